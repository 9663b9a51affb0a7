#pragma once
// A Conv2dGeometry from its fourteen numbers in one call, shared by the convolution suites (test_conv on
// the CPU, test_cuda_conv on the device) to write their case tables.
#include <cstdint>

#include "kernels/conv_geometry.h"

namespace hg::testing {

// Input [n, c, h, w], oc output channels, a kh x kw kernel; stride, padding, dilation and groups.
inline kernels::Conv2dGeometry geometry(int64_t n, int64_t c, int64_t h, int64_t w, int64_t oc, int64_t kh, int64_t kw,
                                        int64_t sh = 1, int64_t sw = 1, int64_t ph = 0, int64_t pw = 0, int64_t dh = 1,
                                        int64_t dw = 1, int64_t groups = 1) {
  kernels::Conv2dGeometry g;
  g.batch = n, g.in_channels = c, g.height = h, g.width = w, g.out_channels = oc, g.kernel_h = kh, g.kernel_w = kw;
  g.stride_h = sh, g.stride_w = sw, g.pad_h = ph, g.pad_w = pw, g.dilation_h = dh, g.dilation_w = dw, g.groups = groups;
  return g;
}

}  // namespace hg::testing
