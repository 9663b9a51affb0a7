#pragma once
// The layers of a convolutional network over NCHW tensors: Conv2d, MaxPool2d, AvgPool2d, Flatten.
#include "kernels/options.h"
#include "layers/module.h"

namespace hg::nn {

// The channels and the kernel are required (constructor arguments); the rest are options, validated
// by Conv2d. Windows are (height, width); stride, padding and dilation also take one number for both.
//   Conv2dOptions(3, 16, 3).stride(2).padding(1).bias(false)
struct Conv2dOptions {
  Conv2dOptions(int64_t in, int64_t out, Size2d kernel) : in_channels_(in), out_channels_(out), kernel_size_(kernel) {}
  Conv2dOptions(int64_t in, int64_t out, int64_t kernel) : Conv2dOptions(in, out, Size2d{kernel, kernel}) {}
  HG_OPTION(Conv2dOptions, int64_t, in_channels, 0);
  HG_OPTION(Conv2dOptions, int64_t, out_channels, 0);
  HG_OPTION(Conv2dOptions, Size2d, kernel_size, (Size2d{1, 1}));
  HG_OPTION(Conv2dOptions, Size2d, stride, (Size2d{1, 1}));
  HG_OPTION(Conv2dOptions, Size2d, padding, (Size2d{0, 0}));
  HG_OPTION(Conv2dOptions, Size2d, dilation, (Size2d{1, 1}));
  HG_OPTION(Conv2dOptions, int64_t, groups, 1);
  HG_OPTION(Conv2dOptions, bool, bias, true);

 public:
  Conv2dOptions& stride(int64_t s) { return stride(Size2d{s, s}); }
  Conv2dOptions& padding(int64_t p) { return padding(Size2d{p, p}); }
  Conv2dOptions& dilation(int64_t d) { return dilation(Size2d{d, d}); }
};

// PyTorch's _ConvNd.extra_repr over tuples of any length: "in, out, kernel_size=(..), stride=(..)", then
// padding, dilation, output_padding, groups and bias only where they are not the default.
struct ConvRepr {
  int64_t in_channels = 0, out_channels = 0, groups = 1;
  Shape kernel_size, stride, padding, dilation, output_padding;  // output_padding empty: none
  bool bias = true;
};
std::string conv_extra_repr(const ConvRepr& conv);

// y = conv2d(x, weight, bias) with weight [out, in / groups, KH, KW] and bias [out]; initialised like
// PyTorch: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in / groups * KH * KW, for both.
class Conv2d : public UnaryModule {
 public:
  explicit Conv2d(const Conv2dOptions& options);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight, bias;  // bias undefined without bias
  const Conv2dOptions options;
};

// stride {0, 0} (the default) means stride = kernel.
class MaxPool2d : public UnaryModule {
 public:
  explicit MaxPool2d(Size2d kernel, Size2d stride = {0, 0}, Size2d padding = {0, 0});
  explicit MaxPool2d(int64_t kernel) : MaxPool2d(Size2d{kernel, kernel}) {}
  Tensor forward(const Tensor& x) override { return max_pool2d(x, kernel, stride, padding); }
  std::string extra_repr() const override;
  const Size2d kernel, stride, padding;
};

class AvgPool2d : public UnaryModule {
 public:
  explicit AvgPool2d(Size2d kernel, Size2d stride = {0, 0}, Size2d padding = {0, 0});
  explicit AvgPool2d(int64_t kernel) : AvgPool2d(Size2d{kernel, kernel}) {}
  Tensor forward(const Tensor& x) override { return avg_pool2d(x, kernel, stride, padding); }
  std::string extra_repr() const override;
  const Size2d kernel, stride, padding;
};

// [N, d1, d2, ...] -> [N, d1 d2 ...] (a view when x is contiguous).
class Flatten : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override { return "start_dim=1, end_dim=-1"; }
};

// [N, d1 d2 ...] -> [N, d1, d2, ...]: dimension 1 unflattened into `sizes` (a view when x is contiguous);
// Flatten's inverse, as a generator's Linear -> feature maps.
class Unflatten : public UnaryModule {
 public:
  explicit Unflatten(Shape sizes);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  const Shape sizes;
};

}  // namespace hg::nn
