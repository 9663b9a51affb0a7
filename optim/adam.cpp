// Adam with L2 weight decay and AMSGrad (math in optim/adam.h): options, per-group overrides, state
// creation and the fused adam_step kernel call (kernels/optimizer_kernels.h) of the parameter's device.
#include "optim/adam.h"

#include <cmath>

#include "engine/kernel_dispatch.h"
#include "engine/ops.h"
#include "kernels/optimizer_kernels.h"
#include "optim/group_options.h"

namespace hg::optim {

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam(std::vector<ParamGroup>{ParamGroup{std::move(params), options.lr(), options.weight_decay()}}, options) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options) : LocalOptimizer("Adam"), options_(options) {
  check_lr(options_.lr());
  check_weight_decay(options_.weight_decay());
  check(options_, -1);
  init_groups(std::move(groups));
  enable_device_step();
}

namespace {

const GroupOptionTable<AdamOptions> kGroupOptions = {
    HG_GROUP_OPTION(AdamOptions, beta1), HG_GROUP_OPTION(AdamOptions, beta2), HG_GROUP_OPTION(AdamOptions, eps),
    HG_GROUP_FLAG(AdamOptions, amsgrad)};

std::vector<std::string> buffer_names(bool amsgrad) {
  if (amsgrad) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

}  // namespace

void Adam::check(const AdamOptions& o, int64_t group) const {
  check_range("beta1", o.beta1(), 0.0, 1.0, /*hi_open=*/true, group);
  check_range("beta2", o.beta2(), 0.0, 1.0, /*hi_open=*/true, group);
  check_range("eps", o.eps(), 0.0, INFINITY, false, group);
}

AdamOptions Adam::options_for(const ParamGroup& group) const { return with_overrides(options_, group, kGroupOptions); }

std::vector<GroupOptionName> Adam::group_options() const { return group_option_names(kGroupOptions); }

void Adam::check_group(const ParamGroup& group, size_t index) const { check(options_for(group), int64_t(index)); }

std::vector<std::string> Adam::state_buffer_names() const {
  bool amsgrad = param_groups().empty() && options_.amsgrad();
  for (const ParamGroup& g : param_groups()) amsgrad = amsgrad || options_for(g).amsgrad();
  return buffer_names(amsgrad);
}

std::vector<std::string> Adam::state_buffer_names_for(const Tensor& param) const {
  return buffer_names(options_for(param_groups()[group_index(param)]).amsgrad());
}

void Adam::update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state) {
  fused_step(group, param, Tensor(), grad, state);
}

bool Adam::update_with_master(const ParamGroup& group, const Tensor& param, const Tensor& master,
                              const Tensor& grad, ParamState& state) {
  fused_step(group, param, master, grad, state);
  return true;
}

void Adam::fused_step(const ParamGroup& group, const Tensor& param, const Tensor& master, const Tensor& grad,
                      ParamState& state) {
  const Tensor& values = master.defined() ? master : param;  // what the state is created from
  void* master_ptr = master.defined() ? master.data_ptr() : nullptr;
  const AdamOptions o = options_for(group);
  void* m = state_buffer(state, "exp_avg", values).data_ptr();
  void* v = state_buffer(state, "exp_avg_sq", values).data_ptr();
  void* v_max = o.amsgrad() ? state_buffer(state, "max_exp_avg_sq", values).data_ptr() : nullptr;
  HG_KERNEL(param.device(), adam_step, param.data_ptr(), master_ptr, grad.data_ptr(), m, v, v_max, param.numel(),
            step_scalars(group, param, state), o.beta1(), o.beta2(), o.eps(), group.weight_decay, param.dtype());
}

}  // namespace hg::optim
