// Global gradient-norm clipping (math and the non-finite policy in optim/clip.h).
#include "optim/clip.h"

#include <cmath>

#include "engine/autograd.h"
#include "engine/kernel_dispatch.h"
#include "engine/ops.h"
#include "kernels/step_kernels.h"
#include "optim/unscale.h"

namespace hg::optim {

namespace {

// The sum of squares of every gradient, in parameter order (grad_norm's sum before the sqrt).
double sum_of_squared_gradients(const std::vector<Tensor>& params) {
  double sum = 0.0;
  for (size_t i = 0; i < params.size(); ++i) {
    HG_CHECK(params[i].defined(), "[clip_grad_norm] parameter ", i, " is an undefined tensor");
    const Tensor grad = params[i].grad();
    if (!grad.defined()) continue;
    HG_CHECK(is_floating(grad.dtype()), "[clip_grad_norm] gradient of parameter ", i, " is ", grad.describe(),
             "; expected a floating tensor");
    const Tensor dense = grad.contiguous();
    sum += HG_KERNEL(dense.device(), sum_of_squares, dense.data_ptr(), dense.numel(), dense.dtype());
  }
  return sum;
}

// Every gradient on the CPU and contiguous: the in-place pass writes the storage each gradient views,
// so a gradient that aliases a larger buffer (a data-parallel bucket) stays an alias of it.
bool scalable_in_place(const std::vector<Tensor>& params) {
  for (const Tensor& p : params) {
    const Tensor grad = p.grad();
    if (grad.defined() && (!grad.device().is_cpu() || !grad.is_contiguous())) return false;
  }
  return true;
}

}  // namespace

double grad_norm(const std::vector<Tensor>& params) { return std::sqrt(sum_of_squared_gradients(params)); }

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  HG_CHECK(std::isfinite(max_norm) && max_norm > 0.0, "[clip_grad_norm] invalid max_norm ", max_norm,
           ": expected a finite max_norm > 0");
  NoGradGuard no_grad;
  const double sum = sum_of_squared_gradients(params);
  const double norm = std::sqrt(sum);
  if (!std::isfinite(norm)) return norm;
  const double coef = max_norm / (norm + 1e-6);
  if (coef >= 1.0) return norm;
  if (scalable_in_place(params)) {
    // In place, one pass: the device form's kernel, which computes this coef from the same sum and
    // scales as grad * coef does (kernels/unscale_math.h), without a temporary and a copy back.
    const std::vector<kernels::TensorSpan> spans = gradient_spans(params, kCPU, "[clip_grad_norm]");
    kernels::GradientMultiplier m;
    m.kind = kernels::GradientMultiplier::clip;
    m.sum_sq = &sum;
    m.max_norm = max_norm;
    HG_KERNEL(kCPU, scale_gradients, spans.data(), int64_t(spans.size()), m, nullptr);
    return norm;
  }
  for (const Tensor& p : params) {
    Tensor grad = p.grad();
    if (grad.defined()) grad.copy_(grad * coef);
  }
  return norm;
}

void clip_grad_norm_on_device(const std::vector<Tensor>& params, double max_norm, const Tensor& sum_sq) {
  HG_CHECK(std::isfinite(max_norm) && max_norm > 0.0, "[clip_grad_norm] invalid max_norm ", max_norm,
           ": expected a finite max_norm > 0");
  HG_CHECK(sum_sq.defined() && sum_sq.numel() == 1 && sum_sq.dtype() == DType::f64 && sum_sq.is_contiguous(),
           "[clip_grad_norm] expected the sum of squares as an f64 scalar, got ",
           sum_sq.defined() ? sum_sq.describe() : std::string("an undefined tensor"));
  NoGradGuard no_grad;
  const Device device = sum_sq.device();
  const std::vector<kernels::TensorSpan> spans = gradient_spans(params, device, "[clip_grad_norm]");
  sum_sq.zero_();
  auto* sum = static_cast<double*>(sum_sq.data_ptr());
  for (const kernels::TensorSpan& s : spans) HG_KERNEL(device, sum_of_squares_into, s.data, s.n, s.dtype, sum);
  kernels::GradientMultiplier m;
  m.kind = kernels::GradientMultiplier::clip;
  m.sum_sq = sum;
  m.max_norm = max_norm;
  HG_KERNEL(device, scale_gradients, spans.data(), int64_t(spans.size()), m, nullptr);
}

}  // namespace hg::optim
