// train_cnn: trains a small convolutional network to read procedurally drawn digits.
//
// Data: samples/drawn_digits.h draws each image 0-9 from pen strokes with random jitter, thickness and
// noise, from (seed, index): training images stream from one seed (never repeated), the held-out set
// comes from another. Model: two conv 3x3 (padding 1) + ReLU + 2x2 max-pool stages, then a linear
// classifier. Reports held-out accuracy. Written only against halfgrad's public headers.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "app/cli.h"
#include "app/thread_defaults.h"
#include "engine/allocator.h"
#include "engine/random.h"
#include "layers/nn.h"
#include "optim/by_name.h"
#include "optim/optim.h"
#include "samples/drawn_digits.h"
#include "train/trainer.h"

using namespace hg;

namespace {

// Every flag, bound by name to the member that holds its value.
struct Config {
  app::Flags flags{"train_cnn",
                       "Trains a small CNN (conv-relu-pool x2, linear) on procedurally drawn digits and reports "
                       "held-out accuracy." HG_THREADS_HELP};
  std::string& device = flags.add_string("device", "cpu", "device to train on: cpu, cuda or cuda:N");
  int64_t& size = flags.add_int("size", 16, "image side in pixels (a multiple of 4, 8 to 256)", 8);
  int64_t& channels = flags.add_int("channels", 16, "channels of the first conv (the second has twice as many)", 1);
  int64_t& batch = flags.add_int("batch", 64, "images per step", 1);
  int64_t& steps = flags.add_int("steps", 400, "optimizer steps", 0);
  std::string& optimizer =
      flags.add_string("optimizer", "adamw", "the optimizer: " + optim::optimizer_name_list() + " (optim/by_name.h)");
  double& lr = flags.add_double("lr", 3e-3, "peak learning rate", 0.0);
  int64_t& warmup = flags.add_int("warmup", 50, "linear warmup steps", 0);
  double& weight_decay =
      flags.add_double("weight-decay", 0.01, "weight decay (decoupled for adamw and lion, L2 for the others)", 0.0);
  int64_t& eval_every = flags.add_int("eval-every", 200, "evaluate every N steps (0: only at the end)", 0);
  int64_t& eval_images = flags.add_int("eval-images", 2000, "held-out images per evaluation", 1);
  int64_t& seed =
      flags.add_int("seed", 1337, "random seed (weights, training images; held-out images use seed + 1)", 0);
  int64_t& threads = flags.add_int(
      "threads", -1,
      "OpenMP threads (-1: OMP_NUM_THREADS when set, else 1, which suits a model this small; 0: OMP_NUM_THREADS "
      "when set, else the usable cores)",
      -1);
  int64_t& show = flags.add_int("show", 0, "draw N held-out images with the model's answers at the end", 0);

  Config(int argc, char** argv) {
    // The checks parse() cannot make, run by parse() before --print-config prints.
    flags.after_parse([this] {
      if (size % 4 != 0 || size > 256)
        app::exit_with_usage_error(
            "train_cnn", "--size " + std::to_string(size) + " must be a multiple of 4 in [8, 256] (two 2x2 poolings)");
      app::check_at_most("train_cnn", {{"channels", channels, 4096},
                                           {"batch", batch, 1 << 20},
                                           {"eval-images", eval_images, 1 << 24},
                                           {"threads", threads, 4096},
                                           {"show", show, 1000}});
      app::checked_device("train_cnn", device);
      const std::vector<std::string>& names = optim::optimizer_names();
      if (std::find(names.begin(), names.end(), optimizer) == names.end())
        app::exit_with_usage_error(
            "train_cnn", "unknown --optimizer \"" + optimizer + "\"; expected " + optim::optimizer_name_list());
    });
    flags.parse(argc, argv);
  }
  Config(const Config&) = delete;
};

std::shared_ptr<nn::Sequential> make_model(const Config& o) {
  const int64_t c = o.channels, side = o.size / 4;
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Conv2d>(nn::Conv2dOptions(1, c, 3).padding(1)));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::MaxPool2d>(2));
  model->push_back(std::make_shared<nn::Conv2d>(nn::Conv2dOptions(c, 2 * c, 3).padding(1)));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::MaxPool2d>(2));
  model->push_back(std::make_shared<nn::Flatten>());
  model->push_back(std::make_shared<nn::Linear>(2 * c * side * side, 10));
  return model;
}

// Predicted classes (i64, on the CPU) of a batch of images.
Tensor predict(nn::Sequential& model, const Tensor& images, const Device& device) {
  return max(model(images.to(device)), 1).second.to(kCPU);
}

// Share of the first `count` held-out images classified right (the Trainer evaluates in eval mode, without grad).
double accuracy(nn::Sequential& model, const samples::DrawnDigits& held_out, int64_t count, const Device& device) {
  int64_t right = 0;
  for (int64_t first = 0; first < count; first += 500) {
    const int64_t n = std::min<int64_t>(500, count - first);
    auto [images, labels] = held_out.batch(first, n);
    const std::vector<int64_t> predicted = predict(model, images, device).to_vector<int64_t>();
    const std::vector<int64_t> truth = labels.to_vector<int64_t>();
    for (int64_t i = 0; i < n; ++i) right += predicted[size_t(i)] == truth[size_t(i)];
  }
  return double(right) / double(count);
}

void show_images(nn::Sequential& model, const samples::DrawnDigits& held_out, int64_t count, const Device& device) {
  NoGradGuard no_grad;
  model.eval();
  auto [images, labels] = held_out.batch(0, count);
  const std::vector<int64_t> predicted = predict(model, images, device).to_vector<int64_t>();
  for (int64_t i = 0; i < count; ++i) {
    const std::vector<float> pixels = images.select(0, i).to_vector<float>();
    std::vector<float> ink(pixels.size());
    for (size_t k = 0; k < ink.size(); ++k) ink[k] = pixels[k] / 2.5f + 0.18f;
    std::printf("%sheld-out image %lld: label %lld, model says %lld\n\n", held_out.ascii(ink).c_str(), (long long)i,
                (long long)labels.to_vector<int64_t>()[size_t(i)], (long long)predicted[size_t(i)]);
  }
}

int run(const Config& o) {
  // The thread count and wait policy in force (app/thread_defaults.h); no loader workers here.
  const app::ThreadSettings threads = app::apply_thread_settings(o.threads, std::nullopt, false, false, 1);
  manual_seed(uint64_t(o.seed));
  const Device device = Device::parse(o.device);
  // Training images stream from one seed (batch k is images k*B..k*B+B-1, never repeated), the
  // held-out set comes from another.
  const auto train_digits =
      std::make_shared<samples::DrawnDigits>(o.size, uint64_t(o.seed), std::max<int64_t>(o.steps, 1) * o.batch);
  const samples::DrawnDigits held_out(o.size, uint64_t(o.seed) + 1);
  auto model = make_model(o);
  model->to(device);
  const std::unique_ptr<optim::LocalOptimizer> optimizer =
      optim::make_optimizer(o.optimizer, model->parameters(), o.lr, o.weight_decay);
  data::DataLoader loader(train_digits, data::DataLoaderOptions().batch_size(o.batch).shuffle(false).device(device));
  train::Trainer trainer(
      *model, *optimizer, loader, [&](const data::Batch& b) { return cross_entropy((*model)(b[0]), b[1]); },
      train::TrainerOptions()
          .steps(o.steps)
          .eval_every(o.eval_every)
          .metric_name("accuracy")
          .metric_mode(train::StopMode::max));
  const int64_t total_steps = std::max<int64_t>(o.steps, 1);
  trainer
      .schedule(
          std::make_shared<optim::WarmupCosine>(o.lr, std::min(o.warmup, total_steps - 1), total_steps, o.lr / 20))
      .evaluator([&] {
        const double held_out_accuracy = accuracy(*model, held_out, o.eval_images, device);
        char text[96];
        std::snprintf(text, sizeof text, "held-out accuracy %.2f%% (%lld images)", 100.0 * held_out_accuracy,
                      (long long)o.eval_images);
        return train::Evaluation{held_out_accuracy, text};
      });

  std::printf(
      "train_cnn: drawn digits %lldx%lld on %s | conv%lld-pool-conv%lld-pool-linear, %.1fk parameters | "
      "batch %lld | %s\n",
      (long long)o.size, (long long)o.size, device.str().c_str(), (long long)o.channels, (long long)(2 * o.channels),
      double(model->parameter_count()) / 1e3, (long long)o.batch, threads.describe().c_str());
  trainer.fit();
  if (o.show > 0) show_images(*model, held_out, o.show, device);
  return 0;
}

}  // namespace

// Nothing escapes: a usage or input error exits 2, any other error 1, on one line (app/cli.h).
int main(int argc, char** argv) {
  app::bound_openmp_spin(argv);  // before libgomp's threads or anything else exists
  return app::guarded_main("train_cnn", [&] {
    const Config config(argc, argv);
    return run(config);
  });
}
