#pragma once
// The normalisation layers beside LayerNorm (layers/basic.h): BatchNorm1d / BatchNorm2d with running
// statistics, GroupNorm and RMSNorm -- PyTorch's constructor arguments, initialisation and state-dict
// names, each a thin module over its fused op (engine/ops.h batch_norm, group_norm, rms_norm).
#include <optional>

#include "kernels/options.h"
#include "layers/module.h"

namespace hg::nn {

//   BatchNormOptions(64).momentum(std::nullopt)   (a cumulative average, PyTorch's momentum=None)
struct BatchNormOptions {
  explicit BatchNormOptions(int64_t num_features) : num_features_(num_features) {}
  HG_OPTION(BatchNormOptions, int64_t, num_features, 0);
  HG_OPTION(BatchNormOptions, double, eps, 1e-5);
  HG_OPTION(BatchNormOptions, std::optional<double>, momentum, 0.1);
  HG_OPTION(BatchNormOptions, bool, affine, true);
  HG_OPTION(BatchNormOptions, bool, track_running_stats, true);
};

// y = (x - mean) / sqrt(var + eps) * weight + bias per channel (dimension 1). In training, and always
// without track_running_stats, mean and var are the batch's (biased var); each training forward then
// updates running_mean / running_var (unbiased var) by `momentum` -- or by 1 / num_batches_tracked,
// the cumulative average, when momentum is unset -- and counts num_batches_tracked. In eval they are
// the running statistics. weight ones, bias zeros, running_mean zeros, running_var ones (fp32; f64 for
// an f64 model), num_batches_tracked an i64 scalar: PyTorch's state dict, key for key.
class BatchNorm : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;  // undefined when not kept
  const BatchNormOptions options;

 protected:
  // `dims`: the input ranks the layer takes ({2, 3} for 1d, {4} for 2d), for its error message.
  BatchNorm(const BatchNormOptions& options, std::vector<int64_t> dims);

 private:
  std::vector<int64_t> dims_;
};

// x [N, C] or [N, C, L].
class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(const BatchNormOptions& options) : BatchNorm(options, {2, 3}) {}
  explicit BatchNorm1d(int64_t num_features) : BatchNorm1d(BatchNormOptions(num_features)) {}
};

// x [N, C, H, W].
class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(const BatchNormOptions& options) : BatchNorm(options, {4}) {}
  explicit BatchNorm2d(int64_t num_features) : BatchNorm2d(BatchNormOptions(num_features)) {}
};

// x [N, C, *] normalised over each of num_groups groups of C / num_groups channels, then weight and bias
// per channel (ones and zeros; none without affine).
class GroupNorm : public UnaryModule {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight, bias;
  const int64_t num_groups, num_channels;
  const double eps;
};

// y = x / sqrt(mean(x^2 over normalized_shape) + eps) * weight (ones; none without elementwise_affine);
// eps unset is the input dtype's machine epsilon (PyTorch 2.4's nn.RMSNorm).
class RMSNorm : public UnaryModule {
 public:
  explicit RMSNorm(Shape normalized_shape, std::optional<double> eps = std::nullopt, bool elementwise_affine = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight;
  const Shape normalized_shape;
  const std::optional<double> eps;
};

}  // namespace hg::nn
