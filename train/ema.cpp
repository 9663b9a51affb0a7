// The exponential moving average of the weights (formula in train/ema.h).
#include "train/ema.h"

#include <algorithm>
#include <cmath>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "kernels/error.h"
#include "train/checkpoint.h"

namespace hg::train {
namespace {
constexpr const char* kWho = "[ExponentialMovingAverage]";
}  // namespace

ExponentialMovingAverage::ExponentialMovingAverage(std::vector<Tensor> params, EmaOptions options)
    : params_(std::move(params)), options_(options) {
  HG_CHECK(std::isfinite(options_.decay()) && options_.decay() >= 0 && options_.decay() <= 1, kWho, " decay ",
           options_.decay(), "; expected 0 <= decay <= 1");
  HG_CHECK(!params_.empty(), kWho, " no parameters to average");
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    HG_CHECK(params_[i].defined() && is_floating(params_[i].dtype()), kWho, " parameter ", i, " is ",
             params_[i].defined() ? params_[i].describe() : std::string("undefined"), "; expected a floating tensor");
    shadow_.push_back(params_[i].detach().clone());
  }
}

double ExponentialMovingAverage::decay_at(int64_t n) const {
  if (!options_.warmup()) return options_.decay();
  return std::min(options_.decay(), (1.0 + double(n)) / (10.0 + double(n)));
}

void ExponentialMovingAverage::update() {
  HG_CHECK(live_.empty(), kWho, " update() while the averaged weights are swapped in; expected swap_out() first");
  NoGradGuard no_grad;
  if (updates_ == 0) {
    for (size_t i = 0; i < params_.size(); ++i) shadow_[i].copy_(params_[i]);
  } else {
    const double weight = 1.0 - decay_at(updates_);
    for (size_t i = 0; i < params_.size(); ++i) {
      const Tensor p = params_[i].detach();
      shadow_[i].copy_(shadow_[i] + (p - shadow_[i]) * weight);
    }
  }
  updates_ += 1;
}

void ExponentialMovingAverage::swap_in() {
  HG_CHECK(live_.empty(), kWho, " swap_in() twice; expected swap_out() in between");
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    live_.push_back(params_[i].detach().clone());
    params_[i].copy_(shadow_[i]);
  }
}

void ExponentialMovingAverage::swap_out() {
  HG_CHECK(!live_.empty(), kWho, " swap_out() without swap_in(); expected the averaged weights swapped in");
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) params_[i].copy_(live_[i]);
  live_.clear();
}

void ExponentialMovingAverage::copy_to(const std::vector<Tensor>& params) const {
  HG_CHECK(params.size() == shadow_.size(), kWho, " copy_to got ", params.size(), " parameters; expected ",
           shadow_.size(), " (those averaged)");
  for (size_t i = 0; i < params.size(); ++i)
    HG_CHECK(params[i].defined() && params[i].shape() == shadow_[i].shape() && params[i].dtype() == shadow_[i].dtype(),
             kWho, " copy_to: parameter ", i, " is ",
             params[i].defined() ? params[i].describe() : std::string("undefined"), "; expected ",
             shadow_[i].describe());
  NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) params[i].copy_(shadow_[i]);
}

void ExponentialMovingAverage::register_state(TrainingState& state, const std::string& prefix) {
  for (size_t i = 0; i < shadow_.size(); ++i) state.extra(prefix + std::to_string(i), shadow_[i]);
  state.counter(prefix + "updates", updates_);
}

}  // namespace hg::train
