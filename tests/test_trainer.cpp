// train::Trainer (train/trainer.h) as a user's program drives it, on a small classifier over fixed
// random data: accumulated micro-batches equal the full batch; a run stopped and resumed from its
// checkpoint equals the uninterrupted run bit for bit; a planted inf skips exactly that step (weights
// and schedule stay); early stopping restores the best evaluation's weights and reports it; the
// sequence-length warmup narrows the batches it hands to the loss; bad options are refused.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "data/data_loader.h"
#include "engine/random.h"
#include "kernels/runtime_counters.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "support/check_error.h"
#include "support/flat_values.h"
#include "train/trainer.h"
#include "support/temp_dir.h"

using namespace hg;

namespace {

// 64 examples: "x" f32 [6] drawn once from a fixed seed, "label" i64 [] in 0..2.
struct Blobs final : data::Dataset {
  std::vector<float> x;
  std::vector<int64_t> label;
  Blobs() {
    std::mt19937 rng(17);
    std::normal_distribution<float> normal;
    for (int64_t i = 0; i < size(); ++i) {
      label.push_back(i % 3);
      for (int k = 0; k < 6; ++k) x.push_back(normal(rng) + (k == label.back() ? 2.0f : 0.0f));
    }
  }
  int64_t size() const override { return 64; }
  std::vector<data::Field> fields() const override { return {{"x", DType::f32, {6}}, {"label", DType::i64, {}}}; }
  void get(int64_t i, const std::vector<void*>& out) const override {
    std::memcpy(out[0], x.data() + 6 * i, 6 * sizeof(float));
    *static_cast<int64_t*>(out[1]) = label[size_t(i)];
  }
};

using hg::test::TempDir;

// A fresh model (same seed every time), an optimizer and a loader over Blobs, trained by a Trainer.
struct Run {
  std::shared_ptr<nn::Linear> model;
  std::unique_ptr<optim::LocalOptimizer> optimizer;
  std::unique_ptr<data::DataLoader> loader;
  std::unique_ptr<train::Trainer> trainer;
  std::function<Tensor(const data::Batch&)> loss_of_batch;

  Run(int64_t batch, const train::TrainerOptions& options, bool sgd = false) {
    manual_seed(5);
    model = std::make_shared<nn::Linear>(6, 3);
    if (sgd)
      optimizer = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions().lr(0.1));
    else
      optimizer = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions().lr(0.05));
    loader = std::make_unique<data::DataLoader>(std::make_shared<Blobs>(),
                                                data::DataLoaderOptions().batch_size(batch).shuffle(true).seed(3));
    loss_of_batch = [this](const data::Batch& b) { return cross_entropy(model->forward(b[0]), b[1]); };
    trainer = std::make_unique<train::Trainer>(
        *model, *optimizer, *loader, [this](const data::Batch& b) { return loss_of_batch(b); }, options);
  }
};

}  // namespace

TEST_CASE("accumulated micro-batches train like the full batch") {
  Run full(16, train::TrainerOptions().steps(12), /*sgd=*/true);
  Run accumulated(8, train::TrainerOptions().steps(12).grad_accum(2), /*sgd=*/true);
  const train::TrainResult a = full.trainer->fit(), b = accumulated.trainer->fit();
  CHECK(a.optimizer_steps == 12);
  CHECK(b.optimizer_steps == 12);
  CHECK(b.final_loss == doctest::Approx(a.final_loss).epsilon(1e-6));
  const std::vector<float> pa = testing::flat_values(full.model->parameters()), pb = testing::flat_values(accumulated.model->parameters());
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) CHECK(pb[i] == doctest::Approx(pa[i]).epsilon(1e-5));
  CHECK(testing::flat_values(Run(16, train::TrainerOptions(), true).model->parameters()) != pa);  // it trained
}

TEST_CASE("a run stopped and resumed from its checkpoint equals the uninterrupted run bit for bit") {
  TempDir straight_dir, resumed_dir;
  const auto options = train::TrainerOptions().steps(10).checkpoint_every(3).keep_checkpoints(2);
  Run straight(8, train::TrainerOptions(options).checkpoint_dir(straight_dir.path.string()));
  straight.trainer->schedule(std::make_shared<optim::WarmupCosine>(0.05, 2, 10, 0.001));
  const train::TrainResult whole = straight.trainer->fit();
  {
    Run first(8, train::TrainerOptions(options).checkpoint_dir(resumed_dir.path.string()).stop_after(4));
    first.trainer->schedule(std::make_shared<optim::WarmupCosine>(0.05, 2, 10, 0.001));
    CHECK(first.trainer->fit().last_step == 4);
  }
  Run second(8, train::TrainerOptions(options).checkpoint_dir(resumed_dir.path.string()).resume(true));
  second.trainer->schedule(std::make_shared<optim::WarmupCosine>(0.05, 2, 10, 0.001));
  const train::TrainResult rest = second.trainer->fit();
  CHECK(rest.first_step == 5);
  CHECK(rest.last_step == 10);
  CHECK(rest.final_loss == whole.final_loss);
  CHECK(testing::flat_values(second.model->parameters()) == testing::flat_values(straight.model->parameters()));
  CHECK(std::filesystem::exists(resumed_dir.path / "step_0000000010.safetensors"));
  CHECK_FALSE(std::filesystem::exists(resumed_dir.path / "step_0000000003.safetensors"));  // keep 2: 9 and 10
}

TEST_CASE("an inf loss skips that step under a loss scaler: weights and schedule stay") {
  Run run(8, train::TrainerOptions().steps(6));
  int calls = 0;
  std::vector<float> before_bad_step;
  run.loss_of_batch = [&](const data::Batch& b) {
    Tensor loss = cross_entropy(run.model->forward(b[0]), b[1]);
    if (++calls == 4) {
      before_bad_step = testing::flat_values(run.model->parameters());
      return loss * std::numeric_limits<double>::infinity();
    }
    return loss;
  };
  std::vector<double> lrs;
  struct Recording final : optim::LrSchedule {
    std::vector<double>* seen;
    double lr(int64_t step) const override {
      seen->push_back(double(step));
      return 0.05;
    }
  };
  auto schedule = std::make_shared<Recording>();
  schedule->seen = &lrs;
  run.trainer->schedule(schedule).loss_scaler(
      optim::LossScaler::dynamic(optim::DynamicLossScaleOptions().init_scale(1024)));
  const train::TrainResult r = run.trainer->fit();
  CHECK(r.skipped_steps == 1);
  CHECK(r.optimizer_steps == 5);
  CHECK(lrs == std::vector<double>{0, 1, 2, 3, 3, 4});  // the skipped 4th step did not advance t
  CHECK(run.trainer->scaler().scale_value() == 512);
  CHECK_FALSE(before_bad_step.empty());
  CHECK(testing::flat_values(run.model->parameters()) != before_bad_step);  // the later steps trained
}

TEST_CASE("early stopping restores the best evaluation's weights and reports that evaluation") {
  Run run(8, train::TrainerOptions()
                 .steps(20)
                 .eval_every(2)
                 .metric_mode(train::StopMode::min)
                 .monitor(train::MonitorOptions().early_stop_patience(2)));
  std::vector<std::vector<float>> weights;
  // A made-up validation loss: best at the 2nd evaluation (step 4), worse after it.
  run.trainer->evaluator([&] {
    weights.push_back(testing::flat_values(run.model->parameters()));
    const double value = weights.size() == 2 ? 0.5 : 1.0 + double(weights.size());
    return train::Evaluation{value, "made-up loss " + std::to_string(value)};
  });
  const train::TrainResult r = run.trainer->fit();
  CHECK(r.stopped_early);
  CHECK(r.last_step == 8);  // evaluations at 2, 4, 6, 8: two without improvement after step 4
  REQUIRE(r.evaluation.has_value());
  CHECK(r.evaluation->value == 0.5);
  CHECK(testing::flat_values(run.model->parameters()) == weights[1]);
}

TEST_CASE("the sequence-length warmup narrows the fields of rank 2 and more") {
  struct Sequences final : data::Dataset {
    int64_t size() const override { return 32; }
    std::vector<data::Field> fields() const override { return {{"ids", DType::i64, {8}}, {"w", DType::f32, {}}}; }
    void get(int64_t i, const std::vector<void*>& out) const override {
      for (int t = 0; t < 8; ++t) static_cast<int64_t*>(out[0])[t] = (i + t) % 5;
      *static_cast<float*>(out[1]) = 1.0f;
    }
  };
  manual_seed(1);
  nn::Embedding model(5, 4);
  optim::SGD sgd(model.parameters(), optim::SGDOptions().lr(0.1));
  data::DataLoader loader(std::make_shared<Sequences>(), data::DataLoaderOptions().batch_size(4));
  std::vector<int64_t> lengths;
  train::Trainer trainer(
      model, sgd, loader,
      [&](const data::Batch& b) {
        lengths.push_back(b[0].size(1));
        CHECK(b[1].dim() == 1);  // a per-example scalar is not a sequence
        return sum(model.forward(b[0]));
      },
      train::TrainerOptions().steps(6).seq_warmup_steps(4).seq_warmup_start(2));
  trainer.fit();
  CHECK(lengths == std::vector<int64_t>{2, 3, 5, 6, 8, 8});  // 2 + floor(6 (t - 1) / 4), full from step 5
}

TEST_CASE("bad trainer options are refused") {
  auto make = [](const train::TrainerOptions& o) { Run run(8, o); };
  CHECK_ERROR(make(train::TrainerOptions().grad_accum(0)), "[Trainer]", "grad_accum 0");
  CHECK_ERROR(make(train::TrainerOptions().clip(-1)), "[Trainer]", "clip -1");
  CHECK_ERROR(make(train::TrainerOptions().resume(true)), "[Trainer]", "need a checkpoint_dir");
  CHECK_ERROR(make(train::TrainerOptions().seq_warmup_start(0)), "[Trainer]", "seq_warmup_start 0");
  CHECK_THROWS_WITH_AS(parse_offload_mode("gpu"), doctest::Contains("expected \"off\", \"inputs\""),
                       hg::Error);
}

TEST_CASE("a resume the loader cannot use changes nothing and keeps failing") {
  TempDir dir;
  {
    Run first(8, train::TrainerOptions().steps(6).stop_after(3).checkpoint_dir(dir.path.string()));
    first.trainer->fit();
  }
  // Another data order (seed): the loader's saved position does not apply to it.
  manual_seed(5);
  auto model = std::make_shared<nn::Linear>(6, 3);
  optim::AdamW adamw(model->parameters(), optim::AdamWOptions().lr(0.05));
  data::DataLoader loader(std::make_shared<Blobs>(), data::DataLoaderOptions().batch_size(8).shuffle(true).seed(99));
  train::Trainer trainer(
      *model, adamw, loader, [&](const data::Batch& b) { return cross_entropy(model->forward(b[0]), b[1]); },
      train::TrainerOptions().steps(6).checkpoint_dir(dir.path.string()));
  const std::vector<float> before = testing::flat_values(model->parameters());
  CHECK_ERROR(trainer.resume(), "--resume from", "step_0000000003.safetensors", "seed 3", "seed 99");
  CHECK(trainer.completed_steps() == 0);
  CHECK(testing::flat_values(model->parameters()) == before);
  CHECK(adamw.state_tensors().empty());
  CHECK_ERROR(trainer.resume(), "--resume from");  // still refused, not silently "resumed"
  trainer.fit();
  CHECK_ERROR(trainer.loss_scaler(optim::LossScaler::dynamic()), "[Trainer]", "loss_scaler() after resume() or fit()");
}

TEST_CASE("on the device: a planted overflow is skipped by the kernels and unlogged steps read nothing") {
  // AdamW decides on the device and WarmupCosine has a device form: the steps that are not logged
  // (1-5 here) run under forbid_host_reads, so any item(), to_vector or copy to the host in them throws.
  const auto options = train::TrainerOptions().steps(6).log_every(100).forbid_host_reads(true);
  const auto scaler = optim::LossScaler::dynamic(optim::DynamicLossScaleOptions().init_scale(1024));
  Run reading(8, options);
  reading.loss_of_batch = [&](const data::Batch& b) {
    Tensor loss = cross_entropy(reading.model->forward(b[0]), b[1]);
    (void)loss.item();  // a host read inside an unlogged step
    return loss;
  };
  reading.trainer->schedule(std::make_shared<optim::WarmupCosine>(0.05, 2, 6, 0.001)).loss_scaler(scaler);
  CHECK_THROWS_WITH_AS(reading.trainer->fit(), doctest::Contains("must not read the device"), hg::Error);

  Run run(8, options);
  int calls = 0;
  run.loss_of_batch = [&](const data::Batch& b) {
    Tensor loss = cross_entropy(run.model->forward(b[0]), b[1]);
    return ++calls == 4 ? loss * std::numeric_limits<double>::infinity() : loss;
  };
  run.trainer->schedule(std::make_shared<optim::WarmupCosine>(0.05, 2, 6, 0.001)).loss_scaler(scaler);
  const RuntimeCounters before = runtime_counters();
  const train::TrainResult r = run.trainer->fit();
  CHECK((runtime_counters() - before).host_waits() == 0);  // the CPU device makes no runtime call
  CHECK(r.skipped_steps == 1);   // counted by the update kernel, read at the last step
  CHECK(r.optimizer_steps == 5); // t advanced by the kernel on the five clean steps only
  CHECK(run.trainer->scaler().scale_value() == 512);
  CHECK(std::isfinite(r.final_loss));
  for (const Tensor& p : run.model->parameters())
    for (float v : p.to_vector<float>()) CHECK(std::isfinite(v));  // the inf step wrote nothing
}

TEST_CASE("resume refuses an entry other than the one the run config was read from") {
  TempDir dir;
  {
    Run first(8, train::TrainerOptions().steps(6).checkpoint_every(2).stop_after(4).checkpoint_dir(dir.path.string()));
    first.trainer->fit();
  }
  const std::string step2 = (dir.path / "step_0000000002.safetensors").string();
  const std::string step4 = (dir.path / "step_0000000004.safetensors").string();
  REQUIRE(std::filesystem::exists(step2));
  REQUIRE(std::filesystem::exists(step4));
  // The run config came from step 2 (say step 4 appeared, or could not be read, in between).
  Run other(8, train::TrainerOptions().steps(6).checkpoint_dir(dir.path.string()).resume_entry(step2));
  const std::vector<float> before = testing::flat_values(other.model->parameters());
  CHECK_ERROR(other.trainer->resume(), "[Trainer]", "run config was read from", "step_0000000002.safetensors",
              "resumed from", "step_0000000004.safetensors", "from one checkpoint");
  CHECK(testing::flat_values(other.model->parameters()) == before);
  Run same(8, train::TrainerOptions().steps(6).checkpoint_dir(dir.path.string()).resume_entry(step4));
  CHECK(same.trainer->resume());
  CHECK(same.trainer->completed_steps() == 4);
}
