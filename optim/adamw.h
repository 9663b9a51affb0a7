#pragma once
// AdamW (Adam with decoupled weight decay, Loshchilov & Hutter 2019), with exactly PyTorch's
// torch.optim.AdamW semantics. At a parameter's t-th update (t = 1, 2, ...), with gradient g:
//
//   theta <- theta * (1 - lr * weight_decay)
//   m     <- beta1 * m + (1 - beta1) * g                  ("exp_avg")
//   v     <- beta2 * v + (1 - beta2) * g^2                ("exp_avg_sq")
//   theta <- theta - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
//
// m and v start at zero and are kept in fp32 (f64 for f64 parameters); the update is one fused
// kernel (kernels::{cpu,cuda}::adamw_step, per-element math in kernels/adamw_math.h) that computes in that
// precision and rounds the parameter once on store. decay_only_matrices(true) applies weight decay
// only to tensors of rank >= 2 (weights of linear layers and embeddings), not to biases and norm
// gains: the usual GPT recipe, without building two groups by hand.
//
// The kernel is the capturable form (kernels::*::adamw_step_device): lr (set_device_lr, else the
// group's), the skip flag (set_skip_flag) and each parameter's update count t live in memory the
// kernel reads when it runs, so AdamW decides_on_device(): a skipped step leaves parameters, masters
// and moments bit for bit and t where it was, with no host read.
#include "optim/optimizer.h"

namespace hg::optim {

// AdamWOptions().lr(3e-4).betas(0.9, 0.95).weight_decay(0.1)
struct AdamWOptions {
  HG_OPTION(AdamWOptions, double, lr, 1e-3);
  HG_OPTION(AdamWOptions, double, beta1, 0.9);
  HG_OPTION(AdamWOptions, double, beta2, 0.999);
  HG_OPTION(AdamWOptions, double, eps, 1e-8);
  HG_OPTION(AdamWOptions, double, weight_decay, 1e-2);
  HG_OPTION(AdamWOptions, bool, decay_only_matrices, false);

 public:
  AdamWOptions& betas(double b1, double b2) { return beta1(b1).beta2(b2); }
};

class AdamW : public LocalOptimizer {
 public:
  // One group with the options' lr and weight_decay.
  AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  // Groups with their own lr and weight_decay; betas, eps and decay_only_matrices from the options.
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options);

  const AdamWOptions& options() const { return options_; }

 protected:
  void update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state) override;
  // The fused kernel's master-copy path: one pass reads and writes param, master, m and v.
  bool update_with_master(const ParamGroup& group, const Tensor& param, const Tensor& master, const Tensor& grad,
                          ParamState& state) override;
  std::vector<std::string> state_buffer_names() const override;
  DType state_dtype(const Tensor& param) const override;
  bool skips_on_device() const override { return true; }

 private:
  void check_options() const;
  // One adamw_step kernel call; master is null or the fp32 master copy of a half param.
  void fused_step(const ParamGroup& group, const Tensor& param, void* master, const Tensor& grad, ParamState& state);
  AdamWOptions options_;
};

}  // namespace hg::optim
