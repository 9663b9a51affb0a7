// 2-D max and average pooling on the CPU (math in kernels/kernels.h, geometry in
// kernels/conv_geometry.h).
//   forward:   y[n, c, i, j] = max / mean over the window rows [i sh - ph, i sh - ph + KH) x columns
//              [j sw - pw, j sw - pw + KW), clipped to the image; Max records argmax = h W + w of the
//              first maximum (NaN counts as the maximum); Avg divides by KH KW (padding counts as 0).
//   backward:  a gather: dx[n, c, h, w] sums dy over the windows covering (h, w)
//              (covering_windows), where argmax == h W + w (Max) or times 1 / (KH KW) (Avg).
// Parallel strategy: OpenMP over the N C planes; within a plane, plain loops in acc_t.
#include <cmath>
#include <algorithm>
#include <limits>

#include "kernels/dispatch.h"
#include "kernels/kernels.h"

namespace hg::kernels::cpu {
namespace {

template <class T, class A = acc_t<T>>
void forward_typed(PoolMode mode, const Pool2dGeometry& g, const T* x, T* y, int32_t* argmax) {
  const int64_t oh = g.out_h(), ow = g.out_w(), hw = g.height * g.width;
  const A inv_area = A(1) / A(g.kernel_h * g.kernel_w);
#pragma omp parallel for schedule(static) if (g.planes() * oh * ow >= 4096)
  for (int64_t plane = 0; plane < g.planes(); ++plane) {
    const T* in = x + plane * hw;
    for (int64_t i = 0; i < oh; ++i) {
      const int64_t h0 = std::max<int64_t>(i * g.stride_h - g.pad_h, 0);
      const int64_t h1 = std::min<int64_t>(i * g.stride_h - g.pad_h + g.kernel_h, g.height);
      for (int64_t j = 0; j < ow; ++j) {
        const int64_t w0 = std::max<int64_t>(j * g.stride_w - g.pad_w, 0);
        const int64_t w1 = std::min<int64_t>(j * g.stride_w - g.pad_w + g.kernel_w, g.width);
        const int64_t out = (plane * oh + i) * ow + j;
        if (mode == PoolMode::Max) {
          A best = A(in[h0 * g.width + w0]);
          int64_t best_at = h0 * g.width + w0;
          for (int64_t h = h0; h < h1; ++h) {
            for (int64_t w = w0; w < w1; ++w) {
              const A v = A(in[h * g.width + w]);
              if (!std::isnan(best) && (v > best || std::isnan(v))) {
                best = v;
                best_at = h * g.width + w;
              }
            }
          }
          y[out] = T(best);
          argmax[out] = int32_t(best_at);
        } else {
          A sum = 0;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) sum += A(in[h * g.width + w]);
          y[out] = T(sum * inv_area);
        }
      }
    }
  }
}

template <class T, class A = acc_t<T>>
void backward_typed(PoolMode mode, const Pool2dGeometry& g, const T* dy, const int32_t* argmax, T* dx) {
  const int64_t oh = g.out_h(), ow = g.out_w(), hw = g.height * g.width;
  const A inv_area = A(1) / A(g.kernel_h * g.kernel_w);
#pragma omp parallel for schedule(static) if (g.planes() * hw >= 4096)
  for (int64_t plane = 0; plane < g.planes(); ++plane) {
    const T* grad = dy + plane * oh * ow;
    const int32_t* index = mode == PoolMode::Max ? argmax + plane * oh * ow : nullptr;
    for (int64_t h = 0; h < g.height; ++h) {
      int64_t i0, i1;
      covering_windows(h, g.kernel_h, g.stride_h, g.pad_h, oh, i0, i1);
      for (int64_t w = 0; w < g.width; ++w) {
        int64_t j0, j1;
        covering_windows(w, g.kernel_w, g.stride_w, g.pad_w, ow, j0, j1);
        A sum = 0;
        for (int64_t i = i0; i <= i1; ++i) {
          for (int64_t j = j0; j <= j1; ++j) {
            if (mode == PoolMode::Avg) {
              sum += A(grad[i * ow + j]);
            } else if (index[i * ow + j] == h * g.width + w) {
              sum += A(grad[i * ow + j]);
            }
          }
        }
        dx[plane * hw + h * g.width + w] = T(mode == PoolMode::Avg ? sum * inv_area : sum);
      }
    }
  }
}

}  // namespace

void pool2d_forward(PoolMode mode, const Pool2dGeometry& g, const void* x, void* y, int32_t* argmax, DType dtype) {
  check_pool2d_geometry(mode, g, argmax, "pool2d_forward");
  dispatch_floating(dtype, "pool2d_forward", [&]<class T>() {
    forward_typed<T>(mode, g, static_cast<const T*>(x), static_cast<T*>(y), argmax);
  });
}

void pool2d_backward(PoolMode mode, const Pool2dGeometry& g, const void* dy, const int32_t* argmax, void* dx,
                     DType dtype) {
  check_pool2d_geometry(mode, g, argmax, "pool2d_backward");
  dispatch_floating(dtype, "pool2d_backward", [&]<class T>() {
    backward_typed<T>(mode, g, static_cast<const T*>(dy), argmax, static_cast<T*>(dx));
  });
}

}  // namespace hg::kernels::cpu
