// bias_gelu_forward / bias_gelu_backward: the MLP's bias + GELU in one pass each way (math:
// kernels/cpu/bias_gelu.h). The GEMM before it runs without its bias epilogue, so the pre-activation
// x + b is never stored: forward reads x once and writes y; backward reads x and dy once, writes dx and
// sums the bias gradient in the same pass (the composed path is a bias epilogue, a GELU pass, a GELU
// backward pass and a column-sum pass over dx).
//
// Vectorisation: the GELU formulas are unary_math.h's, on float rows; tanhf/erff are declared to
// GCC as having SIMD variants (glibc libmvec, as in elementwise.cpp), so the row loops vectorise.
// Half rows are widened into a float row buffer with convert.h's to_float and narrowed with
// from_float, row by row (convert.h is where the SIMD conversions live).
// On a CPU with AVX-512 (vector_math.h), f32/bf16/f16 rows run gelu_avx512.h's explicit loops
// instead (the same blocks and partial sums): half rows converted in registers, no row buffers.
//
// Parallel strategy: rows are cut into fixed blocks of kRowBlock rows; OpenMP spreads the blocks
// (static schedule) only when the tensor has at least kParallelMinElements elements, so small calls
// open no parallel region. Backward: each block writes its own partial bias gradient row
// (partials [blocks, cols], acc_t), then the columns are summed over the blocks in block order,
// split by column ranges over the threads. Blocks and summation order are fixed, so every result is
// bit-identical for any thread count (1..64: a GPT MLP of 2048 rows has 128 blocks; 256 rows, 16).

// GCC 12 warns that the undefined vectors inside its own AVX-512 intrinsics may be uninitialised
// (before any include: the warnings point into avx512fintrin.h).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/cpu/bias_gelu.h"

#include <omp.h>


#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/gelu_avx512.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/dispatch.h"
#include "kernels/error.h"
#include "kernels/unary_math.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(_OPENMP) && defined(__GLIBC__)
#if __GLIBC_PREREQ(2, 35)
#define HG_BIAS_GELU_LIBMVEC 1
#endif
#endif
#ifdef HG_BIAS_GELU_LIBMVEC
extern "C" {
#pragma omp declare simd notinbranch
float tanhf(float) noexcept;
#pragma omp declare simd notinbranch
float erff(float) noexcept;
#pragma omp declare simd notinbranch
float expf(float) noexcept;
}
#endif

namespace hg::kernels::cpu {
namespace {

constexpr int64_t kRowBlock = 16;
constexpr int64_t kParallelMinElements = int64_t(1) << 15;

template <bool kErf, class A>
inline A gelu_value(A v) {
  if constexpr (kErf) return gelu_erf_of(v);
  else return gelu_tanh_of(v);
}

template <bool kErf, class A>
inline A gelu_slope(A v) {
  if constexpr (kErf) return gelu_erf_derivative(v);
  else return gelu_tanh_derivative(v);
}

// A row of T as acc_t: the row itself for f32/f64, else widened into `buffer`.
template <class T>
const acc_t<T>* widen(const T* row, acc_t<T>* buffer, int64_t n) {
  if constexpr (std::is_same_v<T, acc_t<T>>) {
    return row;
  } else {
    to_float(row, buffer, n);
    return buffer;
  }
}

template <class T>
void narrow_to(const acc_t<T>* values, T* row, int64_t n) {
  if constexpr (!std::is_same_v<T, acc_t<T>>) from_float(values, row, n);
}

template <class T>
constexpr bool kHasAvx512Rows = std::is_same_v<T, float> || std::is_same_v<T, bfloat16> || std::is_same_v<T, half>;

template <class T, bool kErf>
void forward_typed(const T* x, const T* bias, T* y, int64_t rows, int64_t cols) {
  using A = acc_t<T>;
  std::vector<A> b_buffer(cols);
  const A* b = widen(bias, b_buffer.data(), cols);
  const int64_t blocks = (rows + kRowBlock - 1) / kRowBlock;
  if constexpr (kHasAvx512Rows<T>) {
    if (vector_math_active() == VectorMath::avx512) {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMinElements)
      for (int64_t block = 0; block < blocks; ++block) {
        for (int64_t r = block * kRowBlock; r < std::min(rows, (block + 1) * kRowBlock); ++r)
          simd512::gelu_forward_span<T, kErf, true>(x + r * cols, b, y + r * cols, cols);
      }
      return;
    }
  }
#pragma omp parallel if (rows * cols >= kParallelMinElements)
  {
    std::vector<A> in_buffer(std::is_same_v<T, A> ? 0 : cols), out_buffer(std::is_same_v<T, A> ? 0 : cols);
#pragma omp for schedule(static)
    for (int64_t block = 0; block < blocks; ++block) {
      for (int64_t r = block * kRowBlock; r < std::min(rows, (block + 1) * kRowBlock); ++r) {
        const A* __restrict xr = widen(x + r * cols, in_buffer.data(), cols);
        A* __restrict yr;
        if constexpr (std::is_same_v<T, A>) yr = y + r * cols;
        else yr = out_buffer.data();
#pragma omp simd
        for (int64_t j = 0; j < cols; ++j) yr[j] = gelu_value<kErf>(xr[j] + b[j]);
        narrow_to(yr, y + r * cols, cols);
      }
    }
  }
}

// dbias[j] = sum over blocks of partial[block][j], in block order; columns split over the threads of
// the enclosing parallel region (orphaned omp for; a plain loop outside one).
template <class T>
void sum_bias_partials(const acc_t<T>* partial, int64_t blocks, int64_t cols, T* dbias) {
#pragma omp for schedule(static)
  for (int64_t j = 0; j < cols; ++j) {
    acc_t<T> s = 0;
    for (int64_t block = 0; block < blocks; ++block) s += partial[size_t(block * cols + j)];
    dbias[j] = T(s);
  }
}

template <class T, bool kErf>
void backward_typed(const T* x, const T* bias, const T* dy, T* dx, T* dbias, int64_t rows, int64_t cols) {
  using A = acc_t<T>;
  constexpr bool kStaged = !std::is_same_v<T, A>;
  std::vector<A> b_buffer(cols);
  const A* b = widen(bias, b_buffer.data(), cols);
  const int64_t blocks = (rows + kRowBlock - 1) / kRowBlock;
  std::vector<A> partial(dbias != nullptr ? size_t(blocks * cols) : 0);
  const bool parallel = rows * cols >= kParallelMinElements;
  if constexpr (kHasAvx512Rows<T>) {
    if (vector_math_active() == VectorMath::avx512) {
#pragma omp parallel if (parallel)
      {
#pragma omp for schedule(static)
        for (int64_t block = 0; block < blocks; ++block) {
          A* sum = dbias != nullptr ? partial.data() + block * cols : nullptr;
          if (sum != nullptr) std::fill(sum, sum + cols, A(0));
          for (int64_t r = block * kRowBlock; r < std::min(rows, (block + 1) * kRowBlock); ++r)
            simd512::gelu_backward_span<T, kErf, true>(x + r * cols, b, dy + r * cols, dx + r * cols, sum, cols);
        }
        if (dbias != nullptr) sum_bias_partials(partial.data(), blocks, cols, dbias);
      }
      return;
    }
  }
#pragma omp parallel if (parallel)
  {
    std::vector<A> x_buffer(kStaged ? cols : 0), g_buffer(kStaged ? cols : 0), d_buffer(kStaged ? cols : 0);
#pragma omp for schedule(static)
    for (int64_t block = 0; block < blocks; ++block) {
      A* __restrict sum = dbias != nullptr ? partial.data() + block * cols : nullptr;
      if (sum != nullptr) std::fill(sum, sum + cols, A(0));
      for (int64_t r = block * kRowBlock; r < std::min(rows, (block + 1) * kRowBlock); ++r) {
        const A* __restrict xr = widen(x + r * cols, x_buffer.data(), cols);
        const A* __restrict gr = widen(dy + r * cols, g_buffer.data(), cols);
        A* __restrict dr;
        if constexpr (kStaged) dr = d_buffer.data();
        else dr = dx + r * cols;
#pragma omp simd
        for (int64_t j = 0; j < cols; ++j) dr[j] = gr[j] * gelu_slope<kErf>(xr[j] + b[j]);
        if (sum != nullptr) {
          // The bias gradient sums the half-rounded dx for half dtypes, as sum(dx) would.
          if constexpr (kStaged) {
            narrow_to(dr, dx + r * cols, cols);
            to_float(dx + r * cols, dr, cols);
          }
#pragma omp simd
          for (int64_t j = 0; j < cols; ++j) sum[j] += dr[j];
        } else {
          narrow_to(dr, dx + r * cols, cols);
        }
      }
    }
    if (dbias != nullptr) sum_bias_partials(partial.data(), blocks, cols, dbias);
  }
}

}  // namespace

void bias_gelu_forward(const void* x, const void* bias, void* y, int64_t rows, int64_t cols, bool erf, DType dtype) {
  HG_CHECK(rows >= 0 && cols >= 0, "[bias_gelu_forward] expected rows, cols >= 0, got ", rows, ", ", cols);
  dispatch_floating(dtype, "bias_gelu", [&]<class T>() {
    if (erf) forward_typed<T, true>(static_cast<const T*>(x), static_cast<const T*>(bias), static_cast<T*>(y), rows, cols);
    else forward_typed<T, false>(static_cast<const T*>(x), static_cast<const T*>(bias), static_cast<T*>(y), rows, cols);
  });
}

void bias_gelu_backward(const void* x, const void* bias, const void* dy, void* dx, void* dbias, int64_t rows,
                        int64_t cols, bool erf, DType dtype) {
  HG_CHECK(rows >= 0 && cols >= 0, "[bias_gelu_backward] expected rows, cols >= 0, got ", rows, ", ", cols);
  dispatch_floating(dtype, "bias_gelu", [&]<class T>() {
    auto run = [&]<bool kErf>() {
      backward_typed<T, kErf>(static_cast<const T*>(x), static_cast<const T*>(bias), static_cast<const T*>(dy),
                              static_cast<T*>(dx), static_cast<T*>(dbias), rows, cols);
    };
    if (erf) run.template operator()<true>();
    else run.template operator()<false>();
  });
}

}  // namespace hg::kernels::cpu
