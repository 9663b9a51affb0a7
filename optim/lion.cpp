// Lion (math in optim/lion.h), composed from engine ops under the step's NoGradGuard; the parameter and
// the momentum are written in place.
#include "optim/lion.h"

#include <cmath>

#include "engine/ops.h"

namespace hg::optim {

Lion::Lion(std::vector<Tensor> params, LionOptions options)
    : Lion(std::vector<ParamGroup>{ParamGroup{std::move(params), options.lr(), options.weight_decay()}}, options) {}

Lion::Lion(std::vector<ParamGroup> groups, LionOptions options) : LocalOptimizer("Lion"), options_(options) {
  check_lr(options_.lr());
  check_weight_decay(options_.weight_decay());
  check_range("beta1", options_.beta1(), 0.0, 1.0);
  check_range("beta2", options_.beta2(), 0.0, 1.0);
  init_groups(std::move(groups));
}

void Lion::update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state) {
  Tensor& m = state_buffer(state, "exp_avg", param);
  const Tensor direction = sign(m * options_.beta1() + grad * (1.0 - options_.beta1()));
  Tensor target = param;
  const Tensor decayed = group.weight_decay != 0.0 ? param * (1.0 - group.lr * group.weight_decay) : param;
  target.copy_(decayed - direction * group.lr);
  m.copy_(m * options_.beta2() + grad * (1.0 - options_.beta2()));
}

}  // namespace hg::optim
