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
// parameter's dtype. Composed from engine ops; element-wise, so ZeRO shards its state.
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
  // Groups with their own lr and weight_decay; betas from the options.
  Lion(std::vector<ParamGroup> groups, LionOptions options);

  const LionOptions& options() const { return options_; }
  bool elementwise() const override { return true; }
  std::vector<std::string> state_buffer_names() const override { return {"exp_avg"}; }
  DType state_dtype(const Tensor& param) const override { return accumulate_dtype(param.dtype()); }

 protected:
  void update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state) override;

 private:
  LionOptions options_;
};

}  // namespace hg::optim
