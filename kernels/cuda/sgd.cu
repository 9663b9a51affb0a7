// The fused SGD step on a CUDA device (kernels/optimizer_kernels.h sgd_step).
//
// Math (kernels/sgd_math.h, PyTorch's SGD): g += wd theta;  momentum: buf = g at the first update (t = 1),
//   else buf = mu buf + (1-dampening) g, then g = g + mu buf (Nesterov) or g = buf;  theta -= g lr;
// each product and sum rounded on its own (no fma: the CPU backend's bits).
// Parallel strategy: kernels/cuda/fused_optimizer.h (grid-stride, one element per thread per iteration,
// every array read and written once, coalesced; no state array at all without momentum).
#include "kernels/cuda/fused_optimizer.h"
#include "kernels/kernels_cuda.h"
#include "kernels/optimizer_kernels.h"
#include "kernels/sgd_math.h"

namespace hg::kernels::cuda {

void sgd_step(void* param, void* master, const void* grad, void* momentum_buffer, int64_t n,
              const AdamWStepScalars& scalars, double weight_decay, double momentum, double dampening, bool nesterov,
              DType dtype, Stream stream) {
  check_momentum_buffer("sgd_step", momentum_buffer, momentum);
  HG_CHECK(!nesterov || momentum > 0.0, "[sgd_step] Nesterov momentum needs momentum > 0, got ", momentum);
  void* const state[1] = {momentum_buffer};
  const auto run = [&]<int K, bool kMomentum, bool kNesterov>() {
    fused_optimizer_launch<K>("sgd_step", param, master, grad, state, n, dtype, scalars, stream,
                              SGDStep<kMomentum, kNesterov>{weight_decay, momentum, dampening});
  };
  if (momentum_buffer == nullptr) {
    run.template operator()<0, false, false>();
  } else if (nesterov) {
    run.template operator()<1, true, true>();
  } else {
    run.template operator()<1, true, false>();
  }
}

}  // namespace hg::kernels::cuda
