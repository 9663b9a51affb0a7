#pragma once
// ReduceLROnPlateau: PyTorch's torch.optim.lr_scheduler.ReduceLROnPlateau (1.13), fed one metric per
// evaluation. Unlike the closed-form schedules of optim/lr_schedule.h it has state, and its learning
// rate depends on the metrics it was fed:
//
//   step(metric):  last_epoch += 1
//                  better(metric, best) ? (best = metric, num_bad_epochs = 0) : num_bad_epochs += 1
//                  cooldown_counter > 0 ? (cooldown_counter -= 1, num_bad_epochs = 0)
//                  num_bad_epochs > patience ? (new = max(lr * factor, min_lr);
//                                               lr - new > eps ? lr = new;
//                                               cooldown_counter = cooldown, num_bad_epochs = 0)
//   better(a, best): mode min, rel: a < best * (1 - threshold)    mode max, rel: a > best * (1 + threshold)
//                    mode min, abs: a < best - threshold          mode max, abs: a > best + threshold
//   best starts at +inf (min) or -inf (max); a NaN metric is never better (a bad epoch).
//
// CHAINING (train/trainer.h Trainer::plateau): with a schedule s as well, the learning rate of step t
// is min(s(t), plateau.lr()). With the plateau's initial lr equal to the schedule's peak, a warmup
// runs as it is and the plateau takes over once it has cut the rate below the schedule (e.g.
// Sequential({LinearWarmup(base, W), ConstantLr(base)}, {W}) then plateau(base): warmup, then plateau).
//
// The state that a checkpoint saves: state() / load_state() (f64 [6]: lr, best, num_bad_epochs,
// cooldown_counter, last_epoch, and a format tag).
#include <cstdint>

#include "engine/tensor.h"
#include "kernels/options.h"

namespace hg::optim {

enum class PlateauMode { min, max };
enum class ThresholdMode { rel, abs };

// PlateauOptions().mode(PlateauMode::max).factor(0.5).patience(2)
struct PlateauOptions {
  HG_OPTION(PlateauOptions, PlateauMode, mode, PlateauMode::min);
  HG_OPTION(PlateauOptions, double, factor, 0.1);  // new lr = lr * factor; in [0, 1)
  HG_OPTION(PlateauOptions, int64_t, patience, 10);
  HG_OPTION(PlateauOptions, double, threshold, 1e-4);
  HG_OPTION(PlateauOptions, ThresholdMode, threshold_mode, ThresholdMode::rel);
  HG_OPTION(PlateauOptions, int64_t, cooldown, 0);
  HG_OPTION(PlateauOptions, double, min_lr, 0.0);
  HG_OPTION(PlateauOptions, double, eps, 1e-8);
};

class ReduceLROnPlateau {
 public:
  // The options are checked here (hg::Error naming the bad one).
  explicit ReduceLROnPlateau(double lr, PlateauOptions options = {});
  // Feeds one metric (an evaluation); returns the learning rate from now on.
  double step(double metric);
  double lr() const { return lr_; }
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  int64_t last_epoch() const { return last_epoch_; }
  const PlateauOptions& options() const { return options_; }

  // Checkpoint state: f64 [6] on the CPU; load_state checks it before changing anything.
  Tensor state() const;
  void load_state(const Tensor& state);
  // The check of load_state alone (hg::Error for a tensor it would refuse).
  static void check_state(const Tensor& state);

 private:
  bool is_better(double a, double best) const;

  PlateauOptions options_;
  double lr_, best_;
  int64_t num_bad_epochs_ = 0, cooldown_counter_ = 0, last_epoch_ = 0;
};

}  // namespace hg::optim
