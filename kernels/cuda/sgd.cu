// The fused SGD step on a CUDA device (kernels/optimizer_kernels.h sgd_step).
//
// Math (kernels/sgd_math.h, PyTorch's SGD): g += wd theta;  momentum: buf = g at the first update, else
//   buf = mu buf + (1-dampening) g, then g = g + mu buf (Nesterov) or g = buf;  theta -= g lr;
// each product and sum rounded on its own (no fma: the CPU backend's bits).
// Parallel strategy: kernels/cuda/fused_optimizer.h (grid-stride, one element per thread per iteration,
// every array read and written once, coalesced; no state array at all without momentum).
#include "kernels/cuda/fused_optimizer.h"
#include "kernels/kernels_cuda.h"
#include "kernels/optimizer_kernels.h"
#include "kernels/sgd_math.h"

namespace hg::kernels::cuda {
namespace {

template <bool kMomentum, bool kNesterov, bool kFirst>
void run(void* param, void* master, const void* grad, void* momentum_buffer, int64_t n, double lr, double weight_decay,
         double momentum, double dampening, DType dtype, Stream stream) {
  void* const state[1] = {momentum_buffer};
  fused_optimizer_launch<kMomentum ? 1 : 0>("sgd_step", param, master, grad, state, n, dtype, stream, [&]<class A>() {
    return SGDRule<kMomentum, kNesterov, kFirst, A>{sgd_coefficients<A>(lr, weight_decay, momentum, dampening)};
  });
}

}  // namespace

void sgd_step(void* param, void* master, const void* grad, void* momentum_buffer, int64_t n, double lr,
              double weight_decay, double momentum, double dampening, bool nesterov, bool first, DType dtype,
              Stream stream) {
  HG_CHECK((momentum_buffer != nullptr) == (momentum > 0.0),
           "[sgd_step] expected a momentum buffer exactly when momentum > 0; got momentum ", momentum,
           momentum_buffer ? " with one" : " without one");
  HG_CHECK(!nesterov || momentum > 0.0, "[sgd_step] Nesterov momentum needs momentum > 0, got ", momentum);
  if (momentum_buffer == nullptr) {
    run<false, false, false>(param, master, grad, nullptr, n, lr, weight_decay, momentum, dampening, dtype, stream);
  } else if (nesterov && first) {
    run<true, true, true>(param, master, grad, momentum_buffer, n, lr, weight_decay, momentum, dampening, dtype,
                          stream);
  } else if (nesterov) {
    run<true, true, false>(param, master, grad, momentum_buffer, n, lr, weight_decay, momentum, dampening, dtype,
                           stream);
  } else if (first) {
    run<true, false, true>(param, master, grad, momentum_buffer, n, lr, weight_decay, momentum, dampening, dtype,
                           stream);
  } else {
    run<true, false, false>(param, master, grad, momentum_buffer, n, lr, weight_decay, momentum, dampening, dtype,
                            stream);
  }
}

}  // namespace hg::kernels::cuda
