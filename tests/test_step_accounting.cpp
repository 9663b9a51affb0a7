// What a steady-state training step asks of the CUDA runtime, counted (kernels/runtime_counters.h) on
// the CUDA device -- the SIMT emulator in CI, a GPU under scripts/gpu-check -- for a small GPT
// trained by train::Trainer: after a warm-up, a step makes no allocation, no free, no device-wide
// synchronisation, creates no event, and the host waits for the device only on a logged step, once
// (the figures' readback). Checked in f32, bf16 and fp16 (dynamic loss scale), with gradient
// accumulation + clipping + a schedule, activation checkpointing, and activation offload; and with the
// step captured into a CUDA graph (one graph launch per step, no kernel launch from the host), whose
// losses and weights equal the eager run's bit for bit -- also across an fp16 overflow it skips. A
// step that would synchronise cannot be captured: CUDA's error, in an hg::Error. Every fused optimizer
// (SGD, AdamW, Adam, RMSprop, Adagrad, Lion) is captured and replayed; a user's optimizer that decides on
// the host is refused.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/data_loader.h"
#include "engine/cuda/cuda_context.h"
#include "engine/random.h"
#include "kernels/runtime_counters.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "support/check_error.h"
#include "train/trainer.h"

using namespace hg;

namespace {

constexpr int64_t kContext = 8, kVocab = 32;

// Random token windows (seeded): "x" i64 [kContext], "y" = x shifted by one; poisoned examples (see
// Tokens::poison) carry inf in "poison" so that a chosen step overflows on the device.
struct Tokens final : data::Dataset {
  std::vector<int64_t> tokens;
  std::vector<float> poison;
  explicit Tokens(int64_t poisoned_from = -1, int64_t poisoned_to = -1) {
    std::mt19937 rng(23);
    for (int64_t i = 0; i < size() * (kContext + 1); ++i) tokens.push_back(int64_t(rng() % kVocab));
    for (int64_t i = 0; i < size(); ++i)
      poison.push_back(i >= poisoned_from && i < poisoned_to ? INFINITY : 0.0f);
  }
  int64_t size() const override { return 64; }
  std::vector<data::Field> fields() const override {
    return {{"x", DType::i64, {kContext}}, {"y", DType::i64, {kContext}}, {"poison", DType::f32, {}}};
  }
  void get(int64_t i, const std::vector<void*>& out) const override {
    const int64_t* window = tokens.data() + i * (kContext + 1);
    std::memcpy(out[0], window, kContext * sizeof(int64_t));
    std::memcpy(out[1], window + 1, kContext * sizeof(int64_t));
    *static_cast<float*>(out[2]) = poison[size_t(i)];
  }
};

struct TempFile {
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               ("hg_step_accounting_" + std::to_string(::getpid()) + "_" + std::to_string(next()++));
  static int& next() {
    static int n = 0;
    return n;
  }
  ~TempFile() {
    std::error_code ignored;
    std::filesystem::remove(path, ignored);
  }
};

struct Config {
  const char* name;
  DType dtype = DType::f32;
  bool fp16_scaler = false;
  int64_t grad_accum = 1;
  bool clip_and_schedule = false;
  int64_t recompute_every = 0;  // activation checkpointing
  OffloadMode offload = OffloadMode::off;
  bool cuda_graph = false;
  int64_t poisoned_from = -1, poisoned_to = -1;  // examples whose loss is inf (no shuffle: step = row / batch)
  const char* optimizer = "AdamW";               // or SGD, Adam, RMSprop, Adagrad, Lion (their widest variants)
};

std::unique_ptr<optim::LocalOptimizer> make_optimizer(const std::string& name, std::vector<Tensor> params) {
  if (name == "SGD")
    return std::make_unique<optim::SGD>(std::move(params), optim::SGDOptions().lr(0.05).momentum(0.9).dampening(0.1));
  if (name == "Adam")
    return std::make_unique<optim::Adam>(std::move(params), optim::AdamOptions().lr(3e-3).amsgrad(true));
  if (name == "RMSprop")
    return std::make_unique<optim::RMSprop>(std::move(params),
                                            optim::RMSpropOptions().lr(1e-3).momentum(0.5).centered(true));
  if (name == "Adagrad")
    return std::make_unique<optim::Adagrad>(std::move(params), optim::AdagradOptions().lr(1e-2).lr_decay(0.01));
  if (name == "Lion") return std::make_unique<optim::Lion>(std::move(params), optim::LionOptions().lr(3e-4));
  return std::make_unique<optim::AdamW>(std::move(params), optim::AdamWOptions().lr(3e-3));
}

constexpr int64_t kBatch = 4, kSteps = 8, kLogEvery = 4;

struct StepRecord {
  int64_t step = 0;
  bool logged = false;  // has a loss: the host read the step's figures
  double loss = NAN;
  RuntimeCounters runtime;
};

struct Outcome {
  std::vector<StepRecord> steps;
  std::vector<float> weights;
};

std::vector<float> flat(const std::vector<Tensor>& params) {
  std::vector<float> out;
  for (const Tensor& p : params) {
    const std::vector<float> v = p.to(DType::f32).to_vector<float>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

Outcome train_gpt(const Config& c) {
  manual_seed(11);
  const Device device = Device::cuda(0);
  auto model = std::make_shared<nn::GPT>(
      nn::GPTConfig().vocab_size(kVocab).context(kContext).n_layer(2).n_head(2).n_embd(32).dropout(0.0));
  model->to(c.dtype);
  model->to(device);
  model->set_recompute_every(c.recompute_every);
  const std::unique_ptr<optim::LocalOptimizer> optimizer = make_optimizer(c.optimizer, model->parameters());
  data::DataLoader loader(std::make_shared<Tokens>(c.poisoned_from, c.poisoned_to),
                          data::DataLoaderOptions().batch_size(kBatch).shuffle(false).device(device));
  TempFile metrics;
  train::Trainer trainer(
      *model, *optimizer, loader,
      [&](const data::Batch& b) {
        const Tensor loss = model->loss(b[0], b[1]);
        return loss * (sum(b[2].to(loss.dtype())) + 1.0);  // x 1 exactly, or inf on a poisoned batch
      },
      train::TrainerOptions()
          .steps(kSteps)
          .log_every(kLogEvery)
          .grad_accum(c.grad_accum)
          .clip(c.clip_and_schedule ? 1.0 : 0.0)
          .offload_activations(c.offload)
          .cuda_graph(c.cuda_graph)
          .monitor(train::MonitorOptions().metrics_path(metrics.path.string())));
  if (c.fp16_scaler) trainer.loss_scaler(optim::LossScaler::dynamic(optim::DynamicLossScaleOptions().init_scale(1024)));
  if (c.clip_and_schedule) trainer.schedule(std::make_shared<optim::WarmupCosine>(3e-3, 2, kSteps, 3e-4));
  trainer.fit();

  Outcome out;
  std::ifstream in(metrics.path);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    StepRecord r;
    r.step = j.at("step").get<int64_t>();
    r.logged = j.contains("loss");
    if (r.logged) r.loss = j.at("loss").get<double>();
    for (int i = 0; i < kRuntimeCounterCount; ++i) {
      const std::string key = std::string("cuda_") + runtime_counter_name(RuntimeCounter(i));
      REQUIRE_MESSAGE(j.contains(key), "metrics record of step ", r.step, " lacks ", key);
      r.runtime.value[size_t(i)] = j.at(key).get<int64_t>();
    }
    out.steps.push_back(r);
  }
  out.weights = flat(model->parameters());
  return out;
}

bool skip_without_device() {
  if (cuda::is_available()) return false;
  MESSAGE("SKIPPED: no CUDA device (" << cuda::unavailable_reason() << ")");
  return true;
}

// The steady-state steps (after the warm-up, and after the capture in graph mode).
void check_steady_state(const Config& c, const Outcome& o) {
  REQUIRE(o.steps.size() == size_t(kSteps));
  // Graph: steps 1-2 eager, 3 captured; 4, the first replay, may replace (once) the pinned staging
  // buffers the capture kept for the graph's host-to-device copy nodes.
  const int64_t first_steady = c.cuda_graph ? 5 : 3;
  using C = RuntimeCounter;
  for (const StepRecord& s : o.steps) {
    if (s.step < first_steady) continue;
    const RuntimeCounters& r = s.runtime;
    INFO(c.name << ", step " << s.step << (s.logged ? " (logged)" : "") << ": " << r.json());
    CHECK(r[C::device_allocs] == 0);
    CHECK(r[C::device_frees] == 0);
    CHECK(r[C::pinned_allocs] == 0);
    CHECK(r[C::pinned_frees] == 0);
    CHECK(r[C::device_syncs] == 0);
    CHECK(r[C::events_created] == 0);
    CHECK(r[C::blas_heuristic_queries] == 0);
    CHECK(r.host_waits() == (s.logged ? 1 : 0));
    CHECK(r[C::h2d_copies] >= 1);  // the batch did go to the device: the counters count
    if (c.cuda_graph) {
      CHECK(r[C::graph_launches] == 1);
      // Only the batches' copies into the graph's inputs (3 fields a micro-batch), and on a logged step
      // the gathering of its figures.
      CHECK(r[C::kernel_launches] <= 3 * c.grad_accum + (s.logged ? 8 : 0));
      CHECK(r[C::blas_calls] == 0);
    } else {
      CHECK(r[C::graph_launches] == 0);
      CHECK(r[C::kernel_launches] > 50);
      CHECK(r[C::blas_calls] > 10);
    }
  }
  CHECK(o.steps[size_t(kLogEvery - 1)].logged);
  CHECK_FALSE(o.steps[size_t(kLogEvery)].logged);
}

}  // namespace

TEST_CASE("a steady-state GPT step: no allocation, free or device sync; one host wait, on logged steps only") {
  if (skip_without_device()) return;
  const Config configs[] = {
      {"f32"},
      {"bf16", DType::bf16},
      {"fp16 + dynamic loss scale", DType::f16, true},
      {"f32, 2 micro-batches, clip, warmup-cosine", DType::f32, false, 2, true},
      {"bf16, activation checkpointing", DType::bf16, false, 1, false, 1},
      {"f32, checkpointing + offload of its inputs", DType::f32, false, 1, false, 1,
       OffloadMode::recompute_inputs},
      {"bf16, offload of every activation", DType::bf16, false, 1, false, 0, OffloadMode::all},
  };
  for (const Config& c : configs) {
    const std::string name = c.name;
    CAPTURE(name);
    check_steady_state(c, train_gpt(c));
  }
}

TEST_CASE("a GPT step captured into a CUDA graph and replayed equals the eager steps bit for bit") {
  if (skip_without_device()) return;
  const Config configs[] = {
      {"f32", DType::f32},
      {"bf16, 2 micro-batches, clip, warmup-cosine", DType::bf16, false, 2, true},
      // Rows 20-23 are step 6's batch: the overflow happens inside a replay, which must skip it.
      {"fp16 + dynamic loss scale, overflow planted at step 6", DType::f16, true, 1, false, 0, OffloadMode::off, false,
       20, 24},
      {"f32, activation checkpointing", DType::f32, false, 1, false, 1},
      // Every fused optimizer takes the step on the device: each is captured, replays and skips alike.
      {"SGD with momentum, fp16 + dynamic loss scale, overflow at step 6", DType::f16, true, 1, false, 0,
       OffloadMode::off, false, 20, 24, "SGD"},
      {"Adam with AMSGrad, bf16, clip, warmup-cosine", DType::bf16, false, 1, true, 0, OffloadMode::off, false, -1, -1,
       "Adam"},
      {"RMSprop centered with momentum, f32", DType::f32, false, 1, false, 0, OffloadMode::off, false, -1, -1,
       "RMSprop"},
      {"Adagrad, fp16 + dynamic loss scale, overflow at step 1", DType::f16, true, 1, false, 0, OffloadMode::off, false,
       0, 4, "Adagrad"},
      {"Lion, bf16", DType::bf16, false, 1, false, 0, OffloadMode::off, false, -1, -1, "Lion"},
  };
  for (Config c : configs) {
    const std::string name = c.name;
    CAPTURE(name);
    c.cuda_graph = false;
    const Outcome eager = train_gpt(c);
    c.cuda_graph = true;
    const Outcome graph = train_gpt(c);
    check_steady_state(c, graph);
    REQUIRE(eager.steps.size() == graph.steps.size());
    for (size_t i = 0; i < eager.steps.size(); ++i) {
      CHECK(eager.steps[i].logged == graph.steps[i].logged);
      if (eager.steps[i].logged) CHECK(std::memcmp(&eager.steps[i].loss, &graph.steps[i].loss, sizeof(double)) == 0);
    }
    CHECK(eager.weights == graph.weights);
    for (float w : graph.weights) REQUIRE(std::isfinite(w));
  }
}

TEST_CASE("capturing a step that reads the device on the host fails with CUDA's capture error") {
  if (skip_without_device()) return;
  manual_seed(3);
  const Device device = Device::cuda(0);
  auto model = std::make_shared<nn::GPT>(nn::GPTConfig().vocab_size(kVocab).context(kContext).n_layer(1).n_head(2).n_embd(16));
  model->to(device);
  optim::AdamW optimizer(model->parameters());
  data::DataLoader loader(std::make_shared<Tokens>(), data::DataLoaderOptions().batch_size(kBatch).device(device));
  train::Trainer trainer(
      *model, optimizer, loader,
      [&](const data::Batch& b) {
        const Tensor loss = model->loss(b[0], b[1]);
        if (std::isnan(loss.item())) std::puts("nan");  // a host read: a stream synchronisation
        return loss;
      },
      train::TrainerOptions().steps(4).cuda_graph(true));
  CHECK_THROWS_WITH_AS(trainer.fit(), doctest::Contains("cudaErrorStreamCapture"), Error);
}

// A user's own optimizer, which decides on the host (it has no device step).
class HostSGD final : public optim::LocalOptimizer {
 public:
  explicit HostSGD(std::vector<Tensor> params) : LocalOptimizer("HostSGD") {
    init_groups({optim::ParamGroup{std::move(params), 0.1, 0.0}});
  }
  std::vector<std::string> state_buffer_names() const override { return {}; }
  DType state_dtype(const Tensor& param) const override { return param.dtype(); }

 protected:
  void update(const optim::ParamGroup& group, const Tensor& param, const Tensor& grad, optim::ParamState&) override {
    Tensor target = param;
    target.copy_(param - grad * group.lr);
  }
};

TEST_CASE("cuda_graph is refused where a replay could not equal the eager step") {
  if (skip_without_device()) return;
  const Device device = Device::cuda(0);
  auto run = [&](double dropout, bool host_optimizer) {
    manual_seed(3);
    auto model = std::make_shared<nn::GPT>(
        nn::GPTConfig().vocab_size(kVocab).context(kContext).n_layer(1).n_head(2).n_embd(16).dropout(dropout));
    model->to(device);
    std::unique_ptr<optim::LocalOptimizer> optimizer;
    if (host_optimizer)
      optimizer = std::make_unique<HostSGD>(model->parameters());
    else
      optimizer = std::make_unique<optim::AdamW>(model->parameters());
    data::DataLoader loader(std::make_shared<Tokens>(), data::DataLoaderOptions().batch_size(kBatch).device(device));
    train::Trainer trainer(
        *model, *optimizer, loader, [&](const data::Batch& b) { return model->loss(b[0], b[1]); },
        train::TrainerOptions().steps(4).cuda_graph(true));
    trainer.fit();
  };
  CHECK_THROWS_WITH_AS(run(0.1, false), doctest::Contains("draws random numbers (dropout)"), Error);
  CHECK_THROWS_WITH_AS(run(0.0, true), doctest::Contains("the step is not taken on the device"), Error);
}
