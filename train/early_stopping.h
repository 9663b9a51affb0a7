#pragma once
// Early stopping on a validation metric, with patience and min_delta, keeping a copy of the best
// weights to restore at the end.
//
//   train::EarlyStopping stopper(model.parameters(),
//                                train::EarlyStoppingOptions().mode(train::StopMode::min).patience(3).min_delta(1e-3));
//   for (...) { train(); if (stopper.update(val_loss)) break; }
//   stopper.restore_best();      // the parameters now hold, bit for bit, the best evaluation's weights
//
// CONVENTION
//   - An evaluation improves when it beats the best so far by more than min_delta (min mode:
//     value < best - min_delta; max mode: value > best + min_delta). The first finite value always
//     improves; a NaN never does.
//   - Each improvement copies the parameters (same device and dtype) into the snapshot; after
//     `patience` evaluations in a row without improvement, should_stop() turns true.
#include <cstdint>
#include <vector>

#include "engine/tensor.h"
#include "optim/optimizer.h"

namespace hg::train {

enum class StopMode { min, max };  // min: loss-like metrics; max: accuracy-like

struct EarlyStoppingOptions {
  HG_OPTION(EarlyStoppingOptions, StopMode, mode, StopMode::min);
  HG_OPTION(EarlyStoppingOptions, int64_t, patience, 5);
  HG_OPTION(EarlyStoppingOptions, double, min_delta, 0.0);
};

class EarlyStopping {
 public:
  // Throws hg::Error for patience < 1, a negative or non-finite min_delta, or an undefined parameter.
  EarlyStopping(std::vector<Tensor> parameters, EarlyStoppingOptions options = {});

  // Reports one evaluation; snapshots the weights when it improves. Returns should_stop().
  bool update(double value);
  bool should_stop() const { return bad_evaluations_ >= options_.patience(); }
  // Copies the best snapshot back into the parameters (in place: every handle sees it). Throws when
  // no evaluation has improved yet.
  void restore_best();

  bool has_best() const { return has_best_; }
  double best() const { return best_; }
  int64_t best_evaluation() const { return best_evaluation_; }  // 1-based; 0 before any improvement
  int64_t evaluations() const { return evaluations_; }
  int64_t evaluations_without_improvement() const { return bad_evaluations_; }
  const EarlyStoppingOptions& options() const { return options_; }

 private:
  std::vector<Tensor> parameters_, best_weights_;
  EarlyStoppingOptions options_;
  bool has_best_ = false;
  double best_ = 0;
  int64_t best_evaluation_ = 0, evaluations_ = 0, bad_evaluations_ = 0;
};

}  // namespace hg::train
