// The fused Adam step on the CPU (kernels/optimizer_kernels.h adam_step).
//
// Math (kernels/adam_math.h, PyTorch's Adam with L2 weight decay and AMSGrad), at update t >= 1:
//   g += wd theta;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  v_max = max(v_max, v);
//   theta -= (m / (sqrt(v or v_max) / sqrt(1 - b2^t) + eps)) * lr / (1 - b1^t).
// Parallel strategy: kernels/cpu/fused_optimizer.h (chunks over OpenMP threads, one vectorisable pass).
#include "kernels/adam_math.h"
#include "kernels/cpu/fused_optimizer.h"
#include "kernels/optimizer_kernels.h"

namespace hg::kernels::cpu {

void adam_step(void* param, void* master, const void* grad, void* exp_avg, void* exp_avg_sq, void* max_exp_avg_sq,
               int64_t n, const AdamWStepScalars& scalars, double beta1, double beta2, double eps, double weight_decay,
               DType dtype) {
  if (max_exp_avg_sq != nullptr) {
    void* const state[3] = {exp_avg, exp_avg_sq, max_exp_avg_sq};
    fused_optimizer_step<3>("adam_step", param, master, grad, state, n, dtype, scalars,
                            AdamStep<true>{beta1, beta2, eps, weight_decay});
  } else {
    void* const state[2] = {exp_avg, exp_avg_sq};
    fused_optimizer_step<2>("adam_step", param, master, grad, state, n, dtype, scalars,
                            AdamStep<false>{beta1, beta2, eps, weight_decay});
  }
}

}  // namespace hg::kernels::cpu
