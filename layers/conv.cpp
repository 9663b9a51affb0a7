#include "layers/conv.h"

#include <algorithm>
#include <cmath>

#include "layers/init.h"

namespace hg::nn {

Conv2d::Conv2d(const Conv2dOptions& opts) : options(opts) {
  const int64_t in = opts.in_channels(), out = opts.out_channels(), groups = opts.groups();
  const Size2d kernel = opts.kernel_size(), stride = opts.stride(), padding = opts.padding(),
               dilation = opts.dilation();
  HG_CHECK(in > 0 && out > 0 && kernel[0] > 0 && kernel[1] > 0,
           "[Conv2d] expected positive sizes, got in_channels = ", in, ", out_channels = ", out, ", kernel_size = (",
           kernel[0], ", ", kernel[1], ")");
  HG_CHECK(groups > 0 && in % groups == 0 && out % groups == 0, "[Conv2d] groups = ", groups,
           " must divide in_channels = ", in, " and out_channels = ", out);
  HG_CHECK(stride[0] > 0 && stride[1] > 0 && dilation[0] > 0 && dilation[1] > 0 && padding[0] >= 0 && padding[1] >= 0,
           "[Conv2d] expected stride > 0, dilation > 0 and padding >= 0");
  const int64_t fan_in = in / groups * kernel[0] * kernel[1];
  const double bound = 1.0 / std::sqrt(double(fan_in));
  weight = register_parameter("weight", empty({out, in / groups, kernel[0], kernel[1]}));
  init::uniform_(weight, -bound, bound);
  if (opts.bias()) {
    bias = register_parameter("bias", empty({out}));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Conv2d::forward(const Tensor& x) {
  ModuleScope scope(*this);
  HG_CHECK(x.dim() == 4 && x.size(1) == options.in_channels(), "[Conv2d] input ", x.describe(),
           " does not match in_channels = ", options.in_channels(), "; expected [N, ", options.in_channels(),
           ", H, W]");
  return conv2d(x, weight, bias, options.stride(), options.padding(), options.dilation(), options.groups());
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

namespace {
// "(3, 3)" as PyTorch prints a pair; "2" for a pool's square window (PyTorch prints what it was given).
std::string window_repr(Size2d v) { return v[0] == v[1] ? std::to_string(v[0]) : tuple_repr(Shape{v[0], v[1]}); }
std::string pool_repr(Size2d kernel, Size2d stride, Size2d padding) {
  const Size2d step = stride[0] == 0 && stride[1] == 0 ? kernel : stride;
  return "kernel_size=" + window_repr(kernel) + ", stride=" + window_repr(step) + ", padding=" + window_repr(padding);
}
}  // namespace

std::string conv_extra_repr(const ConvRepr& c) {
  auto all = [](const Shape& s, int64_t v) {
    return std::all_of(s.begin(), s.end(), [v](int64_t x) { return x == v; });
  };
  std::string out = detail::concat(c.in_channels, ", ", c.out_channels, ", kernel_size=", tuple_repr(c.kernel_size),
                                   ", stride=", tuple_repr(c.stride));
  if (!all(c.padding, 0)) out += ", padding=" + tuple_repr(c.padding);
  if (!all(c.dilation, 1)) out += ", dilation=" + tuple_repr(c.dilation);
  if (!all(c.output_padding, 0)) out += ", output_padding=" + tuple_repr(c.output_padding);
  if (c.groups != 1) out += ", groups=" + std::to_string(c.groups);
  if (!c.bias) out += ", bias=False";
  return out;
}

std::string Conv2d::extra_repr() const {
  const Conv2dOptions& o = options;
  auto shape = [](Size2d v) { return Shape{v[0], v[1]}; };
  return conv_extra_repr({o.in_channels(), o.out_channels(), o.groups(), shape(o.kernel_size()), shape(o.stride()),
                          shape(o.padding()), shape(o.dilation()), {}, o.bias()});
}

std::string MaxPool2d::extra_repr() const {
  return pool_repr(kernel, stride, padding) + ", dilation=1, ceil_mode=False";
}

std::string AvgPool2d::extra_repr() const { return pool_repr(kernel, stride, padding); }

Tensor Flatten::forward(const Tensor& x) {
  HG_CHECK(x.dim() >= 1, "[Flatten] expected at least a batch dimension, got ", x.describe());
  return x.reshape({x.size(0), -1});
}

Unflatten::Unflatten(Shape sizes_) : sizes(std::move(sizes_)) {
  HG_CHECK(!sizes.empty(), "[Unflatten] expected at least one size");
  for (int64_t s : sizes) HG_CHECK(s > 0, "[Unflatten] sizes must be positive, got ", shape_str(sizes));
}

Tensor Unflatten::forward(const Tensor& x) {
  int64_t count = 1;
  for (int64_t s : sizes) count *= s;
  HG_CHECK(x.dim() == 2 && x.size(1) == count, "[Unflatten] expected [N, ", count, "] to unflatten into ",
           shape_str(sizes), ", got ", x.describe());
  Shape shape{x.size(0)};
  shape.insert(shape.end(), sizes.begin(), sizes.end());
  return x.reshape(shape);
}

std::string Unflatten::extra_repr() const {
  std::string text = "dim=1, unflattened_size=(";
  for (size_t i = 0; i < sizes.size(); ++i) text += (i ? ", " : "") + std::to_string(sizes[i]);
  return text + (sizes.size() == 1 ? ",)" : ")");
}

}  // namespace hg::nn
