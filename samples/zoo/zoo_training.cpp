#include "samples/zoo/zoo_training.h"

#include <algorithm>
#include <memory>

#include "engine/random.h"
#include "optim/by_name.h"
#include "train/precision.h"

namespace hg::samples::zoo {

RunSetup start_run(const ZooConfig& c) {
  const Device device = Device::parse(c.device);
  const app::ThreadSettings threads = app::apply_thread_settings(
      c.threads, c.workers >= 0 ? std::optional<int64_t>(c.workers) : std::nullopt, device.is_cuda());
  manual_seed(uint64_t(c.seed));
  return {device, threads, train::parse_precision(c.precision)};
}

void check_batch_fits(const ZooConfig& c, int64_t examples, const char* what) {
  if (examples < c.batch)
    app::exit_with_usage_error(kProgram, "--batch " + std::to_string(c.batch) + " is larger than the " +
                                             std::to_string(examples) + " training " + what +
                                             "; expected --batch <= " + std::to_string(examples));
}

std::unique_ptr<optim::LocalOptimizer> prepare_model(nn::Module& model, const ZooConfig& c, const RunSetup& run) {
  if (!c.save_init.empty()) safetensors::save(c.save_init, model.state_dict());
  model.to(run.dtype);
  model.to(run.device);
  return optim::make_optimizer(c.optimizer, model.parameters(), c.lr, c.weight_decay);
}

void set_loss_scale(train::Trainer& trainer, const RunSetup& run) {
  if (run.dtype == DType::f16) trainer.loss_scaler(train::parse_loss_scale("", run.dtype));
}

data::DataLoaderOptions loader_options(const ZooConfig& c, int workers, const Device& device) {
  return data::DataLoaderOptions()
      .batch_size(c.batch)
      .shuffle(true)
      .drop_last(true)
      .seed(uint64_t(c.seed))
      .workers(workers)
      .device(device);
}

int64_t planned_steps(const ZooConfig& c, int64_t per_epoch) {
  return c.steps > 0 ? c.steps : std::max<int64_t>(c.epochs * per_epoch, 1);
}

train::TrainerOptions trainer_options(const ZooConfig& c, int64_t steps, int64_t per_epoch,
                                      const std::string& metric_name, train::StopMode mode) {
  return train::TrainerOptions()
      .steps(steps)
      .stop_after(c.stop_after)
      .eval_every(c.eval_every > 0 ? c.eval_every : per_epoch)
      .log_every(std::max<int64_t>(per_epoch / 4, 1))
      .metric_name(metric_name)
      .metric_mode(mode)
      .checkpoint_dir(c.checkpoint_dir)
      .checkpoint_every(c.checkpoint_every)
      .resume(c.resume)
      .run_config(c.flags.run_config(zoo_resume_rules()))
      .monitor(train::MonitorOptions().metrics_path(c.metrics_log));
}

void set_schedule(train::Trainer& trainer, const ZooConfig& c, int64_t steps) {
  trainer.schedule(std::make_shared<optim::WarmupCosine>(c.lr, std::min(c.warmup, steps - 1), steps, c.lr / 20));
}

void BatchRecorder::record(const data::Batch& batch) {
  if (path_.empty() || batches_ == 64) return;
  for (size_t f = 0; f < names_.size(); ++f)
    saved_.emplace_back(names_[f] + "." + std::to_string(batches_), batch[f].to(kCPU).clone());
  ++batches_;
}

void BatchRecorder::save() const {
  if (!path_.empty()) safetensors::save(path_, saved_);
}

}  // namespace hg::samples::zoo
