#pragma once
// Optimizer: the protocol every optimizer follows (a training loop needs nothing else), and
// LocalOptimizer: the base of the optimizers whose state lives in this process. LocalOptimizer owns
// parameter groups and per-parameter state and runs the step loop; a subclass supplies the update of
// one parameter. The sharded optimizer (ZeRO) is dist::ZeroOptimizer.
//
// An optimizer minimises a loss L(theta) from its gradients: after loss.backward(), step() moves
// every parameter theta that has a gradient g = dL/dtheta by a rule of (theta, g, state) — SGD
// (optim/sgd.h) and AdamW (optim/adamw.h) — and zero_grad() clears the gradients for the next one.
//
// CONVENTION (LocalOptimizer)
//   - Parameters are defined, contiguous, floating leaf tensors, each in exactly one group. Checked
//     when added, with an hg::Error naming the optimizer, the group and index. One that does not
//     require grad (a frozen module's, nn::Module::freeze) is accepted: it gets no gradient, so step()
//     skips it (PyTorch's rule), until it is unfrozen.
//   - A parameter's index is its position counting through the groups in order (group 0's
//     parameters first); indices name state in state_tensors() ("3.exp_avg", "3.step").
//   - step() runs under NoGradGuard, skips parameters whose grad() is undefined (their state is
//     left as it is) and needs each other gradient to have its parameter's shape, dtype and device.
//   - A parameter's state is created at its first update: step = number of updates applied to it,
//     and the optimizer's named buffers (same shape as the parameter, dtype from state_dtype(), unless
//     the optimizer says otherwise through state_buffer_names_for / state_buffer_layout).
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
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/autograd.h"
#include "engine/tensor.h"
#include "kernels/adamw_math.h"
#include "kernels/options.h"
#include "optim/device_step.h"
#include "optim/sharded_state.h"

namespace hg::optim {

// How half-precision parameters are updated (see MIXED PRECISION above). No effect on f32/f64.
// MixedPrecisionOptions().master_weights(true).stochastic_rounding(true).rounding_seed(7)
struct MixedPrecisionOptions {
  HG_OPTION(MixedPrecisionOptions, bool, master_weights, true);
  HG_OPTION(MixedPrecisionOptions, bool, stochastic_rounding, false);
  HG_OPTION(MixedPrecisionOptions, uint64_t, rounding_seed, 0);
};

// Parameters sharing a learning rate, a weight decay and, like PyTorch's param_groups, any other
// hyper-parameter of the optimizer: `overrides` maps an option's name (as the optimizer's options struct
// spells it: "beta1", "eps", "momentum", "amsgrad", ...) to this group's value (a flag as 0 or 1); options
// it does not name are the optimizer's. The optimizer checks the names and the values (the options' own
// range checks) when the group is added, with an hg::Error naming the optimizer, the group and the key.
//   ParamGroup{{w}, 1e-3, 0.1}.set("beta2", 0.95).set("amsgrad", 1)
struct ParamGroup {
  std::vector<Tensor> params;
  double lr = 0.0;
  double weight_decay = 0.0;
  std::map<std::string, double> overrides;

  ParamGroup(std::vector<Tensor> params = {}, double lr = 0.0, double weight_decay = 0.0,
             std::map<std::string, double> overrides = {})
      : params(std::move(params)), lr(lr), weight_decay(weight_decay), overrides(std::move(overrides)) {}

  ParamGroup& set(const std::string& option, double value) {
    overrides[option] = value;
    return *this;
  }
};

// One hyper-parameter a group may override (LocalOptimizer::group_options): its name, and whether it is a
// flag (a bool option, given as 0 or 1).
struct GroupOptionName {
  std::string name;
  bool flag = false;
};

// What an optimizer keeps for one parameter.
struct ParamState {
  int64_t step = 0;                       // step() calls that reached this parameter (= updates applied,
                                          // unless the device skipped some: see step_count)
  std::map<std::string, Tensor> buffers;  // e.g. "exp_avg", "momentum_buffer"; empty before step 1
  // The fused optimizers (step_scalars) count the updates applied where their kernels run: i64[3] on the
  // parameter's device, step_count[parity] current (kernels/adamw_math.h AdamWStepScalars).
  Tensor step_count;
  int32_t parity = 0;
  bool initialized() const { return step > 0; }
};

// The protocol every optimizer follows, local (SGD, AdamW: LocalOptimizer below) or sharded across
// ranks (dist::ZeroOptimizer). A training loop (train::Trainer) drives any of them the same way:
//
//   for each micro-batch: optimizer.set_gradient_sync(last micro-batch); scaler.scale(loss).backward();
//   scaler.unscale_(optimizer);          // -> optimizer.unscale_and_check(S): grads /= S, inf/NaN found?
//   optimizer.clip_grad_norm(max_norm);  // global: over every rank's gradients under ZeRO
//   optimizer.set_lr(schedule.lr(t));
//   scaler.step(optimizer);              // optimizer.step(), or skipped (grads zeroed) on inf/NaN
//   scaler.update(); optimizer.zero_grad();
//
// CONVENTION
//   - A found inf/NaN is the same on every rank of a sharded optimizer (it is decided from the
//     all-reduced norm), so every rank skips the same steps.
//   - state_tensors() is what this process keeps: all of it for a local optimizer (the training
//     checkpoint holds it), this rank's shard for a sharded one (is_sharded(): its sharded_state()
//     saves the shards into files of their own, one per rank, which its load_state re-partitions).
//   - whole_parameters() makes every parameter readable and writable in this process while the guard
//     lives (a sharded optimizer gathers them, collectively); commit() makes values written in its
//     scope the optimizer's own (shards, fp32 master copies).
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // "[AdamW]"-style name for messages.
  virtual const std::string& name() const = 0;
  // Every parameter it updates, in its order.
  virtual std::vector<Tensor> parameters() const = 0;

  // Applies one update to every parameter that has a gradient (under NoGradGuard). Returns false
  // when the optimizer found an inf/NaN gradient itself and skipped the update (a sharded optimizer
  // checks; a local one leaves that to the loss scaler and always returns true).
  virtual bool step() = 0;
  // Clears the gradients: drops them (set_to_none; the next backward allocates fresh ones) or writes
  // zeros into them in place. A sharded optimizer always zeroes its flat buffers.
  virtual void zero_grad(bool set_to_none = true) = 0;
  // The learning rate of the next step() (of every group).
  virtual void set_lr(double lr) = 0;
  // Off for gradient-accumulation micro-steps that must not communicate (sharded optimizers); on for
  // the last one. Local optimizers ignore it.
  virtual void set_gradient_sync(bool sync) {}

  // Divides every gradient by `scale` (or has the update do it) and returns true when some gradient
  // is inf or NaN. Default: one fused multi-tensor pass per device over parameters()' gradients.
  virtual bool unscale_and_check(double scale);
  // The global L2 norm of the gradients (optim/clip.h), and clipping to max_norm; both return the
  // norm before clipping and leave gradients with a non-finite norm untouched.
  virtual double grad_norm();
  virtual double clip_grad_norm(double max_norm);

  // The device-resident step capability (optim/device_step.h): null for an optimizer that decides on
  // the host (the forms above, a read per decision).
  DeviceStep* device_step() const { return device_step_; }
  bool decides_on_device() const { return device_step_ != nullptr; }

  // This process's optimizer state as named tensors (see CONVENTION), and its restoration (checked
  // before anything changes).
  virtual std::vector<std::pair<std::string, Tensor>> state_tensors() const = 0;
  virtual void load_state_tensors(const std::vector<std::pair<std::string, Tensor>>& entries) = 0;

  // The sharding capability (see CONVENTION): null for an optimizer whose whole state is in this
  // process (its state_tensors() go into the training checkpoint).
  ShardedState* sharded_state() const { return sharded_; }
  bool is_sharded() const { return sharded_ != nullptr; }

  // The guard of whole_parameters(). A local optimizer's parameters are always whole; its commit()
  // copies parameters written in the guard's scope into their fp32 master copies.
  class WholeParameters {
   public:
    virtual ~WholeParameters() = default;
    virtual void commit() {}
  };
  [[nodiscard]] virtual std::unique_ptr<WholeParameters> whole_parameters() {
    return std::make_unique<WholeParameters>();
  }
  // One line about the memory it keeps, for a progress line ("" when there is nothing to add).
  virtual std::string state_summary() const { return ""; }

 protected:
  // An optimizer hands its capabilities over in its constructor.
  void set_sharded_state(ShardedState* state) { sharded_ = state; }
  void set_device_step(DeviceStep* step) { device_step_ = step; }

 private:
  ShardedState* sharded_ = nullptr;
  DeviceStep* device_step_ = nullptr;
};

// An optimizer whose whole state lives in this process: parameter groups, per-parameter state and
// the step loop; a subclass supplies the update of one parameter (SGD, AdamW).
class LocalOptimizer : public Optimizer {
 public:
  const std::string& name() const override { return name_; }
  std::vector<Tensor> parameters() const override;
  // Applies one update to every parameter that has a gradient (under NoGradGuard); returns true.
  bool step() override;
  void zero_grad(bool set_to_none = true) override;

  // Sets the learning rate of every group (what a schedule drives each step), or of one group.
  void set_lr(double lr) override;
  void set_lr(size_t group, double lr);
  // Adds a group; its parameters are checked as the constructor checks them.
  void add_param_group(ParamGroup group);

  // How half parameters are updated. Changing master_weights once any parameter has state is an
  // error (the state would no longer match); rounding can change at any time.
  void set_mixed_precision(const MixedPrecisionOptions& options);
  const MixedPrecisionOptions& mixed_precision() const { return mixed_precision_; }
  // Whether parameter p is updated through a stored fp32 master copy.
  bool keeps_master(const Tensor& p) const { return mixed_precision_.master_weights() && is_half(p.dtype()); }

  // ---- the sharding capability (dist::ZeroOptimizer shards the state of any such optimizer) ----
  // Whether update() is element-wise: each element moves by a function of its own value, gradient
  // and state (and of the group's lr and weight decay and the step count) only, so that the update of
  // any contiguous run of a parameter's elements, its state buffers cut the same way, is that run of
  // the whole parameter's update. True for SGD and AdamW; an optimizer with a per-tensor reduction
  // (LAMB's trust ratio, Adafactor's factored moments) would say false, and ZeRO refuses it.
  virtual bool elementwise() const { return false; }
  // update() on `param` (a contiguous f32/f64 run of a parameter's elements, or of its fp32 master
  // copy), `grad` (the same run, its dtype) and `state` (step already counted; buffers: views of the
  // same run of each state buffer, or none before the first update, which creates them).
  void update_elements(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state);
  // The buffers an initialised parameter has (e.g. {"exp_avg", "exp_avg_sq"}), and their dtype for
  // `param` (without the fp32 "master" of a half parameter).
  virtual std::vector<std::string> state_buffer_names() const = 0;
  virtual DType state_dtype(const Tensor& param) const = 0;

  // Read-only: parameters are added through add_param_group, which keeps the state in step.
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  // The index of the group `param` belongs to (an error naming it when it is none of this optimizer's).
  size_t group_index(const Tensor& param) const;
  // The hyper-parameters a group may override (ParamGroup::overrides), besides lr and weight_decay.
  virtual std::vector<GroupOptionName> group_options() const { return {}; }
  // Number of parameters over all groups.
  int64_t num_params() const { return int64_t(state_.size()); }
  // The state of parameter `index` (see CONVENTION for the numbering).
  const ParamState& state(int64_t index) const;

  // The state of every initialised parameter as named tensors, for checkpoints:
  // "{index}.step" (i64 scalar) and "{index}.{buffer}" (the live buffer, sharing storage).
  std::vector<std::pair<std::string, Tensor>> state_tensors() const override;
  // Replaces the whole state with `entries` (as state_tensors() returns them; parameters without
  // entries start fresh). Checks names, indices, shapes and dtypes against the parameters and
  // throws before changing anything when one does not fit. Buffers are copied.
  void load_state_tensors(const std::vector<std::pair<std::string, Tensor>>& entries) override;
  // A guard whose commit() refreshes the fp32 master copies from the (rewritten) parameters.
  [[nodiscard]] std::unique_ptr<WholeParameters> whole_parameters() override;

 protected:
  // `name` prefixes error messages ("[AdamW] ...").
  explicit LocalOptimizer(std::string name);
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
  // The buffers `param` keeps once initialised, and the shape and dtype of each: by default
  // state_buffer_names(), each with the parameter's shape and state_dtype(param). An optimizer whose
  // buffers depend on the parameter (AdamW with 8-bit state: codes and per-block scales for large
  // parameters, optim/adamw.h) overrides both.
  virtual std::vector<std::string> state_buffer_names_for(const Tensor& param) const { return state_buffer_names(); }
  virtual std::pair<Shape, DType> state_buffer_layout(const Tensor& param, const std::string& buffer) const {
    return {param.shape(), state_dtype(param)};
  }

  void check_lr(double lr) const;
  void check_weight_decay(double weight_decay) const;
  // Checks that `value` of option `option` is finite and within [lo, hi] (hi_open: [lo, hi)), with a
  // message naming both, and the group when `group` >= 0 (a group's override).
  void check_range(const char* option, double value, double lo, double hi, bool hi_open = false,
                   int64_t group = -1) const;
  // Checks the options group `index` runs with (its overrides applied) as the constructor checks the
  // options; called by add_param_group once the override names are known to be group_options().
  virtual void check_group(const ParamGroup& group, size_t index) const {}
  // State buffer `name` of `state`, created at the parameter's first update filled with `initial`,
  // with `param`'s shape and state_dtype(param).
  Tensor& state_buffer(ParamState& state, const std::string& name, const Tensor& param, double initial = 0.0) const;
  // Called from the constructor of an optimizer whose update() honours device_lr() and skip_flag() in
  // its kernels (every fused one, through step_scalars): device_step() then unscales and clips with the
  // fused passes and steps with them.
  void enable_device_step();
  // The learning rate and skip flag of the DeviceStep::step running now (undefined otherwise), for update().
  const Tensor& device_lr() const { return device_lr_; }
  const Tensor& skip_flag() const { return skip_flag_; }
  // The scalars of one fused kernel call on `param` (kernels/optimizer_kernels.h): device_lr() when a device
  // step runs (else the group's lr), skip_flag(), and state.step_count, made from state.step at the
  // parameter's first call on its device ([current, next, blocks done]: the kernel settles the count).
  kernels::AdamWStepScalars step_scalars(const ParamGroup& group, const Tensor& param, ParamState& state) const;

  std::vector<ParamGroup> groups_;
  std::vector<ParamState> state_;  // one per parameter, by index

  // Updates parameter `index` of `group` from its gradient (the mixed-precision routing above).
  void update_param(const ParamGroup& group, const Tensor& param, Tensor grad, ParamState& state, size_t index);

 private:
  void check_param(const Tensor& p, size_t group, size_t index_in_group) const;
  // Checks a group's override names against group_options() and flags' values, then check_group.
  void check_overrides(const ParamGroup& group, size_t index) const;
  // The state buffers parameter p has once initialised: the optimizer's plus "master" if kept.
  std::vector<std::string> buffers_of(const Tensor& p) const;
  std::string name_;
  std::unordered_map<const TensorImpl*, size_t> group_of_;  // parameter -> index of its group
  MixedPrecisionOptions mixed_precision_;
  class LocalDeviceStep;  // optimizer.cpp
  std::unique_ptr<DeviceStep> device_step_impl_;
  Tensor device_lr_, skip_flag_;
};

}  // namespace hg::optim
