// SGD with momentum, dampening, Nesterov and weight decay (math in optim/sgd.h): composed from
// engine ops on acc-dtype copies under NoGradGuard, with the parameter and buffer written in place.
#include "optim/sgd.h"

#include <cmath>

#include "engine/ops.h"
#include "optim/group_options.h"

namespace hg::optim {

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : SGD(std::vector<ParamGroup>{ParamGroup{std::move(params), options.lr(), options.weight_decay()}}, options) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions options) : LocalOptimizer("SGD"), options_(options) {
  check_lr(options_.lr());
  check_weight_decay(options_.weight_decay());
  check(options_, -1);
  init_groups(std::move(groups));
}

namespace {

const GroupOptionTable<SGDOptions> kGroupOptions = {
    HG_GROUP_OPTION(SGDOptions, momentum), HG_GROUP_OPTION(SGDOptions, dampening), HG_GROUP_FLAG(SGDOptions, nesterov)};

std::vector<std::string> buffer_names(bool momentum) {
  if (momentum) return {"momentum_buffer"};
  return {};
}

}  // namespace

void SGD::check(const SGDOptions& o, int64_t group) const {
  const std::string where = group >= 0 ? detail::concat(" in group ", group) : std::string();
  HG_CHECK(std::isfinite(o.momentum()) && o.momentum() >= 0.0, "[SGD] invalid momentum ", o.momentum(), where,
           ": expected momentum >= 0");
  HG_CHECK(o.dampening() >= 0.0 && o.dampening() <= 1.0, "[SGD] invalid dampening ", o.dampening(), where,
           ": expected 0 <= dampening <= 1");
  HG_CHECK(!o.nesterov() || (o.momentum() > 0.0 && o.dampening() == 0.0),
           "[SGD] nesterov momentum requires momentum > 0 and dampening = 0, got momentum ", o.momentum(),
           " and dampening ", o.dampening(), where);
}

SGDOptions SGD::options_for(const ParamGroup& group) const { return with_overrides(options_, group, kGroupOptions); }

std::vector<GroupOptionName> SGD::group_options() const { return group_option_names(kGroupOptions); }

void SGD::check_group(const ParamGroup& group, size_t index) const { check(options_for(group), int64_t(index)); }

std::vector<std::string> SGD::state_buffer_names() const {
  bool momentum = param_groups().empty() && options_.momentum() > 0.0;
  for (const ParamGroup& g : param_groups()) momentum = momentum || options_for(g).momentum() > 0.0;
  return buffer_names(momentum);
}

std::vector<std::string> SGD::state_buffer_names_for(const Tensor& param) const {
  return buffer_names(options_for(param_groups()[group_index(param)]).momentum() > 0.0);
}

DType SGD::state_dtype(const Tensor& param) const { return accumulate_dtype(param.dtype()); }

void SGD::update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state) {
  const DType acc = accumulate_dtype(param.dtype());
  const Tensor theta = cast(param, acc);
  Tensor g = cast(grad, acc);
  if (group.weight_decay != 0.0) g = g + theta * group.weight_decay;
  const SGDOptions o = options_for(group);
  const double momentum = o.momentum();
  if (momentum > 0.0) {
    auto it = state.buffers.find("momentum_buffer");
    if (it == state.buffers.end()) {
      it = state.buffers.emplace("momentum_buffer", g.clone()).first;
    } else {
      Tensor& buf = it->second;
      buf.copy_(buf * momentum + g * (1.0 - o.dampening()));
    }
    g = o.nesterov() ? g + it->second * momentum : it->second;
  }
  Tensor target = param;
  target.copy_(theta - g * group.lr);
}

}  // namespace hg::optim
