#pragma once
// The pointwise losses of an input x and a target t, fused (engine/ops/losses.cpp: mse_loss, l1_loss,
// smooth_l1_loss, huber_loss, binary_cross_entropy, kl_div). Per element, in A = acc_t<T> (fp32 for half
// types), with d = x - t:
//   Squared  (mse_loss):   f = d^2                                          df/dx = 2 d
//   Absolute (l1_loss):    f = |d|                                          df/dx = sign(d), 0 at 0, NaN for NaN
//   Huber    (huber_loss): f = c (d - c / 2),  c = clamp(d, -delta, delta)  df/dx = c
//            (= d^2 / 2 where |d| <= delta, delta (|d| - delta / 2) beyond; smooth_l1_loss with beta is
//            Huber with delta = beta and scale 1 / beta)
//            and for these three df/dt = -df/dx;
//   BinaryCrossEntropy: f = -(t max(log x, -100) + (1 - t) max(log(1 - x), -100))
//            df/dx = (x - t) / max(x (1 - x), 1e-12),  df/dt = log(1 - x) - log(x)
//            (PyTorch 1.13's: the logs clamped forward, not in the backward; x in [0, 1] is the caller's
//            check);
//   KlDiv (kl_div, x = log q, t = p):  f = t log(t or 1 where t == 0) - t x  (xlogy(t, t) - t x)
//            df/dx = -t,  df/dt = log(t or 1) + (t != 0) - x
//   KlDivLogTarget (t = log p):        f = e^t (t - x)
//            df/dx = -e^t,  df/dt = e^t (t - x + 1).
//   pointwise_loss_forward:  y[i]  = scale f(x[i], t[i])        the per-element losses (Reduction::None)
//   pointwise_loss_sum:      y[0]  = scale sum_i f(x[i], t[i])  a reduced loss (scale 1 / n: the mean), n >= 1;
//                            on the CPU one pass (fp32 sums of fixed chunks, added in double in chunk
//                            order: the same bits at any thread count); on CUDA the values go to a
//                            workspace and through the reduce kernel (two launches)
//   pointwise_loss_backward: dx[i] = scale g df/dx,  dt[i] = scale g df/dt,  g = g[0] for every element
//                            (g_per_element false: a reduced loss, its 1 / n folded into scale) or g[i];
//                            dx or dt may be null (not both).
// One pass each (two for the backward when both gradients are wanted), every value rounded to T once.
// Declared like every kernel of kernels/kernels.h (kernels::cpu::name(args...) in kernels/cpu/pointwise_loss.cpp,
// kernels::cuda::name(args..., stream) in kernels/cuda/pointwise_loss.cu); kept in its own header so that
// kernels.h's includers do not depend on it.
#include <cmath>
#include <cstdint>

#include "kernels/declare_kernel.h"
#include "kernels/dtype.h"
#include "kernels/host_device.h"

namespace hg::kernels {

enum class PointwiseLoss : uint8_t { Squared, Absolute, Huber, BinaryCrossEntropy, KlDiv, KlDivLogTarget };

// The log and exp the math below calls: these on a device; the CPU passes vectorisable ones
// (kernels/cpu/simd_math.h vlog, vexp).
struct StdLogExp {
  template <class A>
  static HG_HOST_DEVICE A log(A x) {
    return std::log(x);
  }
  template <class A>
  static HG_HOST_DEVICE A exp(A x) {
    return std::exp(x);
  }
};

template <class A>
HG_HOST_DEVICE inline A clamp_symmetric(A d, A delta) {
  return d < -delta ? -delta : (d > delta ? delta : d);
}

template <PointwiseLoss kKind, class Math = StdLogExp, class A>
HG_HOST_DEVICE inline A pointwise_loss_value(A x, A t, A delta) {
  const A d = x - t;
  if constexpr (kKind == PointwiseLoss::Squared) {
    return d * d;
  } else if constexpr (kKind == PointwiseLoss::Absolute) {
    return d < A(0) ? -d : d;  // NaN stays NaN
  } else if constexpr (kKind == PointwiseLoss::Huber) {
    const A c = clamp_symmetric(d, delta);
    return c * (d - A(0.5) * c);
  } else if constexpr (kKind == PointwiseLoss::BinaryCrossEntropy) {
    const A log_x = Math::log(x), log_1mx = Math::log(A(1) - x);
    return -(t * (log_x < A(-100) ? A(-100) : log_x) + (A(1) - t) * (log_1mx < A(-100) ? A(-100) : log_1mx));
  } else if constexpr (kKind == PointwiseLoss::KlDiv) {
    return t * Math::log(t == A(0) ? A(1) : t) - t * x;
  } else {
    return Math::exp(t) * (t - x);
  }
}

// df/dx (kWithRespectToTarget false) or df/dt.
template <PointwiseLoss kKind, bool kWithRespectToTarget, class Math = StdLogExp, class A>
HG_HOST_DEVICE inline A pointwise_loss_derivative(A x, A t, A delta) {
  if constexpr (kKind == PointwiseLoss::KlDiv) {
    if constexpr (kWithRespectToTarget) {
      return Math::log(t == A(0) ? A(1) : t) + (t == A(0) ? A(0) : A(1)) - x;
    } else {
      return -t;
    }
  } else if constexpr (kKind == PointwiseLoss::KlDivLogTarget) {
    if constexpr (kWithRespectToTarget) {
      return Math::exp(t) * (t - x + A(1));
    } else {
      return -Math::exp(t);
    }
  } else if constexpr (kKind == PointwiseLoss::BinaryCrossEntropy) {
    if constexpr (kWithRespectToTarget) {
      return Math::log(A(1) - x) - Math::log(x);
    } else {
      const A spread = x * (A(1) - x);
      return (x - t) / (spread < A(1e-12) ? A(1e-12) : spread);
    }
  } else {
    const A d = x - t;
    A dx;
    if constexpr (kKind == PointwiseLoss::Squared) {
      dx = A(2) * d;
    } else if constexpr (kKind == PointwiseLoss::Absolute) {
      dx = d > A(0) ? A(1) : (d < A(0) ? A(-1) : (d == A(0) ? A(0) : d));  // 0 at +-0, NaN for NaN
    } else {
      dx = clamp_symmetric(d, delta);
    }
    return kWithRespectToTarget ? -dx : dx;
  }
}

// Calls body.template operator()<kKind>() for the run-time kind.
template <class F>
decltype(auto) with_pointwise_loss(PointwiseLoss kind, F&& body) {
  switch (kind) {
    case PointwiseLoss::Squared:
      return body.template operator()<PointwiseLoss::Squared>();
    case PointwiseLoss::Absolute:
      return body.template operator()<PointwiseLoss::Absolute>();
    case PointwiseLoss::Huber:
      return body.template operator()<PointwiseLoss::Huber>();
    case PointwiseLoss::BinaryCrossEntropy:
      return body.template operator()<PointwiseLoss::BinaryCrossEntropy>();
    case PointwiseLoss::KlDiv:
      return body.template operator()<PointwiseLoss::KlDiv>();
    case PointwiseLoss::KlDivLogTarget:
      break;
  }
  return body.template operator()<PointwiseLoss::KlDivLogTarget>();
}

HG_DECLARE_KERNEL(void, pointwise_loss_forward,
                  (PointwiseLoss kind, double delta, double scale, const void* x, const void* t, void* y, int64_t n,
                   DType dtype));
HG_DECLARE_KERNEL(void, pointwise_loss_sum,
                  (PointwiseLoss kind, double delta, double scale, const void* x, const void* t, void* y, int64_t n,
                   DType dtype));
HG_DECLARE_KERNEL(void, pointwise_loss_backward,
                  (PointwiseLoss kind, double delta, double scale, const void* x, const void* t, const void* g,
                   bool g_per_element, void* dx, void* dt, int64_t n, DType dtype));

}  // namespace hg::kernels
