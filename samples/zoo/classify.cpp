#include "samples/zoo/classify.h"

#include <algorithm>
#include <cstdio>

#include "app/thread_defaults.h"
#include "data/image_augment.h"
#include "data/mnist.h"
#include "engine/random.h"
#include "engine/safetensors.h"
#include "optim/by_name.h"
#include "samples/zoo/image_models.h"
#include "train/precision.h"
#include "train/trainer.h"

namespace hg::samples::zoo {

namespace {

// The first `limit` examples of `dataset` (0: all).
int64_t evaluated_count(const data::Dataset& dataset, int64_t limit) {
  return limit > 0 ? std::min(limit, dataset.size()) : dataset.size();
}

// Share of the first `count` examples of `dataset` that `model` classifies right; in eval mode and
// without grad (the Trainer's evaluator runs so; the final test runs under the same guard).
double accuracy(nn::UnaryModule& model, const data::Dataset& dataset, int64_t count, const Device& device,
                DType dtype) {
  const std::vector<data::Field> fields = dataset.fields();
  const data::Field& image = fields[0];
  int64_t right = 0;
  for (int64_t first = 0; first < count; first += 500) {
    const int64_t n = std::min<int64_t>(500, count - first);
    Shape shape{n};
    shape.insert(shape.end(), image.shape.begin(), image.shape.end());
    Tensor images = empty(shape, DType::f32), labels = empty({n}, DType::i64);
    for (int64_t i = 0; i < n; ++i)
      dataset.get(first + i, {static_cast<float*>(images.data_ptr()) + i * image.numel(),
                              static_cast<int64_t*>(labels.data_ptr()) + i});
    const Tensor predicted = max(model(images.to(device).to(dtype)), 1).second.to(kCPU);
    const std::vector<int64_t> p = predicted.to_vector<int64_t>(), truth = labels.to_vector<int64_t>();
    for (int64_t i = 0; i < n; ++i) right += p[size_t(i)] == truth[size_t(i)];
  }
  return count > 0 ? double(right) / double(count) : 0.0;
}

std::string percent_text(const char* what, double share, int64_t count) {
  char text[96];
  std::snprintf(text, sizeof text, "%s accuracy %.2f%% (%lld images)", what, 100.0 * share, (long long)count);
  return text;
}

}  // namespace

int train_image_classifier(const ZooConfig& c) {
  const Device device = Device::parse(c.device);
  const app::ThreadSettings threads = app::apply_thread_settings(
      c.threads, c.workers >= 0 ? std::optional<int64_t>(c.workers) : std::nullopt, device.is_cuda());
  manual_seed(uint64_t(c.seed));
  const DType dtype = train::parse_precision(c.precision);

  // The splits: the last --validation training images validate, the t10k files test.
  const data::MnistSplits splits =
      app::or_usage_error(kProgram, "--data " + c.data, [&] { return data::load_mnist_splits(c.data, c.validation); });
  const data::MnistData& raw = splits.train->data();
  std::shared_ptr<const data::Dataset> train_set = splits.train;
  if (c.train_limit > 0 && c.train_limit < train_set->size())
    train_set = std::make_shared<data::MnistDataset>(splits.train->shared_data(), 0, c.train_limit);
  if (c.augment_pad > 0 || c.augment_flip == "on")
    train_set = std::make_shared<data::AugmentedImages>(
        train_set, data::ImageAugmentOptions()
                       .pad(c.augment_pad)
                       .hflip(c.augment_flip == "on")
                       .fill(-data::kFashionMnistMean / data::kFashionMnistStd)
                       .seed(uint64_t(c.seed) * 7919 + 3));
  if (train_set->size() < c.batch)
    app::exit_with_usage_error(kProgram, "--batch " + std::to_string(c.batch) + " is larger than the " +
                                             std::to_string(train_set->size()) + " training images; expected --batch <= " +
                                             std::to_string(train_set->size()));

  const ImageModelSpec spec{1, raw.rows, raw.cols, std::max<int64_t>(raw.classes, 2), c.width};
  const std::shared_ptr<nn::UnaryModule> model =
      app::or_usage_error(kProgram, [&] { return make_image_model(c.model, spec); });
  if (!c.save_init.empty()) safetensors::save(c.save_init, model->state_dict());
  model->to(dtype);
  model->to(device);
  const std::unique_ptr<optim::LocalOptimizer> optimizer =
      optim::make_optimizer(c.optimizer, model->parameters(), c.lr, c.weight_decay);

  data::DataLoader loader(train_set, data::DataLoaderOptions()
                                         .batch_size(c.batch)
                                         .shuffle(true)
                                         .drop_last(true)
                                         .seed(uint64_t(c.seed))
                                         .workers(threads.workers)
                                         .device(device));
  const int64_t per_epoch = loader.batches_per_epoch();
  const int64_t steps = c.steps > 0 ? c.steps : std::max<int64_t>(c.epochs * per_epoch, 1);
  const int64_t validated = evaluated_count(*splits.validation, c.eval_limit);
  safetensors::NamedTensors saved_batches;  // --save-batches: what the first steps saw, for the PyTorch side by side
  train::Trainer trainer(
      *model, *optimizer, loader,
      [&](const data::Batch& b) {
        if (!c.save_batches.empty() && saved_batches.size() < 2 * 64) {
          const std::string k = std::to_string(saved_batches.size() / 2);
          saved_batches.emplace_back("images." + k, b[0].to(kCPU).clone());
          saved_batches.emplace_back("labels." + k, b[1].to(kCPU).clone());
        }
        return cross_entropy((*model)(b[0].to(dtype)), b[1]);
      },
      train::TrainerOptions()
          .steps(steps)
          .stop_after(c.stop_after)
          .eval_every(c.eval_every > 0 ? c.eval_every : per_epoch)
          .log_every(std::max<int64_t>(per_epoch / 4, 1))
          .metric_name("val_accuracy")
          .metric_mode(train::StopMode::max)
          .checkpoint_dir(c.checkpoint_dir)
          .checkpoint_every(c.checkpoint_every)
          .resume(c.resume)
          .run_config(c.flags.run_config(zoo_resume_rules()))
          .monitor(train::MonitorOptions().metrics_path(c.metrics_log)));
  trainer.schedule(std::make_shared<optim::WarmupCosine>(c.lr, std::min(c.warmup, steps - 1), steps, c.lr / 20));
  if (dtype == DType::f16) trainer.loss_scaler(train::parse_loss_scale("", dtype));
  trainer.evaluator([&] {
    const double share = accuracy(*model, *splits.validation, validated, device, dtype);
    return train::Evaluation{share, percent_text("validation", share, validated)};
  });

  std::printf("zoo %s: %lldx%lld images, %lld training (%lld steps of %lld, %.1f epochs) on %s in %s | %.1fk "
              "parameters | %s %s lr %g wd %g | augment pad %lld flip %s | %s\n",
              c.model.c_str(), (long long)raw.rows, (long long)raw.cols, (long long)train_set->size(),
              (long long)steps, (long long)c.batch, double(steps) / double(per_epoch), device.str().c_str(),
              train::precision_name(dtype), double(model->parameter_count()) / 1e3, c.optimizer.c_str(),
              "warmup-cosine", c.lr, c.weight_decay, (long long)c.augment_pad, c.augment_flip.c_str(),
              threads.describe().c_str());
  trainer.fit();

  const int64_t tested = evaluated_count(*splits.test, c.eval_limit);
  NoGradGuard no_grad;
  model->eval();
  const double test = accuracy(*model, *splits.test, tested, device, dtype);
  std::printf("%s\n", percent_text("test", test, tested).c_str());
  if (!c.save.empty()) trainer.save_model(c.save);
  if (!c.save_batches.empty()) safetensors::save(c.save_batches, saved_batches);
  return 0;
}

}  // namespace hg::samples::zoo
