// Row-wise softmax and log-softmax over contiguous [rows, cols], forward and backward.
//
// Math, per row, over the visible columns c < v (v = cols, or with causal_rows > 0
// v = (r % causal_rows) + (cols - causal_rows) + 1):
//   m = max_c x[c],  s = sum_c exp(x[c] - m)             (max-subtracted, so exp never overflows)
//   softmax:     y[c] = exp(x[c] - m) / s,   masked y = 0
//   log_softmax: y[c] = x[c] - m - log(s),   masked y = -inf (log 0)
// Backward (rows need no mask: masked softmax outputs are 0, so their dx is 0):
//   softmax:     dx = y * (dy - sum_c dy * y)
//   log_softmax: dx = dy - exp(y) * sum_c dy
// All in acc_t. A NaN anywhere in a row makes the whole row NaN (it reaches s).
//
// Parallel strategy: one row per OpenMP iteration (static schedule), only when the tensor is large
// enough. f32/f64 rows keep exp(x - m) in y itself; f16/bf16 rows are first converted into a
// per-thread float buffer (one row, so it stays in L1/L2), computed there in place and rounded to
// the dtype on the way out (both through convert.h's SIMD conversions), so every row reads x from
// memory once and writes y once. exp goes to glibc's vectorised expf.
//
// Where the CPU has AVX-512 (vector_math.h), f32/bf16/f16 rows run softmax_avx512.h's explicit loops
// instead: the same math and row split, half rows converted in registers (no staged copy of x or dy),
// exp from simd_math_avx512.h. f64, and CPUs without AVX-512, keep the loops below.

// GCC 12 warns that the undefined vectors inside its own AVX-512 intrinsics may be uninitialised
// (before any include: the warnings point into avx512fintrin.h).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "kernels/cpu/simd_math.h"
#include "kernels/cpu/softmax_avx512.h"
#include "kernels/cpu/vector_math.h"

namespace hg::kernels::cpu {
namespace {

constexpr int64_t kParallelMinElements = int64_t(1) << 15;

int64_t visible_columns(int64_t row, int64_t cols, int64_t causal_rows) {
  return causal_rows > 0 ? (row % causal_rows) + (cols - causal_rows) + 1 : cols;
}

// The row's maximum. GCC does not vectorise a float max reduction without -ffinite-math-only, so
// kLanes independent running maxima (one vector register) are kept and combined at the end. A NaN
// in the row may or may not be picked; either way it reaches the sum and the row comes out NaN.
template <class A>
A row_max(const A* x, int64_t n) {
  constexpr int64_t kLanes = 64 / sizeof(A);
  A lanes[kLanes];
  for (int64_t k = 0; k < kLanes; ++k) lanes[k] = -std::numeric_limits<A>::infinity();
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes) {
    for (int64_t k = 0; k < kLanes; ++k) lanes[k] = x[c + k] > lanes[k] ? x[c + k] : lanes[k];
  }
  A m = -std::numeric_limits<A>::infinity();
  for (int64_t k = 0; k < kLanes; ++k) m = lanes[k] > m ? lanes[k] : m;
  for (; c < n; ++c) m = x[c] > m ? x[c] : m;
  return m;
}

// Softmax or log-softmax of x[0, visible) into y (dtype T), masked tail [visible, cols). `exps` is
// a row of acc_t scratch for exp(x - m) (y itself when T is acc_t; it may also be x when x is a
// staged copy), so the division and the conversion to T happen in the same final pass.
template <class T>
void softmax_row(const acc_t<T>* x, acc_t<T>* exps, T* y, int64_t cols, int64_t visible, bool log) {
  using A = acc_t<T>;
  const A m = row_max(x, visible);
  A s = 0;
  if (log) {
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < visible; ++c) s += vexp(x[c] - m);
    const A log_s = std::log(s);
    for (int64_t c = 0; c < visible; ++c) y[c] = T((x[c] - m) - log_s);
    for (int64_t c = visible; c < cols; ++c) y[c] = T(-std::numeric_limits<A>::infinity());
    return;
  }
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < visible; ++c) {
    const A e = vexp(x[c] - m);
    exps[c] = e;
    s += e;
  }
  const A inv_s = A(1) / s;
  for (int64_t c = 0; c < visible; ++c) y[c] = T(exps[c] * inv_s);
  for (int64_t c = visible; c < cols; ++c) y[c] = T(A(0));
}

template <class A>
void softmax_backward_row(const A* y, const A* dy, A* dx, int64_t cols, bool log) {
  A s = 0;
  if (log) {
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < cols; ++c) s += dy[c];
    for (int64_t c = 0; c < cols; ++c) dx[c] = dy[c] - vexp(y[c]) * s;
    return;
  }
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < cols; ++c) s += dy[c] * y[c];
  for (int64_t c = 0; c < cols; ++c) dx[c] = y[c] * (dy[c] - s);
}

// Half rows are widened and narrowed by convert.h's SIMD conversions.
// bf16 on AVX2+ builds (kFuseConversion) converts in a plain loop the compiler vectorises.
template <class T>
void load_row(const T* __restrict in, acc_t<T>* __restrict out, int64_t n) {
  if constexpr (kFuseConversion<T>) {
    for (int64_t c = 0; c < n; ++c) out[c] = acc_t<T>(in[c]);
  } else {
    to_float(in, out, n);
  }
}

template <class T>
void store_row(const acc_t<T>* __restrict in, T* __restrict out, int64_t n) {
  if constexpr (kFuseConversion<T>) {
    for (int64_t c = 0; c < n; ++c) out[c] = T(in[c]);
  } else {
    from_float(in, out, n);
  }
}

template <class T>
constexpr bool kHasAvx512Rows = std::is_same_v<T, float> || std::is_same_v<T, bfloat16> || std::is_same_v<T, half>;

template <class T>
void softmax_forward_avx512(const T* x, T* y, int64_t rows, int64_t cols, bool log, int64_t causal_rows) {
#pragma omp parallel if (rows * cols >= kParallelMinElements && rows > 1)
  {
    std::vector<float> scratch(std::is_same_v<T, float> || log ? 0 : size_t(cols));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      float* e;
      if constexpr (std::is_same_v<T, float>) e = y + r * cols;
      else e = scratch.data();
      simd512::softmax_row(x + r * cols, y + r * cols, e, cols, visible_columns(r, cols, causal_rows), log);
    }
  }
}

template <class T>
void softmax_backward_avx512(const T* y, const T* dy, T* dx, int64_t rows, int64_t cols, bool log) {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMinElements && rows > 1)
  for (int64_t r = 0; r < rows; ++r) simd512::softmax_backward_row(y + r * cols, dy + r * cols, dx + r * cols, cols, log);
}

template <class T>
void softmax_forward_typed(const T* x, T* y, int64_t rows, int64_t cols, bool log, int64_t causal_rows) {
  using A = acc_t<T>;
  if constexpr (kHasAvx512Rows<T>) {
    if (vector_math_active() == VectorMath::avx512) return softmax_forward_avx512(x, y, rows, cols, log, causal_rows);
  }
#pragma omp parallel if (rows * cols >= kParallelMinElements && rows > 1)
  {
    std::vector<A> staged(std::is_same_v<T, A> ? 0 : size_t(cols));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t visible = visible_columns(r, cols, causal_rows);
      if constexpr (std::is_same_v<T, A>) {
        softmax_row(x + r * cols, y + r * cols, y + r * cols, cols, visible, log);
      } else {
        load_row(x + r * cols, staged.data(), cols);
        if constexpr (kFuseConversion<T>) {  // bf16 on AVX2+ builds: narrowed in the final pass
          softmax_row(staged.data(), staged.data(), y + r * cols, cols, visible, log);
        } else {
          softmax_row<A>(staged.data(), staged.data(), staged.data(), cols, visible, log);
          store_row(staged.data(), y + r * cols, cols);
        }
      }
    }
  }
}

template <class T>
void softmax_backward_typed(const T* y, const T* dy, T* dx, int64_t rows, int64_t cols, bool log) {
  using A = acc_t<T>;
  if constexpr (kHasAvx512Rows<T>) {
    if (vector_math_active() == VectorMath::avx512) return softmax_backward_avx512(y, dy, dx, rows, cols, log);
  }
#pragma omp parallel if (rows * cols >= kParallelMinElements && rows > 1)
  {
    std::vector<A> staged_y(std::is_same_v<T, A> ? 0 : size_t(cols));
    std::vector<A> staged_dy(staged_y.size());
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      if constexpr (std::is_same_v<T, A>) {
        softmax_backward_row(y + r * cols, dy + r * cols, dx + r * cols, cols, log);
      } else {
        load_row(y + r * cols, staged_y.data(), cols);
        load_row(dy + r * cols, staged_dy.data(), cols);
        softmax_backward_row(staged_y.data(), staged_dy.data(), staged_dy.data(), cols, log);
        store_row(staged_dy.data(), dx + r * cols, cols);
      }
    }
  }
}

}  // namespace

void softmax_forward(const void* x, void* y, int64_t rows, int64_t cols, bool log, int64_t causal_rows, DType dtype) {
  HG_CHECK(rows >= 0 && cols >= 0, "[softmax_forward] rows = ", rows, ", cols = ", cols, ", expected both >= 0");
  HG_CHECK(causal_rows >= 0 && causal_rows <= cols, "[softmax_forward] causal_rows = ", causal_rows,
           ", expected 0 <= causal_rows <= cols = ", cols, " (every row must see at least one column)");
  if (rows == 0 || cols == 0) return;
  dispatch_floating(dtype, "softmax_forward", [&]<class T>() {
    softmax_forward_typed(static_cast<const T*>(x), static_cast<T*>(y), rows, cols, log, causal_rows);
  });
}

void softmax_backward(const void* y, const void* dy, void* dx, int64_t rows, int64_t cols, bool log, DType dtype) {
  HG_CHECK(rows >= 0 && cols >= 0, "[softmax_backward] rows = ", rows, ", cols = ", cols, ", expected both >= 0");
  if (rows == 0 || cols == 0) return;
  dispatch_floating(dtype, "softmax_backward", [&]<class T>() {
    softmax_backward_typed(static_cast<const T*>(y), static_cast<const T*>(dy), static_cast<T*>(dx), rows, cols, log);
  });
}

}  // namespace hg::kernels::cpu
