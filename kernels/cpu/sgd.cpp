// The fused SGD step on the CPU (kernels/optimizer_kernels.h sgd_step).
//
// Math (kernels/sgd_math.h, PyTorch's SGD): g += wd theta;  momentum: buf = g at the first update, else
//   buf = mu buf + (1-dampening) g, then g = g + mu buf (Nesterov) or g = buf;  theta -= g lr.
// Parallel strategy: kernels/cpu/fused_optimizer.h (chunks over OpenMP threads, one vectorisable pass;
// no state array at all without momentum).
#include "kernels/cpu/fused_optimizer.h"
#include "kernels/optimizer_kernels.h"
#include "kernels/sgd_math.h"

namespace hg::kernels::cpu {
namespace {

template <bool kMomentum, bool kNesterov, bool kFirst>
void run(void* param, void* master, const void* grad, void* momentum_buffer, int64_t n, double lr, double weight_decay,
         double momentum, double dampening, DType dtype) {
  void* const state[1] = {momentum_buffer};
  fused_optimizer_step<kMomentum ? 1 : 0>("sgd_step", param, master, grad, state, n, dtype, [&]<class A>() {
    return [c = sgd_coefficients<A>(lr, weight_decay, momentum, dampening)](A& theta, A g, A* s) {
      sgd_update<kMomentum, kNesterov, kFirst>(theta, g, s, c);
    };
  });
}

}  // namespace

void sgd_step(void* param, void* master, const void* grad, void* momentum_buffer, int64_t n, double lr,
              double weight_decay, double momentum, double dampening, bool nesterov, bool first, DType dtype) {
  HG_CHECK((momentum_buffer != nullptr) == (momentum > 0.0),
           "[sgd_step] expected a momentum buffer exactly when momentum > 0; got momentum ", momentum,
           momentum_buffer ? " with one" : " without one");
  HG_CHECK(!nesterov || momentum > 0.0, "[sgd_step] Nesterov momentum needs momentum > 0, got ", momentum);
  const auto go = [&]<bool kNesterov, bool kFirst>() {
    run<true, kNesterov, kFirst>(param, master, grad, momentum_buffer, n, lr, weight_decay, momentum, dampening, dtype);
  };
  if (momentum_buffer == nullptr)
    run<false, false, false>(param, master, grad, nullptr, n, lr, weight_decay, momentum, dampening, dtype);
  else if (nesterov && first)
    go.template operator()<true, true>();
  else if (nesterov)
    go.template operator()<true, false>();
  else if (first)
    go.template operator()<false, true>();
  else
    go.template operator()<false, false>();
}

}  // namespace hg::kernels::cpu
