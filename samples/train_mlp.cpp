// train_mlp: trains an MLP classifier on generated 2-D spirals and reports held-out accuracy.
//
// Data: K interleaved spiral arms (K = --classes). A point of class k at radius r in (0, 1] sits at
// angle 2 pi k / K + 2 pi turns r, plus Gaussian noise on the angle (--noise radians, scaled by r)
// and on both coordinates; training and held-out sets are drawn from different seeds. Model: an MLP
// (Linear-GELU blocks, --depth hidden layers of --width units, then Linear to K logits). Written only
// against halfgrad's public headers.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "app/cli.h"
#include "app/thread_defaults.h"
#include "engine/allocator.h"
#include "engine/random.h"
#include "layers/nn.h"
#include "optim/by_name.h"
#include "optim/optim.h"
#include "train/trainer.h"

using namespace hg;

namespace {

// Every flag, bound by name to the member that holds its value.
struct Config {
  app::Flags flags{
      "train_mlp",
      "Trains an MLP to tell interleaved 2-D spiral arms apart and reports held-out accuracy." HG_THREADS_HELP};
  std::string& device = flags.add_string("device", "cpu", "device to train on: cpu, cuda or cuda:N");
  int64_t& classes = flags.add_int("classes", 5, "spiral arms (classes)", 2);
  double& turns = flags.add_double("turns", 1.5, "turns of each arm", 0.0, 10.0);
  double& noise = flags.add_double("noise", 0.2, "angular noise in radians (scaled by the radius)", 0.0, 10.0);
  int64_t& points = flags.add_int("points", 4000, "training points (the held-out set has as many)", 1);
  int64_t& width = flags.add_int("width", 128, "hidden units per layer", 1);
  int64_t& depth = flags.add_int("depth", 2, "hidden layers", 1);
  int64_t& batch = flags.add_int("batch", 128, "points per step", 1);
  int64_t& steps = flags.add_int("steps", 2000, "optimizer steps", 0);
  std::string& optimizer =
      flags.add_string("optimizer", "adamw", "the optimizer: " + optim::optimizer_name_list() + " (optim/by_name.h)");
  double& lr = flags.add_double("lr", 3e-3, "peak learning rate", 0.0);
  int64_t& warmup = flags.add_int("warmup", 100, "linear warmup steps", 0);
  double& weight_decay =
      flags.add_double("weight-decay", 0.0, "weight decay (decoupled for adamw and lion, L2 for the others)", 0.0);
  int64_t& eval_every = flags.add_int("eval-every", 500, "evaluate every N steps (0: only at the end)", 0);
  int64_t& seed = flags.add_int("seed", 1337, "random seed (weights, data, batches)", 0);
  int64_t& threads = flags.add_int(
      "threads", -1,
      "OpenMP threads (-1: OMP_NUM_THREADS when set, else 1, which suits a model this small; 0: OMP_NUM_THREADS "
      "when set, else the usable cores)",
      -1);

  Config(int argc, char** argv) {
    // The checks parse() cannot make, run by parse() before --print-config prints.
    flags.after_parse([this] {
      if (classes > 1000) app::exit_with_usage_error("train_mlp", "--classes must be at most 1000");
      app::check_at_most("train_mlp", {{"points", points, 1 << 26},
                                           {"width", width, 1 << 16},
                                           {"depth", depth, 1024},
                                           {"batch", batch, 1 << 20},
                                           {"threads", threads, 4096}});
      app::checked_device("train_mlp", device);
      const std::vector<std::string>& names = optim::optimizer_names();
      if (std::find(names.begin(), names.end(), optimizer) == names.end())
        app::exit_with_usage_error(
            "train_mlp", "unknown --optimizer \"" + optimizer + "\"; expected " + optim::optimizer_name_list());
    });
    flags.parse(argc, argv);
  }
  Config(const Config&) = delete;
};

// Points of the spiral arms as a data::Dataset: fields "xy" f32 [2] and "label" i64 [].
struct Points final : data::Dataset {
  std::vector<float> xy;  // [n, 2]
  std::vector<int64_t> label;
  int64_t size() const override { return int64_t(label.size()); }
  std::vector<data::Field> fields() const override { return {{"xy", DType::f32, {2}}, {"label", DType::i64, {}}}; }
  void get(int64_t index, const std::vector<void*>& out) const override {
    std::copy_n(xy.data() + 2 * index, 2, static_cast<float*>(out[0]));
    *static_cast<int64_t*>(out[1]) = label[size_t(index)];
  }
};

std::shared_ptr<Points> spirals(const Config& o, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> radius(0.05, 1.0);
  std::normal_distribution<double> gauss(0.0, 1.0);
  auto p = std::make_shared<Points>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = int64_t(rng() % uint64_t(o.classes));
    const double r = radius(rng);
    const double angle = 2 * M_PI * double(k) / double(o.classes) + 2 * M_PI * o.turns * r + o.noise * r * gauss(rng);
    p->xy.push_back(float(r * std::cos(angle) + 0.01 * gauss(rng)));
    p->xy.push_back(float(r * std::sin(angle) + 0.01 * gauss(rng)));
    p->label.push_back(k);
  }
  return p;
}

std::shared_ptr<nn::Sequential> make_model(const Config& o) {
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

// Share of `data` classified right (the Trainer evaluates in eval mode, without grad).
double accuracy(nn::Sequential& model, const Points& data, const Device& device) {
  const int64_t n = int64_t(data.label.size());
  const Tensor logits = model(from_vector(data.xy, {n, 2}).to(device));
  const std::vector<int64_t> predicted = max(logits, 1).second.to(kCPU).to_vector<int64_t>();
  int64_t right = 0;
  for (int64_t i = 0; i < n; ++i) right += predicted[size_t(i)] == data.label[size_t(i)];
  return double(right) / double(n);
}

int run(const Config& o) {
  // The thread count and wait policy in force (app/thread_defaults.h); no loader workers here.
  const app::ThreadSettings threads = app::apply_thread_settings(o.threads, std::nullopt, false, false, 1);
  manual_seed(uint64_t(o.seed));
  const Device device = Device::parse(o.device);
  const auto train = spirals(o, o.points, uint64_t(o.seed) * 2 + 1),
             held_out = spirals(o, o.points, uint64_t(o.seed) * 2 + 2);
  auto model = make_model(o);
  model->to(device);
  const std::unique_ptr<optim::LocalOptimizer> optimizer =
      optim::make_optimizer(o.optimizer, model->parameters(), o.lr, o.weight_decay);
  // Minibatches of a fresh permutation of the points every epoch (the last, short batch dropped).
  data::DataLoader loader(train, data::DataLoaderOptions()
                                     .batch_size(std::min(o.batch, o.points))
                                     .shuffle(true)
                                     .drop_last(true)
                                     .seed(uint64_t(o.seed) * 31 + 7)
                                     .device(device));
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
        const double held_out_accuracy = accuracy(*model, *held_out, device);
        char text[128];
        std::snprintf(text, sizeof text, "train accuracy %.2f%% | held-out accuracy %.2f%% (%lld points)",
                      100.0 * accuracy(*model, *train, device), 100.0 * held_out_accuracy, (long long)o.points);
        return train::Evaluation{held_out_accuracy, text};
      });

  std::printf(
      "train_mlp: %lld spiral arms, %.2f turns, %lld training points on %s | MLP 2-%lldx%lld-%lld, %.1fk "
      "parameters | batch %lld | %s\n",
      (long long)o.classes, o.turns, (long long)o.points, device.str().c_str(), (long long)o.width, (long long)o.depth,
      (long long)o.classes, double(model->parameter_count()) / 1e3, (long long)o.batch, threads.describe().c_str());
  trainer.fit();
  return 0;
}

}  // namespace

// Nothing escapes: a usage or input error exits 2, any other error 1, on one line (app/cli.h).
int main(int argc, char** argv) {
  app::bound_openmp_spin(argv);  // before libgomp's threads or anything else exists
  return app::guarded_main("train_mlp", [&] {
    const Config config(argc, argv);
    return run(config);
  });
}
