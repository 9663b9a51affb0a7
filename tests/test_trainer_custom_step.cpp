// train::Trainer with a user-defined step (train/custom_step.h): a tiny GAN -- a generator and a
// discriminator, each with its own optimizer, schedule and loss scaler -- trained through a StepContext.
// Stopped and resumed from its checkpoint it equals the uninterrupted run bit for bit (both optimizers,
// both scalers, both t, the EMA); accumulated micro-batches equal the full batch; an inf in one
// Update's loss skips that Update alone; bad Updates and misuse are refused by name.
#include <doctest/doctest.h>

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

// 48 examples: "real" f32 [4] around (2, -1, 0.5, 3) and "z" f32 [2] the generator's noise, drawn
// once from `seed` (fresh per test run: the seed is printed).
struct GanData final : data::Dataset {
  std::vector<float> real, z;
  explicit GanData(uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal;
    const float centre[4] = {2.0f, -1.0f, 0.5f, 3.0f};
    for (int64_t i = 0; i < size(); ++i) {
      for (float c : centre) real.push_back(c + 0.3f * normal(rng));
      for (int k = 0; k < 2; ++k) z.push_back(normal(rng));
    }
  }
  int64_t size() const override { return 48; }
  std::vector<data::Field> fields() const override { return {{"real", DType::f32, {4}}, {"z", DType::f32, {2}}}; }
  void get(int64_t i, const std::vector<void*>& out) const override {
    std::memcpy(out[0], real.data() + 4 * i, 4 * sizeof(float));
    std::memcpy(out[1], z.data() + 2 * i, 2 * sizeof(float));
  }
};

struct Gan : nn::Module {
  std::shared_ptr<nn::Linear> g, d;
  Gan() {
    g = register_module("g", std::make_shared<nn::Linear>(2, 4));
    d = register_module("d", std::make_shared<nn::Linear>(4, 1));
  }
};

// The GAN trained by a Trainer with a custom step: D (Adam, StepLR, dynamic scaler, clip_value) and
// G (AdamW, WarmupCosine, dynamic scaler, clip by norm); the standard non-saturating losses.
struct GanRun {
  std::shared_ptr<Gan> model;
  std::unique_ptr<optim::LocalOptimizer> d_opt, g_opt;
  std::unique_ptr<data::DataLoader> loader;
  std::unique_ptr<train::Trainer> trainer;
  int64_t calls = 0;
  int64_t poison_d_at = -1;  // the D backward call (1-based) whose loss is made inf

  GanRun(int64_t batch, const train::TrainerOptions& options, bool sgd = false, bool scalers = true) {
    manual_seed(11);
    model = std::make_shared<Gan>();
    if (sgd) {
      d_opt = std::make_unique<optim::SGD>(model->d->parameters(), optim::SGDOptions().lr(0.05));
      g_opt = std::make_unique<optim::SGD>(model->g->parameters(), optim::SGDOptions().lr(0.05));
    } else {
      d_opt = std::make_unique<optim::Adam>(model->d->parameters(), optim::AdamOptions().lr(0.02));
      g_opt = std::make_unique<optim::AdamW>(model->g->parameters(), optim::AdamWOptions().lr(0.03));
    }
    loader = std::make_unique<data::DataLoader>(std::make_shared<GanData>(testing::fresh_seed()),
                                                data::DataLoaderOptions().batch_size(batch).shuffle(true).seed(7));
    auto scaler = [&] {
      return scalers ? optim::LossScaler::dynamic(optim::DynamicLossScaleOptions().init_scale(256).growth_interval(3))
                     : optim::LossScaler::none();
    };
    std::vector<train::Update> updates;
    updates.push_back({"D", d_opt.get(), sgd ? nullptr : std::make_shared<optim::StepLR>(0.02, 3, 0.5), scaler(), 0.0,
                       sgd ? 0.0 : 0.5});
    updates.push_back({"G", g_opt.get(), sgd ? nullptr : std::make_shared<optim::WarmupCosine>(0.03, 2, 10, 0.003),
                       scaler(), sgd ? 0.0 : 1.0});
    trainer = std::make_unique<train::Trainer>(
        *model, std::move(updates), *loader, [this](train::StepContext& ctx) { step(ctx); }, options);
  }

  void step(train::StepContext& ctx) {
    double d_total = 0, g_total = 0;
    for (const data::Batch& b : ctx.batches()) {
      const Tensor fake = model->g->forward(b[1]).detach();
      Tensor d_loss = mean(softplus(-model->d->forward(b[0]))) + mean(softplus(model->d->forward(fake)));
      if (++calls == poison_d_at) d_loss = d_loss * std::numeric_limits<double>::infinity();
      ctx.backward("D", d_loss);
      d_total += d_loss.item() / double(ctx.batches().size());
    }
    ctx.step("D");
    for (const data::Batch& b : ctx.batches()) {
      const Tensor g_loss = mean(softplus(-model->d->forward(model->g->forward(b[1]))));
      ctx.backward("G", g_loss);
      g_total += g_loss.item() / double(ctx.batches().size());
    }
    ctx.step("G");
    ctx.log("d_loss", d_total);
    ctx.log("g_loss", g_total);
  }
};

}  // namespace

TEST_CASE("a custom two-optimizer (GAN) step resumed from its checkpoint equals the uninterrupted run bit for bit") {
  MESSAGE("data seed " << testing::fresh_seed());
  hg::test::TempDir straight_dir, resumed_dir;
  const auto options = train::TrainerOptions().steps(10).checkpoint_every(3).keep_checkpoints(2);
  GanRun straight(8, train::TrainerOptions(options).checkpoint_dir(straight_dir.path.string()));
  straight.trainer->ema(train::EmaOptions().decay(0.8).warmup(true), straight.model->g->parameters());
  const std::vector<float> initial = testing::flat_values(straight.model->parameters());
  const train::TrainResult whole = straight.trainer->fit();
  {
    GanRun first(8, train::TrainerOptions(options).checkpoint_dir(resumed_dir.path.string()).stop_after(4));
    first.trainer->ema(train::EmaOptions().decay(0.8).warmup(true), first.model->g->parameters());
    CHECK(first.trainer->fit().last_step == 4);
  }
  GanRun second(8, train::TrainerOptions(options).checkpoint_dir(resumed_dir.path.string()).resume(true));
  second.trainer->ema(train::EmaOptions().decay(0.8).warmup(true), second.model->g->parameters());
  const train::TrainResult rest = second.trainer->fit();
  CHECK(rest.first_step == 5);
  CHECK(rest.last_step == 10);
  CHECK(whole.optimizer_steps == 20);  // 10 D steps + 10 G steps
  CHECK(rest.optimizer_steps == whole.optimizer_steps);
  CHECK(std::isfinite(whole.final_loss));
  CHECK(rest.final_loss == whole.final_loss);  // d_loss, the first value logged
  CHECK(testing::flat_values(second.model->parameters()) == testing::flat_values(straight.model->parameters()));
  CHECK(testing::flat_values(second.model->parameters()) != initial);  // both trained
  for (size_t i = 0; i < 2; ++i) {
    const train::UpdateState &a = straight.trainer->updates()[i], &b = second.trainer->updates()[i];
    CHECK(a.steps == 10);
    CHECK(b.steps == a.steps);
    CHECK(b.spec.scaler.scale_value() == a.spec.scaler.scale_value());
    CHECK(b.spec.scaler.scale_value() > 256);  // grown (growth_interval 3): the scaler state was resumed
    CHECK(b.lr == a.lr);
  }
  CHECK(straight.trainer->updates()[1].lr == doctest::Approx(optim::WarmupCosine(0.03, 2, 10, 0.003).lr(9)));
  CHECK(second.trainer->ema()->updates() == 10);
  CHECK(testing::flat_values(second.trainer->ema()->shadow()) == testing::flat_values(straight.trainer->ema()->shadow()));
  CHECK(testing::flat_values(straight.trainer->ema()->shadow()) != testing::flat_values(straight.model->g->parameters()));
}

TEST_CASE("a custom step over accumulated micro-batches equals the full batch") {
  GanRun full(16, train::TrainerOptions().steps(6), /*sgd=*/true, /*scalers=*/false);
  GanRun accumulated(8, train::TrainerOptions().steps(6).grad_accum(2), /*sgd=*/true, /*scalers=*/false);
  const train::TrainResult a = full.trainer->fit(), b = accumulated.trainer->fit();
  CHECK(b.final_loss == doctest::Approx(a.final_loss).epsilon(1e-6));
  const std::vector<float> pa = testing::flat_values(full.model->parameters()), pb = testing::flat_values(accumulated.model->parameters());
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) CHECK(pb[i] == doctest::Approx(pa[i]).epsilon(1e-5));
  GanRun untrained(16, train::TrainerOptions().steps(6), true, false);
  CHECK(testing::flat_values(untrained.model->parameters()) != pa);
}

TEST_CASE("an inf in one Update's loss skips that Update's step alone") {
  GanRun run(8, train::TrainerOptions().steps(5));
  run.poison_d_at = 3;  // D's loss of step 3
  const train::TrainResult r = run.trainer->fit();
  CHECK(r.skipped_steps == 1);
  CHECK(run.trainer->updates()[0].steps == 4);                        // D: step 3 skipped
  CHECK(run.trainer->updates()[1].steps == 5);                        // G stepped every time
  CHECK(run.trainer->updates()[0].spec.scaler.scale_value() == 128);  // backed off once from 256
  CHECK(run.trainer->updates()[0].spec.scaler.skipped_steps() == 1);
  CHECK(run.trainer->updates()[1].spec.scaler.skipped_steps() == 0);
}

TEST_CASE("custom steps refuse bad Updates and misuse, by name") {
  manual_seed(2);
  nn::Linear model(2, 2);
  optim::SGD a(model.parameters(), optim::SGDOptions().lr(0.1));
  nn::Linear other(2, 2);
  optim::SGD b(other.parameters(), optim::SGDOptions().lr(0.1));
  data::DataLoader loader(std::make_shared<GanData>(1), data::DataLoaderOptions().batch_size(4));
  auto noop = [](train::StepContext&) {};
  using train::Trainer;
  using train::Update;
  CHECK_ERROR(Trainer(model, std::vector<Update>{}, loader, noop), "without Updates");
  CHECK_ERROR(Trainer(model, {{"D", &a}, {"D", &b}}, loader, noop), "two Updates are named 'D'");
  CHECK_ERROR(Trainer(model, {{"D", &a}, {"G", &a}}, loader, noop), "'D' and 'G' share one optimizer");
  CHECK_ERROR(Trainer(model, {{"a.b", &a}}, loader, noop), "is named 'a.b'");
  CHECK_ERROR(Trainer(model, {{"D", &a}, {"G", nullptr}}, loader, noop), "Update 'G' has no optimizer");
  CHECK_ERROR(Trainer(model, {{"D", &a, nullptr, {}, -1.0}}, loader, noop), "Update 'D': clip -1");
  CHECK_ERROR(Trainer(model, {{"D", &a}}, loader, noop, train::TrainerOptions().clip(1.0)),
              "give each Update its own clip");
  Trainer trainer(
      model, {{"D", &a}, {"G", &b}}, loader,
      [&](train::StepContext& ctx) { ctx.backward("X", sum(model.forward(ctx.batches()[0][1]))); },
      train::TrainerOptions().steps(1));
  CHECK_ERROR(trainer.schedule(std::make_shared<optim::ConstantLr>(0.1)), "expected each Update's own schedule");
  CHECK_ERROR(trainer.plateau(std::make_shared<optim::ReduceLROnPlateau>(0.1)), "plateau() with a custom step");
  CHECK_ERROR(trainer.fit(), "no Update named 'X'; expected one of 'D', 'G'");
}
