#pragma once
// Lion (EvoLved Sign Momentum; Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms",
// Algorithm 2) with decoupled weight decay. PyTorch has no Lion; the semantics are the paper's, as the
// reference implementations (lucidrains/lion-pytorch, optax.lion) apply them. With gradient g:
//
//   theta <- theta * (1 - lr * weight_decay)
//   theta <- theta - lr * sign(beta1 * m + (1 - beta1) * g)
//   m     <- beta2 * m + (1 - beta2) * g                   ("exp_avg")
//
// Every element moves by exactly lr (or 0 where the interpolation is 0): use a learning rate 3-10x
// smaller than AdamW's and a weight decay 3-10x larger (the paper's advice). m starts at zero, in the
// parameter's dtype. One fused kernel per step (lion_step, kernels/lion_math.h); element-wise, so ZeRO
// shards its state.
#include "optim/optimizer.h"

namespace hg::optim {

// LionOptions().lr(1e-4).betas(0.9, 0.99).weight_decay(1.0)
struct LionOptions {
  HG_OPTION(LionOptions, double, lr, 1e-4);
  HG_OPTION(LionOptions, double, beta1, 0.9);
  HG_OPTION(LionOptions, double, beta2, 0.99);
  HG_OPTION(LionOptions, double, weight_decay, 0.0);

 public:
  LionOptions& betas(double b1, double b2) { return beta1(b1).beta2(b2); }
};

class Lion : public LocalOptimizer {
 public:
  Lion(std::vector<Tensor> params, LionOptions options = {});
  // Groups with their own lr and weight_decay; betas from the options unless a group overrides them
  // (ParamGroup::overrides: beta1, beta2).
  Lion(std::vector<ParamGroup> groups, LionOptions options);

  const LionOptions& options() const { return options_; }
  // The options `group` runs with: options() with its overrides.
  LionOptions options_for(const ParamGroup& group) const;
  std::vector<GroupOptionName> group_options() const override;
  bool elementwise() const override { return true; }
  std::vector<std::string> state_buffer_names() const override { return {"exp_avg"}; }
  DType state_dtype(const Tensor& param) const override { return accumulate_dtype(param.dtype()); }

 protected:
  void update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state) override;
  // The fused kernel's master-copy path: one pass reads and writes param, master and the state.
  bool update_with_master(const ParamGroup& group, const Tensor& param, const Tensor& master, const Tensor& grad,
                          ParamState& state) override;
  void check_group(const ParamGroup& group, size_t index) const override;

 private:
  void check(const LionOptions& o, int64_t group) const;
  // One lion_step kernel call (kernels/optimizer_kernels.h); master is undefined or the fp32 master copy of a
  // half parameter (the state is created from it: fp32 values, as from the fp32 copy that update() gets).
  void fused_step(const ParamGroup& group, const Tensor& param, const Tensor& master, const Tensor& grad,
                  ParamState& state);
  LionOptions options_;
};

}  // namespace hg::optim
