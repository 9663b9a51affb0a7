// bench_zoo: one training step of each zoo model (samples/zoo/image_models.h, char_mlp.h,
// generative_models.h) at its recipe's batch, on the CPU, one JSON object per line, on the workloads of
// bench/peers/pytorch_zoo.py (run both in one session on one machine: scripts/bench-zoo-peers):
//   mlp, lenet, resnet, vit at their default widths, images [128, 1, 28, 28] ~ N(0, 1), 10 classes;
//   makemore (200 hidden units) on 128 contexts of 3 random characters: forward, cross_entropy against
//   fixed random labels, backward, AdamW (lr 1e-3, weight decay 0.01, PyTorch's defaults otherwise);
//   vae on images ~ U(0, 1): noise drawn, forward, negative ELBO, backward, Adam (lr 1e-3);
//   seq2seq (width 64) on 128 random sources [128, 6] of digit ids 1..10 and decoder inputs [128, 10] of word
//   ids 1..32 (no padding; the masks are built all the same), cross_entropy against random word ids, AdamW;
//   dcgan on images ~ U(-1, 1): noise drawn, the discriminator's step on real and detached generated
//   images, then the generator's through it, each with Adam (lr 2e-4, betas (0.5, 0.999));
//   diffusion (width 16) on images ~ U(-1, 1): steps t and noise drawn, x_t formed, the U-Net's noise
//   prediction, its MSE, backward, AdamW (lr 1e-3, no weight decay).
// Gradients dropped after each step; BatchNorm in training mode.
// Fields: bench "zoo", model, impl "halfgrad", dtype, threads, batch, best_ms, median_ms (of `repeats`
// steps after two warm-up steps).
// Usage: bench_zoo [--quick] [--only NAME] [--batch N]
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "bench_args.h"
#include "engine/random.h"
#include "json_line.h"
#include "optim/adam.h"
#include "optim/adamw.h"
#include "samples/zoo/char_mlp.h"
#include "samples/zoo/diffusion_model.h"
#include "samples/zoo/generative_models.h"
#include "samples/zoo/image_models.h"
#include "samples/zoo/number_words.h"
#include "samples/zoo/seq2seq_model.h"
#include "timing.h"

using namespace hg;

namespace {

constexpr const char* kUsage =
    "usage: bench_zoo [--quick] [--only NAME] [--batch N]\n"
    "One training step (forward, loss, backward, optimizer) of each zoo model on a batch of 28 x 28 images\n"
    "(makemore: of 3-character contexts), on the CPU with OMP_NUM_THREADS threads; one JSON line each.\n"
    "The same workloads in PyTorch: bench/peers/pytorch_zoo.py (scripts/bench-zoo-peers runs both).\n"
    "  --quick      3 timed steps instead of 20 (smoke runs)\n"
    "  --only NAME  only the model NAME (mlp, lenet, resnet, vit, makemore, vae, dcgan, diffusion, seq2seq)\n"
    "  --batch N    images per step (default 128, the recipes')\n"
    "  -h, --help   this text\n";

// One model's training step, with what it owns.
struct Workload {
  std::shared_ptr<nn::Module> model;
  std::vector<std::unique_ptr<optim::LocalOptimizer>> optimizers;
  std::function<void()> step;
};

Workload classifier(const std::string& name, int64_t batch) {
  const bool chars = name == "makemore";
  const std::shared_ptr<nn::UnaryModule> model =
      chars ? std::static_pointer_cast<nn::UnaryModule>(samples::zoo::make_char_mlp(0))
            : samples::zoo::make_image_model(name, samples::zoo::ImageModelSpec{1, 28, 28, 10, 0});
  Workload w{model, {}, {}};
  w.optimizers.push_back(
      std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions().lr(1e-3).weight_decay(0.01)));
  const Tensor inputs =
      chars ? randint(0, 27, {batch, samples::zoo::kMakemoreBlock}, DType::i64) : randn({batch, 1, 28, 28});
  const Tensor labels = randint(0, chars ? 27 : 10, {batch}, DType::i64);
  optim::LocalOptimizer* optimizer = w.optimizers[0].get();
  w.step = [model, optimizer, inputs, labels] {
    cross_entropy((*model)(inputs), labels).backward();
    optimizer->step();
    optimizer->zero_grad();
  };
  return w;
}

Workload vae(int64_t batch) {
  const auto model = std::make_shared<samples::zoo::VAE>(samples::zoo::ImageModelSpec{1, 28, 28, 0, 0});
  Workload w{model, {}, {}};
  w.optimizers.push_back(std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions().lr(1e-3)));
  const Tensor images = rand({batch, 1, 28, 28});
  optim::LocalOptimizer* optimizer = w.optimizers[0].get();
  w.step = [model, optimizer, images] {
    samples::zoo::vae_loss(model->forward(images), images).backward();
    optimizer->step();
    optimizer->zero_grad();
  };
  return w;
}

Workload diffusion(int64_t batch) {
  const auto model = std::make_shared<samples::zoo::DiffusionUNet>(samples::zoo::ImageModelSpec{1, 28, 28, 0, 0});
  Workload w{model, {}, {}};
  w.optimizers.push_back(
      std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions().lr(1e-3).weight_decay(0.0)));
  const Tensor images = rand({batch, 1, 28, 28}) * 2.0 - 1.0;
  const auto schedule = std::make_shared<samples::zoo::NoiseSchedule>();
  optim::LocalOptimizer* optimizer = w.optimizers[0].get();
  w.step = [model, optimizer, images, schedule] {
    const Tensor t = randint(0, schedule->steps(), {images.size(0)});
    samples::zoo::diffusion_loss(*model, *schedule, images, randn(images.shape()), t).backward();
    optimizer->step();
    optimizer->zero_grad();
  };
  return w;
}

Workload seq2seq(int64_t batch) {
  using namespace samples::zoo;
  const auto model = std::make_shared<Seq2SeqTransformer>(
      Seq2SeqSpec{kSourceVocabulary, int64_t(target_vocabulary().size()), kNumberDigits, kNumberWords, 0});
  Workload w{model, {}, {}};
  w.optimizers.push_back(
      std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions().lr(1e-3).weight_decay(0.01)));
  const int64_t words = int64_t(target_vocabulary().size());
  const Tensor source = randint(1, kSourceVocabulary, {batch, kNumberDigits}, DType::i64);
  const Tensor decoder_input = randint(1, words, {batch, kNumberWords}, DType::i64);
  const Tensor target = randint(1, words, {batch * kNumberWords}, DType::i64);
  optim::LocalOptimizer* optimizer = w.optimizers[0].get();
  w.step = [model, optimizer, source, decoder_input, target] {
    const Tensor logits = model->forward(source, decoder_input);
    cross_entropy(logits.reshape({-1, logits.size(2)}), target).backward();
    optimizer->step();
    optimizer->zero_grad();
  };
  return w;
}

Workload dcgan(int64_t batch) {
  const auto gan = std::make_shared<samples::zoo::DCGAN>(samples::zoo::ImageModelSpec{1, 28, 28, 0, 0});
  Workload w{gan, {}, {}};
  const auto options = optim::AdamOptions().lr(2e-4).betas(0.5, 0.999);
  w.optimizers.push_back(std::make_unique<optim::Adam>(gan->discriminator->parameters(), options));
  w.optimizers.push_back(std::make_unique<optim::Adam>(gan->generator->parameters(), options));
  const Tensor real = rand({batch, 1, 28, 28}) * 2.0 - 1.0;
  optim::LocalOptimizer *d_opt = w.optimizers[0].get(), *g_opt = w.optimizers[1].get();
  w.step = [gan, d_opt, g_opt, real] {
    nn::Sequential &g = *gan->generator, &d = *gan->discriminator;
    const auto bce = [](const Tensor& logits, double label) {
      return binary_cross_entropy_with_logits(logits, full_like(logits, label));
    };
    const Tensor fake = g(randn({real.size(0), gan->latent()}));
    (bce(d(real), 1.0) + bce(d(fake.detach()), 0.0)).backward();
    d_opt->step();
    d_opt->zero_grad();
    bce(d(fake), 1.0).backward();
    g_opt->step();
    g_opt->zero_grad();
    d_opt->zero_grad();  // the generator's backward went through the discriminator
  };
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string only;
  int64_t batch = 128;
  for (int i = 1; i < argc; ++i) {
    if (bench::is_help(argv[i])) bench::exit_with_usage(kUsage);
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else if (std::strcmp(argv[i], "--batch") == 0 && i + 1 < argc && std::atoll(argv[i + 1]) > 0) {
      batch = std::atoll(argv[++i]);
    } else {
      bench::exit_unknown_argument("bench_zoo", argv[i], kUsage);
    }
  }
  manual_seed(1);
  std::vector<std::string> names = samples::zoo::image_model_names();
  names.insert(names.end(), {"makemore", "vae", "dcgan", "diffusion", "seq2seq"});
  for (const std::string& name : names) {
    if (!only.empty() && name != only) continue;
    const Workload workload = name == "vae"         ? vae(batch)
                              : name == "dcgan"     ? dcgan(batch)
                              : name == "diffusion" ? diffusion(batch)
                              : name == "seq2seq"   ? seq2seq(batch)
                                                    : classifier(name, batch);
    const std::function<void()>& step = workload.step;
    const int repeats = quick ? 3 : 20;
    // Two warm-up steps: AdamW's state, the allocator's pools, plan caches.
    const std::vector<double> times = bench::timed_calls(repeats, step, 2);
    const double best = *std::min_element(times.begin(), times.end());
    bench::JsonLine("zoo")
        .add("model", name)
        .add("impl", "halfgrad")
        .add("dtype", "f32")
        .add("threads", (long long)omp_get_max_threads())
        .add("batch", (long long)batch)
        .add("best_ms", best * 1e3)
        .add("median_ms", bench::median(times) * 1e3)
        .print();
  }
  return 0;
}
