// Adagrad with learning-rate decay and L2 weight decay (math in optim/adagrad.h): options, per-group
// overrides, state creation and the fused adagrad_step kernel call (kernels/optimizer_kernels.h).
#include "optim/adagrad.h"

#include <cmath>

#include "engine/kernel_dispatch.h"
#include "engine/ops.h"
#include "kernels/optimizer_kernels.h"
#include "optim/group_options.h"

namespace hg::optim {

Adagrad::Adagrad(std::vector<Tensor> params, AdagradOptions options)
    : Adagrad(std::vector<ParamGroup>{ParamGroup{std::move(params), options.lr(), options.weight_decay()}}, options) {}

Adagrad::Adagrad(std::vector<ParamGroup> groups, AdagradOptions options)
    : LocalOptimizer("Adagrad"), options_(options) {
  check_lr(options_.lr());
  check_weight_decay(options_.weight_decay());
  check(options_, -1);
  init_groups(std::move(groups));
  enable_device_step();
}

namespace {

// Not initial_accumulator_value: PyTorch fills every sum from the constructor's value, whatever a group
// says, so a group key would be ignored there; here it is refused as unknown.
const GroupOptionTable<AdagradOptions> kGroupOptions = {HG_GROUP_OPTION(AdagradOptions, lr_decay),
                                                        HG_GROUP_OPTION(AdagradOptions, eps)};

}  // namespace

void Adagrad::check(const AdagradOptions& o, int64_t group) const {
  check_range("lr_decay", o.lr_decay(), 0.0, INFINITY, false, group);
  check_range("initial_accumulator_value", o.initial_accumulator_value(), 0.0, INFINITY, false, group);
  check_range("eps", o.eps(), 0.0, INFINITY, false, group);
}

AdagradOptions Adagrad::options_for(const ParamGroup& group) const {
  return with_overrides(options_, group, kGroupOptions);
}

std::vector<GroupOptionName> Adagrad::group_options() const { return group_option_names(kGroupOptions); }

void Adagrad::check_group(const ParamGroup& group, size_t index) const { check(options_for(group), int64_t(index)); }

void Adagrad::update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state) {
  fused_step(group, param, Tensor(), grad, state);
}

bool Adagrad::update_with_master(const ParamGroup& group, const Tensor& param, const Tensor& master,
                                 const Tensor& grad, ParamState& state) {
  fused_step(group, param, master, grad, state);
  return true;
}

void Adagrad::fused_step(const ParamGroup& group, const Tensor& param, const Tensor& master, const Tensor& grad,
                         ParamState& state) {
  const Tensor& values = master.defined() ? master : param;  // what the state is created from
  void* master_ptr = master.defined() ? master.data_ptr() : nullptr;
  const AdagradOptions o = options_for(group);
  void* sum = state_buffer(state, "sum", values, o.initial_accumulator_value()).data_ptr();
  HG_KERNEL(param.device(), adagrad_step, param.data_ptr(), master_ptr, grad.data_ptr(), sum, param.numel(),
            step_scalars(group, param, state), o.lr_decay(), o.eps(), group.weight_decay, param.dtype());
}

}  // namespace hg::optim
