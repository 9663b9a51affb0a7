// The fused SGD step on the CPU (kernels/optimizer_kernels.h sgd_step).
//
// Math (kernels/sgd_math.h, PyTorch's SGD): g += wd theta;  momentum: buf = g at the first update (t = 1),
//   else buf = mu buf + (1-dampening) g, then g = g + mu buf (Nesterov) or g = buf;  theta -= g lr.
// Parallel strategy: kernels/cpu/fused_optimizer.h (chunks over OpenMP threads, one vectorisable pass;
// no state array at all without momentum).
#include "kernels/cpu/fused_optimizer.h"
#include "kernels/optimizer_kernels.h"
#include "kernels/sgd_math.h"

namespace hg::kernels::cpu {

void sgd_step(void* param, void* master, const void* grad, void* momentum_buffer, int64_t n,
              const AdamWStepScalars& scalars, double weight_decay, double momentum, double dampening, bool nesterov,
              DType dtype) {
  check_momentum_buffer("sgd_step", momentum_buffer, momentum);
  HG_CHECK(!nesterov || momentum > 0.0, "[sgd_step] Nesterov momentum needs momentum > 0, got ", momentum);
  void* const state[1] = {momentum_buffer};
  const auto run = [&]<int K, bool kMomentum, bool kNesterov>() {
    fused_optimizer_step<K>("sgd_step", param, master, grad, state, n, dtype, scalars,
                            SGDStep<kMomentum, kNesterov>{weight_decay, momentum, dampening});
  };
  if (momentum_buffer == nullptr)
    run.template operator()<0, false, false>();
  else if (nesterov)
    run.template operator()<1, true, true>();
  else
    run.template operator()<1, true, false>();
}

}  // namespace hg::kernels::cpu
