#include "layers/conv.h"

#include <cmath>

#include "layers/init.h"

namespace hg::nn {

Conv2d::Conv2d(const Conv2dOptions& opts) : options(opts) {
  HG_CHECK(opts.in_channels > 0 && opts.out_channels > 0 && opts.kernel_size[0] > 0 && opts.kernel_size[1] > 0,
           "[Conv2d] expected positive sizes, got in_channels = ", opts.in_channels, ", out_channels = ",
           opts.out_channels, ", kernel_size = (", opts.kernel_size[0], ", ", opts.kernel_size[1], ")");
  HG_CHECK(opts.groups_ > 0 && opts.in_channels % opts.groups_ == 0 && opts.out_channels % opts.groups_ == 0,
           "[Conv2d] groups = ", opts.groups_, " must divide in_channels = ", opts.in_channels,
           " and out_channels = ", opts.out_channels);
  HG_CHECK(opts.stride_[0] > 0 && opts.stride_[1] > 0 && opts.dilation_[0] > 0 && opts.dilation_[1] > 0 &&
               opts.padding_[0] >= 0 && opts.padding_[1] >= 0,
           "[Conv2d] expected stride > 0, dilation > 0 and padding >= 0");
  const int64_t fan_in = opts.in_channels / opts.groups_ * opts.kernel_size[0] * opts.kernel_size[1];
  const double bound = 1.0 / std::sqrt(double(fan_in));
  weight = register_parameter(
      "weight", empty({opts.out_channels, opts.in_channels / opts.groups_, opts.kernel_size[0], opts.kernel_size[1]}));
  init::uniform_(weight, -bound, bound);
  if (opts.with_bias) {
    bias = register_parameter("bias", empty({opts.out_channels}));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Conv2d::forward(const Tensor& x) {
  ModuleScope scope(*this);
  HG_CHECK(x.dim() == 4 && x.size(1) == options.in_channels, "[Conv2d] input ", x.describe(),
           " does not match in_channels = ", options.in_channels, "; expected [N, ", options.in_channels, ", H, W]");
  return conv2d(x, weight, bias, options.stride_, options.padding_, options.dilation_, options.groups_);
}

namespace {
void check_window(const char* layer, Size2d kernel, Size2d stride, Size2d padding) {
  HG_CHECK(kernel[0] > 0 && kernel[1] > 0 && stride[0] >= 0 && stride[1] >= 0 && padding[0] >= 0 && padding[1] >= 0,
           "[", layer, "] expected kernel > 0, stride >= 0 (0: the kernel) and padding >= 0, got kernel (", kernel[0],
           ", ", kernel[1], "), stride (", stride[0], ", ", stride[1], "), padding (", padding[0], ", ", padding[1], ")");
}
}  // namespace

MaxPool2d::MaxPool2d(Size2d kernel_, Size2d stride_, Size2d padding_)
    : kernel(kernel_), stride(stride_), padding(padding_) {
  check_window("MaxPool2d", kernel, stride, padding);
}

AvgPool2d::AvgPool2d(Size2d kernel_, Size2d stride_, Size2d padding_)
    : kernel(kernel_), stride(stride_), padding(padding_) {
  check_window("AvgPool2d", kernel, stride, padding);
}

Tensor Flatten::forward(const Tensor& x) {
  HG_CHECK(x.dim() >= 1, "[Flatten] expected at least a batch dimension, got ", x.describe());
  return x.reshape({x.size(0), -1});
}

}  // namespace hg::nn
