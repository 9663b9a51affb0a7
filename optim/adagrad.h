#pragma once
// Adagrad (Duchi et al. 2011) with learning-rate decay and L2 weight decay, with exactly PyTorch's
// torch.optim.Adagrad semantics. At a parameter's t-th update (t = 1, 2, ...), with gradient g:
//
//   g     <- g + weight_decay * theta
//   s     <- s + g^2                                       ("sum", starting at initial_accumulator_value)
//   theta <- theta - lr / (1 + (t - 1) * lr_decay) * g / (sqrt(s) + eps)
//
// The sum is kept in the parameter's dtype. PyTorch creates it in the constructor; here it is created at
// the parameter's first update (as every halfgrad optimizer's state), with the same value. Composed
// from engine ops; element-wise, so ZeRO shards its state (dist/zero_optimizer.h).
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
  // Groups with their own lr and weight_decay; lr_decay, the initial sum and eps from the options.
  Adagrad(std::vector<ParamGroup> groups, AdagradOptions options);

  const AdagradOptions& options() const { return options_; }
  bool elementwise() const override { return true; }
  std::vector<std::string> state_buffer_names() const override { return {"sum"}; }
  DType state_dtype(const Tensor& param) const override { return accumulate_dtype(param.dtype()); }

 protected:
  void update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state) override;

 private:
  AdagradOptions options_;
};

}  // namespace hg::optim
