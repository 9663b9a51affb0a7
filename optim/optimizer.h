#pragma once
// Optimizer: the base of every optimizer in hg::optim. It owns parameter groups and per-parameter
// state and runs the step loop; a subclass supplies the update of one parameter.
//
// An optimizer minimises a loss L(theta) from its gradients: after loss.backward(), step() moves
// every parameter theta that has a gradient g = dL/dtheta by a rule of (theta, g, state) — SGD
// (optim/sgd.h) and AdamW (optim/adamw.h) — and zero_grad() clears the gradients for the next one.
//
// CONVENTION
//   - Parameters are defined, contiguous, floating leaf tensors that require grad, each in exactly
//     one group. Checked when added, with an hg::Error naming the optimizer, the group and index.
//   - A parameter's index is its position counting through the groups in order (group 0's
//     parameters first); indices name state in state_tensors() ("3.exp_avg", "3.step").
//   - step() runs under NoGradGuard, skips parameters whose grad() is undefined (their state is
//     left as it is) and needs each other gradient to have its parameter's shape, dtype and device.
//   - A parameter's state is created at its first update: step = number of updates applied to it,
//     and the optimizer's named buffers (same shape as the parameter, dtype from state_dtype()).
//
// MIXED PRECISION (set_mixed_precision; see MixedPrecisionOptions)
//   A half parameter (f16/bf16) is updated through an fp32 copy: with master_weights (the default)
//   the optimizer keeps that copy as the state buffer "master" (created from the parameter at its
//   first update, saved and loaded with the other state), applies the update rule to it in fp32 and
//   writes its rounding back into the parameter — round-to-nearest-even, or stochastic rounding
//   (seeded: the draws are a pure function of the seed, the parameter's index and its step count,
//   so a resumed run rounds as the uninterrupted one). Without master weights the update is computed
//   in fp32 from the half value and rounded straight back (no extra memory; stochastic rounding then
//   keeps small updates from vanishing). A half parameter may carry an fp32 gradient
//   (Tensor::set_grad_dtype), which the update reads without rounding it to half first.
//   Model-state bytes per parameter (Adam): f32 4+4+8 = 16; half params, half grads, fp32
//   master/m/v 2+2+12 = 16 (the ZeRO paper's accounting); with fp32 grads 2+4+12 = 18; half params
//   without master 2+2+8 = 12.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/autograd.h"
#include "engine/tensor.h"

// HG_OPTIM_ARG(Options, T, name, default) declares one option of an options struct in PyTorch's C++
// style: `Options& name(T)` sets it and returns the struct (so setters chain), `T name() const`
// reads it. Options are validated by the optimizer's constructor, not by the setters.
#define HG_OPTIM_ARG(Options, T, name, default_value) \
 public:                                              \
  Options& name(T value) {                            \
    name##_ = value;                                  \
    return *this;                                     \
  }                                                   \
  T name() const { return name##_; }                  \
                                                      \
 private:                                             \
  T name##_ = default_value

namespace hg::optim {

// How half-precision parameters are updated (see MIXED PRECISION above). No effect on f32/f64.
// MixedPrecisionOptions().master_weights(true).stochastic_rounding(true).rounding_seed(7)
struct MixedPrecisionOptions {
  HG_OPTIM_ARG(MixedPrecisionOptions, bool, master_weights, true);
  HG_OPTIM_ARG(MixedPrecisionOptions, bool, stochastic_rounding, false);
  HG_OPTIM_ARG(MixedPrecisionOptions, uint64_t, rounding_seed, 0);
};

// Parameters sharing a learning rate and weight decay. The other hyperparameters (betas, eps,
// momentum, ...) are the optimizer's, from its options.
struct ParamGroup {
  std::vector<Tensor> params;
  double lr = 0.0;
  double weight_decay = 0.0;
};

// What an optimizer keeps for one parameter.
struct ParamState {
  int64_t step = 0;                       // updates applied to this parameter so far
  std::map<std::string, Tensor> buffers;  // e.g. "exp_avg", "momentum_buffer"; empty before step 1
  bool initialized() const { return step > 0; }
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Applies one update to every parameter that has a gradient (under NoGradGuard).
  virtual void step();
  // Clears the gradients: drops them (set_to_none, the default; the next backward allocates fresh
  // ones) or writes zeros into the existing ones in place.
  void zero_grad(bool set_to_none = true);

  // Sets the learning rate of every group (what a schedule drives each step), or of one group.
  void set_lr(double lr);
  void set_lr(size_t group, double lr);
  // Adds a group; its parameters are checked as the constructor checks them.
  void add_param_group(ParamGroup group);

  // How half parameters are updated. Changing master_weights once any parameter has state is an
  // error (the state would no longer match); rounding can change at any time.
  void set_mixed_precision(const MixedPrecisionOptions& options);
  const MixedPrecisionOptions& mixed_precision() const { return mixed_precision_; }
  // Whether parameter p is updated through a stored fp32 master copy.
  bool keeps_master(const Tensor& p) const { return mixed_precision_.master_weights() && is_half(p.dtype()); }

  // Read-only: parameters are added through add_param_group, which keeps the state in step.
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  // Number of parameters over all groups.
  int64_t num_params() const { return int64_t(state_.size()); }
  // The state of parameter `index` (see CONVENTION for the numbering).
  const ParamState& state(int64_t index) const;
  const std::string& name() const { return name_; }

  // The state of every initialised parameter as named tensors, for checkpoints:
  // "{index}.step" (i64 scalar) and "{index}.{buffer}" (the live buffer, sharing storage).
  std::vector<std::pair<std::string, Tensor>> state_tensors() const;
  // Replaces the whole state with `entries` (as state_tensors() returns them; parameters without
  // entries start fresh). Checks names, indices, shapes and dtypes against the parameters and
  // throws before changing anything when one does not fit. Buffers are copied.
  void load_state_tensors(const std::vector<std::pair<std::string, Tensor>>& entries);

 protected:
  // `name` prefixes error messages ("[AdamW] ...").
  explicit Optimizer(std::string name);
  // Validates and registers the groups (call from the subclass constructor, after its options are
  // validated). Throws when there are no parameters at all.
  void init_groups(std::vector<ParamGroup> groups);

  // Updates one parameter. `state.step` has already been incremented (1 at the first update);
  // `grad` is contiguous with the parameter's shape, dtype and device. For a half parameter,
  // `param` is its fp32 master copy (or an fp32 working copy) and `grad` is fp32.
  virtual void update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state) = 0;
  // Optionally, the update of a half parameter and its fp32 master copy in one fused pass with
  // round-to-nearest-even into `param` (grad in the parameter's dtype). Returns false when the
  // optimizer has no such path; step() then runs update() on the master copy and rounds.
  virtual bool update_with_master(const ParamGroup& group, const Tensor& param, const Tensor& master,
                                  const Tensor& grad, ParamState& state) {
    return false;
  }
  // The buffers an initialised parameter has (e.g. {"exp_avg", "exp_avg_sq"}).
  virtual std::vector<std::string> state_buffer_names() const = 0;
  // The dtype of those buffers for `param`.
  virtual DType state_dtype(const Tensor& param) const = 0;

  void check_lr(double lr) const;
  void check_weight_decay(double weight_decay) const;

  std::vector<ParamGroup> groups_;
  std::vector<ParamState> state_;  // one per parameter, by index

  // Updates parameter `index` of `group` from its gradient (the mixed-precision routing above).
  void update_param(const ParamGroup& group, const Tensor& param, Tensor grad, ParamState& state, size_t index);

 private:
  void check_param(const Tensor& p, size_t group, size_t index_in_group) const;
  // The state buffers parameter p has once initialised: the optimizer's plus "master" if kept.
  std::vector<std::string> buffers_of(const Tensor& p) const;
  std::string name_;
  MixedPrecisionOptions mixed_precision_;
};

}  // namespace hg::optim
