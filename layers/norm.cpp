#include "layers/norm.h"

#include <algorithm>

#include "engine/autograd.h"

namespace hg::nn {

namespace {
const char* batch_norm_name(const std::vector<int64_t>& dims) {
  return dims.front() == 4 ? "BatchNorm2d" : "BatchNorm1d";
}
}  // namespace

BatchNorm::BatchNorm(const BatchNormOptions& o, std::vector<int64_t> dims) : options(o), dims_(std::move(dims)) {
  const char* who = batch_norm_name(dims_);
  HG_CHECK(o.num_features() > 0, "[", who, "] expected num_features > 0, got ", o.num_features());
  HG_CHECK(o.eps() > 0, "[", who, "] expected eps > 0, got ", o.eps());
  HG_CHECK(!o.momentum() || (*o.momentum() >= 0.0 && *o.momentum() <= 1.0), "[", who, "] expected momentum in [0, 1] ",
           "or unset (the cumulative average), got ", o.momentum().value_or(0.0));
  const int64_t c = o.num_features();
  if (o.affine()) {
    weight = register_parameter("weight", ones({c}));
    bias = register_parameter("bias", zeros({c}));
  }
  if (o.track_running_stats()) {
    running_mean = register_buffer("running_mean", zeros({c}));
    running_var = register_buffer("running_var", ones({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", scalar_tensor(0.0, DType::i64));
  }
}

Tensor BatchNorm::forward(const Tensor& x) {
  ModuleScope scope(*this);
  const char* who = batch_norm_name(dims_);
  const bool rank_ok = std::find(dims_.begin(), dims_.end(), x.dim()) != dims_.end();
  HG_CHECK(rank_ok, "[", who, "] expected ", dims_.front() == 4 ? "[N, C, H, W]" : "[N, C] or [N, C, L]", ", got ",
           x.describe());
  HG_CHECK(x.size(1) == options.num_features(), "[", who, "] the input ", x.describe(), " has ", x.size(1),
           " channels (dimension 1) but num_features = ", options.num_features());
  if (!running_mean.defined()) return batch_norm(x, Tensor(), Tensor(), weight, bias, true, 0.0, options.eps());
  if (!is_training()) return batch_norm(x, running_mean, running_var, weight, bias, false, 0.0, options.eps());
  // The running statistics stay fp32 (f64 for f64) whatever the model's dtype: a model converted with
  // to(bf16) got half copies of them, taken back here (before any update, their values are exact).
  const DType stats = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  double momentum = 0.0;
  {
    NoGradGuard no_grad;
    for (const Tensor* t : {&running_mean, &running_var})
      if (t->dtype() != stats) assign_in_place(*t, t->to(stats));
    // num_batches_tracked += 1 on its device (i64 has no arithmetic op: through f64, exact below 2^53).
    num_batches_tracked.copy_((num_batches_tracked.to(DType::f64) + 1.0).to(DType::i64));
    // Unset momentum: the cumulative average, factor 1 / batches seen (one host read of the count).
    momentum = options.momentum() ? *options.momentum() : 1.0 / num_batches_tracked.item();
  }
  return batch_norm(x, running_mean, running_var, weight, bias, true, momentum, options.eps());
}

std::string BatchNorm::extra_repr() const {
  const BatchNormOptions& o = options;
  return detail::concat(
      o.num_features(), ", eps=", repr_float(o.eps()), ", momentum=", o.momentum() ? repr_float(*o.momentum()) : "None",
      ", affine=", repr_bool(o.affine()), ", track_running_stats=", repr_bool(o.track_running_stats()));
}

GroupNorm::GroupNorm(int64_t groups, int64_t channels, double eps_, bool affine)
    : num_groups(groups), num_channels(channels), eps(eps_) {
  HG_CHECK(groups > 0 && channels > 0 && channels % groups == 0, "[GroupNorm] expected num_channels (", channels,
           ") to be a positive multiple of num_groups (", groups, ")");
  HG_CHECK(eps_ > 0, "[GroupNorm] expected eps > 0, got ", eps_);
  if (affine) {
    weight = register_parameter("weight", ones({channels}));
    bias = register_parameter("bias", zeros({channels}));
  }
}

Tensor GroupNorm::forward(const Tensor& x) {
  ModuleScope scope(*this);
  HG_CHECK(x.dim() >= 2 && x.size(1) == num_channels, "[GroupNorm] expected [N, ", num_channels, ", *], got ",
           x.describe());
  return group_norm(x, num_groups, weight, bias, eps);
}

std::string GroupNorm::extra_repr() const {
  return detail::concat(num_groups, ", ", num_channels, ", eps=", repr_float(eps),
                        ", affine=", repr_bool(weight.defined()));
}

RMSNorm::RMSNorm(Shape shape, std::optional<double> eps_, bool elementwise_affine)
    : normalized_shape(std::move(shape)), eps(eps_) {
  HG_CHECK(!normalized_shape.empty() &&
               std::all_of(normalized_shape.begin(), normalized_shape.end(), [](int64_t d) { return d > 0; }),
           "[RMSNorm] expected a normalized_shape of positive sizes, got ", shape_str(normalized_shape));
  HG_CHECK(!eps || *eps > 0, "[RMSNorm] expected eps > 0 or unset (the dtype's machine epsilon), got ",
           eps.value_or(0));
  if (elementwise_affine) weight = register_parameter("weight", ones(normalized_shape));
}

Tensor RMSNorm::forward(const Tensor& x) {
  ModuleScope scope(*this);
  return rms_norm(x, normalized_shape, weight, eps);
}

std::string RMSNorm::extra_repr() const {
  return tuple_repr(normalized_shape) + ", eps=" + (eps ? repr_float(*eps) : "None") +
         ", elementwise_affine=" + repr_bool(weight.defined());
}

}  // namespace hg::nn
