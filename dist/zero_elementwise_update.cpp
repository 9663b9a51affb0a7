// ZeroOptimizer's update rule (dist/zero_optimizer.h): the optimizer the user built, whose update
// ZeRO applies to the elements this rank owns.
//
// AdamW runs through ZeroOptimizer's fused kernels (dist/zero_device_step.cpp, offload, 8-bit state).
// Any other optimizer must be element-wise (optim/optimizer.h LocalOptimizer::elementwise): then the
// update of this rank's slice of a parameter, with its state buffers cut the same way, is that slice
// of the whole parameter's update, and every stage equals one process's optimizer bit for bit given
// the same gradients. Its state lives here as one flat fp32 tensor per buffer over the owned elements
// (the same offsets as the master copy and the owned gradients), which checkpoints save and
// re-partition exactly as AdamW's moments; each owned slice has a ParamState whose buffers are views
// of them. Before the first update the slices have no buffers: the optimizer creates them as it does
// for a whole parameter (SGD's momentum starts as the gradient itself), and they are copied into the
// flat tensors and replaced by views once it returns.
#include <algorithm>
#include <map>

#include "dist/zero_optimizer.h"
#include "engine/autograd.h"
#include "engine/ops.h"

namespace hg::dist {

void ZeroOptimizer::adopt_update_rule(std::unique_ptr<optim::LocalOptimizer> rule) {
  const char* who = "[ZeroOptimizer]";
  HG_CHECK(rule != nullptr, who, " no optimizer to shard (a null pointer)");
  const auto* adamw = dynamic_cast<const optim::AdamW*>(rule.get());
  fused_adamw_ = adamw != nullptr;
  HG_CHECK(fused_adamw_ || rule->elementwise(), who, " cannot shard ", rule->name(),
           ": its update is not element-wise (LocalOptimizer::elementwise), so a rank could not update its part "
           "of a parameter alone");
  if (adamw) options_.adamw(adamw->options());
  enable_device_step();
  for (int64_t i = 0; i < rule->num_params(); ++i)
    HG_CHECK(!rule->state(i).initialized(), who, " ", rule->name(), " has already updated its parameter ", i,
             ": shard a fresh optimizer (a saved state is restored with ZeroOptimizer::load_state)");
  const optim::MixedPrecisionOptions& mixed = rule->mixed_precision();
  HG_CHECK(!mixed.stochastic_rounding(), who,
           " stochastic rounding is not implemented under ZeRO (it rounds the "
           "fp32 master to nearest even); turn it off in ",
           rule->name(), "'s set_mixed_precision");
  HG_CHECK(mixed.master_weights(), who,
           " ZeRO keeps fp32 master weights for half parameters (they are what it "
           "shards); master_weights(false) is a local optimizer's setting");
  if (!fused_adamw_) {
    const DType state = rule->state_dtype(zeros({1}, DType::f32, kCPU));
    HG_CHECK(state == DType::f32, who, " ", rule->name(), " keeps ", dtype_name(state),
             " state for f32 elements; ZeRO shards fp32 state");
  }

  std::map<const TensorImpl*, size_t> group_of_param;
  groups_.clear();
  for (const optim::ParamGroup& group : rule->param_groups()) {
    for (const Tensor& p : group.params) group_of_param[p.impl()] = groups_.size();
    groups_.push_back(optim::ParamGroup{{}, group.lr, group.weight_decay, group.overrides});
  }
  HG_CHECK(int64_t(group_of_param.size()) == int64_t(params_.size()), who, " ", rule->name(), " updates ",
           group_of_param.size(), " parameters but ZeRO shards ", params_.size(),
           ": build the optimizer over exactly the model's parameters");
  group_of_.assign(params_.size(), 0);
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto it = group_of_param.find(params_[i].impl());
    HG_CHECK(it != group_of_param.end(), who, " parameter ", i, " ", params_[i].describe(), " is not one of ",
             rule->name(), "'s: build the optimizer over model.parameters() after Module::to");
    group_of_[i] = it->second;
  }
  if (fused_adamw_)
    for (const optim::ParamGroup& group : groups_)
      HG_CHECK(group.lr == groups_[0].lr, who, " AdamW's groups have learning rates ", groups_[0].lr, " and ", group.lr,
               "; ZeRO's fused AdamW update takes one (weight decay may differ per group)");
  lr_ = groups_[0].lr;
  rule_ = std::move(rule);
}

double ZeroOptimizer::weight_decay_of(size_t param) const {
  const double decay = groups_[group_of_[param]].weight_decay;
  if (fused_adamw_ && options_.adamw().decay_only_matrices() && params_[param].dim() < 2) return 0.0;
  return decay;
}

optim::AdamWOptions ZeroOptimizer::adamw_options_of(size_t param) const {
  return static_cast<const optim::AdamW&>(*rule_).options_for(groups_[group_of_[param]]);
}

void ZeroOptimizer::init_rule_state() {
  rule_state_.clear();
  for (const std::string& name : rule_->state_buffer_names()) rule_state_.emplace_back(name, new_state(opt_count_));
  bind_slice_states();
}

void ZeroOptimizer::bind_slice_states() {
  slice_states_.assign(slices_.size(), optim::ParamState());
  for (size_t k = 0; k < slices_.size(); ++k) {
    slice_states_[k].step = step_;
    if (step_ == 0) continue;  // the first update creates the buffers, as for a whole parameter
    for (const auto& [name, flat] : rule_state_)
      slice_states_[k].buffers[name] = flat.narrow(0, slices_[k].state, slices_[k].count);
  }
}

void ZeroOptimizer::update_elementwise(const Tensor& params, const Tensor& grads, double grad_multiplier) {
  NoGradGuard no_grad;
  ++step_;
  for (size_t k = 0; k < slices_.size(); ++k) {
    const StateSlice& slice = slices_[k];
    optim::ParamState& state = slice_states_[k];
    state.step = step_;
    const Tensor param = params.narrow(0, slice.local, slice.count);
    // Half parameters: the update runs on the fp32 master's slice, then rounds to nearest even.
    const Tensor elements = master_.defined() ? master_.narrow(0, slice.local, slice.count) : param;
    Tensor grad = grads.narrow(0, slice.local, slice.count);
    if (grad.dtype() != elements.dtype()) grad = grad.to(elements.dtype());
    if (grad_multiplier != 1.0) grad = grad * grad_multiplier;
    rule_->update_elements(groups_[group_of_[slice.param]], elements, grad, state);
    if (master_.defined()) {
      Tensor target = param;
      target.copy_(elements);
    }
    // Buffers the first update created move into the flat state; later updates write in place.
    for (auto& [name, buffer] : state.buffers) {
      const auto flat = std::find_if(rule_state_.begin(), rule_state_.end(),
                                     [&name = name](const auto& entry) { return entry.first == name; });
      HG_CHECK(flat != rule_state_.end(), "[ZeroOptimizer] internal: ", rule_->name(), " created the buffer '", name,
               "' that its state_buffer_names() does not list");
      const Tensor view = flat->second.narrow(0, slice.state, slice.count);
      if (buffer.impl()->storage == view.impl()->storage && buffer.offset() == view.offset()) continue;
      Tensor(view).copy_(buffer);
      buffer = view;
    }
  }
}

}  // namespace hg::dist
