// conv2d, conv_transpose2d (and their 1-D forms), max_pool2d and avg_pool2d over NCHW tensors: input
// checks, workspace, dispatch, backward.
//
// conv2d: y = W * x + b (cross-correlation, kernels/kernels.h has the index math). Backward:
//   dx = conv2d_backward_data(dy, W),  dW = conv2d_backward_filter(x, dy),  db = sum_{n, i, j} dy.
// The kernels' workspace (im2col patch matrices on the CPU and the emulator, cuDNN's per-algorithm
// workspace on a GPU) is a tensor from the device's caching allocator, sized by
// conv2d_workspace_bytes for the pass, and released when the call returns.
// Pooling: forward saves nothing for Avg and the argmax (i32 plane offsets) for Max; backward
// gathers dy through the windows (deterministic on both backends).
#include <algorithm>
#include <climits>

#include "engine/ops.h"
#include "engine/ops/op_support.h"

namespace hg {

namespace {

// A scratch buffer of at least `bytes` on `device`, from its caching allocator.
Tensor workspace(size_t bytes, const Device& device) {
  return empty({int64_t((bytes + sizeof(int64_t) - 1) / sizeof(int64_t))}, i64, device);
}

void* pointer_of(const Tensor& t) { return t.numel() > 0 ? t.data_ptr() : nullptr; }

Tensor conv_pass(kernels::ConvPass pass, const kernels::Conv2dGeometry& g, const Tensor& a, const Tensor& b,
                 const Tensor& bias, const Shape& out_shape) {
  Tensor out = ops::empty_as(out_shape, a);
  if (g.batch == 0) {
    if (pass == kernels::ConvPass::BackwardFilter) out = zeros(out_shape, a.dtype(), a.device());
    return out;
  }
  const Device device = a.device();
  const size_t bytes = HG_KERNEL(device, conv2d_workspace_bytes, g, pass, a.dtype());
  const Tensor ws = workspace(bytes, device);
  switch (pass) {
    case kernels::ConvPass::Forward:
      HG_KERNEL(device, conv2d_forward, g, a.data_ptr(), b.data_ptr(), bias.defined() ? bias.data_ptr() : nullptr,
                out.data_ptr(), pointer_of(ws), bytes, a.dtype());
      break;
    case kernels::ConvPass::BackwardData:  // a = dy, b = weight
      HG_KERNEL(device, conv2d_backward_data, g, a.data_ptr(), b.data_ptr(), out.data_ptr(), pointer_of(ws), bytes,
                a.dtype());
      break;
    case kernels::ConvPass::BackwardFilter:  // a = x, b = dy
      HG_KERNEL(device, conv2d_backward_filter, g, a.data_ptr(), b.data_ptr(), out.data_ptr(), pointer_of(ws), bytes,
                a.dtype());
      break;
  }
  return out;
}

void check_pair(const Size2d& v, int64_t minimum, const char* op, const char* what) {
  HG_CHECK(v[0] >= minimum && v[1] >= minimum, "[", op, "] ", what, " (", v[0], ", ", v[1], ") must be >= ", minimum);
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Size2d stride, Size2d padding,
              Size2d dilation, int64_t groups) {
  const char* name = "conv2d";
  ops::check_floating(x, name, "x");
  ops::check_floating(weight, name, "weight");
  ops::check_same({&x, &weight}, {"x", "weight"}, name);
  ops::check_backend(x, name);
  HG_CHECK(x.dim() == 4, "[", name, "] x ", x.describe(), " must be 4-D [N, C, H, W]");
  HG_CHECK(weight.dim() == 4, "[", name, "] weight ", weight.describe(), " must be 4-D [out_channels, in_channels / groups, KH, KW]");
  check_pair(stride, 1, name, "stride");
  check_pair(padding, 0, name, "padding");
  check_pair(dilation, 1, name, "dilation");
  HG_CHECK(groups >= 1 && weight.size(0) % groups == 0, "[", name, "] groups = ", groups,
           " must be >= 1 and divide the weight's ", weight.size(0), " output channels");
  HG_CHECK(x.size(1) == weight.size(1) * groups, "[", name, "] x ", x.describe(), " has ", x.size(1),
           " channels but weight ", weight.describe(), " with groups = ", groups, " expects ", weight.size(1) * groups);
  if (bias.defined()) {
    ops::check_same({&x, &bias}, {"x", "bias"}, name);
    HG_CHECK(bias.shape() == Shape{weight.size(0)}, "[", name, "] bias ", bias.describe(), " does not match weight ",
             weight.describe(), "; expected bias [", weight.size(0), "]");
  }
  kernels::Conv2dGeometry g;
  g.batch = x.size(0), g.in_channels = x.size(1), g.height = x.size(2), g.width = x.size(3);
  g.out_channels = weight.size(0), g.kernel_h = weight.size(2), g.kernel_w = weight.size(3);
  g.stride_h = stride[0], g.stride_w = stride[1], g.pad_h = padding[0], g.pad_w = padding[1];
  g.dilation_h = dilation[0], g.dilation_w = dilation[1], g.groups = groups;
  kernels::check_conv2d_geometry(g, name);

  const Tensor xc = x.contiguous(), wc = weight.contiguous(), bc = bias.defined() ? bias.contiguous() : Tensor();
  Tensor y = conv_pass(kernels::ConvPass::Forward, g, xc, wc, bc, {g.batch, g.out_channels, g.out_h(), g.out_w()});
  if (should_record({&x, &weight, &bias})) {
    const Tensor sx = xc.detach(), sw = wc.detach();
    record_op(name, {x, weight, bias}, y, [sx, sw, g](const Tensor& grad, const NeedsGrad& needs) {
      const Tensor dy = grad.contiguous();
      Tensor dx, dw, db;
      if (needs[0]) dx = conv_pass(kernels::ConvPass::BackwardData, g, dy, sw, Tensor(), sx.shape());
      if (needs[1]) dw = conv_pass(kernels::ConvPass::BackwardFilter, g, sx, dy, Tensor(), sw.shape());
      if (needs[2]) db = sum(dy, {0, 2, 3});
      return std::vector<Tensor>{dx, dw, db};
    });
  }
  return y;
}

// conv_transpose2d(x, W) is conv2d's input gradient: with g the conv2d that maps the [N, OC, OH, OW]
// output back to x's [N, C, H, W] (in_channels = OC, out_channels = C, the same weight layout),
//   y = backward_data_g(x, W),  dx = forward_g(dy, W),  dW = backward_filter_g(dy, x),  db = sum dy.
// output_padding < stride keeps g's output size at exactly H (floor division absorbs it). PyTorch allows
// output_padding up to max(stride, dilation) - 1; an output_padding >= stride (so below the dilation)
// would make g map y to more rows than x has, so that case runs the transposed convolution unpadded,
// over every row it reaches, and takes rows [padding, padding + out) of that: a crop, then zeros where
// the output reaches past the last row any input touches.
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Size2d stride, Size2d padding,
                        Size2d output_padding, int64_t groups, Size2d dilation) {
  const char* name = "conv_transpose2d";
  ops::check_floating(x, name, "x");
  ops::check_floating(weight, name, "weight");
  ops::check_same({&x, &weight}, {"x", "weight"}, name);
  ops::check_backend(x, name);
  HG_CHECK(x.dim() == 4, "[", name, "] x ", x.describe(), " must be 4-D [N, C, H, W]");
  HG_CHECK(weight.dim() == 4, "[", name, "] weight ", weight.describe(),
           " must be 4-D [in_channels, out_channels / groups, KH, KW]");
  check_pair(stride, 1, name, "stride");
  check_pair(padding, 0, name, "padding");
  check_pair(dilation, 1, name, "dilation");
  check_pair(output_padding, 0, name, "output_padding");
  for (int d = 0; d < 2; ++d)
    HG_CHECK(output_padding[d] < std::max(stride[d], dilation[d]), "[", name, "] output_padding (", output_padding[0],
             ", ", output_padding[1], ") must be below the stride (", stride[0], ", ", stride[1], ") or the dilation (",
             dilation[0], ", ", dilation[1], ") on each axis");
  HG_CHECK(groups >= 1 && weight.size(0) % groups == 0, "[", name, "] groups = ", groups,
           " must be >= 1 and divide the weight's ", weight.size(0), " input channels");
  HG_CHECK(x.size(1) == weight.size(0), "[", name, "] x ", x.describe(), " has ", x.size(1), " channels but weight ",
           weight.describe(), " expects ", weight.size(0));
  const int64_t out_channels = weight.size(1) * groups;
  if (bias.defined()) {
    ops::check_same({&x, &bias}, {"x", "bias"}, name);
    HG_CHECK(bias.shape() == Shape{out_channels}, "[", name, "] bias ", bias.describe(), " does not match weight ",
             weight.describe(), " with groups = ", groups, "; expected bias [", out_channels, "]");
  }
  const int64_t out_h = (x.size(2) - 1) * stride[0] - 2 * padding[0] + dilation[0] * (weight.size(2) - 1) +
                        output_padding[0] + 1;
  const int64_t out_w = (x.size(3) - 1) * stride[1] - 2 * padding[1] + dilation[1] * (weight.size(3) - 1) +
                        output_padding[1] + 1;
  HG_CHECK(x.size(2) > 0 && x.size(3) > 0 && out_h > 0 && out_w > 0, "[", name, "] x ", x.describe(),
           " with weight ", weight.describe(), ", stride (", stride[0], ", ", stride[1], "), padding (", padding[0],
           ", ", padding[1], ") gives an empty ", out_h, "x", out_w, " output; expected a positive size");
  if (output_padding[0] >= stride[0] || output_padding[1] >= stride[1]) {
    const Tensor reached = conv_transpose2d(x, weight, Tensor(), stride, {0, 0}, {0, 0}, groups, dilation);
    const Tensor y = pad(reached, {-padding[1], out_w - (reached.size(3) - padding[1]), -padding[0],
                                   out_h - (reached.size(2) - padding[0])});
    return bias.defined() ? add(y, bias.view({1, out_channels, 1, 1})) : y;
  }
  kernels::Conv2dGeometry g;  // the conv2d from the output y back to x
  g.batch = x.size(0), g.in_channels = out_channels, g.height = out_h, g.width = out_w;
  g.out_channels = x.size(1), g.kernel_h = weight.size(2), g.kernel_w = weight.size(3);
  g.stride_h = stride[0], g.stride_w = stride[1], g.pad_h = padding[0], g.pad_w = padding[1];
  g.dilation_h = dilation[0], g.dilation_w = dilation[1], g.groups = groups;
  kernels::check_conv2d_geometry(g, name);
  HG_CHECK(g.out_h() == x.size(2) && g.out_w() == x.size(3), "[", name, "] internal: the ", out_h, "x", out_w,
           " output maps back to ", g.out_h(), "x", g.out_w(), ", not x's ", x.size(2), "x", x.size(3));

  const Tensor xc = x.contiguous(), wc = weight.contiguous();
  Tensor y = conv_pass(kernels::ConvPass::BackwardData, g, xc, wc, Tensor(), {g.batch, out_channels, out_h, out_w});
  if (should_record({&x, &weight})) {
    const Tensor sx = xc.detach(), sw = wc.detach();
    record_op(name, {x, weight}, y, [sx, sw, g](const Tensor& grad, const NeedsGrad& needs) {
      const Tensor dy = grad.contiguous();
      Tensor dx, dw;
      if (needs[0]) dx = conv_pass(kernels::ConvPass::Forward, g, dy, sw, Tensor(), sx.shape());
      if (needs[1]) dw = conv_pass(kernels::ConvPass::BackwardFilter, g, dy, sx, Tensor(), sw.shape());
      return std::vector<Tensor>{dx, dw};
    });
  }
  return bias.defined() ? add(y, bias.view({1, out_channels, 1, 1})) : y;
}

Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding,
              int64_t dilation, int64_t groups) {
  HG_CHECK(x.defined() && x.dim() == 3, "[conv1d] x ", x.describe(), " must be 3-D [N, C, L]");
  HG_CHECK(weight.defined() && weight.dim() == 3, "[conv1d] weight ", weight.describe(),
           " must be 3-D [out_channels, in_channels / groups, K]");
  return conv2d(x.unsqueeze(2), weight.unsqueeze(2), bias, {1, stride}, {0, padding}, {1, dilation}, groups).squeeze(2);
}

Tensor conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding,
                        int64_t output_padding, int64_t groups, int64_t dilation) {
  HG_CHECK(x.defined() && x.dim() == 3, "[conv_transpose1d] x ", x.describe(), " must be 3-D [N, C, L]");
  HG_CHECK(weight.defined() && weight.dim() == 3, "[conv_transpose1d] weight ", weight.describe(),
           " must be 3-D [in_channels, out_channels / groups, K]");
  return conv_transpose2d(x.unsqueeze(2), weight.unsqueeze(2), bias, {1, stride}, {0, padding}, {0, output_padding},
                          groups, {1, dilation})
      .squeeze(2);
}

namespace {

Tensor pool2d(kernels::PoolMode mode, const char* name, const Tensor& x, Size2d kernel, Size2d stride, Size2d padding) {
  ops::check_floating(x, name, "x");
  ops::check_backend(x, name);
  HG_CHECK(x.dim() == 4, "[", name, "] x ", x.describe(), " must be 4-D [N, C, H, W]");
  HG_CHECK(x.size(2) * x.size(3) <= INT32_MAX, "[", name, "] planes of ", x.size(2), "x", x.size(3),
           " elements are too large for the i32 argmax; expected H * W <= ", INT32_MAX);
  check_pair(kernel, 1, name, "kernel");
  check_pair(stride, 0, name, "stride");
  check_pair(padding, 0, name, "padding");
  kernels::Pool2dGeometry g;
  g.batch = x.size(0), g.channels = x.size(1), g.height = x.size(2), g.width = x.size(3);
  g.kernel_h = kernel[0], g.kernel_w = kernel[1];
  g.stride_h = stride[0] == 0 ? kernel[0] : stride[0], g.stride_w = stride[1] == 0 ? kernel[1] : stride[1];
  g.pad_h = padding[0], g.pad_w = padding[1];
  // (Avg: the argmax buffer is allocated below for Max, so only the geometry is checked here.)
  kernels::check_pool2d_geometry(kernels::PoolMode::Avg, g, nullptr, name);

  const Tensor xc = x.contiguous();
  const Shape out_shape{g.batch, g.channels, g.out_h(), g.out_w()};
  Tensor y = ops::empty_as(out_shape, x);
  const Tensor argmax = mode == kernels::PoolMode::Max ? empty(out_shape, i32, x.device()) : Tensor();
  int32_t* argmax_ptr = argmax.defined() ? static_cast<int32_t*>(argmax.data_ptr()) : nullptr;
  if (y.numel() > 0) HG_KERNEL(x.device(), pool2d_forward, mode, g, xc.data_ptr(), y.data_ptr(), argmax_ptr, x.dtype());
  if (should_record({&x})) {
    const Shape x_shape = x.shape();
    record_op(name, {x}, y, [mode, g, argmax, x_shape](const Tensor& grad, const NeedsGrad&) {
      const Tensor dy = grad.contiguous();
      Tensor dx = ops::empty_as(x_shape, dy);
      const int32_t* index = argmax.defined() ? static_cast<const int32_t*>(argmax.data_ptr()) : nullptr;
      if (dx.numel() > 0) HG_KERNEL(dy.device(), pool2d_backward, mode, g, dy.data_ptr(), index, dx.data_ptr(), dy.dtype());
      return std::vector<Tensor>{dx};
    });
  }
  return y;
}

}  // namespace

Tensor max_pool2d(const Tensor& x, Size2d kernel, Size2d stride, Size2d padding) {
  return pool2d(kernels::PoolMode::Max, "max_pool2d", x, kernel, stride, padding);
}

Tensor avg_pool2d(const Tensor& x, Size2d kernel, Size2d stride, Size2d padding) {
  return pool2d(kernels::PoolMode::Avg, "avg_pool2d", x, kernel, stride, padding);
}

}  // namespace hg
