// The fused Adagrad step on the CPU (kernels/optimizer_kernels.h adagrad_step).
//
// Math (kernels/adagrad_math.h, PyTorch's Adagrad), at update t >= 1:
//   g += wd theta;  sum += g^2;  theta -= (g / (sqrt(sum) + eps)) * lr / (1 + (t - 1) lr_decay).
// Parallel strategy: kernels/cpu/fused_optimizer.h (chunks over OpenMP threads, one vectorisable pass).
#include "kernels/adagrad_math.h"
#include "kernels/cpu/fused_optimizer.h"
#include "kernels/optimizer_kernels.h"

namespace hg::kernels::cpu {

void adagrad_step(void* param, void* master, const void* grad, void* sum, int64_t n, const AdamWStepScalars& scalars,
                  double lr_decay, double eps, double weight_decay, DType dtype) {
  void* const state[1] = {sum};
  fused_optimizer_step<1>("adagrad_step", param, master, grad, state, n, dtype, scalars,
                          AdagradStep{lr_decay, eps, weight_decay});
}

}  // namespace hg::kernels::cpu
