#pragma once
// A user-defined training step (train/trainer.h's second constructor): several named optimizers, each
// an Update with its own learning-rate schedule, loss scaler and clipping, stepped by the user's step
// function through a StepContext -- a GAN's discriminator and generator, or any custom update -- while
// the Trainer keeps the loop: the data, gradient accumulation, evaluation, early stopping, checkpoints
// (every optimizer, scaler and step counter; resumed == uninterrupted bit for bit), the EMA and the
// metrics log.
//
//   train::Trainer trainer(model, {{"D", &d_opt, d_schedule, optim::LossScaler::dynamic()},
//                                  {"G", &g_opt, g_schedule, optim::LossScaler::dynamic(), /*clip=*/1.0}},
//                          loader, [&](train::StepContext& ctx) {
//                            for (const data::Batch& b : ctx.batches())        // grad_accum micro-batches
//                              ctx.backward("D", d_loss(b));                   // / grad_accum, * S_D, backward
//                            ctx.step("D");
//                            for (const data::Batch& b : ctx.batches()) ctx.backward("G", g_loss(b));
//                            ctx.step("G");
//                            ctx.log("d_loss", ...);                           // progress line + metrics log
//                          }, options);
//
// ctx.step(name), on that Update alone, is the single-optimizer step's sequence:
//   scaler.unscale_(opt) -> clip_grad_norm(clip) -> clip_grad_value_(clip_value) -> opt.set_lr(schedule(t))
//   -> scaler.step(opt) (skipped on inf/NaN: t and the schedule stay) -> scaler.update() -> opt.zero_grad()
// where t counts this Update's steps that were not skipped. Before the step function runs, the
// Trainer zeroes every Update's gradients (a generator's backward through the discriminator leaves
// gradients on the discriminator's parameters; they do not leak into its next step).
//
// CONVENTION
//   - The step function is called once per Trainer step with the step's grad_accum micro-batches;
//     backward(name, loss) divides the loss by their number, so backward over each of them then one
//     step(name) is the step on their full batch. Under data parallelism the gradient sync is on for
//     the grad_accum-th backward of an Update in the step (and every one after it).
//   - The step's "loss" (progress line, TrainResult::final_loss) is the first value it log()s; every
//     logged value is a field of the metrics record, with lr_<name> (when the Update has a schedule),
//     grad_norm_<name> (with clip), loss_scale_<name> (with a scaler).
//   - Refused (hg::Error): no Update, an unnamed or duplicate name, a null or sharded optimizer, one
//     optimizer in two Updates, TrainerOptions clip / clip_value / cuda_graph (each Update has its own
//     clipping; the custom step runs eagerly), Trainer::schedule / loss_scaler / plateau (give them to
//     the Updates), an unknown name in backward / step.
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "data/data_loader.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"

namespace hg::train {

// One named optimizer of a custom step, with what belongs to it alone.
struct Update {
  std::string name;
  optim::Optimizer* optimizer = nullptr;
  optim::LrSchedulePtr schedule = nullptr;  // lr(t) of this Update's t; none: the optimizer's own lr
  optim::LossScaler scaler = {};            // none by default
  double clip = 0.0;                        // clip_grad_norm's max_norm (0: off)
  double clip_value = 0.0;                  // clip_grad_value_'s bound (0: off)
};

// An Update's live state in the Trainer (its t, this step's figures).
struct UpdateState {
  Update spec;
  int64_t steps = 0;      // t: optimizer steps taken (checkpointed as counter steps_<name>)
  int64_t backwards = 0;  // backward() calls in this Trainer step
  bool stepped = false;   // whether a step() of this Trainer step was taken (not skipped)
  double lr = std::numeric_limits<double>::quiet_NaN(), grad_norm = std::numeric_limits<double>::quiet_NaN();
};

class StepContext {
 public:
  StepContext(std::vector<UpdateState>& updates, const std::vector<data::Batch>& batches, int64_t step)
      : updates_(updates), batches_(batches), step_(step) {}

  // The step's micro-batches (grad_accum of them) and its number (1-based, as the progress line).
  const std::vector<data::Batch>& batches() const { return batches_; }
  int64_t step() const { return step_; }

  // (loss / grad_accum) scaled by the Update's loss scaler, then backward.
  void backward(const std::string& update, const Tensor& loss);
  // The Update's optimizer step (see above); false when it was skipped (inf/NaN gradients).
  bool step(const std::string& update);
  // Zeroes the Update's gradients (e.g. between two backward passes that must not add up).
  void zero_grad(const std::string& update);
  // A figure of this step: the progress line and the metrics log (a Tensor is read: one host wait).
  void log(const std::string& name, double value);
  void log(const std::string& name, const Tensor& value);

  // The Update's steps taken so far (t) and its scaler.
  int64_t optimizer_steps(const std::string& update) const;
  optim::LossScaler& scaler(const std::string& update);

  const std::vector<std::pair<std::string, double>>& logged() const { return logged_; }

 private:
  UpdateState& find(const std::string& update) const;

  std::vector<UpdateState>& updates_;
  const std::vector<data::Batch>& batches_;
  int64_t step_;
  std::vector<std::pair<std::string, double>> logged_;
};

}  // namespace hg::train
