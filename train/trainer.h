#pragma once
// Trainer: the training loop every sample uses, and a user's program can too.
//
//   data::DataLoader loader(dataset, data::DataLoaderOptions().batch_size(64).device(device));
//   optim::AdamW optimizer(model->parameters(), optim::AdamWOptions().lr(1e-3));
//   train::Trainer trainer(*model, optimizer, loader,
//                          [&](const data::Batch& b) { return model->loss(b[0], b[1]); },
//                          train::TrainerOptions().steps(1000).clip(1.0).eval_every(100));
//   trainer.schedule(std::make_shared<optim::WarmupCosine>(1e-3, 100, 1000, 1e-4));
//   trainer.evaluator([&] { return train::Evaluation{val_loss(), "validation loss ..."}; });
//   train::TrainResult result = trainer.fit();
//
// One optimizer step, in this order (any optim::Optimizer: local, or sharded by ZeRO):
//   for each of grad_accum micro-batches: loader.next() (its rows of the global batch under data
//     parallelism) -> narrowed to the sequence-length warmup's length -> loss(batch) (inside an
//     ActivationOffload scope when set) / grad_accum -> scaler.scale(loss).backward()
//     (optimizer.set_gradient_sync(true) only for the last micro-batch)
//   -> scaler.unscale_(optimizer) -> optimizer.clip_grad_norm(clip) -> clip_grad_value_(clip_value)
//   -> optimizer.set_lr(schedule(t)) -> scaler.step(optimizer) (skipped on inf/NaN: t and the schedule
//   stay) -> ema.update() (a step taken, with an EMA) -> scaler.update()
//   -> optimizer.zero_grad() -> progress line, metrics record, profiler ranges
//   -> every eval_every steps (and at the last): the evaluator, early stopping
//   -> every checkpoint_every steps (and at the last): a checkpoint (train/checkpoint_directory.h)
//
// What a checkpoint holds (a resumed run continues bit for bit): the model, the optimizer (its shards
// under ZeRO), the loss scaler, the step and the optimizer-step counters, the default Philox
// generator (dropout) and the loader's position; and options.run_config, the program's settings.
//
// ON THE DEVICE. When the optimizer has a device step (every fused LocalOptimizer: SGD, AdamW, Adam,
// RMSprop, Adagrad, Lion; ZeRO stages 0-3 over AdamW without optimizer offload; optim/device_step.h) and the schedule,
// if any, has a device_form(), a step reads nothing from the device. Its scalars are a StepState (train/step_state.h),
// each written by its owner and read where needed: the micro-batch losses are summed into a device scalar
// (loss.detach()), the scaler's found_inf decides the skip in the optimizer's kernels, the gradient norm is a device
// sum of squares, t (the steps taken) is a device count advanced by a kernel unless found_inf is set, and the
// schedule's lr is evaluated from it by a kernel into the device scalar the optimizer reads. Only a
// step that is logged (every log_every, evaluated, checkpointed, or the last) reads its figures --
// loss, norm, lr, scale, skipped count, t -- with ONE copy to the host. (On the CPU, where that copy
// costs nothing, every step reads them, so the metrics log keeps a loss per step; forbid_host_reads
// turns that off.) Without a loss scaler a sharded optimizer, which skips inf/NaN steps by itself,
// checks on the device too: an unscale pass by 1 writes the skip flag its kernels read. Otherwise
// (a user's optimizer without a device step, ZeRO over an optimizer other than AdamW or with offload, a
// host-only schedule) each decision is read on the host as it is taken.
//
// CUDA GRAPHS (cuda_graph; train/captured_step.h). A step ON THE DEVICE reads nothing from the host
// and makes no allocation once warm, so it can be captured (engine/cuda/cuda_graph.h): the first
// `graph_warmup` steps of fit() run eagerly (lazy state: Adam moments, plan caches, workspaces, the
// allocator's pools), the next one is captured -- its batches cloned into the graph's input tensors --
// and every step from then on copies its batches into those tensors (device-to-device) and replays
// the graph: one cudaGraphLaunch per step. Logged steps read the figures after the replay as before.
// Refused, with an hg::Error saying why: a model not on a CUDA device, a step not ON THE DEVICE (an optimizer
// without a device step, ZeRO-Offload, a host-only schedule), data parallelism or a sharded optimizer (capturing their
// collectives is not done yet), activation offload, the sequence-length warmup (its shapes change),
// and random ops inside the step (dropout: the captured Philox offsets would repeat every replay;
// found by the default generator moving during capture).
// Evaluation and checkpoints run eagerly between replays. A batch whose shapes differ from the
// captured ones is an hg::Error.
//
// A USER-DEFINED STEP (train/custom_step.h): the second constructor takes named Updates -- each an
// optimizer with its own schedule, loss scaler and clipping -- and a step function that receives a
// StepContext with the step's micro-batches, through which it runs backward (scaled) and steps a named
// Update. The loop, accumulation, evaluation, early stopping, the EMA, checkpoints (every optimizer,
// scaler and t) and the metrics log work as for one optimizer; the step is taken on the host.
//
// EMA (train/ema.h; Trainer::ema): an exponential moving average of the model's (or given) parameters,
// updated after every optimizer step that was not skipped (a custom step: once after the step function,
// when any Update stepped), in every checkpoint, and swapped in for the evaluator with
// EmaOptions().evaluate(true).
//
// CLIPPING: options.clip (global norm, clip_grad_norm) and options.clip_value (clip_grad_value_, each
// gradient element to [-v, v]) both act on the unscaled gradients, after the scaler's unscale_; with
// both, the norm is clipped first.
//
// REDUCE ON PLATEAU (optim/plateau.h; Trainer::plateau): fed the evaluator's value at each evaluation;
// the lr of a step is plateau.lr(), or min(schedule(t), plateau.lr()) with a schedule as well. Its
// state is in every checkpoint.
//
// clip_value, the EMA and the plateau take the step on the host (the host path above: a host read of the
// scaler's verdict per step on a CUDA device); they are refused with cuda_graph.
//
// CONVENTION
//   - t, the step the schedule sees, counts optimizer steps that were not skipped.
//   - Losses printed and logged are the mean over the ranks; only rank 0 writes the metrics log;
//     rank r > 0 writes its profile to FILE.rank<r>.json.
//   - Throughput counts tokens when the batch's first field is an integer tensor of rank >= 2 (token
//     ids [B, T]), examples (rows) otherwise; under data parallelism over all ranks.
//   - Early stopping evaluates the evaluator's value (minimised or maximised: metric_mode) and
//     restores the best weights at the end of fit() (gathered under ZeRO stage 3).
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/curriculum.h"
#include "data/data_loader.h"
#include "dist/communicator.h"
#include "engine/activation_offload.h"
#include "kernels/runtime_counters.h"
#include "layers/module.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "train/captured_step.h"
#include "optim/plateau.h"
#include "train/checkpoint.h"
#include "train/custom_step.h"
#include "train/ema.h"
#include "train/monitor.h"
#include "train/step_state.h"

namespace hg::train {

class CheckpointDirectory;
class Progress;

// What activation offload moves to host memory during the forward (engine/activation_offload.h).

// TrainerOptions().steps(3000).grad_accum(2).clip(1.0).eval_every(500).checkpoint_dir("ckpt")
struct TrainerOptions {
  // Optimizer steps the run is planned for (what the schedule spans, and when the last evaluation is).
  HG_OPTION(TrainerOptions, int64_t, steps, 1000);
  // End this run after step N although the plan is longer (0: at `steps`); resume continues.
  HG_OPTION(TrainerOptions, int64_t, stop_after, 0);
  HG_OPTION(TrainerOptions, int64_t, grad_accum, 1);
  HG_OPTION(TrainerOptions, double, clip, 0.0);        // global gradient-norm clipping (0: off)
  HG_OPTION(TrainerOptions, double, clip_value, 0.0);  // clip_grad_value_ of each gradient element (0: off)
  HG_OPTION(TrainerOptions, int64_t, eval_every, 0);   // 0: only at the last step
  HG_OPTION(TrainerOptions, int64_t, log_every, 100);  // progress lines kept (others overwritten)
  // Name of the evaluator's value in the metrics log, and whether it is minimised (loss) or
  // maximised (accuracy) by early stopping.
  HG_OPTION(TrainerOptions, std::string, metric_name, "val_loss");
  HG_OPTION(TrainerOptions, StopMode, metric_mode, StopMode::min);
  // Sequence-length warmup (data/curriculum.h SequenceLengthWarmup): over the first N steps, every
  // field of rank >= 2 is narrowed along dim 1 from `start` to its full length (0: off).
  HG_OPTION(TrainerOptions, int64_t, seq_warmup_steps, 0);
  HG_OPTION(TrainerOptions, int64_t, seq_warmup_start, 1);
  HG_OPTION(TrainerOptions, OffloadMode, offload_activations, OffloadMode::off);
  // Checkpoints: a directory (train/checkpoint_directory.h), every N steps and at the last.
  HG_OPTION(TrainerOptions, std::string, checkpoint_dir, "");
  HG_OPTION(TrainerOptions, int64_t, checkpoint_every, 0);
  HG_OPTION(TrainerOptions, int64_t, keep_checkpoints, 3);
  HG_OPTION(TrainerOptions, bool, resume, false);  // from the newest checkpoint of checkpoint_dir
  // A checkpoint that cannot be written (CheckpointWriteError: a full disk, a read-only path): false
  // stops the run (fit() rethrows it, naming the newest intact checkpoint to resume from); true prints
  // a warning and trains on, trying again at the next checkpoint step.
  HG_OPTION(TrainerOptions, bool, continue_after_checkpoint_error, false);
  // The entry the run config was read from (read_run_config's StoredRunConfig::entry; "": any): resume()
  // refuses to load another one, so that the settings and the state come from one checkpoint.
  HG_OPTION(TrainerOptions, std::string, resume_entry, "");
  // The program's settings as JSON text, stored in every checkpoint's metadata (train/checkpoint.h)
  // for read_run_config (train/checkpoint_directory.h) to give back to a resumed run ("": none).
  HG_OPTION(TrainerOptions, std::string, run_config, "");
  // Profiler, metrics log, early stopping (train/monitor.h).
  HG_OPTION(TrainerOptions, MonitorOptions, monitor, MonitorOptions());
  // Debug: a step taken on the device that is not logged throws an hg::Error at any host read of
  // device values (engine/host_reads.h) -- how tests assert that such a step reads nothing.
  HG_OPTION(TrainerOptions, bool, forbid_host_reads, false);
  // CUDA Graphs (see CUDA GRAPHS): after `graph_warmup` eager steps, the whole step -- forward,
  // backward, unscale and inf check, clip, schedule, optimizer, loss-scale update -- is captured once
  // and replayed every step after. Losses equal the eager run's bit for bit.
  HG_OPTION(TrainerOptions, bool, cuda_graph, false);
  HG_OPTION(TrainerOptions, int64_t, graph_warmup, 2);
  // The ranks of a data-parallel run (dist/data_parallel.h); nullptr: one process.
  HG_OPTION(TrainerOptions, dist::Communicator*, communicator, nullptr);
};

// One evaluation: the value early stopping and the metrics log see, and the text printed after
// "eval  step N | " and in the summary.
struct Evaluation {
  double value = 0.0;
  std::string text;
  std::vector<std::pair<std::string, double>> metrics = {};  // more fields of the metrics log's record
};

struct TrainResult {
  int64_t first_step = 0, last_step = 0;  // the steps this fit() ran: [first_step, last_step]
  int64_t optimizer_steps = 0, skipped_steps = 0;
  double final_loss = 0.0;               // the last step's mean micro-batch loss (over ranks)
  std::optional<Evaluation> evaluation;  // the last one (the best one when early stopping restored it)
  bool stopped_early = false;
  double seconds = 0.0, data_wait_seconds = 0.0, throughput = 0.0;  // throughput: tokens or examples / s
  int64_t peak_memory_bytes = 0;
  // continue_after_checkpoint_error: the checkpoints that could not be written (each warned about, and
  // counted in the summary), and whether the last one -- the run's final state -- was one of them.
  int64_t checkpoint_failures = 0;
  bool final_checkpoint_failed = false;
};

class Trainer {
 public:
  // The loss of one micro-batch (a forward; the trainer divides it by grad_accum and runs backward).
  using LossFn = std::function<Tensor(const data::Batch&)>;
  using EvalFn = std::function<Evaluation()>;
  // A user-defined step (train/custom_step.h): called once per step with the step's context.
  using StepFn = std::function<void(StepContext&)>;

  // The model, optimizer and loader must outlive the trainer. Options are checked here.
  Trainer(nn::Module& model, optim::Optimizer& optimizer, data::DataLoader& loader, LossFn loss,
          TrainerOptions options = {});
  // A user-defined step over named Updates (see A USER-DEFINED STEP); the optimizers must outlive it.
  Trainer(nn::Module& model, std::vector<Update> updates, data::DataLoader& loader, StepFn step,
          TrainerOptions options = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // The learning rate of optimizer step t (default: the optimizer's own, unchanged).
  Trainer& schedule(std::shared_ptr<const optim::LrSchedule> schedule);
  // The fp16 loss scaler (default: none).
  Trainer& loss_scaler(optim::LossScaler scaler);
  Trainer& evaluator(EvalFn evaluate);
  // The EMA of `params` (default: the model's parameters); see EMA. Set before resume() / fit().
  Trainer& ema(EmaOptions options, std::vector<Tensor> params = {});
  // ReduceLROnPlateau fed by the evaluator (see REDUCE ON PLATEAU). Set before resume() / fit().
  Trainer& plateau(std::shared_ptr<optim::ReduceLROnPlateau> plateau);

  // Restores the newest intact checkpoint of checkpoint_dir (fit() does it when options.resume and it
  // has not run yet); newer damaged ones (CheckpointDirectory::latest_intact_for) are skipped with a
  // warning on stderr: "warning: checkpoint <entry> is damaged (<why>); resuming from <entry>".
  // Returns whether there was one; an hg::Error starting "--resume from <entry>:" when it
  // cannot be used (the live state is then as it was).
  bool resume();
  // Trains from step 1 (or from the resumed checkpoint's step + 1) to stop_after / steps; prints
  // progress lines, evaluations, checkpoints and a summary (rank 0).
  TrainResult fit();

  // The whole weights to `path` (rank 0 writes them; gathered under ZeRO stage 3) and, for a sharded
  // optimizer, its shards beside them (path.rank<r>-of-<N>.safetensors). Collective.
  // `write` writes the whole model to a path (e.g. GPT::save, which adds its config); default: the
  // state dict as safetensors.
  void save_model(const std::string& path, const std::function<void(const std::string&)>& write = {});

  const optim::LossScaler& scaler() const { return scaler_; }
  // The EMA (nullptr when none): for evaluation with the averaged weights (EmaScope) or copy_to.
  ExponentialMovingAverage* ema() const { return ema_.get(); }
  const optim::ReduceLROnPlateau* plateau() const { return plateau_.get(); }
  // A custom step's Updates: their t (steps) and scalers.
  const std::vector<UpdateState>& updates() const { return updates_; }
  // Steps completed (also across a resume).
  int64_t completed_steps() const { return completed_steps_; }

 private:
  struct StepFigures {
    double loss = 0, lr = 0, grad_norm = 0, items = 0, seconds = 0;
    double scale = 1;         // the loss scale after the step
    int64_t skipped = 0;      // the scaler's skipped steps so far
    RuntimeCounters runtime;  // the CUDA runtime calls the step made (kernels/runtime_counters.h)
    std::vector<std::pair<std::string, double>> logged;  // a custom step's log() values
  };
  // The constructors' common part: the options' checks and the checkpoint's registrations.
  void init();
  bool custom() const { return !updates_.empty(); }
  // A custom step: zero every Update's gradients, the user's step, the EMA.
  void custom_step_body(const std::vector<data::Batch>& batches, int64_t step, StepFigures& f);
  data::Batch narrowed(const data::Batch& batch, int64_t step) const;
  // Micro-batches, backward and the optimizer; the figures are read (`read`) or left on the device.
  StepFigures run_step(int64_t step, bool read);
  // What run_step does after fetching the batches: forward and backward of each micro-batch, then
  // the optimizer. `ranges`: profiler phase ranges (not while a CUDA graph is being captured).
  void step_body(const std::vector<data::Batch>& batches, bool read, bool ranges, StepFigures& f);
  // Refuses cuda_graph where a captured step could not equal the eager one (an hg::Error says why).
  void check_graph_preconditions() const;
  // Whether this run's steps stay on the device (see ON THE DEVICE).
  bool steps_on_device() const;
  // The optimizer part of a step on the device (no host read), and its figures' readback.
  void optimizer_step_on_device();
  void read_device_figures(StepFigures& f);
  // The loss of one micro-batch: forward (with activation offload when set), / grad_accum.
  Tensor micro_batch_loss(const data::Batch& batch, int64_t micro_batches);
  metrics::Record report_step(int64_t step, const StepFigures& figures, bool keep) const;
  // On a CUDA device each step's runtime counters go to its metrics record (cuda_<counter>), and with
  // --profile to its progress line.
  bool reports_runtime() const;
  // Runs the evaluator (eval mode, no grad) and early stopping; true when it says to stop.
  bool evaluate(int64_t step, metrics::Record& record, TrainingMonitor& monitor);
  void save_checkpoint(int64_t step, double loss);
  void print_summary(const TrainResult& result) const;
  int rank() const;
  void check_not_started(const char* what) const;

  nn::Module& model_;
  optim::Optimizer& optimizer_;
  data::DataLoader& loader_;
  LossFn loss_;
  StepFn custom_step_;
  std::vector<UpdateState> updates_;  // a custom step's (never resized after init: the state points in)
  EvalFn evaluate_;
  TrainerOptions options_;
  std::shared_ptr<const optim::LrSchedule> schedule_;
  optim::LossScaler scaler_;
  int64_t completed_steps_ = 0, optimizer_steps_ = 0;
  bool resumed_ = false;
  int64_t unscaled_skips_ = 0;  // steps a self-checking optimizer skipped without a loss scaler
  std::optional<StepState> step_state_;  // when steps_on_device(), from the first step of fit()
  std::optional<kernels::LrScheduleDesc> device_schedule_;
  std::unique_ptr<CapturedStep> captured_;  // cuda_graph, from the first step of fit()
  Tensor loader_position_;
  std::unique_ptr<ExponentialMovingAverage> ema_;
  std::shared_ptr<optim::ReduceLROnPlateau> plateau_;
  Tensor plateau_state_;  // the plateau's state() when saved / as loaded
  TrainingState state_;
  std::unique_ptr<CheckpointDirectory> checkpoints_;
  std::vector<std::pair<int64_t, Evaluation>> evaluations_;  // (step, evaluation), in order
  Progress* progress_ = nullptr;                             // fit()'s
  const char* unit_ = "ex";                                  // "tok" or "ex" (see CONVENTION)
  Device device_;                                            // the model's (memory figures)
  struct Totals {
    int64_t steps = 0;
    double seconds = 0, items = 0;
  } totals_;
  int64_t checkpoint_failures_ = 0;  // fit()'s (continue_after_checkpoint_error)
  bool last_checkpoint_failed_ = false;
};

}  // namespace hg::train
