// The EMA of the weights (train/ema.h), clipping by value (optim/clip_value.h) and ReduceLROnPlateau
// (optim/plateau.h), alone and inside train::Trainer (the EMA alone: test_ema.cpp): the EMA resumed ==
// uninterrupted bit for bit, the evaluator seeing the averaged weights;
// clip_grad_value_ against a clamp in double; the Trainer's clip_value acting on the unscaled
// gradients under a loss scaler; the plateau fed by the evaluator, chained after a warmup, resumed.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "data/data_loader.h"
#include "engine/random.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "support/check_error.h"
#include "support/flat_values.h"
#include "support/test_seed.h"
#include "support/temp_dir.h"
#include "train/trainer.h"

using namespace hg;

namespace {

// 40 examples, "x" f32 [5] and "label" i64 [] in 0..1, drawn from the fresh seed.
struct Points final : data::Dataset {
  std::vector<float> x;
  std::vector<int64_t> label;
  Points() {
    std::mt19937 rng(static_cast<uint32_t>(testing::fresh_seed()));
    std::normal_distribution<float> normal;
    for (int64_t i = 0; i < size(); ++i) {
      label.push_back(i % 2);
      for (int k = 0; k < 5; ++k) x.push_back(normal(rng) + (k == label.back() ? 1.5f : 0.0f));
    }
  }
  int64_t size() const override { return 40; }
  std::vector<data::Field> fields() const override { return {{"x", DType::f32, {5}}, {"label", DType::i64, {}}}; }
  void get(int64_t i, const std::vector<void*>& out) const override {
    std::memcpy(out[0], x.data() + 5 * i, 5 * sizeof(float));
    *static_cast<int64_t*>(out[1]) = label[size_t(i)];
  }
};

struct Run {
  std::shared_ptr<nn::Linear> model;
  std::unique_ptr<optim::LocalOptimizer> optimizer;
  std::unique_ptr<data::DataLoader> loader;
  std::unique_ptr<train::Trainer> trainer;

  explicit Run(const train::TrainerOptions& options, double lr = 0.1) {
    manual_seed(9);
    model = std::make_shared<nn::Linear>(5, 2);
    optimizer = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions().lr(lr).momentum(0.9));
    loader = std::make_unique<data::DataLoader>(std::make_shared<Points>(),
                                                data::DataLoaderOptions().batch_size(8).shuffle(true).seed(4));
    trainer = std::make_unique<train::Trainer>(
        *model, *optimizer, *loader, [this](const data::Batch& b) { return cross_entropy(model->forward(b[0]), b[1]); },
        options);
  }
};

}  // namespace

TEST_CASE("the Trainer's EMA resumes bit for bit and the evaluator can see the averaged weights") {
  test::TempDir straight_dir, resumed_dir;
  const auto options = train::TrainerOptions().steps(9).checkpoint_every(2).eval_every(3);
  const auto ema = train::EmaOptions().decay(0.7).evaluate(true);
  Run straight(train::TrainerOptions(options).checkpoint_dir(straight_dir.path.string()));
  straight.trainer->ema(ema);
  std::vector<std::vector<float>> seen;
  straight.trainer->evaluator([&] {
    seen.push_back(testing::flat_values(straight.model->parameters()));
    CHECK(seen.back() == testing::flat_values(straight.trainer->ema()->shadow()));  // swapped in
    return train::Evaluation{1.0, "ema"};
  });
  straight.trainer->fit();
  CHECK(seen.size() == 3);
  CHECK(testing::flat_values(straight.model->parameters()) != testing::flat_values(straight.trainer->ema()->shadow()));  // swapped back
  {
    Run first(train::TrainerOptions(options).checkpoint_dir(resumed_dir.path.string()).stop_after(5));
    first.trainer->ema(ema);
    first.trainer->fit();
  }
  Run second(train::TrainerOptions(options).checkpoint_dir(resumed_dir.path.string()).resume(true));
  second.trainer->ema(ema);
  CHECK(second.trainer->fit().first_step == 6);  // from the step-5 checkpoint (the first run's last)
  CHECK(second.trainer->ema()->updates() == 9);
  CHECK(testing::flat_values(second.trainer->ema()->shadow()) == testing::flat_values(straight.trainer->ema()->shadow()));
  CHECK(testing::flat_values(second.model->parameters()) == testing::flat_values(straight.model->parameters()));
}

TEST_CASE("clip_grad_value_ clamps every gradient element like torch.clamp, and refuses a bad bound") {
  manual_seed(testing::fresh_seed() + 1);
  const Tensor a = randn({4, 6}).requires_grad_(), b = randn({5}).requires_grad_(), c = randn({2});
  a.set_grad(randn({4, 6}) * 3.0);
  std::vector<float> bg = (randn({5}) * 3.0).to_vector<float>();
  bg[1] = std::numeric_limits<float>::infinity();
  bg[2] = -std::numeric_limits<float>::infinity();
  bg[3] = std::nanf("");
  b.set_grad(from_vector(bg, {5}));
  const std::vector<float> ag = a.grad().to_vector<float>();
  optim::clip_grad_value_({a, b, c}, 1.25);
  const std::vector<float> ac = a.grad().to_vector<float>(), bc = b.grad().to_vector<float>();
  int clipped = 0;
  for (size_t i = 0; i < ag.size(); ++i) {
    CHECK(ac[i] == std::clamp(ag[i], -1.25f, 1.25f));
    clipped += ag[i] != ac[i];
  }
  CHECK(clipped > 0);
  CHECK(bc[1] == 1.25f);
  CHECK(bc[2] == -1.25f);
  CHECK(std::isnan(bc[3]));
  CHECK_FALSE(c.grad().defined());
  CHECK_ERROR(optim::clip_grad_value_({a}, 0.0), "[clip_grad_value_] clip_value 0", "expected a finite value > 0");
  CHECK_ERROR(Run(train::TrainerOptions().clip_value(-1.0)), "clip_value -1");
}

TEST_CASE("the Trainer's clip_value bounds the unscaled gradients under a loss scaler") {
  // A static power-of-two scale is exact: with the clip on the unscaled gradients the scaled run equals
  // the unscaled one bit for bit; clipping the scaled gradients at 0.02 would shrink every update.
  Run plain(train::TrainerOptions().steps(6).clip_value(0.02));
  Run scaled(train::TrainerOptions().steps(6).clip_value(0.02));
  scaled.trainer->loss_scaler(optim::LossScaler::fixed(1024));
  Run unclipped(train::TrainerOptions().steps(6));
  plain.trainer->fit();
  scaled.trainer->fit();
  unclipped.trainer->fit();
  CHECK(testing::flat_values(scaled.model->parameters()) == testing::flat_values(plain.model->parameters()));
  CHECK(testing::flat_values(unclipped.model->parameters()) != testing::flat_values(plain.model->parameters()));  // the clip was active
}

TEST_CASE("ReduceLROnPlateau in the Trainer: fed by the evaluator, chained after a warmup, resumed") {
  const std::vector<double> values = {1.0, 0.8, 0.8, 0.81, 0.9, 0.79, 0.85, 0.86, 0.9, 0.95};
  const auto plateau_options = optim::PlateauOptions().factor(0.5).patience(1).threshold(0.0);
  // Warmup over 3 steps to 0.1, then constant; the plateau starts at 0.1: min(warmup, plateau) is the
  // warmup first, the plateau's cuts after.
  auto schedule = [] {
    return std::make_shared<optim::Sequential>(
        std::vector<optim::LrSchedulePtr>{std::make_shared<optim::LinearWarmup>(0.1, 3, 0.0),
                                          std::make_shared<optim::ConstantLr>(0.1)},
        std::vector<int64_t>{3});
  };
  test::TempDir straight_dir, resumed_dir;
  const auto options = train::TrainerOptions().steps(20).eval_every(2).checkpoint_every(2);
  std::vector<double> lrs;
  auto make = [&](Run& run, std::vector<double>* record) {
    run.trainer->schedule(schedule()).plateau(std::make_shared<optim::ReduceLROnPlateau>(0.1, plateau_options));
    run.trainer->evaluator([&run, record, values] {
      if (record) record->push_back(run.optimizer->param_groups()[0].lr);
      // The evaluation after step s (completed_steps() is still s - 1 here) sees values[(s - 1) / 2].
      return train::Evaluation{values[size_t(run.trainer->completed_steps() / 2)], "made-up"};
    });
  };
  Run straight(train::TrainerOptions(options).checkpoint_dir(straight_dir.path.string()));
  make(straight, &lrs);
  straight.trainer->fit();
  // The expected lrs: the warmup's, then the plateau's fed the same values (evaluated at steps 2, 4, ..).
  optim::ReduceLROnPlateau reference(0.1, plateau_options);
  const auto warmup = schedule();
  REQUIRE(lrs.size() == 10);
  for (size_t e = 0; e < lrs.size(); ++e) {
    const int64_t step = int64_t(2 * (e + 1));  // the evaluation after step `step` sees its lr
    CHECK(lrs[e] == std::min(warmup->lr(step - 1), reference.lr()));
    reference.step(values[e]);
  }
  CHECK(straight.trainer->plateau()->lr() == reference.lr());
  CHECK(reference.lr() < 0.1 / 4);  // at least two cuts happened
  {
    Run first(train::TrainerOptions(options).checkpoint_dir(resumed_dir.path.string()).stop_after(11));
    make(first, nullptr);
    first.trainer->fit();
  }
  Run second(train::TrainerOptions(options).checkpoint_dir(resumed_dir.path.string()).resume(true));
  make(second, nullptr);
  CHECK(second.trainer->fit().first_step == 12);  // from the step-11 checkpoint (the first run's last)
  CHECK(second.trainer->plateau()->lr() == straight.trainer->plateau()->lr());
  CHECK(second.trainer->plateau()->best() == straight.trainer->plateau()->best());
  CHECK(testing::flat_values(second.model->parameters()) == testing::flat_values(straight.model->parameters()));
}
