// SGD with momentum, dampening, Nesterov and weight decay (math in optim/sgd.h): composed from
// engine ops on acc-dtype copies under NoGradGuard, with the parameter and buffer written in place.
#include "optim/sgd.h"

#include <cmath>

#include "engine/ops.h"

namespace hg::optim {

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : SGD(std::vector<ParamGroup>{ParamGroup{std::move(params), options.lr(), options.weight_decay()}}, options) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions options) : LocalOptimizer("SGD"), options_(options) {
  check_options();
  init_groups(std::move(groups));
}

void SGD::check_options() const {
  const SGDOptions& o = options_;
  check_lr(o.lr());
  check_weight_decay(o.weight_decay());
  HG_CHECK(std::isfinite(o.momentum()) && o.momentum() >= 0.0, "[SGD] invalid momentum ", o.momentum(),
           ": expected momentum >= 0");
  HG_CHECK(o.dampening() >= 0.0 && o.dampening() <= 1.0, "[SGD] invalid dampening ", o.dampening(),
           ": expected 0 <= dampening <= 1");
  HG_CHECK(!o.nesterov() || (o.momentum() > 0.0 && o.dampening() == 0.0),
           "[SGD] nesterov momentum requires momentum > 0 and dampening = 0, got momentum ", o.momentum(),
           " and dampening ", o.dampening());
}

std::vector<std::string> SGD::state_buffer_names() const {
  if (options_.momentum() > 0.0) return {"momentum_buffer"};
  return {};
}

DType SGD::state_dtype(const Tensor& param) const { return accumulate_dtype(param.dtype()); }

void SGD::update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state) {
  const DType acc = accumulate_dtype(param.dtype());
  const Tensor theta = cast(param, acc);
  Tensor g = cast(grad, acc);
  if (group.weight_decay != 0.0) g = g + theta * group.weight_decay;
  const double momentum = options_.momentum();
  if (momentum > 0.0) {
    auto it = state.buffers.find("momentum_buffer");
    if (it == state.buffers.end()) {
      it = state.buffers.emplace("momentum_buffer", g.clone()).first;
    } else {
      Tensor& buf = it->second;
      buf.copy_(buf * momentum + g * (1.0 - options_.dampening()));
    }
    g = options_.nesterov() ? g + it->second * momentum : it->second;
  }
  Tensor target = param;
  target.copy_(theta - g * group.lr);
}

}  // namespace hg::optim
