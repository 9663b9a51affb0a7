// 2-D max and average pooling on CUDA tensors (contract and math: kernels/kernels.h, pool2d_*;
// geometry: kernels/conv_geometry.h), the same loops as kernels/cpu/pool2d.cpp.
//   forward:  y[n, c, i, j] = max / mean over the window, clipped to the image; Max records
//             argmax = h W + w of the first maximum in row-major window order (NaN wins), Avg
//             divides by KH KW.
//   backward: dx[n, c, h, w] = sum over the windows (i, j) covering (h, w) (covering_windows) of
//             dy[n, c, i, j] where argmax == h W + w (Max) or times 1 / (KH KW) (Avg).
// Parallel strategy: grid-stride loops of kFlatThreads-thread blocks. Forward: one thread per output
// element, reading its window. Backward: one thread per input element, gathering from the at most
// ceil(KH / sh) ceil(KW / sw) windows that cover it, in a fixed order; so overlapping windows need
// no atomics and the result is the same bits on every run. No shared memory.
#include "kernels/cuda/device_math.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/kernels_cuda.h"

namespace hg::kernels::cuda {
namespace {

template <class T>
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
      A best = to_acc(in[h0 * g.width + w0]);
      int64_t best_at = h0 * g.width + w0;
      for (int64_t h = h0; h < h1; ++h) {
        for (int64_t w = w0; w < w1; ++w) {
          const A v = to_acc(in[h * g.width + w]);
          if (!is_nan(best) && (v > best || is_nan(v))) {
            best = v;
            best_at = h * g.width + w;
          }
        }
      }
      y[u] = from_acc<T>(best);
      argmax[u] = int32_t(best_at);
    } else {
      A sum = 0;
      for (int64_t h = h0; h < h1; ++h)
        for (int64_t w = w0; w < w1; ++w) sum += to_acc(in[h * g.width + w]);
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

}  // namespace

void pool2d_forward(PoolMode mode, const Pool2dGeometry& g, const void* x, void* y, int32_t* argmax, DType dtype,
                    Stream stream) {
  check_pool2d_geometry(mode, g, argmax, "pool2d_forward");
  dispatch_floating_cuda(dtype, "pool2d_forward", [&]<class T>() {
    launch(pool2d_forward_kernel<T>, flat_grid(g.planes() * g.out_h() * g.out_w()), dim3(kFlatThreads), 0, stream,
           mode, g, static_cast<const T*>(x), static_cast<T*>(y), argmax);
  });
}

void pool2d_backward(PoolMode mode, const Pool2dGeometry& g, const void* dy, const int32_t* argmax, void* dx,
                     DType dtype, Stream stream) {
  check_pool2d_geometry(mode, g, argmax, "pool2d_backward");
  dispatch_floating_cuda(dtype, "pool2d_backward", [&]<class T>() {
    launch(pool2d_backward_kernel<T>, flat_grid(g.planes() * g.height * g.width), dim3(kFlatThreads), 0, stream, mode,
           g, static_cast<const T*>(dy), argmax, static_cast<T*>(dx));
  });
}

}  // namespace hg::kernels::cuda
