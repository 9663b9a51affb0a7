// ReduceLROnPlateau (semantics in optim/plateau.h).
#include "optim/plateau.h"

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/error.h"

namespace hg::optim {
namespace {

constexpr double kStateTag = 1.0;  // state()[5]: the layout of this version
constexpr const char* kWho = "[ReduceLROnPlateau]";

}  // namespace

ReduceLROnPlateau::ReduceLROnPlateau(double lr, PlateauOptions options) : options_(options), lr_(lr) {
  const PlateauOptions& o = options_;
  HG_CHECK(std::isfinite(lr) && lr >= 0, kWho, " invalid lr ", lr, ": expected a finite lr >= 0");
  HG_CHECK(o.factor() >= 0 && o.factor() < 1.0, kWho, " invalid factor ", o.factor(), ": expected 0 <= factor < 1");
  HG_CHECK(o.patience() >= 0, kWho, " invalid patience ", o.patience(), ": expected patience >= 0");
  HG_CHECK(o.cooldown() >= 0, kWho, " invalid cooldown ", o.cooldown(), ": expected cooldown >= 0");
  HG_CHECK(std::isfinite(o.threshold()) && o.threshold() >= 0, kWho, " invalid threshold ", o.threshold(),
           ": expected a finite threshold >= 0");
  HG_CHECK(std::isfinite(o.min_lr()) && o.min_lr() >= 0, kWho, " invalid min_lr ", o.min_lr(),
           ": expected min_lr >= 0");
  HG_CHECK(std::isfinite(o.eps()) && o.eps() >= 0, kWho, " invalid eps ", o.eps(), ": expected eps >= 0");
  best_ =
      o.mode() == PlateauMode::min ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
}

bool ReduceLROnPlateau::is_better(double a, double best) const {
  const double t = options_.threshold();
  const bool rel = options_.threshold_mode() == ThresholdMode::rel;
  if (options_.mode() == PlateauMode::min) return rel ? a < best * (1.0 - t) : a < best - t;
  return rel ? a > best * (t + 1.0) : a > best + t;
}

double ReduceLROnPlateau::step(double metric) {
  last_epoch_ += 1;
  if (is_better(metric, best_)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    num_bad_epochs_ += 1;
  }
  if (cooldown_counter_ > 0) {
    cooldown_counter_ -= 1;
    num_bad_epochs_ = 0;  // bad epochs in cooldown do not count
  }
  if (num_bad_epochs_ > options_.patience()) {
    const double reduced = std::max(lr_ * options_.factor(), options_.min_lr());
    if (lr_ - reduced > options_.eps()) lr_ = reduced;
    cooldown_counter_ = options_.cooldown();
    num_bad_epochs_ = 0;
  }
  return lr_;
}

Tensor ReduceLROnPlateau::state() const {
  const std::vector<double> values = {
      lr_, best_, double(num_bad_epochs_), double(cooldown_counter_), double(last_epoch_), kStateTag};
  return from_vector(values, {6});
}

void ReduceLROnPlateau::check_state(const Tensor& state) {
  HG_CHECK(state.defined() && state.dtype() == DType::f64 && state.dim() == 1 && state.numel() == 6, kWho, " state is ",
           state.defined() ? state.describe() : std::string("undefined"), "; expected f64 [6]");
  const std::vector<double> v = state.to(kCPU).contiguous().to_vector<double>();
  HG_CHECK(v[5] == kStateTag, kWho, " state has format tag ", v[5], "; expected ", kStateTag);
  HG_CHECK(std::isfinite(v[0]) && v[0] >= 0, kWho, " state's lr ", v[0], "; expected a finite lr >= 0");
  for (int i = 2; i < 5; ++i)
    HG_CHECK(v[size_t(i)] >= 0 && v[size_t(i)] == std::floor(v[size_t(i)]), kWho, " state's counter ", i, " is ",
             v[size_t(i)], "; expected a whole number >= 0");
}

void ReduceLROnPlateau::load_state(const Tensor& state) {
  check_state(state);
  const std::vector<double> v = state.to(kCPU).contiguous().to_vector<double>();
  lr_ = v[0];
  best_ = v[1];
  num_bad_epochs_ = int64_t(v[2]);
  cooldown_counter_ = int64_t(v[3]);
  last_epoch_ = int64_t(v[4]);
}

}  // namespace hg::optim
