// SGD with momentum, dampening, Nesterov and weight decay (math in optim/sgd.h): options, per-group
// overrides, state creation and the fused sgd_step kernel call (kernels/optimizer_kernels.h).
#include "optim/sgd.h"

#include <cmath>

#include "engine/kernel_dispatch.h"
#include "kernels/optimizer_kernels.h"
#include "optim/group_options.h"

namespace hg::optim {

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : SGD(std::vector<ParamGroup>{ParamGroup{std::move(params), options.lr(), options.weight_decay()}}, options) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions options) : LocalOptimizer("SGD"), options_(options) {
  check_lr(options_.lr());
  check_weight_decay(options_.weight_decay());
  check(options_, -1);
  init_groups(std::move(groups));
  enable_device_step();
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
  fused_step(group, param, Tensor(), grad, state);
}

bool SGD::update_with_master(const ParamGroup& group, const Tensor& param, const Tensor& master, const Tensor& grad,
                             ParamState& state) {
  fused_step(group, param, master, grad, state);
  return true;
}

void SGD::fused_step(const ParamGroup& group, const Tensor& param, const Tensor& master, const Tensor& grad,
                     ParamState& state) {
  const Tensor& values = master.defined() ? master : param;  // what the state is created from
  void* master_ptr = master.defined() ? master.data_ptr() : nullptr;
  const SGDOptions o = options_for(group);
  // Set to the gradient by the kernel at the first update applied (t = 1).
  void* buffer = o.momentum() > 0.0 ? state_buffer(state, "momentum_buffer", values).data_ptr() : nullptr;
  HG_KERNEL(param.device(), sgd_step, param.data_ptr(), master_ptr, grad.data_ptr(), buffer, param.numel(),
            step_scalars(group, param, state), group.weight_decay, o.momentum(), o.dampening(), o.nesterov(),
            param.dtype());
}

}  // namespace hg::optim
