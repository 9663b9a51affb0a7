// The fused RMSprop step on the CPU (kernels/optimizer_kernels.h rmsprop_step).
//
// Math (kernels/rmsprop_math.h, PyTorch's RMSprop): g += wd theta;  s = a s + (1-a) g^2;
//   centered: ga = a ga + (1-a) g, d = sqrt(s - ga^2) + eps; else d = sqrt(s) + eps;
//   momentum: buf = mu buf + g / d, theta -= buf lr; else theta -= (g / d) lr.
// Parallel strategy: kernels/cpu/fused_optimizer.h (chunks over OpenMP threads, one vectorisable pass).
#include "kernels/cpu/fused_optimizer.h"
#include "kernels/optimizer_kernels.h"
#include "kernels/rmsprop_math.h"

namespace hg::kernels::cpu {

void rmsprop_step(void* param, void* master, const void* grad, void* square_avg, void* momentum_buffer, void* grad_avg,
                  int64_t n, const AdamWStepScalars& scalars, double alpha, double eps, double weight_decay,
                  double momentum, DType dtype) {
  check_momentum_buffer("rmsprop_step", momentum_buffer, momentum);
  void* const state[3] = {square_avg, momentum_buffer != nullptr ? momentum_buffer : grad_avg, grad_avg};
  const auto run = [&]<bool kMomentum, bool kCentered>() {
    constexpr int K = 1 + int(kMomentum) + int(kCentered);
    fused_optimizer_step<K>("rmsprop_step", param, master, grad, state, n, dtype, scalars,
                            RMSpropStep<kMomentum, kCentered>{alpha, eps, weight_decay, momentum});
  };
  if (momentum_buffer && grad_avg) {
    run.template operator()<true, true>();
  } else if (momentum_buffer) {
    run.template operator()<true, false>();
  } else if (grad_avg) {
    run.template operator()<false, true>();
  } else {
    run.template operator()<false, false>();
  }
}

}  // namespace hg::kernels::cpu
