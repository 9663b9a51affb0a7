#pragma once
// Stochastic gradient descent with momentum, dampening, Nesterov momentum and (L2) weight decay,
// with exactly PyTorch's torch.optim.SGD semantics. For a parameter theta with gradient g:
//
//   g   <- g + weight_decay * theta                          (coupled: decay goes through momentum)
//   buf <- g                                     at the parameter's first update, else
//   buf <- momentum * buf + (1 - dampening) * g              (only when momentum > 0)
//   g   <- g + momentum * buf   (nesterov)   or   g <- buf   (momentum > 0)
//   theta <- theta - lr * g
//
// The arithmetic is done in the accumulation dtype (f32 for f16/bf16 parameters, f64 for f64) and
// the parameter is rounded once when stored; the momentum buffer ("momentum_buffer", only when
// momentum > 0) is kept in that accumulation dtype. One fused kernel per parameter and step
// (sgd_step, kernels/sgd_math.h), each product and sum rounded on its own: the CPU and CUDA backends
// give the same bits. Element-wise, so ZeRO shards its state.
#include "optim/optimizer.h"

namespace hg::optim {

// SGDOptions().lr(0.1).momentum(0.9).nesterov(true)
struct SGDOptions {
  HG_OPTION(SGDOptions, double, lr, 1e-3);
  HG_OPTION(SGDOptions, double, momentum, 0.0);
  HG_OPTION(SGDOptions, double, dampening, 0.0);
  HG_OPTION(SGDOptions, double, weight_decay, 0.0);
  HG_OPTION(SGDOptions, bool, nesterov, false);
};

class SGD : public LocalOptimizer {
 public:
  // One group with the options' lr and weight_decay.
  SGD(std::vector<Tensor> params, SGDOptions options = {});
  // Groups with their own lr and weight_decay; momentum, dampening and nesterov from the options unless
  // a group overrides them (ParamGroup::overrides: momentum, dampening, nesterov).
  SGD(std::vector<ParamGroup> groups, SGDOptions options);

  const SGDOptions& options() const { return options_; }
  // The options `group` runs with: options() with its overrides.
  SGDOptions options_for(const ParamGroup& group) const;
  std::vector<GroupOptionName> group_options() const override;
  bool elementwise() const override { return true; }
  // Every buffer some group keeps (momentum_buffer when any group has momentum > 0).
  std::vector<std::string> state_buffer_names() const override;
  DType state_dtype(const Tensor& param) const override;

 protected:
  void update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state) override;
  // The fused kernel's master-copy path: one pass reads and writes param, master and the buffer.
  bool update_with_master(const ParamGroup& group, const Tensor& param, const Tensor& master, const Tensor& grad,
                          ParamState& state) override;
  void check_group(const ParamGroup& group, size_t index) const override;
  std::vector<std::string> state_buffer_names_for(const Tensor& param) const override;

 private:
  void check(const SGDOptions& o, int64_t group) const;
  // One sgd_step kernel call; master is undefined or the fp32 master copy of a half parameter.
  void fused_step(const ParamGroup& group, const Tensor& param, const Tensor& master, const Tensor& grad,
                  ParamState& state);
  SGDOptions options_;
};

}  // namespace hg::optim
