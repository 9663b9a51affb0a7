// 2-D convolution on the CPU as im2col + the project's GEMM (kernels/cpu/gemm.cpp), all in acc_t.
//
// Per image n and group g (Cg = C / groups input channels, OCg = OC / groups output channels,
// R = Cg KH KW patch rows, P = OH OW output pixels):
//   im2col:  col[(c, p, q), (i, j)] = x[n, g Cg + c, i sh - ph + p dh, j sw - pw + q dw]  (0 outside)
//   forward:          y[n, g]  = W_g col + bias            W_g = weight rows of group g, [OCg, R]
//   backward data:    dcol     = W_g^T dy[n, g]            then dx[n, g] = col2im(dcol)
//   backward filter:  dW_g    += dy[n, g] col^T            summed over the images
// col2im adds each patch row back where im2col read it, into an acc_t plane owned by the image's
// thread (no races); every dx element receives its terms in tap order (p, q), as a gather would.
//
// Precision: the patch matrix, the weights and dy are converted to acc_t (float for f16/bf16/f32,
// double for f64) as they are staged, the GEMMs run in acc_t, and outputs are rounded once on store.
//
// Parallel strategy: OpenMP over images (static schedule); each thread owns a slice of the caller's
// workspace (its col, dcol and staged-dy buffers, and for backward filter its own partial dW), and
// the GEMMs it calls run single-threaded inside the parallel region. Backward filter adds the
// per-thread partial dW in thread order, so results are deterministic for a given thread count.
// Everything that can throw is checked before the parallel region.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/dispatch.h"
#include "kernels/kernels.h"

namespace hg::kernels::cpu {
namespace {

int conv_threads(const Conv2dGeometry& g) {
  return int(std::max<int64_t>(1, std::min<int64_t>(omp_get_max_threads(), g.batch)));
}

// Workspace, in acc_t elements: a shared part (the weights in acc_t) and one slice per thread.
struct Workspace {
  int64_t shared = 0, per_thread = 0;
};

Workspace workspace_elements(const Conv2dGeometry& g, ConvPass pass) {
  const int64_t col = g.col_rows() * g.out_pixels(), dy = g.group_out_channels() * g.out_pixels();
  switch (pass) {
    case ConvPass::Forward: return {g.weight_numel(), col + dy};
    case ConvPass::BackwardData: return {g.weight_numel(), col + dy + g.height * g.width};
    case ConvPass::BackwardFilter: return {0, col + dy + g.weight_numel()};
  }
  return {};
}

size_t acc_size(DType dtype) { return dtype == DType::f64 ? sizeof(double) : sizeof(float); }

template <class A>
constexpr DType acc_dtype() {
  return std::is_same_v<A, double> ? DType::f64 : DType::f32;
}

template <class T, class A>
void stage(const T* __restrict in, A* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = A(in[i]);
}

// The outputs j in [first, last) whose tap at offset `tap` (= q dilation - pad) reads inside [0, size):
// 0 <= j stride + tap < size.
inline void valid_outputs(int64_t tap, int64_t stride, int64_t size, int64_t out, int64_t& first, int64_t& last) {
  first = tap >= 0 ? 0 : (-tap + stride - 1) / stride;
  last = size - tap <= 0 ? 0 : std::min<int64_t>(out, (size - tap + stride - 1) / stride);
  if (last < first) last = first;
}

// The patch matrix of one image and group: x points at the group's first channel [Cg, H, W]. Each patch
// row (c, p, q) holds, for output row i, the input row h = i sh - ph + p dh at columns j sw + tap for the
// valid columns [j0, j1) (zeros outside): the bounds are computed once per (p, q), not per element.
template <class T, class A>
void im2col(const Conv2dGeometry& g, const T* __restrict x, A* __restrict col) {
  const int64_t oh = g.out_h(), ow = g.out_w(), P = oh * ow;
  for (int64_t c = 0; c < g.group_in_channels(); ++c) {
    const T* plane = x + c * g.height * g.width;
    for (int64_t p = 0; p < g.kernel_h; ++p) {
      for (int64_t q = 0; q < g.kernel_w; ++q) {
        A* dst = col + ((c * g.kernel_h + p) * g.kernel_w + q) * P;
        const int64_t tap = q * g.dilation_w - g.pad_w;
        int64_t j0, j1;
        valid_outputs(tap, g.stride_w, g.width, ow, j0, j1);
        for (int64_t i = 0; i < oh; ++i) {
          const int64_t h = i * g.stride_h - g.pad_h + p * g.dilation_h;
          A* row = dst + i * ow;
          if (h < 0 || h >= g.height) {
            std::fill(row, row + ow, A(0));
            continue;
          }
          const T* src = plane + h * g.width + tap;
          std::fill(row, row + j0, A(0));
          if (g.stride_w == 1) {
            for (int64_t j = j0; j < j1; ++j) row[j] = A(src[j]);
          } else {
            for (int64_t j = j0; j < j1; ++j) row[j] = A(src[j * g.stride_w]);
          }
          std::fill(row + j1, row + ow, A(0));
        }
      }
    }
  }
}

// dx of one image and group ([Cg, H, W]) from its dcol: dx is zeroed, then every patch row (c, p, q)
// adds its entries where im2col read them. One thread owns the image, and each dx element receives its
// terms in (p, q) order, the order a gather over the taps would sum them.
template <class T, class A>
void col2im(const Conv2dGeometry& g, const A* __restrict dcol, T* __restrict dx, A* __restrict sum) {
  const int64_t oh = g.out_h(), ow = g.out_w(), P = oh * ow, HW = g.height * g.width;
  for (int64_t c = 0; c < g.group_in_channels(); ++c) {
    std::fill(sum, sum + HW, A(0));
    for (int64_t p = 0; p < g.kernel_h; ++p) {
      for (int64_t q = 0; q < g.kernel_w; ++q) {
        const A* src = dcol + ((c * g.kernel_h + p) * g.kernel_w + q) * P;
        const int64_t tap = q * g.dilation_w - g.pad_w;
        int64_t j0, j1;
        valid_outputs(tap, g.stride_w, g.width, ow, j0, j1);
        for (int64_t i = 0; i < oh; ++i) {
          const int64_t h = i * g.stride_h - g.pad_h + p * g.dilation_h;
          if (h < 0 || h >= g.height) continue;
          A* row = sum + h * g.width + tap;
          const A* from = src + i * ow;
          if (g.stride_w == 1) {
            for (int64_t j = j0; j < j1; ++j) row[j] += from[j];
          } else {
            for (int64_t j = j0; j < j1; ++j) row[j * g.stride_w] += from[j];
          }
        }
      }
    }
    T* out = dx + c * HW;
    for (int64_t e = 0; e < HW; ++e) out[e] = T(sum[e]);
  }
}

// dy of one image and group as acc_t: the tensor itself when T is acc_t, else staged.
template <class T, class A>
const A* dy_as_acc(const T* dy, A* staging, int64_t n) {
  if constexpr (std::is_same_v<T, A>) {
    (void)staging;
    (void)n;
    return dy;
  } else {
    stage(dy, staging, n);
    return staging;
  }
}

void check_workspace(const Conv2dGeometry& g, ConvPass pass, DType dtype, const void* workspace, size_t bytes,
                     const char* op) {
  const size_t needed = conv2d_workspace_bytes(g, pass, dtype);
  HG_CHECK(bytes >= needed && (needed == 0 || workspace != nullptr), "[", op, "] workspace of ", bytes,
           " bytes is too small, expected at least conv2d_workspace_bytes = ", needed);
}

template <class T, class A = acc_t<T>>
void forward_typed(const Conv2dGeometry& g, const T* x, const T* weight, const T* bias, T* y, A* ws) {
  const Workspace layout = workspace_elements(g, ConvPass::Forward);
  stage(weight, ws, g.weight_numel());
  const A* w_acc = ws;
  const int64_t R = g.col_rows(), P = g.out_pixels(), Cg = g.group_in_channels(), OCg = g.group_out_channels();
  const int threads = conv_threads(g);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t n = 0; n < g.batch; ++n) {
    A* col = ws + layout.shared + omp_get_thread_num() * layout.per_thread;
    A* out = col + R * P;
    for (int64_t gi = 0; gi < g.groups; ++gi) {
      im2col(g, x + (n * g.in_channels + gi * Cg) * g.height * g.width, col);
      gemm(false, false, OCg, P, R, 1.0, w_acc + gi * OCg * R, R, col, P, 0.0, out, P, acc_dtype<A>());
      for (int64_t o = 0; o < OCg; ++o) {
        const int64_t channel = gi * OCg + o;
        const A b = bias != nullptr ? A(bias[channel]) : A(0);
        T* dst = y + (n * g.out_channels + channel) * P;
        for (int64_t k = 0; k < P; ++k) dst[k] = T(out[o * P + k] + b);
      }
    }
  }
}

template <class T, class A = acc_t<T>>
void backward_data_typed(const Conv2dGeometry& g, const T* dy, const T* weight, T* dx, A* ws) {
  const Workspace layout = workspace_elements(g, ConvPass::BackwardData);
  stage(weight, ws, g.weight_numel());
  const A* w_acc = ws;
  const int64_t R = g.col_rows(), P = g.out_pixels(), Cg = g.group_in_channels(), OCg = g.group_out_channels();
  const int threads = conv_threads(g);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t n = 0; n < g.batch; ++n) {
    A* dcol = ws + layout.shared + omp_get_thread_num() * layout.per_thread;
    A* staging = dcol + R * P;
    A* plane_sums = staging + OCg * P;
    for (int64_t gi = 0; gi < g.groups; ++gi) {
      const A* dy_g = dy_as_acc(dy + (n * g.out_channels + gi * OCg) * P, staging, OCg * P);
      gemm(true, false, R, P, OCg, 1.0, w_acc + gi * OCg * R, R, dy_g, P, 0.0, dcol, P, acc_dtype<A>());
      col2im(g, dcol, dx + (n * g.in_channels + gi * Cg) * g.height * g.width, plane_sums);
    }
  }
}

template <class T, class A = acc_t<T>>
void backward_filter_typed(const Conv2dGeometry& g, const T* x, const T* dy, T* dweight, A* ws) {
  const Workspace layout = workspace_elements(g, ConvPass::BackwardFilter);
  const int64_t R = g.col_rows(), P = g.out_pixels(), Cg = g.group_in_channels(), OCg = g.group_out_channels();
  const int threads = conv_threads(g);
  const int64_t numel = g.weight_numel();
#pragma omp parallel num_threads(threads)
  {
    A* col = ws + omp_get_thread_num() * layout.per_thread;
    A* staging = col + R * P;
    A* partial = staging + OCg * P;
    std::fill(partial, partial + numel, A(0));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < g.batch; ++n) {
      for (int64_t gi = 0; gi < g.groups; ++gi) {
        im2col(g, x + (n * g.in_channels + gi * Cg) * g.height * g.width, col);
        const A* dy_g = dy_as_acc(dy + (n * g.out_channels + gi * OCg) * P, staging, OCg * P);
        gemm(false, true, OCg, R, P, 1.0, dy_g, P, col, P, 1.0, partial + gi * OCg * R, R, acc_dtype<A>());
      }
    }
  }
  // The partials in thread order (deterministic for a given thread count).
#pragma omp parallel for schedule(static) if (numel >= 4096)
  for (int64_t e = 0; e < numel; ++e) {
    A sum = 0;
    for (int t = 0; t < threads; ++t) sum += ws[t * layout.per_thread + R * P + OCg * P + e];
    dweight[e] = T(sum);
  }
}

}  // namespace

size_t conv2d_workspace_bytes(const Conv2dGeometry& g, ConvPass pass, DType dtype) {
  check_conv2d_geometry(g, "conv2d_workspace_bytes");
  const Workspace w = workspace_elements(g, pass);
  return size_t(w.shared + conv_threads(g) * w.per_thread) * acc_size(dtype);
}

void conv2d_forward(const Conv2dGeometry& g, const void* x, const void* weight, const void* bias, void* y,
                    void* workspace, size_t workspace_bytes, DType dtype) {
  check_conv2d_geometry(g, "conv2d_forward");
  check_workspace(g, ConvPass::Forward, dtype, workspace, workspace_bytes, "conv2d_forward");
  dispatch_floating(dtype, "conv2d_forward", [&]<class T>() {
    forward_typed<T>(g, static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const T*>(bias),
                     static_cast<T*>(y), static_cast<acc_t<T>*>(workspace));
  });
}

void conv2d_backward_data(const Conv2dGeometry& g, const void* dy, const void* weight, void* dx, void* workspace,
                          size_t workspace_bytes, DType dtype) {
  check_conv2d_geometry(g, "conv2d_backward_data");
  check_workspace(g, ConvPass::BackwardData, dtype, workspace, workspace_bytes, "conv2d_backward_data");
  dispatch_floating(dtype, "conv2d_backward_data", [&]<class T>() {
    backward_data_typed<T>(g, static_cast<const T*>(dy), static_cast<const T*>(weight), static_cast<T*>(dx),
                           static_cast<acc_t<T>*>(workspace));
  });
}

void conv2d_backward_filter(const Conv2dGeometry& g, const void* x, const void* dy, void* dweight, void* workspace,
                            size_t workspace_bytes, DType dtype) {
  check_conv2d_geometry(g, "conv2d_backward_filter");
  check_workspace(g, ConvPass::BackwardFilter, dtype, workspace, workspace_bytes, "conv2d_backward_filter");
  dispatch_floating(dtype, "conv2d_backward_filter", [&]<class T>() {
    backward_filter_typed<T>(g, static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<T*>(dweight),
                             static_cast<acc_t<T>*>(workspace));
  });
}

void conv2d_forward_reference(const Conv2dGeometry& g, const void* x, const void* weight, const void* bias, void* y,
                              DType dtype) {
  check_conv2d_geometry(g, "conv2d_forward_reference");
  dispatch_floating(dtype, "conv2d_forward_reference", [&]<class T>() {
    const T* xs = static_cast<const T*>(x);
    const T* ws = static_cast<const T*>(weight);
    const T* bs = static_cast<const T*>(bias);
    T* ys = static_cast<T*>(y);
    const int64_t oh = g.out_h(), ow = g.out_w(), Cg = g.group_in_channels(), OCg = g.group_out_channels();
    for (int64_t n = 0; n < g.batch; ++n) {
      for (int64_t o = 0; o < g.out_channels; ++o) {
        const int64_t first_channel = (o / OCg) * Cg;
        for (int64_t i = 0; i < oh; ++i) {
          for (int64_t j = 0; j < ow; ++j) {
            double sum = bs != nullptr ? double(bs[o]) : 0.0;
            for (int64_t c = 0; c < Cg; ++c) {
              for (int64_t p = 0; p < g.kernel_h; ++p) {
                const int64_t h = i * g.stride_h - g.pad_h + p * g.dilation_h;
                if (h < 0 || h >= g.height) continue;
                for (int64_t q = 0; q < g.kernel_w; ++q) {
                  const int64_t w = j * g.stride_w - g.pad_w + q * g.dilation_w;
                  if (w < 0 || w >= g.width) continue;
                  sum += double(ws[((o * Cg + c) * g.kernel_h + p) * g.kernel_w + q]) *
                         double(xs[((n * g.in_channels + first_channel + c) * g.height + h) * g.width + w]);
                }
              }
            }
            ys[((n * g.out_channels + o) * oh + i) * ow + j] = T(acc_t<T>(sum));
          }
        }
      }
    }
  });
}

}  // namespace hg::kernels::cpu
