// Gradient clipping by value (semantics in optim/clip_value.h).
#include "optim/clip_value.h"

#include <cmath>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "kernels/error.h"

namespace hg::optim {

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  HG_CHECK(std::isfinite(clip_value) && clip_value > 0, "[clip_grad_value_] clip_value ", clip_value,
           "; expected a finite value > 0");
  NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    HG_CHECK(params[i].defined(), "[clip_grad_value_] parameter ", i, " is an undefined tensor");
    const Tensor grad = params[i].grad();
    if (!grad.defined()) continue;
    HG_CHECK(is_floating(grad.dtype()), "[clip_grad_value_] gradient of parameter ", i, " is ", grad.describe(),
             "; expected a floating tensor");
    grad.copy_(clamp(grad, -clip_value, clip_value));
  }
}

}  // namespace hg::optim
