// Adagrad with learning-rate decay and L2 weight decay (math in optim/adagrad.h), composed from engine
// ops under the step's NoGradGuard; the parameter and the sum are written in place.
#include "optim/adagrad.h"

#include <cmath>

#include "engine/ops.h"

namespace hg::optim {

Adagrad::Adagrad(std::vector<Tensor> params, AdagradOptions options)
    : Adagrad(std::vector<ParamGroup>{ParamGroup{std::move(params), options.lr(), options.weight_decay()}}, options) {}

Adagrad::Adagrad(std::vector<ParamGroup> groups, AdagradOptions options)
    : LocalOptimizer("Adagrad"), options_(options) {
  check_lr(options_.lr());
  check_weight_decay(options_.weight_decay());
  check_range("lr_decay", options_.lr_decay(), 0.0, INFINITY);
  check_range("initial_accumulator_value", options_.initial_accumulator_value(), 0.0, INFINITY);
  check_range("eps", options_.eps(), 0.0, INFINITY);
  init_groups(std::move(groups));
}

void Adagrad::update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state) {
  const Tensor g = group.weight_decay != 0.0 ? grad + param * group.weight_decay : grad;
  Tensor& sum = state_buffer(state, "sum", param, options_.initial_accumulator_value());
  sum.copy_(sum + g * g);
  const double clr = group.lr / (1.0 + double(state.step - 1) * options_.lr_decay());
  Tensor target = param;
  target.copy_(param - (g / (sqrt(sum) + options_.eps())) * clr);
}

}  // namespace hg::optim
