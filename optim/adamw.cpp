// AdamW (math in optim/adamw.h): options, state creation and the fused adamw_step_device kernel call of the
// parameter's device; the 8-bit state's layout, kernel call and checks are in optim/adamw8bit_state.cpp.
#include "optim/adamw.h"

#include "engine/autograd.h"
#include "engine/kernel_dispatch.h"

#include <cmath>

#include "kernels/kernels.h"
#include "kernels/step_kernels.h"
#include "optim/group_options.h"

namespace hg::optim {

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : AdamW(std::vector<ParamGroup>{ParamGroup{std::move(params), options.lr(), options.weight_decay()}}, options) {}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions options) : LocalOptimizer("AdamW"), options_(options) {
  check_options();
  init_groups(std::move(groups));
  enable_device_step();
}

void AdamW::check_options() const {
  const AdamWOptions& o = options_;
  check_lr(o.lr());
  check_weight_decay(o.weight_decay());
  check_moments(o, -1);
  HG_CHECK(o.state_bits() == 32 || o.state_bits() == 8, "[AdamW] invalid state_bits ", o.state_bits(),
           ": expected 32 (fp32 moments) or 8 (block-wise quantised moments)");
}

namespace {

const GroupOptionTable<AdamWOptions> kGroupOptions = {
    HG_GROUP_OPTION(AdamWOptions, beta1), HG_GROUP_OPTION(AdamWOptions, beta2), HG_GROUP_OPTION(AdamWOptions, eps)};

}  // namespace

void AdamW::check_moments(const AdamWOptions& o, int64_t group) const {
  const std::string where = group >= 0 ? detail::concat(" in group ", group) : std::string();
  HG_CHECK(o.beta1() >= 0.0 && o.beta1() < 1.0, "[AdamW] invalid beta1 ", o.beta1(), where,
           ": expected 0 <= beta1 < 1");
  HG_CHECK(o.beta2() >= 0.0 && o.beta2() < 1.0, "[AdamW] invalid beta2 ", o.beta2(), where,
           ": expected 0 <= beta2 < 1");
  HG_CHECK(std::isfinite(o.eps()) && o.eps() > 0.0, "[AdamW] invalid eps ", o.eps(), where, ": expected eps > 0");
}

AdamWOptions AdamW::options_for(const ParamGroup& group) const {
  return with_overrides(options_, group, kGroupOptions);
}

std::vector<GroupOptionName> AdamW::group_options() const { return group_option_names(kGroupOptions); }

void AdamW::check_group(const ParamGroup& group, size_t index) const {
  check_moments(options_for(group), int64_t(index));
}

std::vector<std::string> AdamW::state_buffer_names() const { return {"exp_avg", "exp_avg_sq"}; }

DType AdamW::state_dtype(const Tensor& param) const { return accumulate_dtype(param.dtype()); }

bool AdamW::update_with_master(const ParamGroup& group, const Tensor& param, const Tensor& master, const Tensor& grad,
                               ParamState& state) {
  fused_step(group, param, master.data_ptr(), grad, state);
  return true;
}

void AdamW::update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state) {
  fused_step(group, param, nullptr, grad, state);
}

void AdamW::fused_step(const ParamGroup& group, const Tensor& param, void* master, const Tensor& grad,
                       ParamState& state) {
  HG_CHECK(param.is_contiguous() && grad.is_contiguous() && grad.device() == param.device(), "[AdamW] parameter ",
           param.describe(), " and its gradient ", grad.describe(), " must be contiguous and on one device");
  if (!state.buffers.count("exp_avg")) init_moments(param, state);
  const AdamWOptions o = options_for(group);
  const double weight_decay = options_.decay_only_matrices() && param.dim() < 2 ? 0.0 : group.weight_decay;
  const kernels::AdamWStepScalars s = step_scalars(group, param, state);
  if (quantizes(param)) {
    quantized_step(param, master, grad, state, s, o, weight_decay);
    return;
  }
  HG_KERNEL(param.device(), adamw_step_device, param.data_ptr(), master, grad.data_ptr(),
            state.buffers.at("exp_avg").data_ptr(), state.buffers.at("exp_avg_sq").data_ptr(), param.numel(), s,
            o.beta1(), o.beta2(), o.eps(), weight_decay, param.dtype());
}

}  // namespace hg::optim
