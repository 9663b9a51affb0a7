// The fused Lion step on the CPU (kernels/optimizer_kernels.h lion_step).
//
// Math (kernels/lion_math.h, Chen et al. 2023): theta *= 1 - lr wd;  theta -= sign(b1 m + (1-b1) g) lr;
//   m = b2 m + (1-b2) g.
// Parallel strategy: kernels/cpu/fused_optimizer.h (chunks over OpenMP threads, one vectorisable pass).
#include "kernels/cpu/fused_optimizer.h"
#include "kernels/lion_math.h"
#include "kernels/optimizer_kernels.h"

namespace hg::kernels::cpu {

void lion_step(void* param, void* master, const void* grad, void* exp_avg, int64_t n, const AdamWStepScalars& scalars,
               double beta1, double beta2, double weight_decay, DType dtype) {
  void* const state[1] = {exp_avg};
  fused_optimizer_step<1>("lion_step", param, master, grad, state, n, dtype, scalars,
                          LionStep{beta1, beta2, weight_decay});
}

}  // namespace hg::kernels::cpu
