#pragma once
// Per-element math of the fused Lion step (Chen et al. 2023, Algorithm 2, decoupled weight decay),
// shared by the CPU and CUDA backends (kernels/cpu/lion.cpp, kernels/cuda/lion.cu):
//
//   theta <- theta * (1 - lr * weight_decay)          (skipped when weight_decay = 0)
//   theta <- theta - sign(beta1 * m + (1 - beta1) * g) * lr
//   m     <- beta2 * m + (1 - beta2) * g              exp_avg
//
// in the order of the composed update it replaces, each operation rounded on its own
// (kernels/optimizer_math.h). sign(0) = 0; sign(NaN) = NaN, as the engine's sign.
#include <cstdint>

#include "kernels/optimizer_math.h"

namespace hg::kernels {

template <class A>
struct LionCoefficients {
  A lr, decay, beta1, one_minus_beta1, beta2, one_minus_beta2;
  bool decays;
};

template <class A>
HG_HOST_DEVICE inline LionCoefficients<A> lion_coefficients(double lr, double beta1, double beta2,
                                                            double weight_decay) {
  return {A(lr), A(1.0 - lr * weight_decay), A(beta1), A(1.0 - beta1), A(beta2), A(1.0 - beta2), weight_decay != 0.0};
}

// One element; s[0] = exp_avg.
template <class A>
HG_HOST_DEVICE inline void lion_update(A& theta, A g, A* s, const LionCoefficients<A>& c) {
  const A x = opt_lerp(s[0], c.beta1, g, c.one_minus_beta1);
  const A direction = x > A(0) ? A(1) : x < A(0) ? A(-1) : x;  // x: 0 or NaN
  const A decayed = c.decays ? opt_mul(theta, c.decay) : theta;
  theta = opt_sub(decayed, opt_mul(direction, c.lr));
  s[0] = opt_lerp(s[0], c.beta2, g, c.one_minus_beta2);
}

// lion_update as the drivers call it (kernels/cpu/fused_optimizer.h, kernels/cuda/fused_optimizer.h).
template <class A>
struct LionRule {
  LionCoefficients<A> c;
  HG_HOST_DEVICE void operator()(A& theta, A g, A* s) const { lion_update(theta, g, s, c); }
};

// The step's hyper-parameters; rule<A>(lr, t) is update t's rule (kernels/optimizer_kernels.h).
struct LionStep {
  double beta1, beta2, weight_decay;
  template <class A>
  HG_HOST_DEVICE LionRule<A> rule(double lr, int64_t) const {
    return {lion_coefficients<A>(lr, beta1, beta2, weight_decay)};
  }
};

}  // namespace hg::kernels
