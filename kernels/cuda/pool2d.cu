// 2-D max and average pooling on CUDA tensors (contract and math: kernels/kernels.h, pool2d_*;
// geometry: kernels/conv_geometry.h), the same loops as kernels/cpu/pool2d.cpp.
//   forward:  y[n, c, i, j] = max / mean over the window, clipped to the image; Max records
//             argmax = h W + w of the first maximum in row-major window order (NaN wins), Avg
//             divides by KH KW.
//   backward: dx[n, c, h, w] = sum over the windows (i, j) covering (h, w) (covering_windows) of
//             dy[n, c, i, j] where argmax == h W + w (Max) or times 1 / (KH KW) (Avg).
// Parallel strategy: grid-stride loops of kFlatThreads-thread blocks. Forward: one thread per output
// element, reading its window row by row. When every window row is whole aligned pairs of elements
// (kernel_w, stride_w, pad_w and width even, x 2-element aligned: the common 2x2 stride-2 pooling),
// a thread reads each pair with one 2-element vector load, so a warp's loads of one window row are
// contiguous (lane l reads elements 2l, 2l + 1: every fetched sector used; element by element, lanes
// would be 2 elements apart and use half of each sector); otherwise element by element. The window
// is visited in the same row-major order either way, so argmax, ties and NaN are as on the CPU.
// Backward: one thread per input element, gathering from the at most ceil(KH / sh) ceil(KW / sw)
// windows that cover it, in a fixed order; so overlapping windows need no atomics and the result is
// the same bits on every run. Max pooling whose windows tile the image (stride = kernel, no padding,
// whole windows: the common 2x2 stride 2) instead gives each window a thread that writes the whole
// window (dy at the argmax, 0 elsewhere; every element has one writer, so still deterministic): the
// gather would read dy only in the lanes whose element is the argmax, a scattered half of each
// warp's sectors; the window thread reads dy and argmax densely, and stores its window rows in pairs
// where they are aligned pairs. No shared memory.
#include "kernels/cuda/device_math.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/kernels_cuda.h"

namespace hg::kernels::cuda {
namespace {

// kSpan: elements per load, 2 when the window rows are whole aligned pairs (see pair_windows), else 1.
template <class T, int kSpan>
__global__ void pool2d_forward_kernel(PoolMode mode, Pool2dGeometry g, const T* __restrict__ x, T* __restrict__ y,
                                      int32_t* __restrict__ argmax) {
  using A = acc_t<T>;
  const int64_t oh = g.out_h(), ow = g.out_w(), total = g.planes() * oh * ow;
  for (int64_t u = flat_worker(); u < total; u += flat_workers()) {
    const int64_t j = u % ow, i = (u / ow) % oh, plane = u / (oh * ow);
    const T* in = x + plane * g.height * g.width;
    const int64_t h_start = i * g.stride_h - g.pad_h, w_start = j * g.stride_w - g.pad_w;
    const int64_t h0 = h_start > 0 ? h_start : 0, w0 = w_start > 0 ? w_start : 0;
    const int64_t h1 = h_start + g.kernel_h < g.height ? h_start + g.kernel_h : g.height;
    const int64_t w1 = w_start + g.kernel_w < g.width ? w_start + g.kernel_w : g.width;
    if (mode == PoolMode::Max) {
      // The first element of the window (best_at < 0) is taken as it is; then a later one wins when
      // greater, or NaN, unless the best is NaN already: the first maximum, NaN first.
      A best = 0;
      int64_t best_at = -1;
      for (int64_t h = h0; h < h1; ++h) {
        for (int64_t w = w0; w < w1; w += kSpan) {
          const Pack<T, kSpan> p = load_pack<kSpan>(in + h * g.width + w);
          HG_UNROLL
          for (int k = 0; k < kSpan; ++k) {
            const A v = to_acc(p.v[k]);
            if (best_at < 0 || (!is_nan(best) && (v > best || is_nan(v)))) {
              best = v;
              best_at = h * g.width + w + k;
            }
          }
        }
      }
      y[u] = from_acc<T>(best);
      argmax[u] = int32_t(best_at);
    } else {
      A sum = 0;
      for (int64_t h = h0; h < h1; ++h) {
        for (int64_t w = w0; w < w1; w += kSpan) {
          const Pack<T, kSpan> p = load_pack<kSpan>(in + h * g.width + w);
          HG_UNROLL
          for (int k = 0; k < kSpan; ++k) sum += to_acc(p.v[k]);
        }
      }
      y[u] = from_acc<T>(sum / A(g.kernel_h * g.kernel_w));
    }
  }
}

template <class T>
__global__ void pool2d_backward_kernel(PoolMode mode, Pool2dGeometry g, const T* __restrict__ dy,
                                       const int32_t* __restrict__ argmax, T* __restrict__ dx) {
  using A = acc_t<T>;
  const int64_t oh = g.out_h(), ow = g.out_w(), hw = g.height * g.width, total = g.planes() * hw;
  for (int64_t u = flat_worker(); u < total; u += flat_workers()) {
    const int64_t w = u % g.width, h = (u / g.width) % g.height, plane = u / hw;
    const T* grad = dy + plane * oh * ow;
    int64_t i0, i1, j0, j1;
    covering_windows(h, g.kernel_h, g.stride_h, g.pad_h, oh, i0, i1);
    covering_windows(w, g.kernel_w, g.stride_w, g.pad_w, ow, j0, j1);
    A sum = 0;
    for (int64_t i = i0; i <= i1; ++i) {
      for (int64_t j = j0; j <= j1; ++j) {
        if (mode == PoolMode::Avg || argmax[plane * oh * ow + i * ow + j] == h * g.width + w) {
          sum += to_acc(grad[i * ow + j]);
        }
      }
    }
    dx[u] = from_acc<T>(mode == PoolMode::Avg ? sum / A(g.kernel_h * g.kernel_w) : sum);
  }
}

// Max backward when the windows tile the image (tiled_windows): each input element lies in exactly
// one window, so the gather above reduces to dx = 0 + dy[window] at the window's argmax and 0
// elsewhere. One thread per window reads its dy and argmax once (consecutive lanes, consecutive
// entries) and writes its whole window, each window row in stores of kSpan elements (2: the rows are
// aligned pairs, pair_windows of dx), so a warp's stores of one row are contiguous.
template <class T, int kSpan>
__global__ void max_pool2d_backward_tiled_kernel(Pool2dGeometry g, const T* __restrict__ dy,
                                                 const int32_t* __restrict__ argmax, T* __restrict__ dx) {
  using A = acc_t<T>;
  const int64_t oh = g.out_h(), ow = g.out_w(), total = g.planes() * oh * ow;
  for (int64_t u = flat_worker(); u < total; u += flat_workers()) {
    const int64_t j = u % ow, i = (u / ow) % oh, plane = u / (oh * ow);
    const A hit = A(0) + to_acc(dy[u]);  // the gather's sum over the one window
    const int64_t at = argmax[u];
    T* out = dx + plane * g.height * g.width;
    for (int64_t h = i * g.kernel_h; h < (i + 1) * g.kernel_h; ++h) {
      for (int64_t w = j * g.kernel_w; w < (j + 1) * g.kernel_w; w += kSpan) {
        Pack<T, kSpan> p;
        HG_UNROLL
        for (int k = 0; k < kSpan; ++k) p.v[k] = from_acc<T>(h * g.width + w + k == at ? hit : A(0));
        store_pack<kSpan>(out + h * g.width + w, p);
      }
    }
  }
}

// Whether the windows tile the image: stride = kernel, no padding, and the image a whole number of
// windows, so every input element is in exactly one window.
bool tiled_windows(const Pool2dGeometry& g) {
  return g.stride_h == g.kernel_h && g.stride_w == g.kernel_w && g.pad_h == 0 && g.pad_w == 0 &&
         g.height % g.kernel_h == 0 && g.width % g.kernel_w == 0;
}

// Whether every window row is whole pairs of elements at 2-element aligned addresses: the window
// starts (j stride_w - pad_w, clipped at 0) and ends (+ kernel_w, clipped at width) are even, each
// image row starts at an even element, and the tensor (x forward, dx backward) is aligned to two elements.
bool pair_windows(const Pool2dGeometry& g, const void* x, size_t element_bytes) {
  return g.kernel_w % 2 == 0 && g.stride_w % 2 == 0 && g.pad_w % 2 == 0 && g.width % 2 == 0 &&
         reinterpret_cast<uintptr_t>(x) % (2 * element_bytes) == 0;
}

}  // namespace

void pool2d_forward(PoolMode mode, const Pool2dGeometry& g, const void* x, void* y, int32_t* argmax, DType dtype,
                    Stream stream) {
  check_pool2d_geometry(mode, g, argmax, "pool2d_forward");
  dispatch_floating_cuda(dtype, "pool2d_forward", [&]<class T>() {
    const auto kernel = pair_windows(g, x, sizeof(T)) ? pool2d_forward_kernel<T, 2> : pool2d_forward_kernel<T, 1>;
    launch(kernel, flat_grid(g.planes() * g.out_h() * g.out_w()), dim3(kFlatThreads), 0, stream, mode, g,
           static_cast<const T*>(x), static_cast<T*>(y), argmax);
  });
}

void pool2d_backward(PoolMode mode, const Pool2dGeometry& g, const void* dy, const int32_t* argmax, void* dx,
                     DType dtype, Stream stream) {
  check_pool2d_geometry(mode, g, argmax, "pool2d_backward");
  dispatch_floating_cuda(dtype, "pool2d_backward", [&]<class T>() {
    if (mode == PoolMode::Max && tiled_windows(g)) {
      const auto kernel = pair_windows(g, dx, sizeof(T)) ? max_pool2d_backward_tiled_kernel<T, 2>
                                                         : max_pool2d_backward_tiled_kernel<T, 1>;
      launch(kernel, flat_grid(g.planes() * g.out_h() * g.out_w()), dim3(kFlatThreads), 0, stream, g,
             static_cast<const T*>(dy), argmax, static_cast<T*>(dx));
      return;
    }
    launch(pool2d_backward_kernel<T>, flat_grid(g.planes() * g.height * g.width), dim3(kFlatThreads), 0, stream, mode,
           g, static_cast<const T*>(dy), argmax, static_cast<T*>(dx));
  });
}

}  // namespace hg::kernels::cuda
