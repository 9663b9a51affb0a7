// The resample kernel (interpolate, adaptive pooling) and conv_transpose2d on the CUDA device against
// the CPU backend, in f32, f16 and bf16: outputs and input gradients at shapes large enough for several
// blocks of the grid-stride loop, upsampling and downsampling (whose backward tables are the long
// ones). On the emulated build the emulator runs the kernels; without a device each case is skipped.
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/ops.h"
#include "support/skip_cuda.h"
#include "support/tensor_compare.h"

using namespace hg;
using hg::testing::max_relative_error;

namespace {

using Fn = std::function<Tensor(const Tensor& x, const Tensor& w)>;

void compare_devices(const char* name, const Shape& x_shape, const Shape& w_shape, const Fn& fn) {
  for (const DType t : {f32, f16, bf16}) {
    CAPTURE(std::string(name));
    CAPTURE(std::string(dtype_name(t)));
    const Tensor x0 = cast(randn(x_shape, f32), t), w0 = cast(randn(w_shape, f32), t);
    std::vector<Tensor> results[2];
    Tensor g0;
    for (int d = 0; d < 2; ++d) {
      const Device device = d == 0 ? kCPU : Device::cuda(0);
      const Tensor x = x0.to(device).detach().requires_grad_(), w = w0.to(device).detach().requires_grad_();
      const Tensor y = fn(x, w);
      if (d == 0) g0 = cast(randn(y.shape(), f32), t);
      y.backward(g0.to(device));
      results[d] = {y, x.grad(), w.grad()};
    }
    const double tol = t == f32 ? 1e-5 : t == f16 ? 2e-3 : 1.6e-2;
    const char* parts[] = {"output", "dx", "dweight"};
    for (size_t i = 0; i < 3; ++i) {
      CAPTURE(std::string(parts[i]));
      CHECK(max_relative_error(results[1][i].to(kCPU), results[0][i]) <= tol * (i == 2 ? 4 : 1));
    }
  }
}

}  // namespace

TEST_CASE("interpolate, the adaptive pools and conv_transpose2d on CUDA match the CPU") {
  if (hg::testing::skip_without_cuda("resample and conv_transpose2d on CUDA")) return;
  compare_devices("bilinear up", {2, 3, 11, 17}, {1}, [](const Tensor& x, const Tensor& w) {
    return interpolate(x, InterpolateOptions().set_size({24, 31}).set_mode(InterpolateMode::Bilinear)) * w;
  });
  compare_devices("bilinear align_corners down", {2, 2, 30, 21}, {1}, [](const Tensor& x, const Tensor& w) {
    return interpolate(
               x, InterpolateOptions().set_size({7, 9}).set_mode(InterpolateMode::Bilinear).set_align_corners(true)) *
           w;
  });
  compare_devices("nearest 2x", {4, 3, 16, 16}, {1}, [](const Tensor& x, const Tensor& w) {
    return interpolate(x, InterpolateOptions().set_scale_factor({2, 2})) * w;
  });
  compare_devices("linear 1d", {3, 5, 40}, {1}, [](const Tensor& x, const Tensor& w) {
    return interpolate(x, InterpolateOptions().set_size({57}).set_mode(InterpolateMode::Linear)) * w;
  });
  compare_devices("adaptive_avg_pool2d", {2, 8, 19, 23}, {1}, [](const Tensor& x, const Tensor& w) {
    return adaptive_avg_pool2d(x, {5, 7}) * w;
  });
  compare_devices("adaptive_avg_pool2d 1x1", {4, 32, 7, 7}, {1}, [](const Tensor& x, const Tensor& w) {
    return adaptive_avg_pool2d(x, {1, 1}) * w;
  });
  compare_devices("conv_transpose2d", {2, 8, 7, 6}, {8, 4, 4, 4}, [](const Tensor& x, const Tensor& w) {
    return conv_transpose2d(x, w, Tensor(), {2, 2}, {1, 1});
  });
  compare_devices("conv_transpose2d groups output_padding", {1, 6, 5, 5}, {6, 2, 3, 3},
                  [](const Tensor& x, const Tensor& w) {
                    return conv_transpose2d(x, w, Tensor(), {2, 2}, {1, 1}, {1, 1}, 3);
                  });
}
