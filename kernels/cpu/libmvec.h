#pragma once
// Tells GCC that glibc's libmvec has SIMD versions of these math functions, so loops calling them can
// be vectorised (math-vector.h only says so under -ffast-math; the functions are there regardless,
// accurate to a few ulp). tanh and erf never set errno, so no -fno-math-errno is needed; log sets it
// only for x <= 0 and exp on overflow, where the callers want the inf / NaN and read no errno. log and
// exp are declared only for a file that defines HG_LIBMVEC_LOG_EXP before this include
// (pointwise_loss.cpp): elementwise.cpp's log and exp ops keep glibc's scalar results. HG_CPU_LIBMVEC is defined where
// the declarations hold (GCC, x86-64, OpenMP, glibc >= 2.35).
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(_OPENMP) && defined(__GLIBC__)
#if __GLIBC_PREREQ(2, 35)
#define HG_CPU_LIBMVEC 1
#endif
#endif
#ifdef HG_CPU_LIBMVEC
extern "C" {
#pragma omp declare simd notinbranch
float tanhf(float) noexcept;
#pragma omp declare simd notinbranch
double tanh(double) noexcept;
#pragma omp declare simd notinbranch
float erff(float) noexcept;
#pragma omp declare simd notinbranch
double erf(double) noexcept;
#ifdef HG_LIBMVEC_LOG_EXP
#pragma omp declare simd notinbranch
float logf(float) noexcept;
#pragma omp declare simd notinbranch
double log(double) noexcept;
#pragma omp declare simd notinbranch
float expf(float) noexcept;
#pragma omp declare simd notinbranch
double exp(double) noexcept;
#endif
}
#endif
