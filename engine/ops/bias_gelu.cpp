// bias_gelu: y = gelu(x + bias) over the last dimension, the MLP's activation after a c_fc GEMM run
// without its bias epilogue (math: kernels/cpu/bias_gelu.h). Saved for backward: x and bias (the
// pre-activation x + bias is never stored). Backward: dx = dy * gelu'(x + b), db = sum over rows of dx.
// CPU: the fused kernels of kernels/cpu/bias_gelu.cpp (one pass forward, one pass backward with the
// bias gradient). CUDA: composed from existing kernels (the broadcast add, unary_forward,
// unary_backward and a sum over rows); the fusion is aimed at the CPU step (docs/cpu_step.md).
#include <optional>

#include "engine/ops.h"
#include "engine/ops/op_support.h"
#include "engine/profiler/profiler.h"
#include "kernels/cpu/bias_gelu.h"

namespace hg {

namespace {

kernels::UnaryOp gelu_op(GeluApproximation a) {
  return a == GeluApproximation::Erf ? kernels::UnaryOp::GeluErf : kernels::UnaryOp::GeluTanh;
}

// x + bias on a CUDA tensor, without recording (the backward is bias_gelu's own).
Tensor add_bias_untracked(const Tensor& x, const Tensor& bias) {
  NoGradGuard no_grad;
  return add(x, bias).contiguous();
}

// A profiler range named after the kernel when op ranges are on (as HG_KERNEL does).
void open_op_range(std::optional<profiler::ScopedRange>& range, const char* kernel, const Device& device) {
  if (profiler::op_ranges_enabled()) range.emplace(kernel, profiler::Category::op, device);
}

}  // namespace

Tensor bias_gelu(const Tensor& input, const Tensor& bias, GeluApproximation approximation) {
  const char* name = "bias_gelu";
  ops::check_floating(input, name, "x");
  ops::check_backend(input, name);
  HG_CHECK(input.dim() >= 1, "[", name, "] expected x of rank >= 1, got ", input.describe());
  HG_CHECK(bias.defined(), "[", name, "] expected a bias [", input.size(-1), "], got an undefined tensor");
  ops::check_same({&input, &bias}, {"x", "bias"}, name);
  const int64_t cols = input.size(-1);
  HG_CHECK(bias.shape() == Shape{cols}, "[", name, "] bias ", bias.describe(), " does not match x ", input.describe(),
           "; expected bias [", cols, "]");
  const Tensor x = input.contiguous(), b = bias.contiguous();
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  const bool erf = approximation == GeluApproximation::Erf;
  Tensor y = ops::empty_as(x.shape(), x);
  if (x.device().is_cpu()) {
    std::optional<profiler::ScopedRange> range;
    open_op_range(range, "bias_gelu_forward", x.device());
    kernels::cpu::bias_gelu_forward(x.data_ptr(), b.data_ptr(), y.data_ptr(), rows, cols, erf, x.dtype());
  } else {
    const Tensor pre = add_bias_untracked(x, b);
    HG_KERNEL(x.device(), unary_forward, gelu_op(approximation), pre.data_ptr(), y.data_ptr(), pre.numel(), 0.0,
              x.dtype());
  }
  if (should_record({&input, &bias})) {
    const SavedTensor saved_x(x), saved_b(b);
    record_op(name, {input, bias}, y,
              [saved_x, saved_b, rows, cols, erf, approximation](const Tensor& g, const NeedsGrad& needs) {
                const Tensor sx = saved_x.unpack(), sb = saved_b.unpack();
                const Tensor dy = g.contiguous();
                Tensor dx = ops::empty_as(sx.shape(), sx);
                Tensor db;
                if (sx.device().is_cpu()) {
                  if (needs[1]) db = ops::empty_as({cols}, sx);
                  std::optional<profiler::ScopedRange> range;
                  open_op_range(range, "bias_gelu_backward", sx.device());
                  kernels::cpu::bias_gelu_backward(sx.data_ptr(), sb.data_ptr(), dy.data_ptr(), dx.data_ptr(),
                                                   db.defined() ? db.data_ptr() : nullptr, rows, cols, erf,
                                                   sx.dtype());
                } else {
                  const Tensor pre = add_bias_untracked(sx, sb);
                  HG_KERNEL(sx.device(), unary_backward, gelu_op(approximation), pre.data_ptr(), nullptr,
                            dy.data_ptr(), dx.data_ptr(), dx.numel(), 0.0, dx.dtype());
                  if (needs[1]) {
                    NoGradGuard no_grad;
                    db = sum(dx.reshape({rows, cols}), {0});
                  }
                }
                return std::vector<Tensor>{dx, db};
              });
  }
  return y;
}

Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias, GeluApproximation approximation) {
  if (x.device().is_cpu() && bias.defined()) return bias_gelu(linear(x, weight, Tensor()), bias, approximation);
  return gelu(linear(x, weight, bias), approximation);
}

}  // namespace hg
