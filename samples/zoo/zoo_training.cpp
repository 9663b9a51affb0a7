#include "samples/zoo/zoo_training.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "data/image_augment.h"
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

std::shared_ptr<const data::Dataset> training_images(const ZooConfig& c, std::shared_ptr<const data::Dataset> train,
                                                     float fill) {
  std::shared_ptr<const data::Dataset> images = std::move(train);
  if (c.train_limit > 0 && c.train_limit < images->size())
    images = std::make_shared<data::DatasetPrefix>(images, c.train_limit);
  if (c.augment_pad > 0 || c.augment_flip == "on")
    images = std::make_shared<data::AugmentedImages>(images, data::ImageAugmentOptions()
                                                                 .pad(c.augment_pad)
                                                                 .hflip(c.augment_flip == "on")
                                                                 .fill(fill)
                                                                 .seed(uint64_t(c.seed) * 7919 + 3));
  return images;
}

GenerativeImages load_generative_images(const ZooConfig& c, double mean, double std) {
  GenerativeImages images{app::or_usage_error(kProgram, "--data " + c.data,
                                              [&] { return data::load_mnist_splits(c.data, c.validation, mean, std); }),
                          nullptr};
  images.train = training_images(c, images.splits.train, float(0.0 - mean / std));  // black: +0 when mean is 0
  check_batch_fits(c, images.train->size(), "images");
  return images;
}

int64_t held_out_count(const ZooConfig& c, const data::Dataset& split) {
  return c.eval_limit > 0 ? std::min(c.eval_limit, split.size()) : split.size();
}

void place_model(nn::Module& model, const ZooConfig& c, const RunSetup& run) {
  if (!c.save_init.empty()) safetensors::save(c.save_init, model.state_dict());
  model.to(run.dtype);
  model.to(run.device);
}

std::unique_ptr<optim::LocalOptimizer> prepare_model(nn::Module& model, const ZooConfig& c, const RunSetup& run) {
  place_model(model, c, run);
  return optim::make_optimizer(c.optimizer, model.parameters(), c.lr, c.weight_decay);
}

void make_images_dir(const ZooConfig& c) {
  if (c.images.empty()) return;
  std::error_code error;
  std::filesystem::create_directories(c.images, error);
  if (error || !std::filesystem::is_directory(c.images))
    app::exit_with_usage_error(kProgram, "--images " + c.images + ": cannot make that directory (" +
                                             (error ? error.message() : "a file is in the way") +
                                             "); expected a directory to write the PNG grids into");
}

std::string share_text(const char* split, const char* measure, double share, int64_t count, const char* units) {
  char text[128];
  std::snprintf(text, sizeof text, "%s %s %.2f%% (%lld %s)", split, measure, 100.0 * share, (long long)count, units);
  return text;
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

namespace {

// Every `per_epoch` steps, but at most `most` times a run of `steps` (gcn's epoch is one step), and `fewest`
// times a run shorter than an epoch (char-lstm's). Rounded up, so the last lands on the run's last step
// (1,000 steps: 334, 668, 1000, not 333, 666, 999 and the end's own evaluation at 1000).
int64_t every(int64_t per_epoch, int64_t steps, int64_t most, int64_t fewest) {
  const auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  if (per_epoch >= steps) return std::max<int64_t>(ceil_div(steps, fewest), 1);
  return std::max({per_epoch, ceil_div(steps, most), int64_t(1)});
}

}  // namespace

train::TrainerOptions trainer_options(const ZooConfig& c, int64_t steps, int64_t per_epoch,
                                      const std::string& metric_name, train::StopMode mode) {
  return train::TrainerOptions()
      .steps(steps)
      .stop_after(c.stop_after)
      .eval_every(c.eval_every > 0 ? c.eval_every : every(per_epoch, steps, 20, 3))
      .log_every(every(per_epoch / 4, steps, 80, 12))
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

void BatchRecorder::record(const data::Batch& batch, const std::vector<Tensor>& extra) {
  if (path_.empty() || batches_ == 64) return;
  const size_t fields = batch.tensors.size();
  HG_CHECK(names_.size() == fields + extra.size(), "[zoo] ", names_.size(), " names for ", fields, " batch fields and ",
           extra.size(), " more tensors");
  for (size_t f = 0; f < names_.size(); ++f) {
    const Tensor& t = f < fields ? batch[f] : extra[f - fields];
    saved_.emplace_back(names_[f] + "." + std::to_string(batches_), t.to(kCPU).clone());
  }
  ++batches_;
}

void BatchRecorder::save() const {
  if (!path_.empty()) safetensors::save(path_, saved_);
}

}  // namespace hg::samples::zoo
