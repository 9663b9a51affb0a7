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
#include "optim/unscale.h"

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
  return record_unscale(unscale_gradients(params, 1.0 / scale_));
}

bool LossScaler::unscale_(Optimizer& optimizer) {
  if (mode_ == LossScaleMode::None) return true;
  if (unscaled_) return !found_inf_;
  return record_unscale(optimizer.unscale_and_check(scale_));
}

bool LossScaler::record_unscale(bool found) {
  if (reducer_) found = reducer_(found);
  unscaled_ = true;
  found_inf_ = found;
  return !found;
}

bool LossScaler::step(Optimizer& optimizer) {
  if (mode_ == LossScaleMode::None) return optimizer.step();
  HG_CHECK(!stepped_, kOp, " step() called twice in one step; call update() after each step()");
  const bool finite = unscale_(optimizer);
  stepped_ = true;
  if (finite && optimizer.step()) return true;
  // Skipped: the parameters and the optimizer state stay as they are.
  optimizer.zero_grad(/*set_to_none=*/false);
  if (finite) found_inf_ = true;  // the optimizer found what the unscale pass could not see
  ++skipped_steps_;
  return false;
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
