#pragma once
// vexp(x), vlog(x), vlog1p(x): exp, log and log1p that GCC can vectorise. glibc's libmvec has SIMD
// expf/exp (and logf/log), but GCC only uses them under -ffast-math (math-vector.h) and never for
// std::exp while errno may be set. These aliases name the same symbols, declared const with SIMD
// variants, so loops calling vexp vectorise (no caller reads the errno of an overflowing exp or of log
// at x <= 0); accuracy is within a few ulp of std::exp / std::log / std::log1p. Elsewhere (clang, non-glibc; glibc
// before 2.35 for log1p, which libmvec gained then) they are std::exp and std::log1p.
#include <cmath>
#include <type_traits>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(_OPENMP) && defined(__GLIBC__)
#if __GLIBC_PREREQ(2, 22)
#define HG_SIMD_EXP 1
#endif
#if __GLIBC_PREREQ(2, 35)
#define HG_SIMD_LOG1P 1
#endif
#endif

#ifdef HG_SIMD_EXP
extern "C" {
#pragma omp declare simd notinbranch
float hg_simd_expf(float) noexcept __asm__("expf") __attribute__((const));
#pragma omp declare simd notinbranch
double hg_simd_exp(double) noexcept __asm__("exp") __attribute__((const));
#pragma omp declare simd notinbranch
float hg_simd_logf(float) noexcept __asm__("logf") __attribute__((const));
#pragma omp declare simd notinbranch
double hg_simd_log(double) noexcept __asm__("log") __attribute__((const));
}
#endif
#ifdef HG_SIMD_LOG1P
extern "C" {
#pragma omp declare simd notinbranch
float hg_simd_log1pf(float) noexcept __asm__("log1pf") __attribute__((const));
#pragma omp declare simd notinbranch
double hg_simd_log1p(double) noexcept __asm__("log1p") __attribute__((const));
}
#endif

namespace hg::kernels::cpu {

template <class A>
inline A vexp(A x) {
#ifdef HG_SIMD_EXP
  if constexpr (std::is_same_v<A, float>) {
    return hg_simd_expf(x);
  } else {
    return hg_simd_exp(x);
  }
#else
  return std::exp(x);
#endif
}

template <class A>
inline A vlog(A x) {
#ifdef HG_SIMD_EXP  // libmvec has log from the same glibc (2.22) as exp
  if constexpr (std::is_same_v<A, float>) {
    return hg_simd_logf(x);
  } else {
    return hg_simd_log(x);
  }
#else
  return std::log(x);
#endif
}

template <class A>
inline A vlog1p(A x) {
#ifdef HG_SIMD_LOG1P
  if constexpr (std::is_same_v<A, float>) {
    return hg_simd_log1pf(x);
  } else {
    return hg_simd_log1p(x);
  }
#else
  return std::log1p(x);
#endif
}

}  // namespace hg::kernels::cpu
