#pragma once
// RMSprop (Hinton's lecture 6e; centered: Graves 2013) with momentum and L2 weight decay, with exactly
// PyTorch's torch.optim.RMSprop semantics. For a parameter theta with gradient g:
//
//   g   <- g + weight_decay * theta
//   s   <- alpha * s + (1 - alpha) * g^2                  ("square_avg")
//   a   <- alpha * a + (1 - alpha) * g                    ("grad_avg", centered only)
//   d   <- sqrt(s - a^2) + eps   (centered)   or   sqrt(s) + eps
//   buf <- momentum * buf + g / d; theta <- theta - lr * buf     ("momentum_buffer", momentum > 0)
//   theta <- theta - lr * g / d                                  (momentum = 0)
//
// Every buffer starts at zero, in the parameter's dtype. One fused kernel per step (rmsprop_step,
// kernels/rmsprop_math.h); element-wise, so ZeRO shards its state (dist/zero_optimizer.h).
#include "optim/optimizer.h"

namespace hg::optim {

// RMSpropOptions().lr(1e-2).alpha(0.99).momentum(0.9).centered(true)
struct RMSpropOptions {
  HG_OPTION(RMSpropOptions, double, lr, 1e-2);
  HG_OPTION(RMSpropOptions, double, alpha, 0.99);
  HG_OPTION(RMSpropOptions, double, eps, 1e-8);
  HG_OPTION(RMSpropOptions, double, weight_decay, 0.0);
  HG_OPTION(RMSpropOptions, double, momentum, 0.0);
  HG_OPTION(RMSpropOptions, bool, centered, false);
};

class RMSprop : public LocalOptimizer {
 public:
  RMSprop(std::vector<Tensor> params, RMSpropOptions options = {});
  // Groups with their own lr and weight_decay; alpha, eps, momentum and centered from the options unless a
  // group overrides them (ParamGroup::overrides: alpha, eps, momentum, centered).
  RMSprop(std::vector<ParamGroup> groups, RMSpropOptions options);

  const RMSpropOptions& options() const { return options_; }
  // The options `group` runs with: options() with its overrides.
  RMSpropOptions options_for(const ParamGroup& group) const;
  std::vector<GroupOptionName> group_options() const override;
  bool elementwise() const override { return true; }
  // Every buffer some group keeps.
  std::vector<std::string> state_buffer_names() const override;
  DType state_dtype(const Tensor& param) const override { return accumulate_dtype(param.dtype()); }

 protected:
  void update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state) override;
  // The fused kernel's master-copy path: one pass reads and writes param, master and the state.
  bool update_with_master(const ParamGroup& group, const Tensor& param, const Tensor& master, const Tensor& grad,
                          ParamState& state) override;
  void check_group(const ParamGroup& group, size_t index) const override;
  std::vector<std::string> state_buffer_names_for(const Tensor& param) const override;

 private:
  void check(const RMSpropOptions& o, int64_t group) const;
  // One rmsprop_step kernel call (kernels/optimizer_kernels.h); master is undefined or the fp32 master copy of a
  // half parameter (the state is created from it: fp32 values, as from the fp32 copy that update() gets).
  void fused_step(const ParamGroup& group, const Tensor& param, const Tensor& master, const Tensor& grad,
                  ParamState& state);
  RMSpropOptions options_;
};

}  // namespace hg::optim
