// rms_norm, group_norm and batch_norm on the CUDA device against the CPU backend, in f32, f16 and bf16,
// at shapes that take every launch path: rms_norm's warp rows (cols <= 1024) and block rows, and a
// backward over several row blocks; batch_norm's block per channel (S > 1) and thread per channel
// (S == 1), training and eval; group_norm's block per group with several channels per group. Outputs,
// the three gradients and the updated running statistics; the tolerance allows one rounding of the
// dtype on top of the two backends' different orders of fp32 summation. On the emulated build the
// emulator runs the kernels; without a device each case is listed as skipped.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
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

double tolerance(DType t) { return t == f32 ? 1e-5 : t == f16 ? 2e-3 : 1.6e-2; }

// fn(x, w, b, running_mean, running_var) on both devices from the same values: y, dx, dw, db and the
// running statistics after the call.
using Fn = std::function<Tensor(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&)>;

void compare_devices(const char* name, const Shape& x_shape, int64_t params, const Fn& fn) {
  for (const DType t : {f32, f16, bf16}) {
    CAPTURE(std::string(name));
    CAPTURE(std::string(dtype_name(t)));
    const Tensor x0 = cast(randn(x_shape, f32) * 1.5 + 0.5, t), w0 = cast(randn({params}, f32), t),
                 b0 = cast(randn({params}, f32), t), g0 = cast(randn(x_shape, f32), t);
    const Tensor rm0 = randn({params}, f32), rv0 = rand({params}, f32) + 0.5;
    std::vector<Tensor> results[2];
    for (int d = 0; d < 2; ++d) {
      const Device device = d == 0 ? kCPU : Device::cuda(0);
      // Copies on both devices (.to(kCPU) of a CPU tensor would share it: the running statistics change).
      auto copy = [&](const Tensor& t) { return d == 0 ? t.clone() : t.to(device); };
      const Tensor x = copy(x0).requires_grad_(), w = copy(w0).requires_grad_(), b = copy(b0).requires_grad_();
      const Tensor rm = copy(rm0), rv = copy(rv0);
      const Tensor y = fn(x, w, b, rm, rv);
      y.backward(g0.to(device));
      results[d] = {y, x.grad(), w.grad(), b.grad(), rm, rv};
    }
    const char* parts[] = {"output", "dx", "dweight", "dbias", "running_mean", "running_var"};
    for (size_t i = 0; i < 6; ++i) {
      CAPTURE(std::string(parts[i]));
      if (!results[1][i].defined()) continue;
      CHECK(max_relative_error(results[1][i].to(kCPU), results[0][i]) <= tolerance(t) * (i == 2 || i == 3 ? 4 : 1));
    }
  }
}

}  // namespace

TEST_CASE("cuda rms_norm: warp rows, block rows and several backward row blocks match the CPU") {
  if (hg::testing::skip_without_cuda("cuda rms_norm")) return;
  for (const int64_t cols : {int64_t(96), int64_t(1500)}) {
    compare_devices("rms_norm", {40, cols}, cols,
                    [cols](const Tensor& x, const Tensor& w, const Tensor& b, const Tensor&, const Tensor&) {
                      return rms_norm(x, {cols}, w, 1e-5) + b;
                    });
  }
}

TEST_CASE("cuda group_norm: several channels per group and single-channel groups match the CPU") {
  if (hg::testing::skip_without_cuda("cuda group_norm")) return;
  compare_devices("group_norm 2 groups", {3, 8, 70}, 8,
                  [](const Tensor& x, const Tensor& w, const Tensor& b, const Tensor&, const Tensor&) {
                    return group_norm(x, 2, w, b);
                  });
  compare_devices("group_norm per channel", {2, 4, 3, 5}, 4,
                  [](const Tensor& x, const Tensor& w, const Tensor& b, const Tensor&, const Tensor&) {
                    return group_norm(x, 4, w, b);
                  });
}

TEST_CASE("cuda batch_norm: block and thread per channel, training and eval, running statistics match the CPU") {
  if (hg::testing::skip_without_cuda("cuda batch_norm")) return;
  for (const bool training : {true, false}) {
    CAPTURE(training);
    const Fn bn = [training](const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& rm, const Tensor& rv) {
      return batch_norm(x, rm, rv, w, b, training, 0.2);
    };
    compare_devices("batch_norm images", {6, 5, 9, 11}, 5, bn);
    compare_devices("batch_norm 2d", {70, 40}, 40, bn);
  }
}
