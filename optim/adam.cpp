// Adam with L2 weight decay and AMSGrad (math in optim/adam.h), composed from engine ops under the
// step's NoGradGuard; the parameter and the buffers are written in place.
#include "optim/adam.h"

#include <cmath>

#include "engine/ops.h"

namespace hg::optim {

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam(std::vector<ParamGroup>{ParamGroup{std::move(params), options.lr(), options.weight_decay()}}, options) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options) : LocalOptimizer("Adam"), options_(options) {
  check_lr(options_.lr());
  check_weight_decay(options_.weight_decay());
  check_range("beta1", options_.beta1(), 0.0, 1.0, /*hi_open=*/true);
  check_range("beta2", options_.beta2(), 0.0, 1.0, /*hi_open=*/true);
  check_range("eps", options_.eps(), 0.0, INFINITY);
  init_groups(std::move(groups));
}

std::vector<std::string> Adam::state_buffer_names() const {
  if (options_.amsgrad()) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

void Adam::update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state) {
  const double beta1 = options_.beta1(), beta2 = options_.beta2();
  const Tensor g = group.weight_decay != 0.0 ? grad + param * group.weight_decay : grad;
  Tensor& m = state_buffer(state, "exp_avg", param);
  Tensor& v = state_buffer(state, "exp_avg_sq", param);
  m.copy_(m * beta1 + g * (1.0 - beta1));
  v.copy_(v * beta2 + (g * g) * (1.0 - beta2));
  Tensor second = v;
  if (options_.amsgrad()) {
    Tensor& v_max = state_buffer(state, "max_exp_avg_sq", param);
    v_max.copy_(maximum(v_max, v));
    second = v_max;
  }
  const double t = double(state.step);
  const double step_size = group.lr / (1.0 - std::pow(beta1, t));
  const Tensor denom = sqrt(second) / std::sqrt(1.0 - std::pow(beta2, t)) + options_.eps();
  Tensor target = param;
  target.copy_(param - (m / denom) * step_size);
}

}  // namespace hg::optim
