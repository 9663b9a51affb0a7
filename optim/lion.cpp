// Lion (math in optim/lion.h): options, per-group overrides, state creation and the fused lion_step
// kernel call (kernels/optimizer_kernels.h).
#include "optim/lion.h"

#include <cmath>

#include "engine/kernel_dispatch.h"
#include "engine/ops.h"
#include "kernels/optimizer_kernels.h"
#include "optim/group_options.h"

namespace hg::optim {

Lion::Lion(std::vector<Tensor> params, LionOptions options)
    : Lion(std::vector<ParamGroup>{ParamGroup{std::move(params), options.lr(), options.weight_decay()}}, options) {}

Lion::Lion(std::vector<ParamGroup> groups, LionOptions options) : LocalOptimizer("Lion"), options_(options) {
  check_lr(options_.lr());
  check_weight_decay(options_.weight_decay());
  check(options_, -1);
  init_groups(std::move(groups));
  enable_device_step();
}

namespace {

const GroupOptionTable<LionOptions> kGroupOptions = {HG_GROUP_OPTION(LionOptions, beta1),
                                                     HG_GROUP_OPTION(LionOptions, beta2)};

}  // namespace

void Lion::check(const LionOptions& o, int64_t group) const {
  check_range("beta1", o.beta1(), 0.0, 1.0, false, group);
  check_range("beta2", o.beta2(), 0.0, 1.0, false, group);
}

LionOptions Lion::options_for(const ParamGroup& group) const { return with_overrides(options_, group, kGroupOptions); }

std::vector<GroupOptionName> Lion::group_options() const { return group_option_names(kGroupOptions); }

void Lion::check_group(const ParamGroup& group, size_t index) const { check(options_for(group), int64_t(index)); }

void Lion::update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state) {
  fused_step(group, param, Tensor(), grad, state);
}

bool Lion::update_with_master(const ParamGroup& group, const Tensor& param, const Tensor& master,
                              const Tensor& grad, ParamState& state) {
  fused_step(group, param, master, grad, state);
  return true;
}

void Lion::fused_step(const ParamGroup& group, const Tensor& param, const Tensor& master, const Tensor& grad,
                      ParamState& state) {
  const Tensor& values = master.defined() ? master : param;  // what the state is created from
  void* master_ptr = master.defined() ? master.data_ptr() : nullptr;
  const LionOptions o = options_for(group);
  void* m = state_buffer(state, "exp_avg", values).data_ptr();
  HG_KERNEL(param.device(), lion_step, param.data_ptr(), master_ptr, grad.data_ptr(), m, param.numel(),
            step_scalars(group, param, state), o.beta1(), o.beta2(), group.weight_decay, param.dtype());
}

}  // namespace hg::optim
