// 2-D convolution on CUDA tensors (contract and math: kernels/kernels.h, conv2d_*).
//
// Two paths, chosen per call by cudnn::enabled() (kernels/cuda/cudnn/conv2d_cudnn.h):
//   cuDNN (nvcc builds that found cuDNN, on a real GPU): forward, backward data and backward filter
//     through cuDNN with an algorithm chosen per shape and a workspace from the caching allocator.
//   im2col + GEMM (this file; the only path on the SIMT emulator, which cannot run cuDNN, and on
//     builds without cuDNN), the same algorithm as the CPU backend, per image n and group g:
//       col  = im2col(x[n, g])                      [R = Cg KH KW, P = OH OW], in A = acc_t<T>
//       y[n, g]  = W_g col + bias                   GEMM in A, rounded once on store (bias_store_kernel)
//       dcol = W_g^T dy[n, g];  dx[n, g] = col2im(dcol)
//       dW_g += dy[n, g] col^T                      GEMM with beta = 1 into an A buffer, rounded at the end
//     The weights and dy are widened to A with the cast kernel (a no-op alias for f32/f64), so
//     every GEMM is an fp32 (fp64) GEMM whatever the storage dtype.
//
// Kernels (parallel strategy: grid-stride loops of kFlatThreads-thread blocks, one thread per
// output element, no shared memory, no atomics):
//   im2col_kernel:      one thread per col element (row (c, p, q), pixel (i, j)): one read of x or a 0.
//   col2im_kernel:      one thread per dx element (c, h, w): a gather over the KH KW taps, each tap
//                       reading the one dcol entry whose window tap hit (h, w) (conv_reading_output),
//                       summed in A in a fixed order: deterministic, no scattered writes. Consecutive
//                       lanes (consecutive w) read consecutive dcol entries of one tap. For 3x3 kernels
//                       the tap loops have compile-time bounds and unroll: each tap is its own load
//                       instruction, so a lane whose tap falls outside the output (at the image edges)
//                       is simply masked off that tap's request, and the index arithmetic folds.
//   bias_store_kernel:  one thread per y element: y = round(out + bias[channel]).
// Kernel audit (audit/exemptions.cpp): the im2col path is exempt from the 1.3x DRAM check -- it
// materialises the patch matrix (KH x KW copies of the input) by design; cuDNN replaces it on a GPU.
#include <cstdlib>

#include "kernels/cuda/cudnn/conv2d_cudnn.h"
#include "kernels/cuda/device_math.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/kernels_cuda.h"

namespace hg::kernels::cuda {
namespace {

template <class T, class A>
__global__ void im2col_kernel(Conv2dGeometry g, const T* __restrict__ x, A* __restrict__ col) {
  const int64_t ow = g.out_w(), P = g.out_pixels(), total = g.col_rows() * P;
  for (int64_t u = flat_worker(); u < total; u += flat_workers()) {
    const int64_t row = u / P, pixel = u % P;
    const int64_t q = row % g.kernel_w, p = (row / g.kernel_w) % g.kernel_h, c = row / (g.kernel_w * g.kernel_h);
    const int64_t h = (pixel / ow) * g.stride_h - g.pad_h + p * g.dilation_h;
    const int64_t w = (pixel % ow) * g.stride_w - g.pad_w + q * g.dilation_w;
    const bool inside = h >= 0 && h < g.height && w >= 0 && w < g.width;
    col[u] = inside ? to_acc(x[(c * g.height + h) * g.width + w]) : A(0);
  }
}

// kKH, kKW: the kernel size when fixed at compile time (the taps unroll), 0 to take it from g.
template <class T, class A, int kKH, int kKW>
__global__ void col2im_kernel(Conv2dGeometry g, const A* __restrict__ dcol, T* __restrict__ dx) {
  const int64_t oh = g.out_h(), ow = g.out_w(), P = oh * ow;
  const int64_t KH = kKH > 0 ? kKH : g.kernel_h, KW = kKW > 0 ? kKW : g.kernel_w;
  const int64_t total = g.group_in_channels() * g.height * g.width;
  for (int64_t u = flat_worker(); u < total; u += flat_workers()) {
    const int64_t w = u % g.width, h = (u / g.width) % g.height, c = u / (g.width * g.height);
    A sum = 0;
    HG_UNROLL
    for (int64_t p = 0; p < KH; ++p) {
      const int64_t i = conv_reading_output(h, p, g.stride_h, g.pad_h, g.dilation_h, oh);
      if (i < 0) continue;
      HG_UNROLL
      for (int64_t q = 0; q < KW; ++q) {
        const int64_t j = conv_reading_output(w, q, g.stride_w, g.pad_w, g.dilation_w, ow);
        if (j >= 0) sum += dcol[((c * KH + p) * KW + q) * P + i * ow + j];
      }
    }
    dx[u] = from_acc<T>(sum);
  }
}

// y[o, k] = round(out[o, k] + bias[o]) over [channels, pixels]; bias nullable.
template <class T, class A>
__global__ void bias_store_kernel(const A* __restrict__ out, const T* __restrict__ bias, T* __restrict__ y,
                                  int64_t channels, int64_t pixels) {
  for (int64_t u = flat_worker(); u < channels * pixels; u += flat_workers()) {
    const A b = bias != nullptr ? to_acc(bias[u / pixels]) : A(0);
    y[u] = from_acc<T>(out[u] + b);
  }
}

DType acc_dtype_of(DType dtype) { return dtype == DType::f64 ? DType::f64 : DType::f32; }

// The im2col path's workspace, in A elements: [widened weights or dW accumulator | col | staged dy or out].
int64_t im2col_workspace_elements(const Conv2dGeometry& g) {
  return g.weight_numel() + g.col_rows() * g.out_pixels() + g.group_out_channels() * g.out_pixels();
}

void check_workspace(const Conv2dGeometry& g, ConvPass pass, DType dtype, const void* workspace, size_t bytes,
                     Stream stream, const char* op) {
  const size_t needed = conv2d_workspace_bytes(g, pass, dtype, stream);
  HG_CHECK(bytes >= needed && (needed == 0 || workspace != nullptr), "[", op, "] workspace of ", bytes,
           " bytes is too small, expected at least conv2d_workspace_bytes = ", needed);
}

// `src` (n elements of dtype) as acc_t: src itself when dtype is its own acc_t, else widened into staging.
const void* as_acc(const void* src, void* staging, int64_t n, DType dtype, Stream stream) {
  if (acc_dtype_of(dtype) == dtype) return src;
  cast(src, dtype, staging, acc_dtype_of(dtype), n, stream);
  return staging;
}

void forward_im2col(const Conv2dGeometry& g, const void* x, const void* weight, const void* bias, void* y,
                    void* workspace, DType dtype, Stream stream) {
  const int64_t R = g.col_rows(), P = g.out_pixels(), Cg = g.group_in_channels(), OCg = g.group_out_channels();
  dispatch_floating_cuda(dtype, "conv2d_forward", [&]<class T>() {
    using A = acc_t<T>;
    A* w_staging = static_cast<A*>(workspace);
    A* col = w_staging + g.weight_numel();
    A* out = col + R * P;
    const A* w = static_cast<const A*>(as_acc(weight, w_staging, g.weight_numel(), dtype, stream));
    for (int64_t n = 0; n < g.batch; ++n) {
      for (int64_t gi = 0; gi < g.groups; ++gi) {
        launch(im2col_kernel<T, A>, flat_grid(R * P), dim3(kFlatThreads), 0, stream, g,
               static_cast<const T*>(x) + (n * g.in_channels + gi * Cg) * g.height * g.width, col);
        gemm(false, false, OCg, P, R, 1.0, w + gi * OCg * R, R, col, P, 0.0, out, P, acc_dtype_of(dtype), stream);
        launch(bias_store_kernel<T, A>, flat_grid(OCg * P), dim3(kFlatThreads), 0, stream, out,
               bias != nullptr ? static_cast<const T*>(bias) + gi * OCg : nullptr,
               static_cast<T*>(y) + (n * g.out_channels + gi * OCg) * P, OCg, P);
      }
    }
  });
}

void backward_data_im2col(const Conv2dGeometry& g, const void* dy, const void* weight, void* dx, void* workspace,
                          DType dtype, Stream stream) {
  const int64_t R = g.col_rows(), P = g.out_pixels(), Cg = g.group_in_channels(), OCg = g.group_out_channels();
  dispatch_floating_cuda(dtype, "conv2d_backward_data", [&]<class T>() {
    using A = acc_t<T>;
    A* w_staging = static_cast<A*>(workspace);
    A* dcol = w_staging + g.weight_numel();
    A* dy_staging = dcol + R * P;
    const A* w = static_cast<const A*>(as_acc(weight, w_staging, g.weight_numel(), dtype, stream));
    const auto col2im = g.kernel_h == 3 && g.kernel_w == 3 ? col2im_kernel<T, A, 3, 3> : col2im_kernel<T, A, 0, 0>;
    for (int64_t n = 0; n < g.batch; ++n) {
      for (int64_t gi = 0; gi < g.groups; ++gi) {
        const T* dy_g = static_cast<const T*>(dy) + (n * g.out_channels + gi * OCg) * P;
        const A* d = static_cast<const A*>(as_acc(dy_g, dy_staging, OCg * P, dtype, stream));
        gemm(true, false, R, P, OCg, 1.0, w + gi * OCg * R, R, d, P, 0.0, dcol, P, acc_dtype_of(dtype), stream);
        launch(col2im, flat_grid(Cg * g.height * g.width), dim3(kFlatThreads), 0, stream, g, dcol,
               static_cast<T*>(dx) + (n * g.in_channels + gi * Cg) * g.height * g.width);
      }
    }
  });
}

void backward_filter_im2col(const Conv2dGeometry& g, const void* x, const void* dy, void* dweight, void* workspace,
                            DType dtype, Stream stream) {
  const int64_t R = g.col_rows(), P = g.out_pixels(), Cg = g.group_in_channels(), OCg = g.group_out_channels();
  dispatch_floating_cuda(dtype, "conv2d_backward_filter", [&]<class T>() {
    using A = acc_t<T>;
    A* dw = static_cast<A*>(workspace);
    A* col = dw + g.weight_numel();
    A* dy_staging = col + R * P;
    if (g.batch == 0) fill(dw, g.weight_numel(), 0.0, acc_dtype_of(dtype), stream);
    for (int64_t n = 0; n < g.batch; ++n) {
      for (int64_t gi = 0; gi < g.groups; ++gi) {
        launch(im2col_kernel<T, A>, flat_grid(R * P), dim3(kFlatThreads), 0, stream, g,
               static_cast<const T*>(x) + (n * g.in_channels + gi * Cg) * g.height * g.width, col);
        const T* dy_g = static_cast<const T*>(dy) + (n * g.out_channels + gi * OCg) * P;
        const A* d = static_cast<const A*>(as_acc(dy_g, dy_staging, OCg * P, dtype, stream));
        gemm(false, true, OCg, R, P, 1.0, d, P, col, P, n == 0 ? 0.0 : 1.0, dw + gi * OCg * R, R,
             acc_dtype_of(dtype), stream);
      }
    }
    cast(dw, acc_dtype_of(dtype), dweight, dtype, g.weight_numel(), stream);
  });
}

}  // namespace

size_t conv2d_workspace_bytes(const Conv2dGeometry& g, ConvPass pass, DType dtype, Stream stream) {
  check_conv2d_geometry(g, "conv2d_workspace_bytes");
  HG_CHECK(is_floating(dtype), "[conv2d] expected a floating dtype, got ", dtype_name(dtype));
  if (cudnn::enabled()) return cudnn::conv2d_workspace_bytes(g, pass, dtype, stream);
  return size_t(im2col_workspace_elements(g)) * dtype_size(acc_dtype_of(dtype));
}

void conv2d_forward(const Conv2dGeometry& g, const void* x, const void* weight, const void* bias, void* y,
                    void* workspace, size_t workspace_bytes, DType dtype, Stream stream) {
  check_workspace(g, ConvPass::Forward, dtype, workspace, workspace_bytes, stream, "conv2d_forward");
  if (cudnn::enabled()) return cudnn::conv2d_forward(g, x, weight, bias, y, workspace, workspace_bytes, dtype, stream);
  forward_im2col(g, x, weight, bias, y, workspace, dtype, stream);
}

void conv2d_backward_data(const Conv2dGeometry& g, const void* dy, const void* weight, void* dx, void* workspace,
                          size_t workspace_bytes, DType dtype, Stream stream) {
  check_workspace(g, ConvPass::BackwardData, dtype, workspace, workspace_bytes, stream, "conv2d_backward_data");
  if (cudnn::enabled()) {
    return cudnn::conv2d_backward_data(g, dy, weight, dx, workspace, workspace_bytes, dtype, stream);
  }
  backward_data_im2col(g, dy, weight, dx, workspace, dtype, stream);
}

void conv2d_backward_filter(const Conv2dGeometry& g, const void* x, const void* dy, void* dweight, void* workspace,
                            size_t workspace_bytes, DType dtype, Stream stream) {
  check_workspace(g, ConvPass::BackwardFilter, dtype, workspace, workspace_bytes, stream, "conv2d_backward_filter");
  if (cudnn::enabled()) {
    return cudnn::conv2d_backward_filter(g, x, dy, dweight, workspace, workspace_bytes, dtype, stream);
  }
  backward_filter_im2col(g, x, dy, dweight, workspace, dtype, stream);
}

}  // namespace hg::kernels::cuda
