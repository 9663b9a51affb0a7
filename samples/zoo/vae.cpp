// zoo --model vae: a variational autoencoder of Fashion-MNIST's images (samples/zoo/generative_models.h).
#include <algorithm>
#include <cstdio>

#include "metrics/image_grid.h"
#include "samples/zoo/generative.h"
#include "samples/zoo/generative_models.h"
#include "samples/zoo/zoo_training.h"
#include "train/precision.h"

namespace hg::samples::zoo {

namespace {

constexpr uint64_t kEvalNoiseSeed = 0x5eed0fe1b0;  // the noise of every evaluation: one estimate each time

// The first `count` images of `dataset` [count, C, H, W] f32 on the CPU, without their labels.
Tensor first_images(const data::Dataset& dataset, int64_t count) { return data::read_examples(dataset, 0, count)[0]; }

// The mean negative ELBO (nats per image) of the first `count` images, one draw of z per image from a
// generator seeded the same at every call.
double negative_elbo(VAE& model, const data::Dataset& dataset, int64_t count, const Device& device, DType dtype) {
  return with_seeded_generator(kEvalNoiseSeed, [&] {
    double total = 0.0;
    const Tensor images = first_images(dataset, count);
    for (int64_t first = 0; first < count; first += 500) {
      const int64_t n = std::min<int64_t>(500, count - first);
      const Tensor x = images.narrow(0, first, n).to(device).to(dtype);
      total += vae_loss(model.forward(x), x).item() * double(n);
    }
    return count > 0 ? total / double(count) : 0.0;
  });
}

void save_grid(const std::string& path, const Tensor& images) {
  const Tensor pixels = images.to(kCPU).to(DType::f32).contiguous();
  metrics::save_image_grid(path, {static_cast<const float*>(pixels.data_ptr()), pixels.size(0), pixels.size(1),
                                  pixels.size(2), pixels.size(3)});
}

// --images: 64 samples of z ~ N(0, I) decoded (the means of p(x | z)), and 32 test images above their
// reconstructions from z = mu, row by row.
void save_vae_grids(VAE& model, const data::Dataset& test, const std::string& dir, const Device& device, DType dtype) {
  const Tensor z = with_seeded_generator(kEvalNoiseSeed + 1, [&] { return randn({64, model.latent()}); });
  save_grid(dir + "/vae-samples.png", sigmoid(model.decode(z.to(device).to(dtype))));
  const int64_t shown = std::min<int64_t>(32, test.size());
  const Tensor originals = first_images(test, shown);
  const VAE::Output out = model.forward(originals.to(device).to(dtype), zeros({shown, model.latent()}, dtype, device));
  const Tensor reconstructions = sigmoid(out.logits).to(kCPU).to(DType::f32);
  std::vector<Tensor> rows;  // 8 originals, their 8 reconstructions, ...
  for (int64_t first = 0; first < shown; first += 8) {
    const int64_t n = std::min<int64_t>(8, shown - first);
    rows.push_back(originals.narrow(0, first, n));
    rows.push_back(reconstructions.narrow(0, first, n));
  }
  save_grid(dir + "/vae-reconstructions.png", cat(rows, 0));
  std::printf("wrote %s/vae-samples.png and %s/vae-reconstructions.png\n", dir.c_str(), dir.c_str());
}

std::string elbo_text(const char* what, double loss, int64_t count) {
  char text[128];
  std::snprintf(text, sizeof text, "%s negative ELBO %.2f nats/image (%lld images)", what, loss, (long long)count);
  return text;
}

}  // namespace

int train_vae(const ZooConfig& c) {
  const RunSetup run = start_run(c);
  make_images_dir(c);
  const Device& device = run.device;
  const DType dtype = run.dtype;

  // Pixels in [0, 1]: the decoder's Bernoulli means.
  const GenerativeImages images = load_generative_images(c, 0.0, 1.0);
  const data::MnistSplits& splits = images.splits;
  const data::MnistData& raw = splits.train->data();
  const std::shared_ptr<const data::Dataset>& train_set = images.train;

  const auto model = std::make_shared<VAE>(ImageModelSpec{1, raw.rows, raw.cols, 0, c.width});
  const std::unique_ptr<optim::LocalOptimizer> optimizer = prepare_model(*model, c, run);
  data::DataLoader loader(train_set, loader_options(c, run.threads.workers, device));
  const int64_t per_epoch = loader.batches_per_epoch(), steps = planned_steps(c, per_epoch);
  BatchRecorder recorder(c.save_batches, {"image", "label", "noise"});
  train::Trainer trainer(
      *model, *optimizer, loader,
      [&](const data::Batch& b) {
        const Tensor x = b[0].to(dtype), eps = randn({x.size(0), model->latent()}, dtype, device);
        recorder.record(b, {eps});
        return vae_loss(model->forward(x, eps), x);
      },
      trainer_options(c, steps, per_epoch, "val_loss", train::StopMode::min));
  set_schedule(trainer, c, steps);
  set_loss_scale(trainer, run);
  trainer.evaluator([&] {
    const int64_t n = held_out_count(c, *splits.validation);
    const double loss = negative_elbo(*model, *splits.validation, n, device, dtype);
    return train::Evaluation{loss, elbo_text("validation", loss, n)};
  });

  std::printf(
      "zoo vae: %lldx%lld images, %lld training (%lld steps of %lld, %.1f epochs) on %s in %s | %.1fk parameters, "
      "latent %lld | %s lr %g wd %g | %s\n",
      (long long)raw.rows, (long long)raw.cols, (long long)train_set->size(), (long long)steps, (long long)c.batch,
      double(steps) / double(per_epoch), device.str().c_str(), train::precision_name(dtype),
      double(model->parameter_count()) / 1e3, (long long)model->latent(), c.optimizer.c_str(), c.lr, c.weight_decay,
      run.threads.describe().c_str());
  trainer.fit();

  NoGradGuard no_grad;
  model->eval();
  const int64_t tested = held_out_count(c, *splits.test);
  std::printf("%s\n", elbo_text("test", negative_elbo(*model, *splits.test, tested, device, dtype), tested).c_str());
  if (!c.images.empty()) save_vae_grids(*model, *splits.test, c.images, device, dtype);
  if (!c.save.empty()) trainer.save_model(c.save);
  recorder.save();
  return 0;
}

}  // namespace hg::samples::zoo
