#pragma once
// The geometry of a 2-D convolution and of a 2-D pooling window over NCHW tensors, shared by the
// CPU and CUDA backends (plain structs passed by value to kernels).
//
// Output size, for each spatial dimension (PyTorch's rule, floor division):
//   out = (in + 2 pad - dilation (kernel - 1) - 1) / stride + 1, or 0 when the window does not fit
// Output position i reads input rows i*stride - pad + p*dilation for p in [0, kernel); rows outside
// [0, in) are zero padding (convolution) or are skipped (pooling).
#include <cstdint>

#include "kernels/error.h"
#include "kernels/host_device.h"

namespace hg::kernels {

// The three convolution passes (each has its own workspace size and, on cuDNN, its own algorithm).
enum class ConvPass { Forward, BackwardData, BackwardFilter };
// Max: the window's maximum (NaN propagates), its position saved for backward. Avg: the window's sum
// divided by kernel_h * kernel_w (padding counts as zeros: PyTorch's count_include_pad = true).
enum class PoolMode { Max, Avg };

HG_HOST_DEVICE inline int64_t conv_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad,
                                               int64_t dilation) {
  const int64_t span = in + 2 * pad - dilation * (kernel - 1) - 1;  // < 0: the window does not fit
  return span < 0 ? 0 : span / stride + 1;
}

// x [batch, in_channels, height, width], weight [out_channels, in_channels / groups, kernel_h,
// kernel_w], y [batch, out_channels, out_h(), out_w()]. Output channel o belongs to group
// o / (out_channels / groups) and sees input channels of that group only.
struct Conv2dGeometry {
  int64_t batch = 0, in_channels = 0, height = 0, width = 0;
  int64_t out_channels = 0, kernel_h = 0, kernel_w = 0;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;

  HG_HOST_DEVICE int64_t out_h() const { return conv_output_size(height, kernel_h, stride_h, pad_h, dilation_h); }
  HG_HOST_DEVICE int64_t out_w() const { return conv_output_size(width, kernel_w, stride_w, pad_w, dilation_w); }
  HG_HOST_DEVICE int64_t group_in_channels() const { return in_channels / groups; }
  HG_HOST_DEVICE int64_t group_out_channels() const { return out_channels / groups; }
  // Rows of the im2col matrix of one group: (channel, p, q) triples.
  HG_HOST_DEVICE int64_t col_rows() const { return group_in_channels() * kernel_h * kernel_w; }
  HG_HOST_DEVICE int64_t out_pixels() const { return out_h() * out_w(); }
  HG_HOST_DEVICE int64_t weight_numel() const { return out_channels * col_rows(); }
};

// x [batch, channels, height, width] -> y [batch, channels, out_h(), out_w()] (no dilation).
struct Pool2dGeometry {
  int64_t batch = 0, channels = 0, height = 0, width = 0;
  int64_t kernel_h = 0, kernel_w = 0, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;

  HG_HOST_DEVICE int64_t out_h() const { return conv_output_size(height, kernel_h, stride_h, pad_h, 1); }
  HG_HOST_DEVICE int64_t out_w() const { return conv_output_size(width, kernel_w, stride_w, pad_w, 1); }
  HG_HOST_DEVICE int64_t planes() const { return batch * channels; }
};

// The output positions whose window covers input position `h` along one dimension:
// [first, last] with i*stride - pad <= h < i*stride - pad + kernel, clipped to [0, out).
// (The gather form of pooling's backward pass, and of col2im for dilation 1.)
HG_HOST_DEVICE inline void covering_windows(int64_t h, int64_t kernel, int64_t stride, int64_t pad, int64_t out,
                                            int64_t& first, int64_t& last) {
  const int64_t hp = h + pad;
  first = hp < kernel ? 0 : (hp - kernel) / stride + 1;
  last = hp / stride;
  if (last > out - 1) last = out - 1;
}

// The output index (along one dimension) whose window tap `p` reads input position h, or -1:
// i with i stride - pad + p dilation = h and 0 <= i < out. (col2im as a gather.)
HG_HOST_DEVICE inline int64_t conv_reading_output(int64_t h, int64_t p, int64_t stride, int64_t pad, int64_t dilation,
                                                  int64_t out) {
  const int64_t hp = h + pad - p * dilation;
  if (hp < 0 || hp % stride != 0) return -1;
  const int64_t i = hp / stride;
  return i < out ? i : -1;
}

// ---- host-side validation shared by the backends (throws hg::Error naming the op) ----

inline void check_conv2d_geometry(const Conv2dGeometry& g, const char* op) {
  HG_CHECK(g.batch >= 0 && g.in_channels > 0 && g.height > 0 && g.width > 0 && g.out_channels > 0 &&
               g.kernel_h > 0 && g.kernel_w > 0,
           "[", op, "] expected positive sizes, got batch = ", g.batch, ", in_channels = ", g.in_channels,
           ", height = ", g.height, ", width = ", g.width, ", out_channels = ", g.out_channels, ", kernel = ",
           g.kernel_h, "x", g.kernel_w);
  HG_CHECK(g.stride_h > 0 && g.stride_w > 0 && g.dilation_h > 0 && g.dilation_w > 0 && g.pad_h >= 0 && g.pad_w >= 0,
           "[", op, "] expected stride > 0, dilation > 0 and padding >= 0, got stride ", g.stride_h, "x", g.stride_w,
           ", dilation ", g.dilation_h, "x", g.dilation_w, ", padding ", g.pad_h, "x", g.pad_w);
  HG_CHECK(g.groups > 0 && g.in_channels % g.groups == 0 && g.out_channels % g.groups == 0, "[", op, "] groups = ",
           g.groups, " must divide in_channels = ", g.in_channels, " and out_channels = ", g.out_channels);
  HG_CHECK(g.out_h() > 0 && g.out_w() > 0, "[", op, "] the ", g.kernel_h, "x", g.kernel_w, " kernel (dilation ",
           g.dilation_h, "x", g.dilation_w, ") is larger than the padded ", g.height + 2 * g.pad_h, "x",
           g.width + 2 * g.pad_w, " input");
}

inline void check_pool2d_geometry(PoolMode mode, const Pool2dGeometry& g, const void* argmax, const char* op) {
  HG_CHECK(g.batch >= 0 && g.channels > 0 && g.height > 0 && g.width > 0 && g.kernel_h > 0 && g.kernel_w > 0 &&
               g.stride_h > 0 && g.stride_w > 0,
           "[", op, "] expected positive sizes and strides, got batch = ", g.batch, ", channels = ", g.channels,
           ", input ", g.height, "x", g.width, ", kernel ", g.kernel_h, "x", g.kernel_w, ", stride ", g.stride_h, "x",
           g.stride_w);
  HG_CHECK(g.pad_h >= 0 && g.pad_w >= 0 && 2 * g.pad_h <= g.kernel_h && 2 * g.pad_w <= g.kernel_w, "[", op,
           "] padding ", g.pad_h, "x", g.pad_w, " must be >= 0 and at most half the ", g.kernel_h, "x", g.kernel_w,
           " kernel");
  HG_CHECK(g.out_h() > 0 && g.out_w() > 0, "[", op, "] the ", g.kernel_h, "x", g.kernel_w,
           " window is larger than the padded ", g.height + 2 * g.pad_h, "x", g.width + 2 * g.pad_w, " input");
  HG_CHECK(mode == PoolMode::Avg || argmax != nullptr, "[", op, "] max pooling needs an argmax buffer");
}

}  // namespace hg::kernels
