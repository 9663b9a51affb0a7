#pragma once
// ExponentialMovingAverage: an averaged copy of a model's parameters (Polyak averaging; what diffusion
// models and GANs evaluate with), as torch.optim.swa_utils.AveragedModel with get_ema_multi_avg_fn:
//
//   update n = 0:      shadow = p                        (AveragedModel's first update_parameters copies)
//   update n >= 1:     shadow = shadow + (1 - d_n) * (p - shadow)      (torch.lerp(shadow, p, 1 - d_n))
//   d_n = decay                                          (EmaOptions().warmup(false), the default)
//   d_n = min(decay, (1 + n) / (10 + n))                 (warmup(true): TensorFlow's num_updates form)
//
// where n counts the updates made before this one. The shadow tensors live on each parameter's device
// in its dtype and are updated with engine ops (CPU or CUDA); only parameters are averaged, not
// buffers (AveragedModel's use_buffers=False). The Trainer calls update() after every optimizer step
// that was not skipped (train/trainer.h Trainer::ema) and saves the shadow and n in its checkpoints.
//
// Evaluating with the averaged weights: swap_in() keeps a copy of the live values and writes the shadow
// into the parameters, swap_out() puts the live values back (exactly); EmaScope does both around a
// block. The shadow keeps the average meanwhile. copy_to() writes the shadow into another model's
// parameters (a copy model for sampling).
#include <cstdint>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "kernels/options.h"

namespace hg::train {

class TrainingState;

// EmaOptions().decay(0.9999).warmup(true).evaluate(true)
struct EmaOptions {
  HG_OPTION(EmaOptions, double, decay, 0.999);  // in [0, 1]
  HG_OPTION(EmaOptions, bool, warmup, false);   // d_n = min(decay, (1 + n) / (10 + n))
  // The Trainer runs its evaluator with the averaged weights swapped in (and back after it).
  HG_OPTION(EmaOptions, bool, evaluate, false);
};

class ExponentialMovingAverage {
 public:
  // The shadow starts as a copy of `params` (each defined and floating; hg::Error otherwise).
  ExponentialMovingAverage(std::vector<Tensor> params, EmaOptions options = {});

  // One update from the parameters' current values (no autograd).
  void update();
  // The decay of update n (n >= 1; update 0 copies).
  double decay_at(int64_t n) const;
  int64_t updates() const { return updates_; }
  const std::vector<Tensor>& shadow() const { return shadow_; }
  const EmaOptions& options() const { return options_; }

  // The averaged weights into the parameters / the live ones back (hg::Error when not in that order).
  void swap_in();
  void swap_out();
  bool swapped_in() const { return !live_.empty(); }
  // Writes the shadow into `params` (same count, shapes and dtypes as the averaged ones).
  void copy_to(const std::vector<Tensor>& params) const;
  // Registers the shadow ("extra.<prefix><i>") and the update count ("counter.<prefix>updates").
  void register_state(TrainingState& state, const std::string& prefix = "ema_");

 private:
  std::vector<Tensor> params_, shadow_, live_;  // live_: the parameters' values while swapped in
  EmaOptions options_;
  int64_t updates_ = 0;
};

// Swaps the averaged weights in for the scope's lifetime: EmaScope s(ema); evaluate(); (back at the end).
class EmaScope {
 public:
  explicit EmaScope(ExponentialMovingAverage& ema) : ema_(ema) { ema_.swap_in(); }
  ~EmaScope() { ema_.swap_out(); }
  EmaScope(const EmaScope&) = delete;
  EmaScope& operator=(const EmaScope&) = delete;

 private:
  ExponentialMovingAverage& ema_;
};

}  // namespace hg::train
