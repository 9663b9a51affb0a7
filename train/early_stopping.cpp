// Early stopping: the improvement rule and the weight snapshot.
#include "train/early_stopping.h"

#include <cmath>

#include "engine/autograd.h"
#include "kernels/error.h"

namespace hg::train {

EarlyStopping::EarlyStopping(std::vector<Tensor> parameters, EarlyStoppingOptions options)
    : parameters_(std::move(parameters)), options_(options) {
  HG_CHECK(options_.patience() >= 1, "[EarlyStopping] patience must be >= 1 evaluation, got ", options_.patience());
  HG_CHECK(std::isfinite(options_.min_delta()) && options_.min_delta() >= 0,
           "[EarlyStopping] min_delta must be finite and >= 0, got ", options_.min_delta());
  for (size_t i = 0; i < parameters_.size(); ++i)
    HG_CHECK(parameters_[i].defined(), "[EarlyStopping] parameter ", i, " is an undefined tensor");
}

bool EarlyStopping::update(double value) {
  evaluations_ += 1;
  bool improved = false;
  if (!std::isnan(value)) {
    if (!has_best_)
      improved = true;
    else if (options_.mode() == StopMode::min)
      improved = value < best_ - options_.min_delta();
    else
      improved = value > best_ + options_.min_delta();
  }
  if (improved) {
    NoGradGuard no_grad;
    best_weights_.clear();
    best_weights_.reserve(parameters_.size());
    for (const Tensor& p : parameters_) best_weights_.push_back(p.detach().clone());
    has_best_ = true;
    best_ = value;
    best_evaluation_ = evaluations_;
    bad_evaluations_ = 0;
  } else {
    bad_evaluations_ += 1;
  }
  return should_stop();
}

void EarlyStopping::restore_best() {
  HG_CHECK(has_best_, "[EarlyStopping] restore_best() before any evaluation improved; call update() first");
  NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) parameters_[i].copy_(best_weights_[i]);
}

}  // namespace hg::train
