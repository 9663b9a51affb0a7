#pragma once
// Per-element math of the fused Adagrad step (PyTorch's torch.optim.Adagrad: L2 weight decay, lr decay),
// shared by the CPU and CUDA backends (kernels/cpu/adagrad.cpp, kernels/cuda/adagrad.cu). At step t >= 1:
//
//   g     <- g + weight_decay * theta
//   sum   <- sum + g^2
//   theta <- theta - (g / (sqrt(sum) + eps)) * (lr / (1 + (t - 1) * lr_decay))
//
// in the order of the composed update it replaces, each operation rounded on its own
// (kernels/optimizer_math.h); the decayed learning rate is computed once per call in double.
#include <cstdint>

#include "kernels/optimizer_math.h"

namespace hg::kernels {

template <class A>
struct AdagradCoefficients {
  A clr, eps, weight_decay;
};

template <class A>
HG_HOST_DEVICE inline AdagradCoefficients<A> adagrad_coefficients(double lr, double lr_decay, double eps,
                                                                  double weight_decay, int64_t step) {
  return {A(lr / (1.0 + double(step - 1) * lr_decay)), A(eps), A(weight_decay)};
}

// One element; s[0] = sum.
template <class A>
HG_HOST_DEVICE inline void adagrad_update(A& theta, A g, A* s, const AdagradCoefficients<A>& c) {
  g = opt_l2(g, theta, c.weight_decay);
  s[0] = opt_add(s[0], opt_mul(g, g));
  theta = opt_sub(theta, opt_mul(g / opt_add(std::sqrt(s[0]), c.eps), c.clr));
}

// adagrad_update as the drivers call it (kernels/cpu/fused_optimizer.h, kernels/cuda/fused_optimizer.h).
template <class A>
struct AdagradRule {
  AdagradCoefficients<A> c;
  HG_HOST_DEVICE void operator()(A& theta, A g, A* s) const { adagrad_update(theta, g, s, c); }
};

// The step's hyper-parameters; rule<A>(lr, t) is update t's rule (kernels/optimizer_kernels.h).
struct AdagradStep {
  double lr_decay, eps, weight_decay;
  template <class A>
  HG_HOST_DEVICE AdagradRule<A> rule(double lr, int64_t t) const {
    return {adagrad_coefficients<A>(lr, lr_decay, eps, weight_decay, t)};
  }
};

}  // namespace hg::kernels
