// 2-D max and average pooling on the CPU (math in kernels/kernels.h, geometry in
// kernels/conv_geometry.h).
//   forward:   y[n, c, i, j] = max / mean over the window rows [i sh - ph, i sh - ph + KH) x columns
//              [j sw - pw, j sw - pw + KW), clipped to the image; Max records argmax = h W + w of the
//              first maximum (NaN counts as the maximum); Avg divides by KH KW (padding counts as 0).
//   backward:  Max: the plane of dx is zeroed and every window adds its dy at its argmax, in window
//              order (a scatter, O(H W + OH OW)); Avg: a gather, dx[n, c, h, w] sums dy over the
//              windows covering (h, w) (covering_windows) times 1 / (KH KW).
// Parallel strategy: OpenMP over the N C planes (a thread owns its planes: the scatter has no races);
// within a plane, plain loops in acc_t (2x2 stride-2 unpadded max windows: a branch-light path).
#include <cmath>
#include <algorithm>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/kernels.h"

namespace hg::kernels::cpu {
namespace {

// The window max of one output and where it is (h W + w): the first NaN, else the first maximum.
template <class T, class A>
inline void window_max(const T* in, int64_t width, int64_t h0, int64_t h1, int64_t w0, int64_t w1, T& y,
                       int32_t& at) {
  A best = A(in[h0 * width + w0]);
  int64_t best_at = h0 * width + w0;
  for (int64_t h = h0; h < h1; ++h) {
    for (int64_t w = w0; w < w1; ++w) {
      const A v = A(in[h * width + w]);
      if (!std::isnan(best) && (v > best || std::isnan(v))) {
        best = v;
        best_at = h * width + w;
      }
    }
  }
  y = T(best);
  at = int32_t(best_at);
}

// 2x2 windows, stride 2, no padding (the CNNs' pooling), branch-free so that it vectorises: the max of
// each row pair, then of the two (strict comparisons keep the first maximum: the scan order's answer).
// NaN makes comparisons false, so a plane with any NaN is redone by window_max (which returns the first).
template <class T, class A>
void max_2x2_plane(const T* in, int64_t width, int64_t oh, int64_t ow, T* y, int32_t* argmax) {
  int nan_seen = 0;
  for (int64_t i = 0; i < oh; ++i) {
    const T* top = in + 2 * i * width;
    const T* bottom = top + width;
    T* out = y + i * ow;
    int32_t* where = argmax + i * ow;
    const int32_t row = int32_t(2 * i * width), below = int32_t(width);
#pragma omp simd reduction(| : nan_seen)
    for (int64_t j = 0; j < ow; ++j) {
      const A a = A(top[2 * j]), b = A(top[2 * j + 1]), c = A(bottom[2 * j]), d = A(bottom[2 * j + 1]);
      const bool right_top = b > a, right_bottom = d > c;
      const A upper = right_top ? b : a, lower = right_bottom ? d : c;
      const int32_t upper_at = int32_t(2 * j) + (right_top ? 1 : 0);
      const int32_t lower_at = int32_t(2 * j) + below + (right_bottom ? 1 : 0);
      const bool take_lower = lower > upper;
      out[j] = T(take_lower ? lower : upper);
      where[j] = row + (take_lower ? lower_at : upper_at);
      nan_seen |= int(a != a) | int(b != b) | int(c != c) | int(d != d);
    }
  }
  if (nan_seen == 0) return;
  for (int64_t i = 0; i < oh; ++i)
    for (int64_t j = 0; j < ow; ++j)
      window_max<T, A>(in, width, 2 * i, 2 * i + 2, 2 * j, 2 * j + 2, y[i * ow + j], argmax[i * ow + j]);
}

template <class T, class A = acc_t<T>>
void forward_typed(PoolMode mode, const Pool2dGeometry& g, const T* x, T* y, int32_t* argmax) {
  const int64_t oh = g.out_h(), ow = g.out_w(), hw = g.height * g.width;
  const A inv_area = A(1) / A(g.kernel_h * g.kernel_w);
  const bool max_2x2 = mode == PoolMode::Max && g.kernel_h == 2 && g.kernel_w == 2 && g.stride_h == 2 &&
                       g.stride_w == 2 && g.pad_h == 0 && g.pad_w == 0;
#pragma omp parallel for schedule(static) if (g.planes() * oh * ow >= 4096)
  for (int64_t plane = 0; plane < g.planes(); ++plane) {
    const T* in = x + plane * hw;
    if (max_2x2) {
      max_2x2_plane<T, A>(in, g.width, oh, ow, y + plane * oh * ow, argmax + plane * oh * ow);
      continue;
    }
    for (int64_t i = 0; i < oh; ++i) {
      const int64_t h0 = std::max<int64_t>(i * g.stride_h - g.pad_h, 0);
      const int64_t h1 = std::min<int64_t>(i * g.stride_h - g.pad_h + g.kernel_h, g.height);
      for (int64_t j = 0; j < ow; ++j) {
        const int64_t w0 = std::max<int64_t>(j * g.stride_w - g.pad_w, 0);
        const int64_t w1 = std::min<int64_t>(j * g.stride_w - g.pad_w + g.kernel_w, g.width);
        const int64_t out = (plane * oh + i) * ow + j;
        if (mode == PoolMode::Max) {
          window_max<T, A>(in, g.width, h0, h1, w0, w1, y[out], argmax[out]);
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
void max_backward(const Pool2dGeometry& g, const T* dy, const int32_t* argmax, T* dx) {
  const int64_t windows = g.out_h() * g.out_w(), hw = g.height * g.width;
#pragma omp parallel for schedule(static) if (g.planes() * hw >= 4096)
  for (int64_t plane = 0; plane < g.planes(); ++plane) {
    const T* grad = dy + plane * windows;
    const int32_t* index = argmax + plane * windows;
    T* out = dx + plane * hw;
    if constexpr (std::is_same_v<T, A>) {
      std::fill(out, out + hw, T(0));
      for (int64_t k = 0; k < windows; ++k) out[index[k]] += grad[k];
    } else {  // half types: the sums in acc_t, rounded once
      thread_local std::vector<A> sums;
      sums.assign(size_t(hw), A(0));
      for (int64_t k = 0; k < windows; ++k) sums[size_t(index[k])] += A(grad[k]);
      for (int64_t e = 0; e < hw; ++e) out[e] = T(sums[size_t(e)]);
    }
  }
}

template <class T, class A = acc_t<T>>
void avg_backward(const Pool2dGeometry& g, const T* dy, T* dx) {
  const int64_t oh = g.out_h(), ow = g.out_w(), hw = g.height * g.width;
  const A inv_area = A(1) / A(g.kernel_h * g.kernel_w);
#pragma omp parallel for schedule(static) if (g.planes() * hw >= 4096)
  for (int64_t plane = 0; plane < g.planes(); ++plane) {
    const T* grad = dy + plane * oh * ow;
    for (int64_t h = 0; h < g.height; ++h) {
      int64_t i0, i1;
      covering_windows(h, g.kernel_h, g.stride_h, g.pad_h, oh, i0, i1);
      for (int64_t w = 0; w < g.width; ++w) {
        int64_t j0, j1;
        covering_windows(w, g.kernel_w, g.stride_w, g.pad_w, ow, j0, j1);
        A sum = 0;
        for (int64_t i = i0; i <= i1; ++i)
          for (int64_t j = j0; j <= j1; ++j) sum += A(grad[i * ow + j]);
        dx[plane * hw + h * g.width + w] = T(sum * inv_area);
      }
    }
  }
}

template <class T>
void backward_typed(PoolMode mode, const Pool2dGeometry& g, const T* dy, const int32_t* argmax, T* dx) {
  if (mode == PoolMode::Max) max_backward<T>(g, dy, argmax, dx);
  else avg_backward<T>(g, dy, dx);
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
