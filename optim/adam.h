#pragma once
// Adam (Kingma & Ba 2015) with coupled L2 weight decay and AMSGrad, with exactly PyTorch's
// torch.optim.Adam semantics. At a parameter's t-th update (t = 1, 2, ...), with gradient g:
//
//   g     <- g + weight_decay * theta                     (L2: the decay goes through the moments)
//   m     <- beta1 * m + (1 - beta1) * g                  ("exp_avg")
//   v     <- beta2 * v + (1 - beta2) * g^2                ("exp_avg_sq")
//   v_max <- max(v_max, v)                                ("max_exp_avg_sq", amsgrad only)
//   theta <- theta - lr / (1 - beta1^t) * m / (sqrt(v or v_max) / sqrt(1 - beta2^t) + eps)
//
// The moments start at zero and are kept in the parameter's dtype (a half parameter is updated through
// its fp32 master copy: optim/optimizer.h MIXED PRECISION). One fused kernel per step (adam_step,
// kernels/adam_math.h); element-wise, so ZeRO shards its state (dist/zero_optimizer.h). For decoupled
// weight decay use AdamW (optim/adamw.h).
#include "optim/optimizer.h"

namespace hg::optim {

// AdamOptions().lr(1e-3).betas(0.9, 0.999).weight_decay(1e-4).amsgrad(true)
struct AdamOptions {
  HG_OPTION(AdamOptions, double, lr, 1e-3);
  HG_OPTION(AdamOptions, double, beta1, 0.9);
  HG_OPTION(AdamOptions, double, beta2, 0.999);
  HG_OPTION(AdamOptions, double, eps, 1e-8);
  HG_OPTION(AdamOptions, double, weight_decay, 0.0);
  HG_OPTION(AdamOptions, bool, amsgrad, false);

 public:
  AdamOptions& betas(double b1, double b2) { return beta1(b1).beta2(b2); }
};

class Adam : public LocalOptimizer {
 public:
  // One group with the options' lr and weight_decay.
  Adam(std::vector<Tensor> params, AdamOptions options = {});
  // Groups with their own lr and weight_decay; betas, eps and amsgrad from the options unless a group
  // overrides them (ParamGroup::overrides: beta1, beta2, eps, amsgrad).
  Adam(std::vector<ParamGroup> groups, AdamOptions options);

  const AdamOptions& options() const { return options_; }
  // The options `group` runs with: options() with its overrides.
  AdamOptions options_for(const ParamGroup& group) const;
  std::vector<GroupOptionName> group_options() const override;
  bool elementwise() const override { return true; }
  // Every buffer some group keeps (max_exp_avg_sq when any group has amsgrad).
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
  void check(const AdamOptions& o, int64_t group) const;
  // One adam_step kernel call (kernels/optimizer_kernels.h); master is undefined or the fp32 master copy of a
  // half parameter (the state is created from it: fp32 values, as from the fp32 copy that update() gets).
  void fused_step(const ParamGroup& group, const Tensor& param, const Tensor& master, const Tensor& grad,
                  ParamState& state);
  AdamOptions options_;
};

}  // namespace hg::optim
