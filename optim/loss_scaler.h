#pragma once
// LossScaler: loss scaling for fp16 training (Micikevicius et al. 2018, "Mixed Precision Training"),
// with PyTorch GradScaler's dynamic policy and DeepSpeed's hysteresis.
//
// fp16 gradients below 2^-24 flush to zero. Multiplying the loss by S before backward multiplies
// every gradient by S (backward is linear in the loss gradient), lifting small gradients into fp16's
// range; they are divided by S again before the optimizer sees them. Too large an S overflows some
// gradient to inf/NaN: that step is skipped and S is lowered. Dynamic scaling keeps S near the
// largest value that does not overflow:
//
//   overflow:  hysteresis_left > 1 ? hysteresis_left -= 1 : S = max(S * backoff_factor, min_scale);
//              the count of consecutive clean steps restarts at 0
//   clean:     good_steps += 1; good_steps == growth_interval ?
//                  S = min(S * growth_factor, max_scale), good_steps = 0, hysteresis_left = hysteresis
//              (consecutive_hysteresis: hysteresis_left = hysteresis after every clean step)
//
// Modes: none (bf16/f32: scale 1, no checks, step() is optimizer.step()); static (a fixed S; an
// overflowing step is still skipped); dynamic (the policy above; defaults: S0 = 2^16, x2 after 2000
// clean steps, x0.5 on overflow, min 1, max 2^127, hysteresis 1 = back off at the first overflow).
//
// One optimizer step, in this order:
//
//   scaler.scale(loss).backward();           // (gradient accumulation: once per micro-batch)
//   scaler.unscale_(optimizer);              // grads /= S, one fused pass; false when inf/NaN
//   optimizer.clip_grad_norm(max_norm);      // on true gradients (a non-finite norm touches nothing)
//   if (scaler.step(optimizer)) ...          // false: skipped, do not advance the LR schedule
//   scaler.update();                         // grow / back off S for the next step
//
// ON THE DEVICE (a step with no host read, capturable into a CUDA graph; train/trainer.h uses it)
//   The scaler's state -- S (f32), found_inf (f32), the growth tracker, the hysteresis budget and the
//   skipped-step count -- is one kernels::LossScaleState in the memory of the device it is first used
//   on (the loss's or the parameters'). scale(loss) multiplies by S read from there; unscale_on_device
//   has the optimizer's kernels divide by S and set found_inf; step_on_device hands found_inf (and
//   the step's lr) to the optimizer's device step (optim/device_step.h), whose kernels skip the update
//   when it is set (for an optimizer without one, found_inf is read on the host, one wait, and the
//   step is skipped there); update()
//   applies the policy in a one-thread kernel. Nothing is read back until scale_value(),
//   skipped_steps(), ... or state_tensors() is called (one read each). The bool-returning unscale_ and
//   step are the device forms followed by that read.
//
// CONVENTION
//   - unscale_ runs optimizer.unscale_and_check(S) (optim/optimizer.h; by default the fused
//     optim/unscale.h pass over every gradient, one launch per device on CUDA) and remembers the
//     result: later calls before update() return it without touching the gradients again.
//   - step() unscales first when unscale_ was not called. On overflow it does not call the optimizer
//     (parameters and optimizer state stay bit-identical), zeroes the gradients in place, counts a
//     skipped step and returns false. update() must follow every unscale_/step, and only them.
//   - Distributed training: every rank must skip the same steps. set_overflow_reducer(f) installs a
//     function called by unscale_ with this rank's found_inf that returns the combined one (an
//     all-reduce with MAX/OR over ranks); every rank then calls unscale_ at the same point.
//   - The state that a checkpoint saves: state_tensors() / load_state_tensors() (names below).
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"
#include "kernels/unscale_math.h"
#include "optim/optimizer.h"

namespace hg::optim {

enum class LossScaleMode { None, Static, Dynamic };

// The dynamic policy's knobs: DynamicLossScaleOptions().init_scale(1024).hysteresis(2)
struct DynamicLossScaleOptions {
  HG_OPTION(DynamicLossScaleOptions, double, init_scale, 65536.0);
  HG_OPTION(DynamicLossScaleOptions, double, growth_factor, 2.0);
  HG_OPTION(DynamicLossScaleOptions, double, backoff_factor, 0.5);
  HG_OPTION(DynamicLossScaleOptions, int64_t, growth_interval, 2000);
  HG_OPTION(DynamicLossScaleOptions, double, min_scale, 1.0);
  // 2^127: the largest power of two a float holds, so S and 1/S stay exact and S * loss stays
  // finite for |loss| < 2; the scale never grows to inf.
  HG_OPTION(DynamicLossScaleOptions, double, max_scale, 0x1p127);
  // Overflows tolerated before backing off (DeepSpeed's delayed_shift); 1 backs off at once.
  HG_OPTION(DynamicLossScaleOptions, int64_t, hysteresis, 1);
  // Restore the hysteresis budget after every clean step (DeepSpeed's consecutive_hysteresis)
  // rather than only when the scale grows.
  HG_OPTION(DynamicLossScaleOptions, bool, consecutive_hysteresis, false);
};

class LossScaler {
 public:
  // Mode none: scale 1, nothing checked.
  LossScaler();
  // A copy is an independent scaler: its device state is a copy of this one's (no host read).
  LossScaler(const LossScaler& other);
  LossScaler& operator=(const LossScaler& other);
  LossScaler(LossScaler&&) noexcept = default;
  LossScaler& operator=(LossScaler&&) noexcept = default;
  static LossScaler none();
  // A fixed scale (finite, > 0).
  static LossScaler fixed(double scale);
  // The dynamic policy; the options are validated here (hg::Error naming the bad one).
  static LossScaler dynamic(DynamicLossScaleOptions options = {});

  LossScaleMode mode() const { return mode_; }
  // "none", "static" or "dynamic".
  const char* mode_name() const;
  bool enabled() const { return mode_ != LossScaleMode::None; }

  // loss * S (the loss itself for mode none), differentiable: backward of it gives S * dL/dtheta.
  Tensor scale(const Tensor& loss) const;
  // Divides the gradients by S and returns true when all are finite (combined across ranks by the
  // overflow reducer, when set): through optimizer.unscale_and_check(S) — a sharded optimizer
  // decides over every rank — or, for `params`, one fused pass per device. See CONVENTION.
  bool unscale_(Optimizer& optimizer);
  bool unscale_(const std::vector<Tensor>& params);
  // optimizer.step() when the gradients are finite (unscaling them first if needed) and true;
  // otherwise no step, gradients zeroed, skipped_steps() + 1, and false. In mode none: the optimizer's
  // own verdict (a sharded optimizer still skips a non-finite step).
  bool step(Optimizer& optimizer);
  // The device forms (see ON THE DEVICE): no host read when the optimizer decides_on_device() and no
  // overflow reducer is set. step_on_device returns the optimizer's own host verdict (false: a
  // host-checking optimizer skipped); a skip decided on the device is counted there. The gradients
  // of a skipped step are left as they are (the caller zeroes them). `lr` is the device step's
  // learning rate (an f64 scalar; undefined: the optimizer's set_lr value); an optimizer without a
  // device step needs it undefined.
  void unscale_on_device(Optimizer& optimizer);
  bool step_on_device(Optimizer& optimizer, const Tensor& lr = Tensor());
  // The dynamic policy on this step's result; ends the step. No-op in mode none.
  void update();

  // Each reads the device state (one host wait) once it lives on a device.
  double scale_value() const { return double(read_state().scale); }
  // Steps skipped because of inf/NaN gradients, over the whole run (checkpointed).
  int64_t skipped_steps() const { return read_state().skipped_steps; }
  // Consecutive clean steps since the last growth or overflow (the growth tracker).
  int64_t good_steps() const { return read_state().good_steps; }
  // Overflows still tolerated before the next backoff.
  int64_t hysteresis_left() const { return read_state().hysteresis_left; }
  // This step's unscale_ result so far: true once an inf/NaN was found (false before unscale_).
  bool found_inf() const { return unscaled_ && read_state().found_inf != 0.0f; }

  // Views of the device state (undefined before its first use on a device, and in mode none):
  // S and found_inf (f32 scalars), the skipped-step count (i64 scalar). For a step that reads them
  // only when it reports (train/trainer.h).
  Tensor scale_tensor() const { return view(DType::f32, 0); }
  Tensor found_inf_tensor() const { return view(DType::f32, 1); }
  Tensor skipped_steps_tensor() const { return view(DType::i64, 3); }
  const DynamicLossScaleOptions& options() const { return options_; }

  // f(local_found_inf) -> global_found_inf, called once per step by unscale_ (an empty function
  // removes it). For data parallelism: all-reduce the flag (MAX) so every rank skips together.
  void set_overflow_reducer(std::function<bool(bool)> reducer) { reducer_ = std::move(reducer); }

  // For checkpoints: "mode" (i64: 0 none, 1 static, 2 dynamic), "scale" (f64), "good_steps",
  // "hysteresis_left", "skipped_steps" (i64), all scalars on the CPU.
  std::vector<std::pair<std::string, Tensor>> state_tensors() const;
  // Restores them, checking every entry (present once, known, a one-element tensor, an integer where
  // one is expected, the same mode, a scale within [min_scale, max_scale] for dynamic and equal to
  // the configured one for static) and throwing before anything changes when one does not fit.
  void load_state_tensors(const std::vector<std::pair<std::string, Tensor>>& entries);

 private:
  LossScaler(LossScaleMode mode, double scale, DynamicLossScaleOptions options);
  // The state on `device` (created there from host_ at its first use; an error on another device).
  void ensure_state(const Device& device);
  // The state as the host sees it: host_ before the first use on a device, else one read.
  kernels::LossScaleState read_state() const;
  // A scalar of `dtype` at element `offset` of the state's storage (undefined without one).
  Tensor view(DType dtype, int64_t offset) const;
  // Writes this rank's flag combined by the reducer back (a host read: the reducer is a host function).
  void reduce_found_inf();
  kernels::LossScalePolicy policy() const;

  LossScaleMode mode_ = LossScaleMode::None;
  DynamicLossScaleOptions options_;
  kernels::LossScaleState host_;  // the state until it lives on a device (and what load_state_tensors checked)
  Tensor state_;                  // i64[4] holding a kernels::LossScaleState, on the device of first use
  bool unscaled_ = false;         // unscale_ ran in this step
  bool stepped_ = false;          // step() ran in this step
  std::function<bool(bool)> reducer_;
};

}  // namespace hg::optim
