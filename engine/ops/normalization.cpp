// rms_norm, group_norm and batch_norm: the front-ends of their fused kernels (the math, forward and
// backward: kernels/kernels.h). Statistics are in fp32 (f64 for f64) and saved for the backward,
// which is one kernel call (two launches on CUDA where a parameter gradient is summed over rows).
#include <limits>
#include <string>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "engine/ops/op_support.h"

namespace hg {
namespace {

// weight / bias: undefined, or `shape` with x's dtype and device.
void check_param(const char* op, const Tensor& x, const Tensor& p, const char* name, const Shape& shape) {
  if (!p.defined()) return;
  ops::check_same({&x, &p}, {"input", name}, op);
  HG_CHECK(p.shape() == shape, "[", op, "] ", name, " is ", p.describe(), " but input is ", x.describe(), "; expected ",
           name, " of shape ", shape_str(shape));
}

const void* ptr_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }
void* out_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

double machine_epsilon(DType dtype) {
  switch (dtype) {
    case f64:
      return std::numeric_limits<double>::epsilon();
    case f16:
      return 0.0009765625;  // 2^-10
    case bf16:
      return 0.0078125;  // 2^-7
    default:
      return double(std::numeric_limits<float>::epsilon());
  }
}

// x [N, C, *] as (N, C, S).
struct Nchw {
  int64_t batch, channels, spatial;
};

Nchw channels_view(const char* op, const Tensor& x) {
  HG_CHECK(x.dim() >= 2, "[", op, "] input is ", x.describe(), "; expected [N, C] or [N, C, *]");
  int64_t spatial = 1;
  for (int d = 2; d < x.dim(); ++d) spatial *= x.size(d);
  return {x.size(0), x.size(1), spatial};
}

}  // namespace

Tensor rms_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight,
                std::optional<double> eps_in) {
  const char* op = "rms_norm";
  ops::check_floating(input, op, "input");
  ops::check_backend(input, op);
  const int k = int(normalized_shape.size());
  bool fits = k >= 1 && input.dim() >= k;
  for (int d = 0; fits && d < k; ++d) fits = input.size(input.dim() - k + d) == normalized_shape[size_t(d)];
  HG_CHECK(fits, "[rms_norm] input ", input.describe(), " does not end in normalized_shape ",
           shape_str(normalized_shape), "; expected its last ", k, " dimension(s) to equal it (and it not empty)");
  check_param(op, input, weight, "weight", normalized_shape);
  const double eps = eps_in.value_or(machine_epsilon(input.dtype()));
  HG_CHECK(eps >= 0, "[rms_norm] eps = ", eps, "; expected eps >= 0");
  int64_t cols = 1;
  for (int64_t s : normalized_shape) cols *= s;
  const int64_t rows = cols == 0 ? 0 : input.numel() / cols;
  const Tensor x = input.contiguous(), w = weight.defined() ? weight.contiguous() : Tensor();
  Tensor y = ops::empty_as(x.shape(), x);
  Tensor rstd = empty({rows}, accumulate_dtype(x.dtype()), x.device());
  HG_KERNEL(x.device(), rms_norm_forward, x.data_ptr(), ptr_or_null(w), y.data_ptr(), rstd.data_ptr(), rows, cols, eps,
            x.dtype());
  if (should_record({&input, &weight})) {
    const SavedTensor saved_x(x), saved_w(w), saved_rstd(rstd);
    record_op(op, {input, weight}, y,
              [saved_x, saved_w, saved_rstd, rows, cols, w_shape = weight.defined() ? weight.shape() : Shape{}](
                  const Tensor& g, const NeedsGrad& needs) {
                const Tensor xs = saved_x.unpack(), ws = saved_w.unpack(), dy = g.contiguous();
                Tensor dx = ops::empty_as(xs.shape(), xs);
                Tensor dw = ws.defined() && needs[1] ? ops::empty_as(w_shape, ws) : Tensor();
                HG_KERNEL(dy.device(), rms_norm_backward, xs.data_ptr(), ptr_or_null(ws),
                          saved_rstd.unpack().data_ptr(), dy.data_ptr(), dx.data_ptr(), out_or_null(dw), rows, cols,
                          dy.dtype());
                return std::vector<Tensor>{needs[0] ? dx : Tensor(), dw};
              });
  }
  return y;
}

Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  const char* op = "group_norm";
  ops::check_floating(input, op, "input");
  ops::check_backend(input, op);
  const Nchw s = channels_view(op, input);
  HG_CHECK(num_groups > 0 && s.channels % num_groups == 0, "[group_norm] input ", input.describe(), " has ", s.channels,
           " channels; expected num_groups (", num_groups, ") > 0 to divide them");
  HG_CHECK(eps > 0, "[group_norm] eps = ", eps, "; expected eps > 0");
  check_param(op, input, weight, "weight", {s.channels});
  check_param(op, input, bias, "bias", {s.channels});
  const Tensor x = input.contiguous(), w = weight.defined() ? weight.contiguous() : Tensor(),
               b = bias.defined() ? bias.contiguous() : Tensor();
  Tensor y = ops::empty_as(x.shape(), x);
  if (x.numel() == 0) return y;
  const DType stat = accumulate_dtype(x.dtype());
  Tensor mean = empty({s.batch, num_groups}, stat, x.device()), rstd = empty({s.batch, num_groups}, stat, x.device());
  HG_KERNEL(x.device(), group_norm_forward, x.data_ptr(), ptr_or_null(w), ptr_or_null(b), y.data_ptr(), mean.data_ptr(),
            rstd.data_ptr(), s.batch, s.channels, s.spatial, num_groups, eps, x.dtype());
  if (should_record({&input, &weight, &bias})) {
    const SavedTensor saved_x(x), saved_w(w), saved_mean(mean), saved_rstd(rstd);
    record_op(op, {input, weight, bias}, y,
              [saved_x, saved_w, saved_mean, saved_rstd, s, num_groups](const Tensor& g, const NeedsGrad& needs) {
                const Tensor xs = saved_x.unpack(), ws = saved_w.unpack(), dy = g.contiguous();
                Tensor dx = ops::empty_as(xs.shape(), xs);
                Tensor dw = needs[1] ? ops::empty_as({s.channels}, xs) : Tensor();
                Tensor db = needs[2] ? ops::empty_as({s.channels}, xs) : Tensor();
                HG_KERNEL(dy.device(), group_norm_backward, xs.data_ptr(), ptr_or_null(ws),
                          saved_mean.unpack().data_ptr(), saved_rstd.unpack().data_ptr(), dy.data_ptr(), dx.data_ptr(),
                          out_or_null(dw), out_or_null(db), s.batch, s.channels, s.spatial, num_groups, dy.dtype());
                return std::vector<Tensor>{needs[0] ? dx : Tensor(), dw, db};
              });
  }
  return y;
}

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  const char* op = "batch_norm";
  ops::check_floating(input, op, "input");
  ops::check_backend(input, op);
  const Nchw s = channels_view(op, input);
  HG_CHECK(eps > 0, "[batch_norm] eps = ", eps, "; expected eps > 0");
  HG_CHECK(momentum >= 0 && momentum <= 1, "[batch_norm] momentum = ", momentum, "; expected 0 <= momentum <= 1");
  check_param(op, input, weight, "weight", {s.channels});
  check_param(op, input, bias, "bias", {s.channels});
  const DType stat = accumulate_dtype(input.dtype());
  for (const auto& [t, name] : {std::pair{&running_mean, "running_mean"}, std::pair{&running_var, "running_var"}}) {
    if (!t->defined()) {
      HG_CHECK(training, "[batch_norm] ", name, " is undefined in eval mode; expected the running statistics ",
               "(or training = true, which normalises by the batch's)");
      continue;
    }
    HG_CHECK(
        t->shape() == Shape{s.channels} && t->dtype() == stat && t->device() == input.device() && t->is_contiguous(),
        "[batch_norm] ", name, " is ", t->describe(), " for input ", input.describe(), "; expected a contiguous [",
        s.channels, "] ", dtype_name(stat), " tensor on the input's device (updated in place when training)");
    HG_CHECK(!t->requires_grad(), "[batch_norm] ", name, " requires grad; expected a buffer (it is updated in place)");
  }
  HG_CHECK(!training || s.batch * s.spatial >= 2, "[batch_norm] input ", input.describe(), " has ", s.batch * s.spatial,
           " value per channel; expected more than 1 in training");
  const Tensor x = input.contiguous(), w = weight.defined() ? weight.contiguous() : Tensor(),
               b = bias.defined() ? bias.contiguous() : Tensor();
  Tensor y = ops::empty_as(x.shape(), x);
  Tensor save_mean = empty({s.channels}, stat, x.device()), save_rstd = empty({s.channels}, stat, x.device());
  HG_KERNEL(x.device(), batch_norm_forward, x.data_ptr(), ptr_or_null(w), ptr_or_null(b),
            running_mean.defined() ? running_mean.data_ptr() : nullptr,
            running_var.defined() ? running_var.data_ptr() : nullptr, y.data_ptr(), save_mean.data_ptr(),
            save_rstd.data_ptr(), s.batch, s.channels, s.spatial, training, momentum, eps, x.dtype());
  if (should_record({&input, &weight, &bias})) {
    const SavedTensor saved_x(x), saved_w(w), saved_mean(save_mean), saved_rstd(save_rstd);
    record_op(op, {input, weight, bias}, y,
              [saved_x, saved_w, saved_mean, saved_rstd, s, training](const Tensor& g, const NeedsGrad& needs) {
                const Tensor xs = saved_x.unpack(), ws = saved_w.unpack(), dy = g.contiguous();
                Tensor dx = needs[0] ? ops::empty_as(xs.shape(), xs) : Tensor();
                Tensor dw = needs[1] ? ops::empty_as({s.channels}, xs) : Tensor();
                Tensor db = needs[2] ? ops::empty_as({s.channels}, xs) : Tensor();
                HG_KERNEL(dy.device(), batch_norm_backward, xs.data_ptr(), ptr_or_null(ws),
                          saved_mean.unpack().data_ptr(), saved_rstd.unpack().data_ptr(), dy.data_ptr(),
                          out_or_null(dx), out_or_null(dw), out_or_null(db), s.batch, s.channels, s.spatial, training,
                          dy.dtype());
                return std::vector<Tensor>{dx, dw, db};
              });
  }
  return y;
}

}  // namespace hg
