// The fused Adagrad step on a CUDA device (kernels/optimizer_kernels.h adagrad_step).
//
// Math (kernels/adagrad_math.h, PyTorch's Adagrad), at update t >= 1:
//   g += wd theta;  sum += g^2;  theta -= (g / (sqrt(sum) + eps)) * lr / (1 + (t - 1) lr_decay);
// each product and sum rounded on its own (no fma: the CPU backend's bits).
// Parallel strategy: kernels/cuda/fused_optimizer.h (grid-stride, one element per thread per iteration,
// every array read and written once, coalesced).
#include "kernels/adagrad_math.h"
#include "kernels/cuda/fused_optimizer.h"
#include "kernels/kernels_cuda.h"
#include "kernels/optimizer_kernels.h"

namespace hg::kernels::cuda {

void adagrad_step(void* param, void* master, const void* grad, void* sum, int64_t n, const AdamWStepScalars& scalars,
                  double lr_decay, double eps, double weight_decay, DType dtype, Stream stream) {
  void* const state[1] = {sum};
  fused_optimizer_launch<1>("adagrad_step", param, master, grad, state, n, dtype, scalars, stream,
                            AdagradStep{lr_decay, eps, weight_decay});
}

}  // namespace hg::kernels::cuda
