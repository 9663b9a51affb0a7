#pragma once
// The convolutions beside Conv2d (layers/conv.h): Conv1d and ConvTranspose2d -- PyTorch's arguments,
// initialisation and state-dict names, each over its op (engine/ops.h conv1d, conv_transpose2d).

#include "kernels/options.h"
#include "layers/module.h"

namespace hg::nn {

//   Conv1dOptions(3, 16, 5).stride(2).padding(2)
struct Conv1dOptions {
  Conv1dOptions(int64_t in, int64_t out, int64_t kernel) : in_channels_(in), out_channels_(out), kernel_size_(kernel) {}
  HG_OPTION(Conv1dOptions, int64_t, in_channels, 0);
  HG_OPTION(Conv1dOptions, int64_t, out_channels, 0);
  HG_OPTION(Conv1dOptions, int64_t, kernel_size, 1);
  HG_OPTION(Conv1dOptions, int64_t, stride, 1);
  HG_OPTION(Conv1dOptions, int64_t, padding, 0);
  HG_OPTION(Conv1dOptions, int64_t, dilation, 1);
  HG_OPTION(Conv1dOptions, int64_t, groups, 1);
  HG_OPTION(Conv1dOptions, bool, bias, true);
};

// x [N, C, L] -> [N, OC, OL]; weight [OC, C / groups, K], bias [OC], both U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
// fan_in = C / groups * K (PyTorch's).
class Conv1d : public UnaryModule {
 public:
  explicit Conv1d(const Conv1dOptions& options);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight, bias;
  const Conv1dOptions options;
};

//   ConvTranspose2dOptions(64, 32, 4).stride(2).padding(1)   (DCGAN's 2x upsampling)
struct ConvTranspose2dOptions {
  ConvTranspose2dOptions(int64_t in, int64_t out, Size2d kernel)
      : in_channels_(in), out_channels_(out), kernel_size_(kernel) {}
  ConvTranspose2dOptions(int64_t in, int64_t out, int64_t kernel)
      : ConvTranspose2dOptions(in, out, Size2d{kernel, kernel}) {}
  HG_OPTION(ConvTranspose2dOptions, int64_t, in_channels, 0);
  HG_OPTION(ConvTranspose2dOptions, int64_t, out_channels, 0);
  HG_OPTION(ConvTranspose2dOptions, Size2d, kernel_size, (Size2d{1, 1}));
  HG_OPTION(ConvTranspose2dOptions, Size2d, stride, (Size2d{1, 1}));
  HG_OPTION(ConvTranspose2dOptions, Size2d, padding, (Size2d{0, 0}));
  HG_OPTION(ConvTranspose2dOptions, Size2d, output_padding, (Size2d{0, 0}));
  HG_OPTION(ConvTranspose2dOptions, Size2d, dilation, (Size2d{1, 1}));
  HG_OPTION(ConvTranspose2dOptions, int64_t, groups, 1);
  HG_OPTION(ConvTranspose2dOptions, bool, bias, true);

 public:
  ConvTranspose2dOptions& stride(int64_t s) { return stride(Size2d{s, s}); }
  ConvTranspose2dOptions& padding(int64_t p) { return padding(Size2d{p, p}); }
  ConvTranspose2dOptions& output_padding(int64_t p) { return output_padding(Size2d{p, p}); }
  ConvTranspose2dOptions& dilation(int64_t d) { return dilation(Size2d{d, d}); }
};

// x [N, C, H, W] -> [N, OC, OH, OW], OH = (H - 1) stride - 2 padding + dilation (KH - 1) + output_padding + 1;
// weight [C, OC / groups, KH, KW] and bias [OC], U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with PyTorch's fan_in
// for this layout, OC / groups * KH * KW.
class ConvTranspose2d : public UnaryModule {
 public:
  explicit ConvTranspose2d(const ConvTranspose2dOptions& options);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight, bias;
  const ConvTranspose2dOptions options;
};

}  // namespace hg::nn
