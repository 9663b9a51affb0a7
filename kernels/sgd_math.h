#pragma once
// Per-element math of the fused SGD step (PyTorch's torch.optim.SGD: L2 weight decay, momentum with
// dampening, Nesterov), shared by the CPU and CUDA backends (kernels/cpu/sgd.cpp, kernels/cuda/sgd.cu):
//
//   g     <- g + weight_decay * theta                        (skipped when weight_decay = 0)
//   buf   <- g                               at the parameter's first update (t = 1), else
//   buf   <- momentum * buf + (1 - dampening) * g            momentum_buffer (kMomentum)
//   g     <- g + momentum * buf  (kNesterov)   or   g <- buf (kMomentum)
//   theta <- theta - g * lr
//
// in the order of the composed update it replaced, each operation rounded on its own
// (kernels/optimizer_math.h). State slot (kMomentum only): s[0] = momentum_buffer.
#include <cstdint>

#include "kernels/optimizer_math.h"

namespace hg::kernels {

template <class A>
struct SGDCoefficients {
  A lr, weight_decay, momentum, one_minus_dampening;
};

template <class A>
HG_HOST_DEVICE inline SGDCoefficients<A> sgd_coefficients(double lr, double weight_decay, double momentum,
                                                          double dampening) {
  return {A(lr), A(weight_decay), A(momentum), A(1.0 - dampening)};
}

// first: the parameter's first update (t = 1), which sets the buffer to the gradient.
template <bool kMomentum, bool kNesterov, class A>
HG_HOST_DEVICE inline void sgd_update(A& theta, A g, A* s, const SGDCoefficients<A>& c, bool first) {
  g = opt_l2(g, theta, c.weight_decay);
  if constexpr (kMomentum) {
    s[0] = first ? g : opt_lerp(s[0], c.momentum, g, c.one_minus_dampening);
    if constexpr (kNesterov) {
      g = opt_add(g, opt_mul(s[0], c.momentum));
    } else {
      g = s[0];
    }
  }
  theta = opt_sub(theta, opt_mul(g, c.lr));
}

// sgd_update as the drivers call it (kernels/cpu/fused_optimizer.h, kernels/cuda/fused_optimizer.h).
template <bool kMomentum, bool kNesterov, class A>
struct SGDRule {
  SGDCoefficients<A> c;
  bool first;
  HG_HOST_DEVICE void operator()(A& theta, A g, A* s) const { sgd_update<kMomentum, kNesterov>(theta, g, s, c, first); }
};

// The step's hyper-parameters; rule<A>(lr, t) is update t's rule (built on the host, or by each CUDA thread
// from the learning rate and count it reads: kernels/optimizer_kernels.h).
template <bool kMomentum, bool kNesterov>
struct SGDStep {
  double weight_decay, momentum, dampening;
  template <class A>
  HG_HOST_DEVICE SGDRule<kMomentum, kNesterov, A> rule(double lr, int64_t t) const {
    return {sgd_coefficients<A>(lr, weight_decay, momentum, dampening), t == 1};
  }
};

}  // namespace hg::kernels
