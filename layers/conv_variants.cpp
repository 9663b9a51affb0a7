#include "layers/conv_variants.h"

#include <algorithm>
#include <cmath>

#include "layers/conv.h"
#include "layers/init.h"

namespace hg::nn {

namespace {
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for the weight and, when kept, the bias: PyTorch's
// kaiming_uniform_(a = sqrt(5)) and its bias rule, which come to the same bound.
void init_like_pytorch(const Tensor& weight, const Tensor& bias, int64_t fan_in) {
  const double bound = 1.0 / std::sqrt(double(fan_in));
  init::uniform_(weight, -bound, bound);
  if (bias.defined()) init::uniform_(bias, -bound, bound);
}

Shape pair(Size2d v) { return Shape{v[0], v[1]}; }
std::string pair_tuple(Size2d v) { return tuple_repr(pair(v)); }
}  // namespace

Conv1d::Conv1d(const Conv1dOptions& o) : options(o) {
  HG_CHECK(o.in_channels() > 0 && o.out_channels() > 0 && o.kernel_size() > 0, "[Conv1d] expected positive sizes, got ",
           "in_channels = ", o.in_channels(), ", out_channels = ", o.out_channels(),
           ", kernel_size = ", o.kernel_size());
  HG_CHECK(o.groups() > 0 && o.in_channels() % o.groups() == 0 && o.out_channels() % o.groups() == 0,
           "[Conv1d] groups = ", o.groups(), " must divide in_channels = ", o.in_channels(),
           " and out_channels = ", o.out_channels());
  HG_CHECK(o.stride() > 0 && o.dilation() > 0 && o.padding() >= 0,
           "[Conv1d] expected stride > 0, dilation > 0 and padding >= 0");
  weight = register_parameter("weight", empty({o.out_channels(), o.in_channels() / o.groups(), o.kernel_size()}));
  if (o.bias()) bias = register_parameter("bias", empty({o.out_channels()}));
  init_like_pytorch(weight, bias, o.in_channels() / o.groups() * o.kernel_size());
}

Tensor Conv1d::forward(const Tensor& x) {
  ModuleScope scope(*this);
  HG_CHECK(x.dim() == 3 && x.size(1) == options.in_channels(), "[Conv1d] expected [N, ", options.in_channels(),
           ", L], got ", x.describe());
  return conv1d(x, weight, bias, options.stride(), options.padding(), options.dilation(), options.groups());
}

std::string Conv1d::extra_repr() const {
  const Conv1dOptions& o = options;
  return conv_extra_repr({o.in_channels(),
                          o.out_channels(),
                          o.groups(),
                          {o.kernel_size()},
                          {o.stride()},
                          {o.padding()},
                          {o.dilation()},
                          {},
                          o.bias()});
}

ConvTranspose2d::ConvTranspose2d(const ConvTranspose2dOptions& o) : options(o) {
  const int64_t in = o.in_channels(), out = o.out_channels(), groups = o.groups();
  const Size2d k = o.kernel_size(), s = o.stride(), p = o.padding(), op = o.output_padding(), d = o.dilation();
  HG_CHECK(in > 0 && out > 0 && k[0] > 0 && k[1] > 0,
           "[ConvTranspose2d] expected positive sizes, got in_channels = ", in, ", out_channels = ", out,
           ", kernel_size = ", pair_tuple(k));
  HG_CHECK(groups > 0 && in % groups == 0 && out % groups == 0, "[ConvTranspose2d] groups = ", groups,
           " must divide in_channels = ", in, " and out_channels = ", out);
  HG_CHECK(s[0] > 0 && s[1] > 0 && d[0] > 0 && d[1] > 0 && p[0] >= 0 && p[1] >= 0,
           "[ConvTranspose2d] expected stride > 0, dilation > 0 and padding >= 0");
  HG_CHECK(op[0] >= 0 && op[1] >= 0 && op[0] < std::max(s[0], d[0]) && op[1] < std::max(s[1], d[1]),
           "[ConvTranspose2d] output_padding ", pair_tuple(op), " must be below the stride ", pair_tuple(s),
           " or the dilation ", pair_tuple(d), " on each axis");
  weight = register_parameter("weight", empty({in, out / groups, k[0], k[1]}));
  if (o.bias()) bias = register_parameter("bias", empty({out}));
  init_like_pytorch(weight, bias, out / groups * k[0] * k[1]);
}

Tensor ConvTranspose2d::forward(const Tensor& x) {
  ModuleScope scope(*this);
  const ConvTranspose2dOptions& o = options;
  HG_CHECK(x.dim() == 4 && x.size(1) == o.in_channels(), "[ConvTranspose2d] expected [N, ", o.in_channels(),
           ", H, W], got ", x.describe());
  return conv_transpose2d(x, weight, bias, o.stride(), o.padding(), o.output_padding(), o.groups(), o.dilation());
}

std::string ConvTranspose2d::extra_repr() const {
  const ConvTranspose2dOptions& o = options;
  return conv_extra_repr({o.in_channels(), o.out_channels(), o.groups(), pair(o.kernel_size()), pair(o.stride()),
                          pair(o.padding()), pair(o.dilation()), pair(o.output_padding()), o.bias()});
}

}  // namespace hg::nn
