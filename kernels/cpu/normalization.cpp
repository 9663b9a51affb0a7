// RMSNorm and GroupNorm on the CPU, forward and backward: normalisations whose statistics are not
// LayerNorm's (that one: layer_norm.cpp; BatchNorm: batch_norm.cpp). The math of each: kernels/kernels.h.
//
// The two share one shape of work: a set of elements (a row; a group's contiguous span) whose mean /
// mean square is taken in acc_t, two passes where a mean is subtracted (the elements sit in cache
// after the first), then an elementwise pass. Half inputs are widened into a per-thread float buffer
// and results narrowed the same way (normalization_runs.h); the sums are `omp simd` reductions.
//
// Parallel strategy and determinism:
//   rms_norm: forward one row per OpenMP iteration; backward in a fixed number of row blocks chosen
//     from `rows` alone, each with a partial dw row summed over its rows in order, then the partials
//     added in block order: the same bits whatever the thread count (as layer_norm.cpp).
//   group_norm: one (n, group) per iteration, both ways; the backward writes per-(n, channel) partial
//     sums of dy * xhat and dy, then adds them over n in order per channel.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/normalization_runs.h"
#include "kernels/kernels.h"

namespace hg::kernels::cpu {

using namespace norm;

namespace {

constexpr int64_t kParallelMinElements = int64_t(1) << 14;
constexpr int64_t kRowBlocks = 64;

}  // namespace

// ---- rms_norm -----------------------------------------------------------------------------------

void rms_norm_forward(const void* x, const void* weight, void* y, void* rstd, int64_t rows, int64_t cols, double eps,
                      DType dtype) {
  check_positive("rms_norm_forward", {rows, cols});
  dispatch_floating(dtype, "rms_norm_forward", [&]<class T>() {
    using A = acc_t<T>;
    const std::vector<A> w = param_row<T>(weight, cols);
#pragma omp parallel if (rows * cols >= kParallelMinElements)
    {
      std::vector<float> in_buffer, out_buffer;
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        const auto* xr = readable(static_cast<const T*>(x) + r * cols, cols, in_buffer);
        const A inv = A(1) / std::sqrt(sum_of_squares(xr, cols, A(0)) / A(cols) + A(eps));
        if (rstd != nullptr) static_cast<A*>(rstd)[r] = inv;
        T* out = static_cast<T*>(y) + r * cols;
        A* yr = result_row(out, cols, out_buffer);
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) yr[c] = A(xr[c]) * inv * (w.empty() ? A(1) : w[size_t(c)]);
        narrow(yr, out, cols);
      }
    }
  });
}

void rms_norm_backward(const void* x, const void* weight, const void* rstd, const void* dy, void* dx, void* dweight,
                       int64_t rows, int64_t cols, DType dtype) {
  check_positive("rms_norm_backward", {rows, cols});
  dispatch_floating(dtype, "rms_norm_backward", [&]<class T>() {
    using A = acc_t<T>;
    const std::vector<A> w = param_row<T>(weight, cols);
    const bool want_dw = dweight != nullptr && weight != nullptr;
    const int64_t blocks = std::max<int64_t>(1, std::min(kRowBlocks, rows));
    std::vector<A> partial(want_dw ? size_t(blocks * cols) : 0, A(0));
#pragma omp parallel if (rows * cols >= kParallelMinElements)
    {
      std::vector<float> x_buffer, dy_buffer, out_buffer;
      std::vector<A> g(static_cast<size_t>(cols));
#pragma omp for schedule(static)
      for (int64_t b = 0; b < blocks; ++b) {
        A* dw_partial = want_dw ? partial.data() + b * cols : nullptr;
        for (int64_t r = rows * b / blocks; r < rows * (b + 1) / blocks; ++r) {
          const A* xr = widen(static_cast<const T*>(x) + r * cols, cols, x_buffer);
          const A* dyr = widen(static_cast<const T*>(dy) + r * cols, cols, dy_buffer);
          const A inv = static_cast<const A*>(rstd)[r];
          A dot = 0;
          for (int64_t c = 0; c < cols; ++c) {
            g[size_t(c)] = dyr[c] * (w.empty() ? A(1) : w[size_t(c)]);
            dot += g[size_t(c)] * xr[c] * inv;
          }
          const A mean_dot = dot / A(cols);
          T* out = static_cast<T*>(dx) + r * cols;
          A* dxr = result_row(out, cols, out_buffer);
          for (int64_t c = 0; c < cols; ++c) {
            const A xhat = xr[c] * inv;
            dxr[c] = inv * (g[size_t(c)] - xhat * mean_dot);
            if (dw_partial) dw_partial[c] += dyr[c] * xhat;
          }
          narrow(dxr, out, cols);
        }
      }
    }
    if (want_dw) {
      std::vector<A> total(static_cast<size_t>(cols), A(0));
      for (int64_t b = 0; b < blocks; ++b)
        for (int64_t c = 0; c < cols; ++c) total[size_t(c)] += partial[size_t(b * cols + c)];
      narrow(total.data(), static_cast<T*>(dweight), cols);
    }
  });
}

// ---- group_norm ---------------------------------------------------------------------------------

void group_norm_forward(const void* x, const void* weight, const void* bias, void* y, void* mean, void* rstd,
                        int64_t batch, int64_t channels, int64_t spatial, int64_t groups, double eps, DType dtype) {
  check_positive("group_norm_forward", {batch, channels, spatial});
  HG_CHECK(groups > 0 && channels % groups == 0, "[group_norm_forward] ", channels, " channels in ", groups,
           " groups; expected groups > 0 dividing the channels");
  dispatch_floating(dtype, "group_norm_forward", [&]<class T>() {
    using A = acc_t<T>;
    const std::vector<A> w = param_row<T>(weight, channels), b = param_row<T>(bias, channels);
    const int64_t per_group = channels / groups, count = per_group * spatial;
#pragma omp parallel if (batch * channels * spatial >= kParallelMinElements)
    {
      std::vector<float> in_buffer, out_buffer;
#pragma omp for schedule(static)
      for (int64_t ng = 0; ng < batch * groups; ++ng) {
        const int64_t offset = ng * count;
        const A* xg = widen(static_cast<const T*>(x) + offset, count, in_buffer);
        const A mu = count > 0 ? sum_of(xg, count) / A(count) : A(0);
        const A inv = A(1) / std::sqrt((count > 0 ? sum_of_squares(xg, count, mu) / A(count) : A(0)) + A(eps));
        if (mean != nullptr) static_cast<A*>(mean)[ng] = mu;
        if (rstd != nullptr) static_cast<A*>(rstd)[ng] = inv;
        T* out = static_cast<T*>(y) + offset;
        A* yg = result_row(out, count, out_buffer);
        const int64_t first_channel = (ng % groups) * per_group;
        for (int64_t k = 0; k < per_group; ++k) {
          const int64_t c = first_channel + k;
          const A wc = w.empty() ? A(1) : w[size_t(c)], bc = b.empty() ? A(0) : b[size_t(c)];
          for (int64_t s = 0; s < spatial; ++s) {
            const int64_t i = k * spatial + s;
            yg[i] = (xg[i] - mu) * inv * wc + bc;
          }
        }
        narrow(yg, out, count);
      }
    }
  });
}

void group_norm_backward(const void* x, const void* weight, const void* mean, const void* rstd, const void* dy,
                         void* dx, void* dweight, void* dbias, int64_t batch, int64_t channels, int64_t spatial,
                         int64_t groups, DType dtype) {
  check_positive("group_norm_backward", {batch, channels, spatial});
  HG_CHECK(groups > 0 && channels % groups == 0, "[group_norm_backward] ", channels, " channels in ", groups,
           " groups; expected groups > 0 dividing the channels");
  dispatch_floating(dtype, "group_norm_backward", [&]<class T>() {
    using A = acc_t<T>;
    const std::vector<A> w = param_row<T>(weight, channels);
    const int64_t per_group = channels / groups, count = per_group * spatial;
    // Per (n, channel): sum dy * xhat and sum dy, added over n in order afterwards.
    std::vector<A> dw_partial(size_t(batch * channels)), db_partial(size_t(batch * channels));
#pragma omp parallel if (batch * channels * spatial >= kParallelMinElements)
    {
      std::vector<float> x_buffer, dy_buffer, out_buffer;
#pragma omp for schedule(static)
      for (int64_t ng = 0; ng < batch * groups; ++ng) {
        const int64_t offset = ng * count, n = ng / groups, first_channel = (ng % groups) * per_group;
        const A* xg = widen(static_cast<const T*>(x) + offset, count, x_buffer);
        const A* dyg = widen(static_cast<const T*>(dy) + offset, count, dy_buffer);
        const A mu = static_cast<const A*>(mean)[ng], inv = static_cast<const A*>(rstd)[ng];
        A sum_g = 0, sum_gx = 0;
        for (int64_t k = 0; k < per_group; ++k) {
          const int64_t c = first_channel + k;
          const A wc = w.empty() ? A(1) : w[size_t(c)];
          A sdy = 0, sdyx = 0;
          add_backward_sums(xg + k * spatial, dyg + k * spatial, spatial, mu, sdy, sdyx);
          sdyx *= inv;
          dw_partial[size_t(n * channels + c)] = sdyx;
          db_partial[size_t(n * channels + c)] = sdy;
          sum_g += wc * sdy;
          sum_gx += wc * sdyx;
        }
        const A mean_g = count > 0 ? sum_g / A(count) : A(0), mean_gx = count > 0 ? sum_gx / A(count) : A(0);
        T* out = static_cast<T*>(dx) + offset;
        A* dxg = result_row(out, count, out_buffer);
        for (int64_t k = 0; k < per_group; ++k) {
          const A wc = w.empty() ? A(1) : w[size_t(first_channel + k)];
          for (int64_t s = 0; s < spatial; ++s) {
            const int64_t i = k * spatial + s;
            const A xhat = (xg[i] - mu) * inv;
            dxg[i] = inv * (dyg[i] * wc - mean_g - xhat * mean_gx);
          }
        }
        narrow(dxg, out, count);
      }
    }
    for (const auto& [target, partial] : {std::pair{dweight, &dw_partial}, std::pair{dbias, &db_partial}}) {
      if (target == nullptr) continue;
      std::vector<A> total(static_cast<size_t>(channels), A(0));
      for (int64_t n = 0; n < batch; ++n)
        for (int64_t c = 0; c < channels; ++c) total[size_t(c)] += (*partial)[size_t(n * channels + c)];
      narrow(total.data(), static_cast<T*>(target), channels);
    }
  });
}

}  // namespace hg::kernels::cpu
