#pragma once
// Per-element math of the fused RMSprop step (PyTorch's torch.optim.RMSprop: L2 weight decay, momentum,
// centered), shared by the CPU and CUDA backends (kernels/cpu/rmsprop.cpp, kernels/cuda/rmsprop.cu):
//
//   g     <- g + weight_decay * theta
//   s     <- alpha * s + (1 - alpha) * g^2                      square_avg
//   a     <- alpha * a + (1 - alpha) * g                        grad_avg (centered)
//   d     <- sqrt(s - a^2) + eps  (centered)  or  sqrt(s) + eps
//   buf   <- momentum * buf + g / d;  theta <- theta - buf * lr  momentum_buffer (momentum > 0)
//   theta <- theta - (g / d) * lr                               (momentum = 0)
//
// in the order of the composed update it replaces, each operation rounded on its own
// (kernels/optimizer_math.h). State slots: s[0] = square_avg, then momentum_buffer (kMomentum), then
// grad_avg (kCentered).
#include <cstdint>

#include "kernels/optimizer_math.h"

namespace hg::kernels {

template <class A>
struct RMSpropCoefficients {
  A lr, alpha, one_minus_alpha, eps, weight_decay, momentum;
};

template <class A>
HG_HOST_DEVICE inline RMSpropCoefficients<A> rmsprop_coefficients(double lr, double alpha, double eps,
                                                                  double weight_decay, double momentum) {
  return {A(lr), A(alpha), A(1.0 - alpha), A(eps), A(weight_decay), A(momentum)};
}

template <bool kMomentum, bool kCentered, class A>
HG_HOST_DEVICE inline void rmsprop_update(A& theta, A g, A* s, const RMSpropCoefficients<A>& c) {
  g = opt_l2(g, theta, c.weight_decay);
  s[0] = opt_lerp(s[0], c.alpha, opt_mul(g, g), c.one_minus_alpha);
  A d;
  if constexpr (kCentered) {
    A& a = s[kMomentum ? 2 : 1];
    a = opt_lerp(a, c.alpha, g, c.one_minus_alpha);
    d = opt_add(std::sqrt(opt_sub(s[0], opt_mul(a, a))), c.eps);
  } else {
    d = opt_add(std::sqrt(s[0]), c.eps);
  }
  if constexpr (kMomentum) {
    s[1] = opt_add(opt_mul(s[1], c.momentum), g / d);
    theta = opt_sub(theta, opt_mul(s[1], c.lr));
  } else {
    theta = opt_sub(theta, opt_mul(g / d, c.lr));
  }
}

// rmsprop_update as the drivers call it (kernels/cpu/fused_optimizer.h, kernels/cuda/fused_optimizer.h).
template <bool kMomentum, bool kCentered, class A>
struct RMSpropRule {
  RMSpropCoefficients<A> c;
  HG_HOST_DEVICE void operator()(A& theta, A g, A* s) const { rmsprop_update<kMomentum, kCentered>(theta, g, s, c); }
};

// The step's hyper-parameters; rule<A>(lr, t) is update t's rule (kernels/optimizer_kernels.h).
template <bool kMomentum, bool kCentered>
struct RMSpropStep {
  double alpha, eps, weight_decay, momentum;
  template <class A>
  HG_HOST_DEVICE RMSpropRule<kMomentum, kCentered, A> rule(double lr, int64_t) const {
    return {rmsprop_coefficients<A>(lr, alpha, eps, weight_decay, momentum)};
  }
};

}  // namespace hg::kernels
