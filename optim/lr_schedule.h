#pragma once
// Learning-rate schedules: small immutable objects that give lr(step) for step = 0, 1, 2, ... (the
// number of optimizer steps already taken). A training loop calls opt.set_lr(schedule.lr(step))
// before opt.step(). Schedules compose: Sequential runs one schedule after another at milestones.
//
//   ConstantLr(base):                     lr(s) = base
//   LinearWarmup(base, W, f0):            lr(s) = base * (f0 + (1 - f0) * min(s, W) / W)
//                                         (f0 * base at s = 0, base from s = W on; PyTorch's LinearLR)
//   CosineDecay(base, S, min_lr):         lr(s) = min_lr + (base - min_lr) * (1 + cos(pi * min(s, S) / S)) / 2
//                                         (base at 0, (base + min_lr) / 2 at S/2, min_lr from S on)
//   Sequential({a, b, c}, {m1, m2}):      a(s) for s < m1, b(s - m1) for m1 <= s < m2, c(s - m2) after
//   WarmupCosine(base, W, total, min_lr): Sequential({LinearWarmup(base, W, 0), CosineDecay(base, total - W,
//                                         min_lr)}, {W}): the GPT recipe, min_lr from s = total on.
//   StepLR(base, S, gamma):               lr(s) = base * gamma^floor(s / S)
//   MultiStepLR(base, {m1, m2..}, gamma): lr(s) = base * gamma^(number of milestones <= s)
//   ExponentialLR(base, gamma):           lr(s) = base * gamma^s
//   OneCycleLR(max_lr, total, options):   from max_lr / div_factor up to max_lr over the first pct_start of
//                                         the steps, then down to that / final_div_factor at total - 1 (cosine
//                                         or linear annealing; three_phase: back to the start, then down)
// They are PyTorch's schedulers of the same names, as functions of the step (their closed forms: PyTorch's
// chained form multiplies as it goes, which differs in the last bits); OneCycleLR holds its last value
// after total_steps, where PyTorch raises.
//
// With a start factor of 0 the warmup's first step (s = 0) has lr 0, as in PyTorch; it still
// updates Adam's moments. Arguments are checked in the constructors (hg::Error).
//
// On the device: device_form() describes a schedule as plain data (kernels/lr_schedule_math.h) that
// the lr_schedule_eval kernel evaluates at a step count in device memory, so a step whose count of
// steps taken lives on the device (skipped steps do not count) reads its lr without the host. The
// built-in schedules have one (up to kernels::kMaxLrPieces pieces after flattening nested
// Sequentials) and their lr() calls the same functions, so both agree to the bit on the CPU; a
// user's schedule without one is evaluated on the host (train/trainer.h then reads the count).
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/tensor.h"
#include "kernels/lr_schedule_math.h"
#include "kernels/options.h"

namespace hg::optim {

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  // The learning rate at `step` (>= 0).
  virtual double lr(int64_t step) const = 0;
  // The schedule as data for the device (see above); nullopt: host only.
  virtual std::optional<kernels::LrScheduleDesc> device_form() const { return std::nullopt; }
};

using LrSchedulePtr = std::shared_ptr<const LrSchedule>;

// lr[0] = the schedule `form` (a device_form()) at the step count step_count[0], evaluated on their
// device by the lr_schedule_eval kernel: lr an f64 and step_count an i64 one-element tensor, on one
// device. No host read.
void write_lr_on_device(const kernels::LrScheduleDesc& form, const Tensor& step_count, const Tensor& lr);

class ConstantLr : public LrSchedule {
 public:
  explicit ConstantLr(double base_lr);
  double lr(int64_t step) const override;
  std::optional<kernels::LrScheduleDesc> device_form() const override;

 private:
  double base_lr_;
};

class LinearWarmup : public LrSchedule {
 public:
  LinearWarmup(double base_lr, int64_t warmup_steps, double start_factor = 0.0);
  double lr(int64_t step) const override;
  std::optional<kernels::LrScheduleDesc> device_form() const override;

 private:
  double base_lr_;
  int64_t warmup_steps_;
  double start_factor_;
};

class CosineDecay : public LrSchedule {
 public:
  CosineDecay(double base_lr, int64_t decay_steps, double min_lr = 0.0);
  double lr(int64_t step) const override;
  std::optional<kernels::LrScheduleDesc> device_form() const override;

 private:
  double base_lr_;
  int64_t decay_steps_;
  double min_lr_;
};

class Sequential : public LrSchedule {
 public:
  // milestones: strictly increasing, > 0, one fewer than schedules.
  Sequential(std::vector<LrSchedulePtr> schedules, std::vector<int64_t> milestones);
  double lr(int64_t step) const override;
  std::optional<kernels::LrScheduleDesc> device_form() const override;

 private:
  std::vector<LrSchedulePtr> schedules_;
  std::vector<int64_t> milestones_;
};

class WarmupCosine : public Sequential {
 public:
  // Linear warmup from 0 over warmup_steps (0: none), then cosine decay to min_lr at total_steps.
  WarmupCosine(double base_lr, int64_t warmup_steps, int64_t total_steps, double min_lr = 0.0);
};

// A schedule that is one device form: lr(step) evaluates it with the kernel's own function.
class DescribedSchedule : public LrSchedule {
 public:
  double lr(int64_t step) const override;
  std::optional<kernels::LrScheduleDesc> device_form() const override { return desc_; }

 protected:
  explicit DescribedSchedule(const char* name) : name_(name) {}
  kernels::LrScheduleDesc desc_;

 private:
  const char* name_;
};

class StepLR : public DescribedSchedule {
 public:
  StepLR(double base_lr, int64_t step_size, double gamma = 0.1);
};

class ExponentialLR : public DescribedSchedule {
 public:
  ExponentialLR(double base_lr, double gamma);
};

// milestones strictly increasing and > 0; up to kernels::kMaxLrPieces - 1 of them run on the device.
class MultiStepLR : public Sequential {
 public:
  MultiStepLR(double base_lr, std::vector<int64_t> milestones, double gamma = 0.1);
};

//   OneCycleOptions().pct_start(0.25).anneal_linear(true)
struct OneCycleOptions {
  HG_OPTION(OneCycleOptions, double, pct_start, 0.3);
  HG_OPTION(OneCycleOptions, double, div_factor, 25.0);
  HG_OPTION(OneCycleOptions, double, final_div_factor, 1e4);
  HG_OPTION(OneCycleOptions, bool, anneal_linear, false);  // PyTorch's anneal_strategy="linear"; else "cos"
  HG_OPTION(OneCycleOptions, bool, three_phase, false);
};

// PyTorch's OneCycleLR for the learning rate (its momentum cycling is not done here).
class OneCycleLR : public DescribedSchedule {
 public:
  OneCycleLR(double max_lr, int64_t total_steps, const OneCycleOptions& options = {});
};

}  // namespace hg::optim
