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
  // `grad` is contiguous with the parameter's shape, dtype and device.
  virtual void update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state) = 0;
  // The buffers an initialised parameter has (e.g. {"exp_avg", "exp_avg_sq"}).
  virtual std::vector<std::string> state_buffer_names() const = 0;
  // The dtype of those buffers for `param`.
  virtual DType state_dtype(const Tensor& param) const = 0;

  void check_lr(double lr) const;
  void check_weight_decay(double weight_decay) const;

  std::vector<ParamGroup> groups_;
  std::vector<ParamState> state_;  // one per parameter, by index

 private:
  void check_param(const Tensor& p, size_t group, size_t index_in_group) const;
  std::string name_;
};

}  // namespace hg::optim
