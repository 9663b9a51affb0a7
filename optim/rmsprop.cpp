// RMSprop with momentum, centering and L2 weight decay (math in optim/rmsprop.h): options, per-group
// overrides, state creation and the fused rmsprop_step kernel call (kernels/optimizer_kernels.h).
#include "optim/rmsprop.h"

#include <cmath>

#include "engine/kernel_dispatch.h"
#include "engine/ops.h"
#include "kernels/optimizer_kernels.h"
#include "optim/group_options.h"

namespace hg::optim {

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions options)
    : RMSprop(std::vector<ParamGroup>{ParamGroup{std::move(params), options.lr(), options.weight_decay()}}, options) {}

RMSprop::RMSprop(std::vector<ParamGroup> groups, RMSpropOptions options)
    : LocalOptimizer("RMSprop"), options_(options) {
  check_lr(options_.lr());
  check_weight_decay(options_.weight_decay());
  check(options_, -1);
  init_groups(std::move(groups));
  enable_device_step();
}

namespace {

const GroupOptionTable<RMSpropOptions> kGroupOptions = {
    HG_GROUP_OPTION(RMSpropOptions, alpha), HG_GROUP_OPTION(RMSpropOptions, eps),
    HG_GROUP_OPTION(RMSpropOptions, momentum), HG_GROUP_FLAG(RMSpropOptions, centered)};

std::vector<std::string> buffer_names(bool momentum, bool centered) {
  std::vector<std::string> names{"square_avg"};
  if (momentum) names.push_back("momentum_buffer");
  if (centered) names.push_back("grad_avg");
  return names;
}

}  // namespace

void RMSprop::check(const RMSpropOptions& o, int64_t group) const {
  check_range("alpha", o.alpha(), 0.0, 1.0, false, group);
  check_range("eps", o.eps(), 0.0, INFINITY, false, group);
  check_range("momentum", o.momentum(), 0.0, INFINITY, false, group);
}

RMSpropOptions RMSprop::options_for(const ParamGroup& group) const {
  return with_overrides(options_, group, kGroupOptions);
}

std::vector<GroupOptionName> RMSprop::group_options() const { return group_option_names(kGroupOptions); }

void RMSprop::check_group(const ParamGroup& group, size_t index) const { check(options_for(group), int64_t(index)); }

std::vector<std::string> RMSprop::state_buffer_names() const {
  bool momentum = param_groups().empty() && options_.momentum() > 0.0;
  bool centered = param_groups().empty() && options_.centered();
  for (const ParamGroup& g : param_groups()) {
    const RMSpropOptions o = options_for(g);
    momentum = momentum || o.momentum() > 0.0;
    centered = centered || o.centered();
  }
  return buffer_names(momentum, centered);
}

std::vector<std::string> RMSprop::state_buffer_names_for(const Tensor& param) const {
  const RMSpropOptions o = options_for(param_groups()[group_index(param)]);
  return buffer_names(o.momentum() > 0.0, o.centered());
}

void RMSprop::update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state) {
  fused_step(group, param, Tensor(), grad, state);
}

bool RMSprop::update_with_master(const ParamGroup& group, const Tensor& param, const Tensor& master,
                                 const Tensor& grad, ParamState& state) {
  fused_step(group, param, master, grad, state);
  return true;
}

void RMSprop::fused_step(const ParamGroup& group, const Tensor& param, const Tensor& master, const Tensor& grad,
                         ParamState& state) {
  const Tensor& values = master.defined() ? master : param;  // what the state is created from
  void* master_ptr = master.defined() ? master.data_ptr() : nullptr;
  const RMSpropOptions o = options_for(group);
  void* square_avg = state_buffer(state, "square_avg", values).data_ptr();
  void* momentum = o.momentum() > 0.0 ? state_buffer(state, "momentum_buffer", values).data_ptr() : nullptr;
  void* grad_avg = o.centered() ? state_buffer(state, "grad_avg", values).data_ptr() : nullptr;
  HG_KERNEL(param.device(), rmsprop_step, param.data_ptr(), master_ptr, grad.data_ptr(), square_avg, momentum, grad_avg,
            param.numel(), step_scalars(group, param, state), o.alpha(), o.eps(), group.weight_decay, o.momentum(),
            param.dtype());
}

}  // namespace hg::optim
