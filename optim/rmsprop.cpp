// RMSprop with momentum, centering and L2 weight decay (math in optim/rmsprop.h), composed from engine
// ops under the step's NoGradGuard; the parameter and the buffers are written in place.
#include "optim/rmsprop.h"

#include <cmath>

#include "engine/ops.h"

namespace hg::optim {

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions options)
    : RMSprop(std::vector<ParamGroup>{ParamGroup{std::move(params), options.lr(), options.weight_decay()}}, options) {}

RMSprop::RMSprop(std::vector<ParamGroup> groups, RMSpropOptions options)
    : LocalOptimizer("RMSprop"), options_(options) {
  check_lr(options_.lr());
  check_weight_decay(options_.weight_decay());
  check_range("alpha", options_.alpha(), 0.0, 1.0);
  check_range("eps", options_.eps(), 0.0, INFINITY);
  check_range("momentum", options_.momentum(), 0.0, INFINITY);
  init_groups(std::move(groups));
}

std::vector<std::string> RMSprop::state_buffer_names() const {
  std::vector<std::string> names{"square_avg"};
  if (options_.momentum() > 0.0) names.push_back("momentum_buffer");
  if (options_.centered()) names.push_back("grad_avg");
  return names;
}

void RMSprop::update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state) {
  const double alpha = options_.alpha();
  const Tensor g = group.weight_decay != 0.0 ? grad + param * group.weight_decay : grad;
  Tensor& square_avg = state_buffer(state, "square_avg", param);
  square_avg.copy_(square_avg * alpha + (g * g) * (1.0 - alpha));
  Tensor avg;
  if (options_.centered()) {
    Tensor& grad_avg = state_buffer(state, "grad_avg", param);
    grad_avg.copy_(grad_avg * alpha + g * (1.0 - alpha));
    avg = sqrt(square_avg - grad_avg * grad_avg) + options_.eps();
  } else {
    avg = sqrt(square_avg) + options_.eps();
  }
  Tensor target = param;
  if (options_.momentum() > 0.0) {
    Tensor& buf = state_buffer(state, "momentum_buffer", param);
    buf.copy_(buf * options_.momentum() + g / avg);
    target.copy_(param - buf * group.lr);
  } else {
    target.copy_(param - (g / avg) * group.lr);
  }
}

}  // namespace hg::optim
