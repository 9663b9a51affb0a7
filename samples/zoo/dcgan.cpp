// zoo --model dcgan: a DCGAN of Fashion-MNIST's images (samples/zoo/generative_models.h), trained by the
// Trainer's user-defined step (train/custom_step.h) with two optimizers, the discriminator's and the
// generator's.
#include <algorithm>
#include <cstdio>

#include "metrics/image_grid.h"
#include "optim/adam.h"
#include "optim/by_name.h"
#include "samples/zoo/generative.h"
#include "samples/zoo/generative_models.h"
#include "samples/zoo/zoo_training.h"
#include "train/precision.h"

namespace hg::samples::zoo {

namespace {

constexpr uint64_t kFixedNoiseSeed = 0xdc6a2;  // the z of every sample grid: one epoch's next to another's

// --optimizer adam (the recipe's) is Radford et al.'s Adam with betas (0.5, 0.999); any other is optim/by_name.h's.
std::unique_ptr<optim::LocalOptimizer> gan_optimizer(const ZooConfig& c, std::vector<Tensor> params) {
  if (c.optimizer == "adam")
    return std::make_unique<optim::Adam>(std::move(params),
                                         optim::AdamOptions().lr(c.lr).betas(0.5, 0.999).weight_decay(c.weight_decay));
  return optim::make_optimizer(c.optimizer, std::move(params), c.lr, c.weight_decay);
}

// The standard GAN losses on logits: the discriminator tells real (1) from generated (0); the generator
// wants its images called real (the non-saturating loss of Goodfellow et al.).
Tensor says_real(const Tensor& logits) { return binary_cross_entropy_with_logits(logits, ones_like(logits)); }
Tensor says_fake(const Tensor& logits) { return binary_cross_entropy_with_logits(logits, zeros_like(logits)); }

// The generator's images of z, as floats in [-1, 1] on the CPU, in eval mode (BatchNorm's running statistics).
Tensor generate(DCGAN& gan, const Tensor& z) {
  NoGradGuard no_grad;
  gan.generator->eval();
  const Tensor images = (*gan.generator)(z).to(kCPU).to(DType::f32).contiguous();
  gan.generator->train();
  return images;
}

void save_samples(const std::string& path, const Tensor& images) {
  metrics::save_image_grid(
      path,
      {static_cast<const float*>(images.data_ptr()), images.size(0), images.size(1), images.size(2), images.size(3)},
      metrics::GridOptions{.low = -1.0f, .high = 1.0f});
}

// How often the discriminator calls the first `count` held-out images real, and as many generated ones real.
struct Judgement {
  double real_called_real = 0.0, fake_called_real = 0.0;
};
Judgement judge(DCGAN& gan, const data::Dataset& held_out, int64_t count, const Device& device, DType dtype) {
  return with_seeded_generator(kFixedNoiseSeed + 1, [&] {
    Judgement j;
    for (int64_t first = 0; first < count; first += 500) {
      const int64_t n = std::min<int64_t>(500, count - first);
      const Tensor images = data::read_examples(held_out, first, n)[0];
      const Tensor fakes = (*gan.generator)(randn({n, gan.latent()}, dtype, device));
      const auto called_real = [&](const Tensor& x) {
        return sum(gt((*gan.discriminator)(x), 0.0).to(DType::f32)).item();
      };
      j.real_called_real += called_real(images.to(device).to(dtype));
      j.fake_called_real += called_real(fakes);
    }
    j.real_called_real /= double(std::max<int64_t>(count, 1));
    j.fake_called_real /= double(std::max<int64_t>(count, 1));
    return j;
  });
}

}  // namespace

int train_dcgan(const ZooConfig& c) {
  const RunSetup run = start_run(c);
  const Device& device = run.device;
  const DType dtype = run.dtype;

  // Pixels in [-1, 1], the generator's Tanh range.
  const GenerativeImages images = load_generative_images(c, 0.5, 0.5);
  const data::MnistSplits& splits = images.splits;
  const data::MnistData& raw = splits.train->data();
  const std::shared_ptr<const data::Dataset>& train_set = images.train;

  const ImageModelSpec spec{1, raw.rows, raw.cols, 0, c.width};
  const auto gan = app::or_usage_error(kProgram, [&] { return std::make_shared<DCGAN>(spec); });
  place_model(*gan, c, run);
  const std::unique_ptr<optim::LocalOptimizer> d_optimizer = gan_optimizer(c, gan->discriminator->parameters()),
                                               g_optimizer = gan_optimizer(c, gan->generator->parameters());
  const optim::LossScaler scaler =
      run.dtype == DType::f16 ? train::parse_loss_scale("", run.dtype) : optim::LossScaler();
  data::DataLoader loader(train_set, loader_options(c, run.threads.workers, device));
  const int64_t per_epoch = loader.batches_per_epoch(), steps = planned_steps(c, per_epoch);
  const int64_t judged = held_out_count(c, *splits.validation);
  const Tensor fixed_noise = with_seeded_generator(kFixedNoiseSeed,
                                                   [&] {
                                                     return randn({64, gan->latent()});
                                                   })
                                 .to(device)
                                 .to(dtype);
  make_images_dir(c);

  BatchRecorder recorder(c.save_batches, {"image", "label", "noise"});
  nn::Sequential& generator = *gan->generator;
  nn::Sequential& discriminator = *gan->discriminator;
  int64_t step = 0;  // the step being taken, for the sample grids' names
  train::Trainer trainer(
      *gan, {{"D", d_optimizer.get(), nullptr, scaler}, {"G", g_optimizer.get(), nullptr, scaler}}, loader,
      [&](train::StepContext& ctx) {
        step = ctx.step();
        // The discriminator's step on real images and on the generator's (detached: no generator gradient).
        std::vector<Tensor> fakes;
        Tensor d_loss, real_logits, fake_logits;
        for (const data::Batch& b : ctx.batches()) {
          const Tensor real = b[0].to(dtype), z = randn({real.size(0), gan->latent()}, dtype, device);
          recorder.record(b, {z});
          fakes.push_back(generator(z));
          real_logits = discriminator(real);
          fake_logits = discriminator(fakes.back().detach());
          d_loss = says_real(real_logits) + says_fake(fake_logits);
          ctx.backward("D", d_loss);
        }
        ctx.step("D");
        // The generator's step through the updated discriminator.
        Tensor g_loss;
        for (const Tensor& fake : fakes) {
          g_loss = says_real(discriminator(fake));
          ctx.backward("G", g_loss);
        }
        ctx.step("G");
        ctx.log("d_loss", d_loss.detach());
        ctx.log("g_loss", g_loss.detach());
        ctx.log("D(x)", mean(sigmoid(real_logits.detach().to(DType::f32))));
        ctx.log("D(G(z))", mean(sigmoid(fake_logits.detach().to(DType::f32))));
      },
      trainer_options(c, steps, per_epoch, "val_fake_called_real", train::StopMode::max));
  trainer.evaluator([&] {
    const Judgement j = judge(*gan, *splits.validation, judged, device, dtype);
    std::string text = "the discriminator calls " + std::to_string(int(100 * j.real_called_real + 0.5)) + "% of " +
                       std::to_string(judged) + " validation images real, and " +
                       std::to_string(int(100 * j.fake_called_real + 0.5)) + "% of as many generated ones";
    if (!c.images.empty()) {
      const std::string path = c.images + "/dcgan-step-" + std::to_string(step) + ".png";
      save_samples(path, generate(*gan, fixed_noise));
      text += "; samples in " + path;
    }
    return train::Evaluation{j.fake_called_real, text, {{"val_real_called_real", j.real_called_real}}};
  });

  std::printf(
      "zoo dcgan: %lldx%lld images, %lld training (%lld steps of %lld, %.1f epochs) on %s in %s | generator %.1fk, "
      "discriminator %.1fk parameters, latent %lld | %s lr %g wd %g | %s\n",
      (long long)raw.rows, (long long)raw.cols, (long long)train_set->size(), (long long)steps, (long long)c.batch,
      double(steps) / double(per_epoch), device.str().c_str(), train::precision_name(dtype),
      double(generator.parameter_count()) / 1e3, double(discriminator.parameter_count()) / 1e3,
      (long long)gan->latent(), c.optimizer.c_str(), c.lr, c.weight_decay, run.threads.describe().c_str());
  trainer.fit();

  if (!c.images.empty()) {
    save_samples(c.images + "/dcgan-samples.png", generate(*gan, fixed_noise));
    std::printf("wrote %s/dcgan-samples.png\n", c.images.c_str());
  }
  if (!c.save.empty()) trainer.save_model(c.save);
  recorder.save();
  return 0;
}

}  // namespace hg::samples::zoo
