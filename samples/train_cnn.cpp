// train_cnn: trains a small convolutional network to read procedurally drawn digits.
//
// Data: samples/drawn_digits.h draws each image 0-9 from pen strokes with random jitter, thickness and
// noise, from (seed, index): training images stream from one seed (never repeated), the held-out set
// comes from another. Model: two conv 3x3 (padding 1) + ReLU + 2x2 max-pool stages, then a linear
// classifier. Reports held-out accuracy. Written only against halfgrad's public headers.
#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "engine/allocator.h"
#include "engine/random.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "samples/cli.h"
#include "samples/drawn_digits.h"
#include "samples/progress.h"

using namespace hg;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string device;
  int64_t size, channels, batch, steps, warmup, eval_every, eval_images, seed, threads, show;
  double lr, weight_decay;
};

Options parse_options(int argc, char** argv) {
  samples::Flags flags("train_cnn",
                       "Trains a small CNN (conv-relu-pool x2, linear) on procedurally drawn digits and reports "
                       "held-out accuracy.");
  auto& device = flags.add_string("device", "cpu", "device to train on: cpu, cuda or cuda:N");
  auto& size = flags.add_int("size", 16, "image side in pixels (a multiple of 4, 8 to 256)", 8);
  auto& channels = flags.add_int("channels", 16, "channels of the first conv (the second has twice as many)", 1);
  auto& batch = flags.add_int("batch", 64, "images per step", 1);
  auto& steps = flags.add_int("steps", 400, "optimizer steps", 0);
  auto& lr = flags.add_double("lr", 3e-3, "peak learning rate (AdamW)", 0.0);
  auto& warmup = flags.add_int("warmup", 50, "linear warmup steps", 0);
  auto& weight_decay = flags.add_double("weight-decay", 0.01, "AdamW decoupled weight decay", 0.0);
  auto& eval_every = flags.add_int("eval-every", 200, "evaluate every N steps (0: only at the end)", 0);
  auto& eval_images = flags.add_int("eval-images", 2000, "held-out images per evaluation", 1);
  auto& seed = flags.add_int("seed", 1337, "random seed (weights, training images; held-out images use seed + 1)", 0);
  auto& threads = flags.add_int("threads", 1, "CPU threads (0: all cores; one suits a model this small)", 0);
  auto& show = flags.add_int("show", 0, "draw N held-out images with the model's answers at the end", 0);
  flags.parse(argc, argv);
  const Options o{device, size, channels, batch, steps, warmup, eval_every, eval_images, seed, threads, show,
                  lr, weight_decay};
  if (o.size % 4 != 0 || o.size > 256)
    samples::exit_with_usage_error("train_cnn", "--size " + std::to_string(o.size) +
                                                    " must be a multiple of 4 in [8, 256] (two 2x2 poolings)");
  samples::check_at_most("train_cnn", {{"channels", o.channels, 4096}, {"batch", o.batch, 1 << 20},
                                       {"eval-images", o.eval_images, 1 << 24}, {"threads", o.threads, 4096},
                                       {"show", o.show, 1000}});
  samples::checked_device("train_cnn", o.device);
  return o;
}

std::shared_ptr<nn::Sequential> make_model(const Options& o) {
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

double accuracy(nn::Sequential& model, const samples::DrawnDigits& held_out, int64_t count, const Device& device) {
  NoGradGuard no_grad;
  model.eval();
  int64_t right = 0;
  for (int64_t first = 0; first < count; first += 500) {
    const int64_t n = std::min<int64_t>(500, count - first);
    auto [images, labels] = held_out.batch(first, n);
    const std::vector<int64_t> predicted = predict(model, images, device).to_vector<int64_t>();
    const std::vector<int64_t> truth = labels.to_vector<int64_t>();
    for (int64_t i = 0; i < n; ++i) right += predicted[size_t(i)] == truth[size_t(i)];
  }
  model.train();
  return double(right) / double(count);
}

int run(const Options& o) {
  if (o.threads > 0) omp_set_num_threads(int(o.threads));
  manual_seed(uint64_t(o.seed));
  const Device device = Device::parse(o.device);
  const samples::DrawnDigits train_digits(o.size, uint64_t(o.seed)), held_out(o.size, uint64_t(o.seed) + 1);
  auto model = make_model(o);
  model->to(device);
  optim::AdamW optimizer(model->parameters(), optim::AdamWOptions().lr(o.lr).weight_decay(o.weight_decay));
  const int64_t total_steps = std::max<int64_t>(o.steps, 1);
  optim::WarmupCosine schedule(o.lr, std::min(o.warmup, total_steps - 1), total_steps, o.lr / 20);

  std::printf("train_cnn: drawn digits %lldx%lld on %s | conv%lld-pool-conv%lld-pool-linear, %.1fk parameters | "
              "batch %lld | %d threads\n",
              (long long)o.size, (long long)o.size, device.str().c_str(), (long long)o.channels,
              (long long)(2 * o.channels), double(model->parameter_count()) / 1e3, (long long)o.batch,
              omp_get_max_threads());
  samples::Progress progress;
  const auto start = Clock::now();
  double last_loss = NAN, held_out_accuracy = NAN;
  for (int64_t step = 1; step <= o.steps; ++step) {
    const auto step_start = Clock::now();
    auto [images, labels] = train_digits.batch((step - 1) * o.batch, o.batch);
    const Tensor loss = cross_entropy((*model)(images.to(device)), labels.to(device));
    loss.backward();
    optimizer.set_lr(schedule.lr(step - 1));
    optimizer.step();
    optimizer.zero_grad();
    last_loss = loss.item();
    const double ms = 1e3 * std::chrono::duration<double>(Clock::now() - step_start).count();
    const bool eval_now = (o.eval_every > 0 && step % o.eval_every == 0) || step == o.steps;
    char line[256];
    std::snprintf(line, sizeof line, "step %5lld/%lld | loss %.4f | lr %.2e | %6.1f ms/step | %7.0f images/s",
                  (long long)step, (long long)o.steps, last_loss, schedule.lr(step - 1), ms, 1e3 * double(o.batch) / ms);
    progress.step_line(line, eval_now);
    if (eval_now) {
      held_out_accuracy = accuracy(*model, held_out, o.eval_images, device);
      std::snprintf(line, sizeof line, "eval  step %lld | held-out accuracy %.2f%% (%lld images)", (long long)step,
                    100.0 * held_out_accuracy, (long long)o.eval_images);
      progress.line(line);
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (o.show > 0) {
    NoGradGuard no_grad;
    model->eval();
    auto [images, labels] = held_out.batch(0, o.show);
    const std::vector<int64_t> predicted = predict(*model, images, device).to_vector<int64_t>();
    for (int64_t i = 0; i < o.show; ++i) {
      const std::vector<float> pixels = images.select(0, i).to_vector<float>();
      std::vector<float> ink(pixels.size());
      for (size_t k = 0; k < ink.size(); ++k) ink[k] = pixels[k] / 2.5f + 0.18f;
      std::printf("%sheld-out image %lld: label %lld, model says %lld\n\n", train_digits.ascii(ink).c_str(),
                  (long long)i, (long long)labels.to_vector<int64_t>()[size_t(i)], (long long)predicted[size_t(i)]);
    }
  }
  std::printf("summary: %lld steps in %.1f s | final loss %.4f | held-out accuracy %.2f%% | %.1f ms/step | "
              "peak memory %.1f MiB\n",
              (long long)o.steps, seconds, last_loss, 100.0 * held_out_accuracy,
              o.steps > 0 ? 1e3 * seconds / double(o.steps) : 0.0,
              double(memory_stats(device).peak_allocated_bytes) / (1024.0 * 1024.0));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  try {
    return run(options);
  } catch (const Error& e) {
    std::fprintf(stderr, "train_cnn: error: %s\n", e.what());
    return 1;
  }
}
