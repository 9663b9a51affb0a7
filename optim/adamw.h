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
// kernel (kernels::{cpu,cuda}::adamw_step_device, per-element math in kernels/adamw_math.h) that computes in that
// precision and rounds the parameter once on store. decay_only_matrices(true) applies weight decay
// only to tensors of rank >= 2 (weights of linear layers and embeddings), not to biases and norm
// gains: the usual GPT recipe, without building two groups by hand.
//
// The kernel is the capturable form (kernels::*::adamw_step_device): lr (device_step()->step's, else
// the group's), the skip flag (device_step()->step's found_inf) and each parameter's update count t
// live in memory the kernel reads when it runs, so AdamW has the device step (optim/device_step.h): a
// skipped step leaves parameters, masters and moments bit for bit and t where it was, with no host read.
//
// 8-BIT STATE (state_bits(8); optim/adamw8bit_state.cpp, kernels/adamw8bit_math.h): an f32/f16/bf16
// parameter with at least kernels::kAdamW8BitMinElements elements keeps m and v as one byte per
// element ("exp_avg", "exp_avg_sq": u8, the parameter's shape; codes of a dynamic quantisation map)
// plus one fp32 absmax per block of kernels::kAdamW8BitBlock elements ("exp_avg_absmax",
// "exp_avg_sq_absmax": f32 [blocks]), bitsandbytes' block-wise 8-bit Adam: the fused kernel
// dequantises a block, applies the update above in fp32 and requantises it. Smaller (and f64)
// parameters keep fp32 moments as with state_bits(32). Moments then cost 2 bytes per element plus
// 8 bytes per 2048 instead of 8. The quantised state is saved and restored as it is (a resumed run
// is bit-exact); loading 32-bit state into an 8-bit optimizer, or the reverse, is an error.
#include "kernels/adamw_math.h"
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
  // The width of the moments: 32 (fp32) or 8 (block-wise quantised; see 8-BIT STATE above).
  HG_OPTION(AdamWOptions, int, state_bits, 32);

 public:
  AdamWOptions& betas(double b1, double b2) { return beta1(b1).beta2(b2); }
};

class AdamW : public LocalOptimizer {
 public:
  // One group with the options' lr and weight_decay.
  AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  // Groups with their own lr and weight_decay; betas and eps from the options unless a group overrides
  // them (ParamGroup::overrides: beta1, beta2, eps); decay_only_matrices and state_bits from the options.
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options);

  const AdamWOptions& options() const { return options_; }
  // The options `group` runs with: options() with its overrides.
  AdamWOptions options_for(const ParamGroup& group) const;
  std::vector<GroupOptionName> group_options() const override;
  // Whether `param` keeps 8-bit moments (state_bits(8), an f32/f16/bf16 parameter with at least
  // kernels::kAdamW8BitMinElements elements).
  bool quantizes(const Tensor& param) const { return quantizes(param, options_); }
  static bool quantizes(const Tensor& param, const AdamWOptions& options);
  // The bytes of the moments (and their block scales) that `param` keeps under `options`; the fp32
  // master copy of a half parameter is not counted.
  static int64_t moment_bytes(const Tensor& param, const AdamWOptions& options);

  // Checks that the entries' moments have this optimizer's width (an error naming the entry when a
  // 32-bit state meets an 8-bit optimizer or the reverse), then LocalOptimizer's load.
  void load_state_tensors(const std::vector<std::pair<std::string, Tensor>>& entries) override;
  // Element-wise with 32-bit state and without decay_only_matrices (which reads the parameter's rank;
  // 8-bit state quantises blocks of a parameter). ZeRO needs neither: it runs AdamW through its own
  // fused kernels, placing the blocks itself (dist/zero_layout.h).
  bool elementwise() const override { return options_.state_bits() == 32 && !options_.decay_only_matrices(); }
  std::vector<std::string> state_buffer_names() const override;
  DType state_dtype(const Tensor& param) const override;

 protected:
  void update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state) override;
  // The fused kernel's master-copy path: one pass reads and writes param, master, m and v.
  bool update_with_master(const ParamGroup& group, const Tensor& param, const Tensor& master, const Tensor& grad,
                          ParamState& state) override;
  std::vector<std::string> state_buffer_names_for(const Tensor& param) const override;
  std::pair<Shape, DType> state_buffer_layout(const Tensor& param, const std::string& buffer) const override;
  void check_group(const ParamGroup& group, size_t index) const override;

 private:
  void check_options() const;
  void check_moments(const AdamWOptions& o, int64_t group) const;  // betas and eps
  // One adamw_step_device kernel call; master is null or the fp32 master copy of a half param.
  void fused_step(const ParamGroup& group, const Tensor& param, void* master, const Tensor& grad, ParamState& state);
  // Zero moments: fp32 zeros, or the maps' zero codes with zero block scales (adamw8bit_state.cpp).
  void init_moments(const Tensor& param, ParamState& state) const;
  // The 8-bit kernel call of fused_step (optim/adamw8bit_state.cpp), with the group's betas and eps in `o`.
  void quantized_step(const Tensor& param, void* master, const Tensor& grad, ParamState& state,
                      const kernels::AdamWStepScalars& scalars, const AdamWOptions& o, double weight_decay);
  AdamWOptions options_;
};

}  // namespace hg::optim
