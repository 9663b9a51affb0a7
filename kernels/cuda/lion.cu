// The fused Lion step on a CUDA device (kernels/optimizer_kernels.h lion_step).
//
// Math (kernels/lion_math.h, Chen et al. 2023): theta *= 1 - lr wd;  theta -= sign(b1 m + (1-b1) g) lr;
//   m = b2 m + (1-b2) g; each product and sum rounded on its own (no fma: the CPU backend's bits).
// Parallel strategy: kernels/cuda/fused_optimizer.h (grid-stride, one element per thread per iteration,
// every array read and written once, coalesced).
#include "kernels/cuda/fused_optimizer.h"
#include "kernels/kernels_cuda.h"
#include "kernels/lion_math.h"
#include "kernels/optimizer_kernels.h"

namespace hg::kernels::cuda {

void lion_step(void* param, void* master, const void* grad, void* exp_avg, int64_t n, const AdamWStepScalars& scalars,
               double beta1, double beta2, double weight_decay, DType dtype, Stream stream) {
  void* const state[1] = {exp_avg};
  fused_optimizer_launch<1>("lion_step", param, master, grad, state, n, dtype, scalars, stream,
                            LionStep{beta1, beta2, weight_decay});
}

}  // namespace hg::kernels::cuda
