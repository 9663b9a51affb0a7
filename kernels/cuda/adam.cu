// The fused Adam step on a CUDA device (kernels/optimizer_kernels.h adam_step).
//
// Math (kernels/adam_math.h, PyTorch's Adam with L2 weight decay and AMSGrad), at update t >= 1:
//   g += wd theta;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  v_max = max(v_max, v);
//   theta -= (m / (sqrt(v or v_max) / sqrt(1 - b2^t) + eps)) * lr / (1 - b1^t);
// each product and sum rounded on its own (no fma: the CPU backend's bits).
// Parallel strategy: kernels/cuda/fused_optimizer.h (grid-stride, one element per thread per iteration,
// every array read and written once, coalesced).
#include "kernels/adam_math.h"
#include "kernels/cuda/fused_optimizer.h"
#include "kernels/kernels_cuda.h"
#include "kernels/optimizer_kernels.h"

namespace hg::kernels::cuda {

void adam_step(void* param, void* master, const void* grad, void* exp_avg, void* exp_avg_sq, void* max_exp_avg_sq,
               int64_t n, const AdamWStepScalars& scalars, double beta1, double beta2, double eps, double weight_decay,
               DType dtype, Stream stream) {
  if (max_exp_avg_sq != nullptr) {
    void* const state[3] = {exp_avg, exp_avg_sq, max_exp_avg_sq};
    fused_optimizer_launch<3>("adam_step", param, master, grad, state, n, dtype, scalars, stream,
                              AdamStep<true>{beta1, beta2, eps, weight_decay});
  } else {
    void* const state[2] = {exp_avg, exp_avg_sq};
    fused_optimizer_launch<2>("adam_step", param, master, grad, state, n, dtype, scalars, stream,
                              AdamStep<false>{beta1, beta2, eps, weight_decay});
  }
}

}  // namespace hg::kernels::cuda
