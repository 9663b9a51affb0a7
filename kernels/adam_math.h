#pragma once
// Per-element math of the fused Adam step (PyTorch's torch.optim.Adam: L2 weight decay, AMSGrad),
// shared by the CPU and CUDA backends (kernels/cpu/adam.cpp, kernels/cuda/adam.cu). At step t >= 1:
//
//   g     <- g + weight_decay * theta
//   m     <- beta1 * m + (1 - beta1) * g                     exp_avg
//   v     <- beta2 * v + (1 - beta2) * g^2                   exp_avg_sq
//   v_max <- max(v_max, v)                                   max_exp_avg_sq (AMSGrad)
//   theta <- theta - (m / (sqrt(v or v_max) * (1 / sqrt(1 - beta2^t)) + eps)) * (lr / (1 - beta1^t))
//
// in the order of the composed update it replaces (optim/adam.cpp before the kernel), each operation
// rounded on its own (kernels/optimizer_math.h). The step's scalars are computed once per call in
// double and rounded to A (float, or double for f64 parameters).
#include <cmath>
#include <cstdint>

#include "kernels/optimizer_math.h"

namespace hg::kernels {

template <class A>
struct AdamCoefficients {
  A weight_decay;
  A beta1, one_minus_beta1;
  A beta2, one_minus_beta2;
  A inv_bias2_sqrt;  // 1 / sqrt(1 - beta2^t)
  A eps;
  A step_size;  // lr / (1 - beta1^t)
};

template <class A>
HG_HOST_DEVICE inline AdamCoefficients<A> adam_coefficients(double lr, double beta1, double beta2, double eps,
                                                            double weight_decay, int64_t step) {
  AdamCoefficients<A> c;
  c.weight_decay = A(weight_decay);
  c.beta1 = A(beta1);
  c.one_minus_beta1 = A(1.0 - beta1);
  c.beta2 = A(beta2);
  c.one_minus_beta2 = A(1.0 - beta2);
  c.inv_bias2_sqrt = A(1.0 / std::sqrt(1.0 - std::pow(beta2, double(step))));
  c.eps = A(eps);
  c.step_size = A(lr / (1.0 - std::pow(beta1, double(step))));
  return c;
}

// One element; s = {m, v} or, with kAmsgrad, {m, v, v_max}.
template <bool kAmsgrad, class A>
HG_HOST_DEVICE inline void adam_update(A& theta, A g, A* s, const AdamCoefficients<A>& c) {
  g = opt_l2(g, theta, c.weight_decay);
  s[0] = opt_lerp(s[0], c.beta1, g, c.one_minus_beta1);
  s[1] = opt_lerp(s[1], c.beta2, opt_mul(g, g), c.one_minus_beta2);
  A second = s[1];
  if constexpr (kAmsgrad) {
    s[2] = (s[1] > s[2] || s[1] != s[1]) ? s[1] : s[2];  // maximum(): NaN propagates
    second = s[2];
  }
  const A denom = opt_add(opt_mul(std::sqrt(second), c.inv_bias2_sqrt), c.eps);
  theta = opt_sub(theta, opt_mul(s[0] / denom, c.step_size));
}

// adam_update as the drivers call it (kernels/cpu/fused_optimizer.h, kernels/cuda/fused_optimizer.h).
template <bool kAmsgrad, class A>
struct AdamRule {
  AdamCoefficients<A> c;
  HG_HOST_DEVICE void operator()(A& theta, A g, A* s) const { adam_update<kAmsgrad>(theta, g, s, c); }
};

// The step's hyper-parameters; rule<A>(lr, t) is update t's rule (kernels/optimizer_kernels.h).
template <bool kAmsgrad>
struct AdamStep {
  double beta1, beta2, eps, weight_decay;
  template <class A>
  HG_HOST_DEVICE AdamRule<kAmsgrad, A> rule(double lr, int64_t t) const {
    return {adam_coefficients<A>(lr, beta1, beta2, eps, weight_decay, t)};
  }
};

}  // namespace hg::kernels
