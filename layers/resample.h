#pragma once
// The resampling layers: Upsample and AdaptiveAvgPool2d -- PyTorch's arguments and printed form, over
// engine/ops.h interpolate and adaptive_avg_pool2d.
#include <optional>
#include <vector>

#include "kernels/options.h"
#include "layers/module.h"

namespace hg::nn {

// Either a size (one per spatial dimension) or one scale factor for every spatial dimension.
//   UpsampleOptions().scale_factor(2.0).mode(InterpolateMode::Bilinear)
struct UpsampleOptions {
  HG_OPTION(UpsampleOptions, std::vector<int64_t>, size, {});
  HG_OPTION(UpsampleOptions, std::optional<double>, scale_factor, std::nullopt);
  HG_OPTION(UpsampleOptions, InterpolateMode, mode, InterpolateMode::Nearest);
  HG_OPTION(UpsampleOptions, std::optional<bool>, align_corners, std::nullopt);
};

// interpolate(x, ...) on [N, C, L] or [N, C, H, W] (PyTorch's nn.Upsample).
class Upsample : public UnaryModule {
 public:
  explicit Upsample(const UpsampleOptions& options);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const UpsampleOptions options;
};

// The mean over output_size windows of each plane of x [..., H, W].
class AdaptiveAvgPool2d : public UnaryModule {
 public:
  explicit AdaptiveAvgPool2d(Size2d output_size);
  explicit AdaptiveAvgPool2d(int64_t output_size) : AdaptiveAvgPool2d(Size2d{output_size, output_size}) {}
  Tensor forward(const Tensor& x) override { return adaptive_avg_pool2d(x, output_size); }
  std::string extra_repr() const override;
  const Size2d output_size;
};

}  // namespace hg::nn
