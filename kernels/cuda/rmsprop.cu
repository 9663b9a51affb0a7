// The fused RMSprop step on a CUDA device (kernels/optimizer_kernels.h rmsprop_step).
//
// Math (kernels/rmsprop_math.h, PyTorch's RMSprop): g += wd theta;  s = a s + (1-a) g^2;
//   centered: ga = a ga + (1-a) g, d = sqrt(s - ga^2) + eps; else d = sqrt(s) + eps;
//   momentum: buf = mu buf + g / d, theta -= buf lr; else theta -= (g / d) lr;
// each product and sum rounded on its own (no fma: the CPU backend's bits).
// Parallel strategy: kernels/cuda/fused_optimizer.h (grid-stride, one element per thread per iteration,
// every array read and written once, coalesced).
#include "kernels/cuda/fused_optimizer.h"
#include "kernels/kernels_cuda.h"
#include "kernels/optimizer_kernels.h"
#include "kernels/rmsprop_math.h"

namespace hg::kernels::cuda {

void rmsprop_step(void* param, void* master, const void* grad, void* square_avg, void* momentum_buffer, void* grad_avg,
                  int64_t n, const AdamWStepScalars& scalars, double alpha, double eps, double weight_decay,
                  double momentum, DType dtype, Stream stream) {
  check_momentum_buffer("rmsprop_step", momentum_buffer, momentum);
  void* const state[3] = {square_avg, momentum_buffer != nullptr ? momentum_buffer : grad_avg, grad_avg};
  const auto run = [&]<bool kMomentum, bool kCentered>() {
    constexpr int K = 1 + int(kMomentum) + int(kCentered);
    fused_optimizer_launch<K>("rmsprop_step", param, master, grad, state, n, dtype, scalars, stream,
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

}  // namespace hg::kernels::cuda
