#include "layers/resample.h"

namespace hg::nn {

Upsample::Upsample(const UpsampleOptions& o) : options(o) {
  HG_CHECK(o.size().empty() != !o.scale_factor().has_value(), "[Upsample] give either a size or a scale_factor, not ",
           o.size().empty() ? "neither" : "both");
  HG_CHECK(!o.scale_factor() || *o.scale_factor() > 0, "[Upsample] expected scale_factor > 0, got ",
           o.scale_factor().value_or(0));
  const bool linear = o.mode() == InterpolateMode::Linear || o.mode() == InterpolateMode::Bilinear;
  HG_CHECK(linear || !o.align_corners(), "[Upsample] align_corners applies to the linear modes only, not ",
           interpolate_mode_name(o.mode()));
}

Tensor Upsample::forward(const Tensor& x) {
  HG_CHECK(x.dim() == 3 || x.dim() == 4, "[Upsample] expected [N, C, L] or [N, C, H, W], got ", x.describe());
  InterpolateOptions io;
  io.mode = options.mode();
  io.align_corners = options.align_corners();
  if (options.scale_factor())
    io.scale_factor.assign(size_t(x.dim() - 2), *options.scale_factor());
  else
    io.size = options.size();
  return interpolate(x, io);
}

// PyTorch's Upsample.extra_repr: "scale_factor=2.0, mode=nearest" (str, not repr, of both).
std::string Upsample::extra_repr() const {
  const std::string what = options.scale_factor() ? "scale_factor=" + repr_float(*options.scale_factor())
                                                  : "size=" + tuple_repr(Shape(options.size()));
  return what + ", mode=" + interpolate_mode_name(options.mode());
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Size2d size) : output_size(size) {
  HG_CHECK(size[0] > 0 && size[1] > 0, "[AdaptiveAvgPool2d] expected a positive output_size, got (", size[0], ", ",
           size[1], ")");
}

std::string AdaptiveAvgPool2d::extra_repr() const {
  return "output_size=" + tuple_repr(Shape{output_size[0], output_size[1]});
}

}  // namespace hg::nn
