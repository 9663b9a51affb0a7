// LayerNorm over the last dimension of contiguous [rows, cols], forward and backward, alone and
// fused with the residual add before it (add_layer_norm_forward / add_layer_norm_backward).
//
// Math: kernels/kernels.h, at layer_norm_forward and layer_norm_backward (per-row mean and rstd,
// then y; backward: dx per row, dw and db summed over the rows) and at add_layer_norm_*. The
// statistics take two passes over the row in acc_t (the row sits in cache after the first).
//
// The fused residual add shares the row functions: forward, the row's h = round(x + residual) is
// written and kept (as acc_t) for the statistics and y, one row at a time, so h is never read back
// from memory; backward, the row's dh is added to the row's dx while it is in L1, rounded as the
// composed add rounds it, so both directions are bit-identical to add then layer_norm.
//
// Determinism of dw/db: the rows are cut into a fixed number of row blocks (kRowBlocks, fewer when
// there are fewer rows), chosen from `rows` alone. Each block owns a partial dw/db row in acc_t,
// accumulated over its rows in increasing order; the partials are then added in block order. The
// result is therefore bitwise identical whatever the number of threads, while x and dy are still read
// only once and every thread has whole blocks of rows to itself.
//
// Parallel strategy: forward, one row per OpenMP iteration; backward, one row block per iteration,
// then the column sums of the partials split by columns. Weight and bias are converted once per call
// into float rows.
//
// Two implementations of a row, chosen at run time (vector_math.h, like softmax and GELU):
//   - where the CPU has AVX-512 (vector_math_active() == avx512), f32/bf16/f16 rows run
//     layer_norm_avx512.h's explicit loops: half rows converted in registers as they are loaded and
//     stored (no float copy of x, dy or dh), four 16-lane accumulators per sum, the backward's two
//     sums and the dw/db partials in one pass; same math, same row blocks and partials;
//   - f64, and CPUs without AVX-512 (or the portable tier forced), run the loops below: f16/bf16 rows
//     widened into per-thread float buffers and outputs computed into one and narrowed, through
//     convert.h's SIMD conversions, and `omp simd` reductions.
// The two agree to a few float ulps (different summation orders); tests/test_layer_norm_cpu.cpp
// holds both against float64 and against each other.

// GCC 12 warns that the undefined vectors inside its own AVX-512 intrinsics may be uninitialised
// (before any include: the warnings point into avx512fintrin.h).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/layer_norm_avx512.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"

namespace hg::kernels::cpu {
namespace {

constexpr int64_t kParallelMinElements = int64_t(1) << 15;
constexpr int64_t kRowBlocks = 64;

template <class T>
constexpr bool is_staged_v = !std::is_same_v<T, acc_t<T>>;

// The dtypes with layer_norm_avx512.h rows (f64 keeps the portable loops everywhere).
template <class T>
constexpr bool kHasAvx512Rows = std::is_same_v<T, float> || std::is_same_v<T, bfloat16> || std::is_same_v<T, half>;

template <class T>
bool use_avx512_rows() {
  if constexpr (kHasAvx512Rows<T>)
    return vector_math_active() == VectorMath::avx512;
  else
    return false;
}

// Half rows are widened (and outputs narrowed) by convert.h's SIMD conversions.
template <class T>
void load_row(const T* __restrict in, acc_t<T>* __restrict out, int64_t n) {
  if constexpr (is_staged_v<T> && !kFuseConversion<T>) {
    to_float(in, out, n);
  } else {  // f32/f64, and bf16 on AVX2+ builds (a compiler-vectorised shift)
    for (int64_t c = 0; c < n; ++c) out[c] = acc_t<T>(in[c]);
  }
}

// The row as acc_t: the row itself for f32/f64, else converted into `staging`.
template <class T>
const acc_t<T>* row_as_acc(const T* row, std::vector<acc_t<T>>& staging, int64_t n) {
  if constexpr (is_staged_v<T>) {
    load_row(row, staging.data(), n);
    return staging.data();
  } else {
    return row;
  }
}

// weight or bias in acc_t, or `fallback` everywhere when the pointer is null.
template <class T>
std::vector<acc_t<T>> param_as_acc(const void* param, int64_t cols, acc_t<T> fallback) {
  std::vector<acc_t<T>> out(size_t(cols), fallback);
  if (param != nullptr) load_row(static_cast<const T*>(param), out.data(), cols);
  return out;
}

// Normalises one row of x (acc_t) into y (acc_t, or bf16 narrowed in the same pass).
template <class A, class Y>
void normalize_row(const A* __restrict x, const A* __restrict w, const A* __restrict b, Y* __restrict y, int64_t cols,
                   A eps, A& mean_out, A& rstd_out) {
  A sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t c = 0; c < cols; ++c) sum += x[c];
  const A mean = sum / A(cols);
  A squares = 0;
#pragma omp simd reduction(+ : squares)
  for (int64_t c = 0; c < cols; ++c) squares += (x[c] - mean) * (x[c] - mean);
  const A rstd = A(1) / std::sqrt(squares / A(cols) + eps);
  for (int64_t c = 0; c < cols; ++c) y[c] = Y((x[c] - mean) * rstd * w[c] + b[c]);
  mean_out = mean;
  rstd_out = rstd;
}

// h = x + residual rounded to T (the composed add's result), written to h; returns the row of h as
// acc_t: h itself for f32/f64, else `staging` (`other`: a second buffer of the row's length). Half
// types, bf16 too, through convert.h's SIMD conversions (measured faster than bf16 inline here).
template <class T>
const acc_t<T>* add_row(const T* __restrict x, const T* __restrict residual, T* __restrict h,
                        std::vector<acc_t<T>>& staging, std::vector<acc_t<T>>& other, int64_t n) {
  using A = acc_t<T>;
  if constexpr (!is_staged_v<T>) {
#pragma omp simd
    for (int64_t c = 0; c < n; ++c) h[c] = x[c] + residual[c];
    return h;
  } else {
    A* __restrict s = staging.data();
    A* __restrict o = other.data();
    to_float(x, s, n);
    to_float(residual, o, n);
    for (int64_t c = 0; c < n; ++c) s[c] += o[c];
    from_float(s, h, n);
    to_float(h, s, n);  // the rounded sum, as the statistics must see it
    return s;
  }
}

// The forward rows through layer_norm_avx512.h (kFused: residual and h are not null).
template <bool kFused, class T>
void forward_avx512(const T* x, const T* residual, T* h, const float* w, const float* b, T* y, float* mean, float* rstd,
                    int64_t rows, int64_t cols, float eps) {
  if constexpr (kHasAvx512Rows<T>) {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelMinElements && rows > 1)
    for (int64_t r = 0; r < rows; ++r) {
      float row_mean, row_rstd;
      simd512::layer_norm_forward_row<kFused>(x + r * cols, kFused ? residual + r * cols : nullptr,
                                              kFused ? h + r * cols : nullptr, w, b, y + r * cols, cols, eps, row_mean,
                                              row_rstd);
      if (mean) mean[r] = row_mean;
      if (rstd) rstd[r] = row_rstd;
    }
  }
}

// LayerNorm of x, or (residual and h not null) of h = x + residual, writing h too.
template <class T>
void forward_typed(const T* x, const T* residual, T* h, const void* weight, const void* bias, T* y, acc_t<T>* mean,
                   acc_t<T>* rstd, int64_t rows, int64_t cols, acc_t<T> eps) {
  using A = acc_t<T>;
  const std::vector<A> w = param_as_acc<T>(weight, cols, A(1));
  const std::vector<A> b = param_as_acc<T>(bias, cols, A(0));
  if constexpr (kHasAvx512Rows<T>) {
    if (use_avx512_rows<T>()) {
      if (residual != nullptr)
        forward_avx512<true>(x, residual, h, w.data(), b.data(), y, mean, rstd, rows, cols, eps);
      else
        forward_avx512<false>(x, residual, h, w.data(), b.data(), y, mean, rstd, rows, cols, eps);
      return;
    }
  }
#pragma omp parallel if (rows * cols >= kParallelMinElements && rows > 1)
  {
    std::vector<A> x_staging(is_staged_v<T> ? size_t(cols) : 0);
    std::vector<A> y_staging(x_staging.size());
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const A* xr = residual != nullptr
                        ? add_row(x + r * cols, residual + r * cols, h + r * cols, x_staging, y_staging, cols)
                        : row_as_acc(x + r * cols, x_staging, cols);
      A row_mean, row_rstd;
      if constexpr (is_staged_v<T> && !kFuseConversion<T>) {
        normalize_row(xr, w.data(), b.data(), y_staging.data(), cols, eps, row_mean, row_rstd);
        from_float(y_staging.data(), y + r * cols, cols);
      } else {  // f32/f64, and bf16 narrowed inline in the same pass (kFuseConversion)
        normalize_row(xr, w.data(), b.data(), y + r * cols, cols, eps, row_mean, row_rstd);
      }
      if (mean) mean[r] = row_mean;
      if (rstd) rstd[r] = row_rstd;
    }
  }
}

// Per-thread buffers of the backward pass.
template <class T>
struct BackwardScratch {
  std::vector<acc_t<T>> x, dy, dx, dh, xhat, g;
  explicit BackwardScratch(int64_t cols)
      : x(is_staged_v<T> ? size_t(cols) : 0),
        dy(x.size()),
        dx(x.size()),
        dh(x.size()),
        xhat(size_t(cols)),
        g(size_t(cols)) {}
};

// dx_row += dh_row as the composed add computes it: both rounded to T, added in acc_t, rounded once.
// A second pass over the row (in L1), so that the LayerNorm dx is rounded exactly as layer_norm_backward
// rounds it -- the product in it is never contracted with the add into an fma -- and the fused backward
// is bit-identical to layer_norm_backward followed by the add.
// Half types (bf16 too) go through convert.h's SIMD conversions here: measured faster than the inline
// bf16 conversion for this read-modify-write.
template <class T>
void add_row_gradient(const T* __restrict dh_row, T* __restrict dx_row, int64_t cols, BackwardScratch<T>& scratch) {
  using A = acc_t<T>;
  if constexpr (is_staged_v<T>) {
    A* __restrict dx = scratch.dx.data();
    A* __restrict dh = scratch.dh.data();
    to_float(dx_row, dx, cols);
    to_float(dh_row, dh, cols);
    for (int64_t c = 0; c < cols; ++c) dx[c] += dh[c];
    from_float(dx, dx_row, cols);
  } else {
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) dx_row[c] = T(A(dx_row[c]) + A(dh_row[c]));
  }
}

// dx of one row (plus dh_row when not null: the fused residual's gradient, added as the composed add),
// and (when dw_partial is not null) dw/db partial sums of the row's block.
template <class T>
void backward_row(const T* x_row, const T* dy_row, const T* dh_row, T* dx_row, const acc_t<T>* w, acc_t<T> mean,
                  acc_t<T> rstd, int64_t cols, BackwardScratch<T>& scratch, acc_t<T>* dw_partial,
                  acc_t<T>* db_partial) {
  using A = acc_t<T>;
  const A* __restrict x = row_as_acc(x_row, scratch.x, cols);
  const A* __restrict dy = row_as_acc(dy_row, scratch.dy, cols);
  A* __restrict xhat = scratch.xhat.data();
  A* __restrict g = scratch.g.data();
  A sum_g = 0, sum_gx = 0;
#pragma omp simd reduction(+ : sum_g, sum_gx)
  for (int64_t c = 0; c < cols; ++c) {
    xhat[c] = (x[c] - mean) * rstd;
    g[c] = dy[c] * w[c];
    sum_g += g[c];
    sum_gx += g[c] * xhat[c];
  }
  const A mean_g = sum_g / A(cols), mean_gx = sum_gx / A(cols);
  if constexpr (is_staged_v<T> && !kFuseConversion<T>) {
    A* __restrict dx = scratch.dx.data();
    for (int64_t c = 0; c < cols; ++c) dx[c] = rstd * (g[c] - mean_g - xhat[c] * mean_gx);
    from_float(dx, dx_row, cols);
  } else {
    for (int64_t c = 0; c < cols; ++c) dx_row[c] = T(rstd * (g[c] - mean_g - xhat[c] * mean_gx));
  }
  if (dh_row != nullptr) add_row_gradient(dh_row, dx_row, cols, scratch);
  if (dw_partial) {
    for (int64_t c = 0; c < cols; ++c) {
      dw_partial[c] += dy[c] * xhat[c];
      db_partial[c] += dy[c];
    }
  }
}

// One backward row through layer_norm_avx512.h (dh_row and dw_partial may be null).
template <class T>
void backward_row_avx512(const T* x_row, const T* dy_row, const T* dh_row, T* dx_row, const acc_t<T>* w, acc_t<T> mean,
                         acc_t<T> rstd, int64_t cols, acc_t<T>* dw_partial, acc_t<T>* db_partial) {
  if constexpr (kHasAvx512Rows<T>) {
    if (dh_row != nullptr) {
      if (dw_partial)
        simd512::layer_norm_backward_row<true, true>(x_row, dy_row, dh_row, dx_row, w, mean, rstd, cols, dw_partial,
                                                     db_partial);
      else
        simd512::layer_norm_backward_row<true, false>(x_row, dy_row, dh_row, dx_row, w, mean, rstd, cols, nullptr,
                                                      nullptr);
    } else {
      if (dw_partial)
        simd512::layer_norm_backward_row<false, true>(x_row, dy_row, static_cast<const T*>(nullptr), dx_row, w, mean,
                                                      rstd, cols, dw_partial, db_partial);
      else
        simd512::layer_norm_backward_row<false, false>(x_row, dy_row, static_cast<const T*>(nullptr), dx_row, w, mean,
                                                       rstd, cols, nullptr, nullptr);
    }
  }
}

template <class T>
void backward_typed(const T* x, const void* weight, const acc_t<T>* mean, const acc_t<T>* rstd, const T* dy,
                    const T* dh, T* dx, T* dweight, T* dbias, int64_t rows, int64_t cols) {
  using A = acc_t<T>;
  const std::vector<A> w = param_as_acc<T>(weight, cols, A(1));
  const bool want_param_grads = dweight != nullptr || dbias != nullptr;
  const int64_t blocks = std::max<int64_t>(1, std::min(rows, kRowBlocks));
  // partial[b] holds block b's dw row followed by its db row; the block's thread zeroes them (filled
  // serially up front, they were 1% of the main thread's samples in a 2-thread GPT step, the other
  // thread idle meanwhile).
  const std::unique_ptr<A[]> partial(want_param_grads ? new A[size_t(blocks * 2 * cols)] : nullptr);
  const auto partials_of = [&](int64_t blk) {
    A* row = partial.get() + blk * 2 * cols;
    std::fill(row, row + 2 * cols, A(0));
    return row;
  };
  const bool parallel = rows * cols >= kParallelMinElements;
  if (use_avx512_rows<T>()) {  // the same blocks and partials, rows from layer_norm_avx512.h
#pragma omp parallel for schedule(static) if (parallel && blocks > 1)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      A* dw_partial = want_param_grads ? partials_of(blk) : nullptr;
      A* db_partial = want_param_grads ? dw_partial + cols : nullptr;
      for (int64_t r = rows * blk / blocks; r < rows * (blk + 1) / blocks; ++r) {
        backward_row_avx512(x + r * cols, dy + r * cols, dh != nullptr ? dh + r * cols : nullptr, dx + r * cols,
                            w.data(), mean[r], rstd[r], cols, dw_partial, db_partial);
      }
    }
  } else {
#pragma omp parallel if (parallel && blocks > 1)
    {
      BackwardScratch<T> scratch(cols);
#pragma omp for schedule(static)
      for (int64_t blk = 0; blk < blocks; ++blk) {
        A* dw_partial = want_param_grads ? partials_of(blk) : nullptr;
        A* db_partial = want_param_grads ? dw_partial + cols : nullptr;
        for (int64_t r = rows * blk / blocks; r < rows * (blk + 1) / blocks; ++r) {
          backward_row(x + r * cols, dy + r * cols, dh != nullptr ? dh + r * cols : nullptr, dx + r * cols, w.data(),
                       mean[r], rstd[r], cols, scratch, dw_partial, db_partial);
        }
      }
    }
  }
  if (!want_param_grads) return;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t c = 0; c < cols; ++c) {
    A dw = 0, db = 0;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      dw += partial[blk * 2 * cols + c];
      db += partial[blk * 2 * cols + cols + c];
    }
    if (dweight) dweight[c] = T(dw);
    if (dbias) dbias[c] = T(db);
  }
}

}  // namespace

void layer_norm_forward(const void* x, const void* weight, const void* bias, void* y, void* mean, void* rstd,
                        int64_t rows, int64_t cols, double eps, DType dtype) {
  HG_CHECK(rows >= 0 && cols > 0, "[layer_norm_forward] rows = ", rows, ", cols = ", cols,
           ", expected rows >= 0 and cols >= 1");
  HG_CHECK(eps >= 0, "[layer_norm_forward] eps = ", eps, ", expected eps >= 0");
  dispatch_floating(dtype, "layer_norm_forward", [&]<class T>() {
    using A = acc_t<T>;
    forward_typed(static_cast<const T*>(x), static_cast<const T*>(nullptr), static_cast<T*>(nullptr), weight, bias,
                  static_cast<T*>(y), static_cast<A*>(mean), static_cast<A*>(rstd), rows, cols, A(eps));
  });
}

void add_layer_norm_forward(const void* x, const void* residual, const void* weight, const void* bias, void* h,
                            void* y, void* mean, void* rstd, int64_t rows, int64_t cols, double eps, DType dtype) {
  HG_CHECK(rows >= 0 && cols > 0, "[add_layer_norm_forward] rows = ", rows, ", cols = ", cols,
           ", expected rows >= 0 and cols >= 1");
  HG_CHECK(eps >= 0, "[add_layer_norm_forward] eps = ", eps, ", expected eps >= 0");
  HG_CHECK(x != nullptr && residual != nullptr && h != nullptr, "[add_layer_norm_forward] expected x, residual and h");
  dispatch_floating(dtype, "add_layer_norm_forward", [&]<class T>() {
    using A = acc_t<T>;
    forward_typed(static_cast<const T*>(x), static_cast<const T*>(residual), static_cast<T*>(h), weight, bias,
                  static_cast<T*>(y), static_cast<A*>(mean), static_cast<A*>(rstd), rows, cols, A(eps));
  });
}

void layer_norm_backward(const void* x, const void* weight, const void* mean, const void* rstd, const void* dy,
                         void* dx, void* dweight, void* dbias, int64_t rows, int64_t cols, DType dtype) {
  HG_CHECK(rows >= 0 && cols > 0, "[layer_norm_backward] rows = ", rows, ", cols = ", cols,
           ", expected rows >= 0 and cols >= 1");
  dispatch_floating(dtype, "layer_norm_backward", [&]<class T>() {
    using A = acc_t<T>;
    backward_typed(static_cast<const T*>(x), weight, static_cast<const A*>(mean), static_cast<const A*>(rstd),
                   static_cast<const T*>(dy), static_cast<const T*>(nullptr), static_cast<T*>(dx),
                   static_cast<T*>(dweight), static_cast<T*>(dbias), rows, cols);
  });
}

void add_layer_norm_backward(const void* h, const void* weight, const void* mean, const void* rstd, const void* dy,
                             const void* dh, void* dx, void* dweight, void* dbias, int64_t rows, int64_t cols,
                             DType dtype) {
  HG_CHECK(rows >= 0 && cols > 0, "[add_layer_norm_backward] rows = ", rows, ", cols = ", cols,
           ", expected rows >= 0 and cols >= 1");
  dispatch_floating(dtype, "add_layer_norm_backward", [&]<class T>() {
    using A = acc_t<T>;
    backward_typed(static_cast<const T*>(h), weight, static_cast<const A*>(mean), static_cast<const A*>(rstd),
                   static_cast<const T*>(dy), static_cast<const T*>(dh), static_cast<T*>(dx),
                   static_cast<T*>(dweight), static_cast<T*>(dbias), rows, cols);
  });
}

}  // namespace hg::kernels::cpu
