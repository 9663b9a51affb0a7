// train_mlp: trains an MLP classifier on generated 2-D spirals and reports held-out accuracy.
//
// Data: K interleaved spiral arms (K = --classes). A point of class k at radius r in (0, 1] sits at
// angle 2 pi k / K + 2 pi turns r, plus Gaussian noise on the angle (--noise radians, scaled by r)
// and on both coordinates; training and held-out sets are drawn from different seeds. Model: an MLP
// (Linear-GELU blocks, --depth hidden layers of --width units, then Linear to K logits). Written only
// against halfgrad's public headers.
#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "engine/allocator.h"
#include "engine/random.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "samples/cli.h"
#include "samples/progress.h"

using namespace hg;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string device;
  int64_t classes, points, width, depth, batch, steps, warmup, eval_every, seed, threads;
  double turns, noise, lr, weight_decay;
};

Options parse_options(int argc, char** argv) {
  samples::Flags flags("train_mlp", "Trains an MLP to tell interleaved 2-D spiral arms apart and reports held-out accuracy.");
  auto& device = flags.add_string("device", "cpu", "device to train on: cpu, cuda or cuda:N");
  auto& classes = flags.add_int("classes", 5, "spiral arms (classes)", 2);
  auto& turns = flags.add_double("turns", 1.5, "turns of each arm", 0.0, 10.0);
  auto& noise = flags.add_double("noise", 0.2, "angular noise in radians (scaled by the radius)", 0.0, 10.0);
  auto& points = flags.add_int("points", 4000, "training points (the held-out set has as many)", 1);
  auto& width = flags.add_int("width", 128, "hidden units per layer", 1);
  auto& depth = flags.add_int("depth", 2, "hidden layers", 1);
  auto& batch = flags.add_int("batch", 128, "points per step", 1);
  auto& steps = flags.add_int("steps", 2000, "optimizer steps", 0);
  auto& lr = flags.add_double("lr", 3e-3, "peak learning rate (AdamW)", 0.0);
  auto& warmup = flags.add_int("warmup", 100, "linear warmup steps", 0);
  auto& weight_decay = flags.add_double("weight-decay", 0.0, "AdamW decoupled weight decay", 0.0);
  auto& eval_every = flags.add_int("eval-every", 500, "evaluate every N steps (0: only at the end)", 0);
  auto& seed = flags.add_int("seed", 1337, "random seed (weights, data, batches)", 0);
  auto& threads = flags.add_int("threads", 1, "CPU threads (0: all cores; one suits a model this small)", 0);
  flags.parse(argc, argv);
  const Options o{device, classes, points, width, depth, batch, steps, warmup, eval_every, seed, threads,
                  turns, noise, lr, weight_decay};
  if (o.classes > 1000) samples::exit_with_usage_error("train_mlp", "--classes must be at most 1000");
  samples::check_at_most("train_mlp", {{"points", o.points, 1 << 26}, {"width", o.width, 1 << 16},
                                       {"depth", o.depth, 1024}, {"batch", o.batch, 1 << 20},
                                       {"threads", o.threads, 4096}});
  samples::checked_device("train_mlp", o.device);
  return o;
}

struct Points {
  std::vector<float> xy;  // [n, 2]
  std::vector<int64_t> label;
};

Points spirals(const Options& o, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> radius(0.05, 1.0);
  std::normal_distribution<double> gauss(0.0, 1.0);
  Points p;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = int64_t(rng() % uint64_t(o.classes));
    const double r = radius(rng);
    const double angle = 2 * M_PI * double(k) / double(o.classes) + 2 * M_PI * o.turns * r + o.noise * r * gauss(rng);
    p.xy.push_back(float(r * std::cos(angle) + 0.01 * gauss(rng)));
    p.xy.push_back(float(r * std::sin(angle) + 0.01 * gauss(rng)));
    p.label.push_back(k);
  }
  return p;
}

std::shared_ptr<nn::Sequential> make_model(const Options& o) {
  auto model = std::make_shared<nn::Sequential>();
  int64_t in = 2;
  for (int64_t layer = 0; layer < o.depth; ++layer) {
    model->push_back(std::make_shared<nn::Linear>(in, o.width));
    model->push_back(std::make_shared<nn::GELU>());
    in = o.width;
  }
  model->push_back(std::make_shared<nn::Linear>(in, o.classes));
  return model;
}

double accuracy(nn::Sequential& model, const Points& data, const Device& device) {
  NoGradGuard no_grad;
  const int64_t n = int64_t(data.label.size());
  const Tensor logits = model(from_vector(data.xy, {n, 2}).to(device));
  const std::vector<int64_t> predicted = max(logits, 1).second.to(kCPU).to_vector<int64_t>();
  int64_t right = 0;
  for (int64_t i = 0; i < n; ++i) right += predicted[size_t(i)] == data.label[size_t(i)];
  return double(right) / double(n);
}

int run(const Options& o) {
  if (o.threads > 0) omp_set_num_threads(int(o.threads));
  manual_seed(uint64_t(o.seed));
  const Device device = Device::parse(o.device);
  const Points train = spirals(o, o.points, uint64_t(o.seed) * 2 + 1), held_out = spirals(o, o.points, uint64_t(o.seed) * 2 + 2);
  auto model = make_model(o);
  model->to(device);
  optim::AdamW optimizer(model->parameters(), optim::AdamWOptions().lr(o.lr).weight_decay(o.weight_decay));
  const int64_t total_steps = std::max<int64_t>(o.steps, 1);
  optim::WarmupCosine schedule(o.lr, std::min(o.warmup, total_steps - 1), total_steps, o.lr / 20);
  std::mt19937_64 order(uint64_t(o.seed) * 31 + 7);

  std::printf("train_mlp: %lld spiral arms, %.2f turns, %lld training points on %s | MLP 2-%lldx%lld-%lld, %.1fk "
              "parameters | batch %lld | %d threads\n",
              (long long)o.classes, o.turns, (long long)o.points, device.str().c_str(), (long long)o.width,
              (long long)o.depth, (long long)o.classes, double(model->parameter_count()) / 1e3, (long long)o.batch,
              omp_get_max_threads());
  samples::Progress progress;
  const auto start = Clock::now();
  double last_loss = NAN, held_out_accuracy = NAN;
  std::vector<float> xy(size_t(o.batch * 2));
  std::vector<int64_t> labels(size_t(o.batch));
  for (int64_t step = 1; step <= o.steps; ++step) {
    const auto step_start = Clock::now();
    for (int64_t i = 0; i < o.batch; ++i) {  // a minibatch drawn with replacement
      const size_t j = size_t(order() % uint64_t(o.points));
      xy[size_t(2 * i)] = train.xy[2 * j];
      xy[size_t(2 * i + 1)] = train.xy[2 * j + 1];
      labels[size_t(i)] = train.label[j];
    }
    const Tensor logits = (*model)(from_vector(xy, {o.batch, 2}).to(device));
    const Tensor loss = cross_entropy(logits, from_vector(labels, {o.batch}).to(device));
    loss.backward();
    optimizer.set_lr(schedule.lr(step - 1));
    optimizer.step();
    optimizer.zero_grad();
    last_loss = loss.item();
    const double ms = 1e3 * std::chrono::duration<double>(Clock::now() - step_start).count();
    const bool eval_now = (o.eval_every > 0 && step % o.eval_every == 0) || step == o.steps;
    char line[256];
    std::snprintf(line, sizeof line, "step %5lld/%lld | loss %.4f | lr %.2e | %6.2f ms/step", (long long)step,
                  (long long)o.steps, last_loss, schedule.lr(step - 1), ms);
    progress.step_line(line, eval_now);
    if (eval_now) {
      held_out_accuracy = accuracy(*model, held_out, device);
      std::snprintf(line, sizeof line, "eval  step %lld | train accuracy %.2f%% | held-out accuracy %.2f%% (%lld points)",
                    (long long)step, 100.0 * accuracy(*model, train, device), 100.0 * held_out_accuracy,
                    (long long)o.points);
      progress.line(line);
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("summary: %lld steps in %.1f s | final loss %.4f | held-out accuracy %.2f%% | %.2f ms/step\n",
              (long long)o.steps, seconds, last_loss, 100.0 * held_out_accuracy,
              o.steps > 0 ? 1e3 * seconds / double(o.steps) : 0.0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  try {
    return run(options);
  } catch (const Error& e) {
    std::fprintf(stderr, "train_mlp: error: %s\n", e.what());
    return 1;
  }
}
