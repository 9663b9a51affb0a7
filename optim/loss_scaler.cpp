// LossScaler: the fused unscale/check pass per device, the skip-on-overflow step, the dynamic
// scale policy and its checkpoint state (the policy and the per-step order are in optim/loss_scaler.h).
#include "optim/loss_scaler.h"

#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "engine/autograd.h"
#include "engine/kernel_dispatch.h"
#include "engine/ops.h"

namespace hg::optim {
namespace {

constexpr const char* kOp = "[LossScaler]";

void check_options(const DynamicLossScaleOptions& o) {
  const double max_float = double(std::numeric_limits<float>::max());
  HG_CHECK(std::isfinite(o.min_scale()) && o.min_scale() > 0.0, kOp, " invalid min_scale ", o.min_scale(),
           ": expected a finite value > 0");
  HG_CHECK(std::isfinite(o.max_scale()) && o.max_scale() >= o.min_scale() && o.max_scale() <= max_float, kOp,
           " invalid max_scale ", o.max_scale(), ": expected min_scale (", o.min_scale(),
           ") <= max_scale <= the largest float (", max_float, ")");
  HG_CHECK(std::isfinite(o.init_scale()) && o.init_scale() >= o.min_scale() && o.init_scale() <= o.max_scale(), kOp,
           " invalid init_scale ", o.init_scale(), ": expected min_scale (", o.min_scale(),
           ") <= init_scale <= max_scale (", o.max_scale(), ")");
  HG_CHECK(std::isfinite(o.growth_factor()) && o.growth_factor() > 1.0, kOp, " invalid growth_factor ",
           o.growth_factor(), ": expected a finite value > 1");
  HG_CHECK(std::isfinite(o.backoff_factor()) && o.backoff_factor() > 0.0 && o.backoff_factor() < 1.0, kOp,
           " invalid backoff_factor ", o.backoff_factor(), ": expected 0 < backoff_factor < 1");
  HG_CHECK(o.growth_interval() >= 1, kOp, " invalid growth_interval ", o.growth_interval(), ": expected >= 1 steps");
  HG_CHECK(o.hysteresis() >= 1, kOp, " invalid hysteresis ", o.hysteresis(),
           ": expected >= 1 (1 backs off at the first overflow)");
}

}  // namespace

LossScaler::LossScaler() = default;

LossScaler::LossScaler(LossScaleMode mode, double scale, DynamicLossScaleOptions options)
    : mode_(mode), scale_(scale), options_(options), hysteresis_left_(options.hysteresis()) {}

LossScaler LossScaler::none() { return LossScaler(); }

LossScaler LossScaler::fixed(double scale) {
  HG_CHECK(std::isfinite(scale) && scale > 0.0 && scale <= double(std::numeric_limits<float>::max()), kOp,
           " invalid static loss scale ", scale, ": expected a finite value > 0 that a float holds");
  return LossScaler(LossScaleMode::Static, scale, DynamicLossScaleOptions().hysteresis(1));
}

LossScaler LossScaler::dynamic(DynamicLossScaleOptions options) {
  check_options(options);
  return LossScaler(LossScaleMode::Dynamic, options.init_scale(), options);
}

const char* LossScaler::mode_name() const {
  switch (mode_) {
    case LossScaleMode::None:
      return "none";
    case LossScaleMode::Static:
      return "static";
    case LossScaleMode::Dynamic:
      return "dynamic";
  }
  return "?";
}

Tensor LossScaler::scale(const Tensor& loss) const {
  HG_CHECK(loss.defined(), kOp, " scale: the loss is an undefined tensor");
  if (mode_ == LossScaleMode::None) return loss;
  return loss * scale_;
}

bool LossScaler::unscale_(const std::vector<Tensor>& params) {
  if (mode_ == LossScaleMode::None) return true;
  if (unscaled_) return !found_inf_;
  NoGradGuard no_grad;
  // Every gradient, grouped by device (in the order of first appearance): one fused pass each.
  std::vector<std::pair<Device, std::vector<kernels::TensorSpan>>> groups;
  for (size_t i = 0; i < params.size(); ++i) {
    HG_CHECK(params[i].defined(), kOp, " unscale_: parameter ", i, " is an undefined tensor");
    Tensor grad = params[i].grad();
    if (!grad.defined()) continue;
    HG_CHECK(is_floating(grad.dtype()), kOp, " unscale_: the gradient of parameter ", i, " is ", grad.describe(),
             "; expected a floating tensor");
    if (!grad.is_contiguous()) {  // unscaled in place: give the parameter a contiguous gradient
      grad = grad.contiguous();
      params[i].set_grad(grad);
    }
    size_t g = 0;
    while (g < groups.size() && !(groups[g].first == grad.device())) ++g;
    if (g == groups.size()) groups.emplace_back(grad.device(), std::vector<kernels::TensorSpan>{});
    groups[g].second.push_back({grad.data_ptr(), grad.numel(), grad.dtype()});
  }
  const double inv_scale = 1.0 / scale_;
  bool found = false;
  for (const auto& [device, spans] : groups) {
    found = HG_KERNEL(device, unscale_and_check, spans.data(), int64_t(spans.size()), inv_scale) || found;
  }
  if (reducer_) found = reducer_(found);
  unscaled_ = true;
  found_inf_ = found;
  return !found;
}

bool LossScaler::step(Optimizer& optimizer, const std::vector<Tensor>& params) {
  if (mode_ == LossScaleMode::None) {
    optimizer.step();
    return true;
  }
  HG_CHECK(!stepped_, kOp, " step() called twice in one step; call update() after each step()");
  const bool finite = unscale_(params);
  stepped_ = true;
  if (finite) {
    optimizer.step();
    return true;
  }
  NoGradGuard no_grad;
  for (const Tensor& p : params) {
    if (Tensor grad = p.grad(); grad.defined()) grad.zero_();
  }
  ++skipped_steps_;
  return false;
}

bool LossScaler::step(const std::function<bool()>& scaled_step) {
  if (mode_ == LossScaleMode::None) return scaled_step();
  HG_CHECK(!stepped_, kOp, " step() called twice in one step; call update() after each step()");
  HG_CHECK(!unscaled_, kOp, " step(scaled_step) after unscale_() in the same step: the optimizer unscales by its "
           "grad_scale itself, so the gradients would be divided by the scale twice");
  const bool finite = scaled_step();
  unscaled_ = stepped_ = true;
  found_inf_ = !finite;
  if (!finite) ++skipped_steps_;
  return finite;
}

void LossScaler::update() {
  if (mode_ == LossScaleMode::None) return;
  HG_CHECK(unscaled_, kOp,
           " update() without unscale_() or step() in this step; the order is scale(loss)."
           "backward(), unscale_(), clip, step(), update()");
  const bool overflow = found_inf_;
  unscaled_ = found_inf_ = stepped_ = false;
  if (mode_ == LossScaleMode::Static) return;
  const DynamicLossScaleOptions& o = options_;
  if (overflow) {
    good_steps_ = 0;
    if (hysteresis_left_ > 1) {
      --hysteresis_left_;
    } else {
      scale_ = std::max(scale_ * o.backoff_factor(), o.min_scale());
    }
    return;
  }
  if (o.consecutive_hysteresis()) hysteresis_left_ = o.hysteresis();
  if (++good_steps_ >= o.growth_interval()) {
    scale_ = std::min(scale_ * o.growth_factor(), o.max_scale());
    good_steps_ = 0;
    hysteresis_left_ = o.hysteresis();
  }
}

std::vector<std::pair<std::string, Tensor>> LossScaler::state_tensors() const {
  return {{"mode", scalar_tensor(double(int(mode_)), DType::i64)},
          {"scale", scalar_tensor(scale_, DType::f64)},
          {"good_steps", scalar_tensor(double(good_steps_), DType::i64)},
          {"hysteresis_left", scalar_tensor(double(hysteresis_left_), DType::i64)},
          {"skipped_steps", scalar_tensor(double(skipped_steps_), DType::i64)}};
}

void LossScaler::load_state_tensors(const std::vector<std::pair<std::string, Tensor>>& entries) {
  const std::string op = std::string(kOp) + " load_state_tensors:";
  const std::set<std::string> known = {"mode", "scale", "good_steps", "hysteresis_left", "skipped_steps"};
  std::map<std::string, double> values;
  for (const auto& [key, value] : entries) {
    HG_CHECK(known.count(key), op, " unknown entry '", key,
             "'; a loss scaler keeps mode, scale, good_steps, hysteresis_left, skipped_steps");
    HG_CHECK(value.defined() && value.numel() == 1, op, " entry '", key, "' is ",
             value.defined() ? value.describe() : std::string("undefined"), "; expected a one-element tensor");
    HG_CHECK(values.emplace(key, value.item()).second, op, " entry '", key, "' appears more than once");
  }
  for (const std::string& k : known) HG_CHECK(values.count(k), op, " entry '", k, "' is missing");
  for (const char* k : {"mode", "good_steps", "hysteresis_left", "skipped_steps"}) {
    const double v = values[k];
    HG_CHECK(std::isfinite(v) && v >= 0 && v == std::floor(v), op, " entry '", k, "' holds ", v,
             "; expected an integer >= 0");
  }
  const int64_t mode = int64_t(values["mode"]);
  HG_CHECK(mode == int64_t(int(mode_)), op, " the state is of a '",
           mode == 0   ? "none"
           : mode == 1 ? "static"
           : mode == 2 ? "dynamic"
                       : "unknown",
           "' scaler (mode ", mode, ") but this one is '", mode_name(), "'");
  const double scale = values["scale"];
  if (mode_ == LossScaleMode::Dynamic) {
    HG_CHECK(std::isfinite(scale) && scale >= options_.min_scale() && scale <= options_.max_scale(), op, " scale ",
             scale, " is outside [min_scale, max_scale] = [", options_.min_scale(), ", ", options_.max_scale(), "]");
    const int64_t left = int64_t(values["hysteresis_left"]);
    HG_CHECK(left >= 1 && left <= options_.hysteresis(), op, " hysteresis_left ", left,
             " is outside [1, hysteresis = ", options_.hysteresis(), "]");
    HG_CHECK(int64_t(values["good_steps"]) < options_.growth_interval(), op, " good_steps ", values["good_steps"],
             " is not below growth_interval ", options_.growth_interval());
  } else {
    HG_CHECK(scale == scale_, op, " the state's scale ", scale, " differs from this ", mode_name(), " scaler's scale ",
             scale_);
  }
  scale_ = scale;
  good_steps_ = int64_t(values["good_steps"]);
  hysteresis_left_ = int64_t(values["hysteresis_left"]);
  skipped_steps_ = int64_t(values["skipped_steps"]);
  unscaled_ = found_inf_ = stepped_ = false;
}

}  // namespace hg::optim
