#pragma once
// The losses of a difference, fused (engine/ops/losses.cpp: mse_loss, l1_loss, smooth_l1_loss,
// huber_loss). Per element, with d = x - t in A = acc_t<T> (fp32 for half types):
//   Squared  (mse_loss):    f = d^2                                       f' = 2 d
//   Absolute (l1_loss):     f = |d|                                       f' = sign(d), 0 at 0 (NaN stays NaN)
//   Huber    (huber_loss):  f = c (d - c / 2),  c = clamp(d, -delta, delta)  f' = c
//            (= d^2 / 2 where |d| <= delta, delta (|d| - delta / 2) beyond; smooth_l1_loss with beta
//            is Huber with delta = beta and scale 1 / beta)
//   difference_loss_forward:  y[i]  = scale f(d[i])                       the per-element losses (the
//                                                                          engine reduces them)
//   difference_loss_backward: dx[i] = scale g f'(d[i]),  dt[i] = -dx[i]   g: g[0] for every element
//                             (g_per_element false: a reduced loss, its 1 / n folded into scale) or g[i];
//                             dx or dt may be null (not both).
// One pass each, every value rounded to T once. Declared like every kernel of kernels/kernels.h
// (kernels::cpu::name(args...) in kernels/cpu/difference_loss.cpp, kernels::cuda::name(args..., stream) in
// kernels/cuda/difference_loss.cu); kept in its own header so that kernels.h's includers do not depend
// on it.
#include <cstdint>

#include "kernels/declare_kernel.h"
#include "kernels/dtype.h"
#include "kernels/host_device.h"

namespace hg::kernels {

enum class DifferenceLoss : uint8_t { Squared, Absolute, Huber };

template <DifferenceLoss kKind, class A>
HG_HOST_DEVICE inline A difference_loss_value(A d, A delta) {
  if constexpr (kKind == DifferenceLoss::Squared) {
    return d * d;
  } else if constexpr (kKind == DifferenceLoss::Absolute) {
    return d < A(0) ? -d : d;  // NaN stays NaN
  } else {
    const A c = d < -delta ? -delta : (d > delta ? delta : d);
    return c * (d - A(0.5) * c);
  }
}

template <DifferenceLoss kKind, class A>
HG_HOST_DEVICE inline A difference_loss_derivative(A d, A delta) {
  if constexpr (kKind == DifferenceLoss::Squared) {
    return A(2) * d;
  } else if constexpr (kKind == DifferenceLoss::Absolute) {
    return d > A(0) ? A(1) : (d < A(0) ? A(-1) : (d == A(0) ? A(0) : d));  // 0 at +-0, NaN for NaN
  } else {
    return d < -delta ? -delta : (d > delta ? delta : d);
  }
}

// Calls body.template operator()<kKind>() for the run-time kind.
template <class F>
decltype(auto) with_difference_loss(DifferenceLoss kind, F&& body) {
  switch (kind) {
    case DifferenceLoss::Squared:
      return body.template operator()<DifferenceLoss::Squared>();
    case DifferenceLoss::Absolute:
      return body.template operator()<DifferenceLoss::Absolute>();
    case DifferenceLoss::Huber:
      break;
  }
  return body.template operator()<DifferenceLoss::Huber>();
}

HG_DECLARE_KERNEL(void, difference_loss_forward,
                  (DifferenceLoss kind, double delta, double scale, const void* x, const void* t, void* y, int64_t n,
                   DType dtype));
HG_DECLARE_KERNEL(void, difference_loss_backward,
                  (DifferenceLoss kind, double delta, double scale, const void* x, const void* t, const void* g,
                   bool g_per_element, void* dx, void* dt, int64_t n, DType dtype));

}  // namespace hg::kernels
