// zoo --model diffusion: a tiny DDPM of Fashion-MNIST's images (samples/zoo/diffusion_model.h), judged by the
// noise-prediction loss of held-out images and by what it draws (--images).
#include <algorithm>
#include <cstdio>

#include "metrics/image_grid.h"
#include "samples/zoo/diffusion_model.h"
#include "samples/zoo/generative.h"
#include "samples/zoo/zoo_training.h"
#include "train/precision.h"

namespace hg::samples::zoo {

namespace {

constexpr uint64_t kEvalNoiseSeed = 0xd1ff0e5;  // the steps and noise of every evaluation: one estimate each time

// The mean loss over the first `count` images of `dataset`, each at a step and with noise drawn from a
// generator seeded the same at every call, so that one evaluation compares with the next.
double held_out_loss(DiffusionUNet& model, const NoiseSchedule& schedule, const data::Dataset& dataset, int64_t count,
                     const Device& device, DType dtype) {
  NoGradGuard no_grad;
  return with_seeded_generator(kEvalNoiseSeed, [&] {
    double total = 0.0;
    for (int64_t first = 0; first < count; first += 500) {
      const int64_t n = std::min<int64_t>(500, count - first);
      const Tensor x0 = data::read_examples(dataset, first, n)[0].to(device).to(dtype);
      const Tensor t = randint(0, schedule.steps(), {n});
      const Tensor noise = randn(x0.shape(), dtype, device);
      total += diffusion_loss(model, schedule, x0, noise, t).item() * double(n);
    }
    return count > 0 ? total / double(count) : 0.0;
  });
}

std::string loss_text(const char* what, double loss, int64_t count) {
  char text[128];
  std::snprintf(text, sizeof text, "%s noise-prediction loss %.5f (%lld images)", what, loss, (long long)count);
  return text;
}

// --images: 64 images drawn through all of the schedule's steps from noise seeded the same in every run.
void save_samples(DiffusionUNet& model, const NoiseSchedule& schedule, const Shape& image_shape,
                  const std::string& dir) {
  const Tensor images =
      with_seeded_generator(kEvalNoiseSeed + 1, [&] { return sample_images(model, schedule, image_shape, 64); });
  const std::string path = dir + "/diffusion-samples.png";
  metrics::save_image_grid(
      path,
      {static_cast<const float*>(images.data_ptr()), images.size(0), images.size(1), images.size(2), images.size(3)},
      metrics::GridOptions{.low = -1.0f, .high = 1.0f});
  std::printf("wrote %s\n", path.c_str());
}

}  // namespace

int train_diffusion(const ZooConfig& c) {
  const RunSetup run = start_run(c);
  make_images_dir(c);
  const Device& device = run.device;
  const DType dtype = run.dtype;

  // Pixels in [-1, 1]: the scale DDPM's noise schedule is made for.
  const GenerativeImages images = load_generative_images(c, 0.5, 0.5);
  const data::MnistSplits& splits = images.splits;
  const data::MnistData& raw = splits.train->data();

  const ImageModelSpec spec{1, raw.rows, raw.cols, 0, c.width};
  const auto model = app::or_usage_error(kProgram, [&] { return std::make_shared<DiffusionUNet>(spec); });
  const NoiseSchedule schedule;
  const std::unique_ptr<optim::LocalOptimizer> optimizer = prepare_model(*model, c, run);
  data::DataLoader loader(images.train, loader_options(c, run.threads.workers, device));
  const int64_t per_epoch = loader.batches_per_epoch(), steps = planned_steps(c, per_epoch);
  BatchRecorder recorder(c.save_batches, {"image", "label", "timestep", "noise"});
  train::Trainer trainer(
      *model, *optimizer, loader,
      [&](const data::Batch& b) {
        const Tensor x0 = b[0].to(dtype);
        const Tensor t = randint(0, schedule.steps(), {x0.size(0)}), noise = randn(x0.shape(), dtype, device);
        recorder.record(b, {t, noise});
        return diffusion_loss(*model, schedule, x0, noise, t);
      },
      trainer_options(c, steps, per_epoch, "val_loss", train::StopMode::min));
  set_schedule(trainer, c, steps);
  set_loss_scale(trainer, run);
  trainer.evaluator([&] {
    const int64_t n = held_out_count(c, *splits.validation);
    const double loss = held_out_loss(*model, schedule, *splits.validation, n, device, dtype);
    return train::Evaluation{loss, loss_text("validation", loss, n)};
  });

  std::printf(
      "zoo diffusion: %lldx%lld images, %lld training (%lld steps of %lld, %.1f epochs) on %s in %s | %.1fk "
      "parameters, %lld noise levels | %s lr %g wd %g | %s\n",
      (long long)raw.rows, (long long)raw.cols, (long long)images.train->size(), (long long)steps, (long long)c.batch,
      double(steps) / double(per_epoch), device.str().c_str(), train::precision_name(dtype),
      double(model->parameter_count()) / 1e3, (long long)schedule.steps(), c.optimizer.c_str(), c.lr, c.weight_decay,
      run.threads.describe().c_str());
  trainer.fit();

  model->eval();
  const int64_t tested = held_out_count(c, *splits.test);
  std::printf("%s\n",
              loss_text("test", held_out_loss(*model, schedule, *splits.test, tested, device, dtype), tested).c_str());
  if (!c.images.empty()) save_samples(*model, schedule, {1, raw.rows, raw.cols}, c.images);
  if (!c.save.empty()) trainer.save_model(c.save);
  recorder.save();
  return 0;
}

}  // namespace hg::samples::zoo
