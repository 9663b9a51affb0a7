#pragma once
// Adagrad (Duchi et al. 2011) with learning-rate decay and L2 weight decay, with exactly PyTorch's
// torch.optim.Adagrad semantics. At a parameter's t-th update (t = 1, 2, ...), with gradient g:
//
//   g     <- g + weight_decay * theta
//   s     <- s + g^2                                       ("sum", starting at initial_accumulator_value)
//   theta <- theta - lr / (1 + (t - 1) * lr_decay) * g / (sqrt(s) + eps)
//
// The sum is kept in the parameter's dtype. PyTorch creates it in the constructor; here it is created at
// the parameter's first update (as every halfgrad optimizer's state), with the same value. One fused
// kernel per step (adagrad_step, kernels/adagrad_math.h); element-wise, so ZeRO shards its state.
#include "optim/optimizer.h"

namespace hg::optim {

// AdagradOptions().lr(1e-2).lr_decay(1e-4).initial_accumulator_value(0.1)
struct AdagradOptions {
  HG_OPTION(AdagradOptions, double, lr, 1e-2);
  HG_OPTION(AdagradOptions, double, lr_decay, 0.0);
  HG_OPTION(AdagradOptions, double, weight_decay, 0.0);
  HG_OPTION(AdagradOptions, double, initial_accumulator_value, 0.0);
  HG_OPTION(AdagradOptions, double, eps, 1e-10);
};

class Adagrad : public LocalOptimizer {
 public:
  Adagrad(std::vector<Tensor> params, AdagradOptions options = {});
  // Groups with their own lr and weight_decay; lr_decay and eps from the options unless a group overrides
  // them (ParamGroup::overrides: lr_decay, eps); the initial sum from the options (PyTorch's constructor
  // argument: a group cannot change it there either).
  Adagrad(std::vector<ParamGroup> groups, AdagradOptions options);

  const AdagradOptions& options() const { return options_; }
  // The options `group` runs with: options() with its overrides.
  AdagradOptions options_for(const ParamGroup& group) const;
  std::vector<GroupOptionName> group_options() const override;
  bool elementwise() const override { return true; }
  std::vector<std::string> state_buffer_names() const override { return {"sum"}; }
  DType state_dtype(const Tensor& param) const override { return accumulate_dtype(param.dtype()); }

 protected:
  void update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state) override;
  // The fused kernel's master-copy path: one pass reads and writes param, master and the state.
  bool update_with_master(const ParamGroup& group, const Tensor& param, const Tensor& master, const Tensor& grad,
                          ParamState& state) override;
  void check_group(const ParamGroup& group, size_t index) const override;

 private:
  void check(const AdagradOptions& o, int64_t group) const;
  // One adagrad_step kernel call (kernels/optimizer_kernels.h); master is undefined or the fp32 master copy of a
  // half parameter (the state is created from it: fp32 values, as from the fp32 copy that update() gets).
  void fused_step(const ParamGroup& group, const Tensor& param, const Tensor& master, const Tensor& grad,
                  ParamState& state);
  AdagradOptions options_;
};

}  // namespace hg::optim
