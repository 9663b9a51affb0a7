// train/checkpoint.h: resuming is bit-exact -- a small GPT (with dropout, so the Philox generator
// matters; data drawn from a std::mt19937_64; a dynamic loss scaler whose scale moves; AdamW) trained
// 2N steps equals N steps, a checkpoint, fresh objects built from another seed, the load, and N more:
// losses, weights, optimizer state and counters bit for bit on the CPU in f32. Plus keep-last-K,
// and errors on truncated, foreign, mismatched and incomplete checkpoints, each leaving the live
// state untouched.
//
// The same source is compiled twice: test_checkpoint runs everything on the CPU;
// test_cuda_checkpoint (HG_CHECKPOINT_ON_CUDA) runs the resume case with the model and optimizer on
// the CUDA device (the SIMT emulator in the emulated build), loading from the CPU-side file.
#include <doctest/doctest.h>

#include "support/check_error.h"
#include "support/suite_device.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "engine/random.h"
#include "engine/safetensors.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "train/checkpoint.h"
#include "train/checkpoint_directory.h"

#if defined(HG_CHECKPOINT_ON_CUDA)
#include "engine/cuda/cuda_context.h"
#endif

// The model cases' names say where they run, so the two builds of this file list apart in ctest.
#if defined(HG_CHECKPOINT_ON_CUDA)
#define ON_DEVICE "cuda: "
#else
#define ON_DEVICE ""
#endif

using namespace hg;

namespace {

constexpr int64_t kVocab = 16;

Device model_device() { return testing::suite_device(); }

std::vector<unsigned char> bytes_of(const Tensor& t) {
  const Tensor host = t.to(kCPU).contiguous();
  std::vector<unsigned char> out(size_t(host.numel()) * host.element_size());
  if (!out.empty()) std::memcpy(out.data(), host.data_ptr(), out.size());
  return out;
}

// A fresh temporary directory, removed at the end of the test.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("hg_checkpoint_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

// Everything a training loop owns, registered in a TrainingState. Not movable: the state points
// into it.
struct Run {
  std::shared_ptr<nn::GPT> model;
  std::unique_ptr<optim::AdamW> optimizer;
  optim::LossScaler scaler;
  std::mt19937_64 data_rng;
  int64_t step = 0;
  Tensor position;  // a data loader's position, as the caller's extra state
  train::TrainingState state;

  explicit Run(uint64_t seed, int64_t width = 16) {
    manual_seed(seed);
    const auto config = nn::GPTConfig().vocab_size(kVocab).context(8).n_layer(1).n_head(2).n_embd(width).dropout(0.1);
    model = std::make_shared<nn::GPT>(config);
    model->to(model_device());
    optimizer = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions().lr(1e-2).weight_decay(0.1));
    scaler = optim::LossScaler::dynamic(optim::DynamicLossScaleOptions().init_scale(256).growth_interval(3));
    data_rng.seed(seed * 31 + 7);
    position = zeros({2}, DType::i64);
    state.model(*model)
        .optimizer(*optimizer)
        .scaler(scaler)
        .counter("step", step)
        .generator("default", default_generator())
        .mt19937_64("data", data_rng)
        .extra("loader", position);
  }
  Run(const Run&) = delete;

  double train_step() {
    std::vector<int64_t> tokens(2 * 9);
    for (int64_t& t : tokens) t = int64_t(data_rng() % uint64_t(kVocab));
    const Tensor batch = from_vector(tokens, {2, 9}).to(model_device());
    const Tensor ids = batch.narrow(1, 0, 8).contiguous(), targets = batch.narrow(1, 1, 8).contiguous();
    const Tensor loss = model->loss(ids, targets);
    scaler.scale(loss).backward();
    scaler.unscale_(*optimizer);
    optimizer->clip_grad_norm(1.0);
    optimizer->set_lr(1e-2 / double(1 + step));  // a schedule driven by the step counter
    scaler.step(*optimizer);
    scaler.update();
    optimizer->zero_grad();
    ++step;
    position = from_vector(std::vector<int64_t>{step, step * 18}, {2});
    return loss.item();
  }

  std::vector<std::vector<unsigned char>> snapshot() const {
    std::vector<std::vector<unsigned char>> out;
    for (const auto& [name, t] : state.tensors()) out.push_back(bytes_of(t));
    return out;
  }
};

}  // namespace

TEST_CASE(ON_DEVICE "training 2N steps equals N steps then save then load into fresh objects then N more bit for bit") {
#if defined(HG_CHECKPOINT_ON_CUDA)
  if (!cuda::is_available()) {
    MESSAGE("SKIPPED: no CUDA device: " << cuda::unavailable_reason() << "; runs on a GPU or in the emulated build");
    return;
  }
#endif
  constexpr int kN = 4;
  TempDir dir;
  std::vector<double> straight;
  std::vector<std::vector<unsigned char>> straight_state;
  double straight_scale = 0;
  {
    Run run(5);
    for (int i = 0; i < 2 * kN; ++i) straight.push_back(run.train_step());
    straight_state = run.snapshot();
    straight_scale = run.scaler.scale_value();
  }
  CHECK(straight_scale != 256);  // the scaler's state moved during the run

  std::vector<double> resumed;
  {
    Run first(5);
    for (int i = 0; i < kN; ++i) resumed.push_back(first.train_step());
    train::CheckpointDirectory(dir.path.string(), 2).save(first.state, first.step);
  }
  manual_seed(999);  // the global generator moves on, as in a new process
  Run second(77);    // fresh objects, other weights, other data order
  const auto before_load = second.snapshot();
  const auto latest = train::CheckpointDirectory(dir.path.string(), 2).latest();
  REQUIRE(latest.has_value());
  CHECK(train::load_checkpoint(*latest, second.state) == kN);
  CHECK(second.snapshot() != before_load);
  CHECK(second.step == kN);
  CHECK(second.position.to_vector<int64_t>() == std::vector<int64_t>{kN, kN * 18});
  for (int i = 0; i < kN; ++i) resumed.push_back(second.train_step());

  REQUIRE(resumed.size() == straight.size());
  for (size_t i = 0; i < straight.size(); ++i) {
    CAPTURE(i);
    CHECK(std::memcmp(&resumed[i], &straight[i], sizeof(double)) == 0);
  }
  const auto resumed_state = second.snapshot();
  REQUIRE(resumed_state.size() == straight_state.size());
  for (size_t i = 0; i < straight_state.size(); ++i) {
    CAPTURE(second.state.tensors()[i].first);
    CHECK(resumed_state[i] == straight_state[i]);
  }
  CHECK(second.scaler.scale_value() == straight_scale);
}

#if !defined(HG_CHECKPOINT_ON_CUDA)

TEST_CASE("a checkpoint directory keeps the last K and ignores temporary and foreign files") {
  TempDir dir;
  Run run(3);
  const train::CheckpointDirectory checkpoints(dir.file("nested/ckpt"), 2);
  CHECK_FALSE(checkpoints.latest().has_value());
  std::ofstream(dir.file("nested/ckpt/notes.txt")) << "keep me";
  std::ofstream(dir.file("nested/ckpt/step_0000000099.safetensors.tmp.123")) << "torn";
  for (int64_t step : {1, 2, 10, 11, 12}) {
    run.step = step;
    checkpoints.save(run.state, step);
  }
  const auto present = checkpoints.list();
  REQUIRE(present.size() == 2);
  CHECK(present[0].step == 11);
  CHECK(present[1].step == 12);
  CHECK_FALSE(present[1].sharded);
  CHECK(*checkpoints.latest() == dir.file("nested/ckpt/step_0000000012.safetensors"));
  CHECK(std::filesystem::exists(dir.file("nested/ckpt/notes.txt")));
  CHECK(std::filesystem::exists(dir.file("nested/ckpt/step_0000000099.safetensors.tmp.123")));
  CHECK_ERROR(train::CheckpointDirectory(dir.file("x"), 0), "keep_last = 0");
}

TEST_CASE("bad checkpoints are refused with a clear error and the live state untouched") {
  TempDir dir;
  std::string path;
  {
    Run source(9);
    for (int i = 0; i < 2; ++i) source.train_step();
    path = dir.file("good.safetensors");
    train::save_checkpoint(path, source.state, source.step);
  }
  Run run(10);
  run.train_step();
  const auto before = run.snapshot();
  const int64_t step_before = run.step;
  const std::mt19937_64 rng_before = run.data_rng;
  auto unchanged = [&] {
    CHECK(run.snapshot() == before);
    CHECK(run.step == step_before);
    CHECK(run.data_rng == rng_before);
  };

  // Truncated: the safetensors reader refuses it.
  const std::string truncated = dir.file("truncated.safetensors");
  std::filesystem::copy_file(path, truncated);
  std::filesystem::resize_file(truncated, std::filesystem::file_size(path) / 2);
  CHECK_THROWS_AS(train::load_checkpoint(truncated, run.state), Error);
  unchanged();
  // Garbage header.
  const std::string garbage = dir.file("garbage.safetensors");
  std::filesystem::copy_file(path, garbage);
  {
    std::fstream f(garbage, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(12);
    f.write("#!%", 3);
  }
  CHECK_THROWS_AS(train::load_checkpoint(garbage, run.state), Error);
  unchanged();
  CHECK_THROWS_AS(train::load_checkpoint(dir.file("absent.safetensors"), run.state), Error);

  // A model-only file.
  const std::string model_only = dir.file("model.safetensors");
  run.model->save(model_only);
  CHECK_ERROR(train::load_checkpoint(model_only, run.state), "not a halfgrad training checkpoint");
  unchanged();

  // Edited copies of the good file: one entry removed, changed or added.
  const safetensors::File good = safetensors::load(path);
  auto edited = [&](const std::string& name, const std::function<void(safetensors::NamedTensors&)>& edit) {
    safetensors::NamedTensors tensors = good.tensors;
    edit(tensors);
    const std::string out = dir.file(name);
    safetensors::save(out, tensors, good.metadata);
    return out;
  };
  auto remove = [](const std::string& key) {
    return [key](safetensors::NamedTensors& t) { std::erase_if(t, [&](const auto& e) { return e.first == key; }); };
  };
  auto replace = [](const std::string& key, Tensor value) {
    return [key, value](safetensors::NamedTensors& t) {
      for (auto& e : t) {
        if (e.first == key) e.second = value;
      }
    };
  };
  CHECK_ERROR(train::load_checkpoint(edited("a.safetensors", remove("model.wte.weight")), run.state),
              "lacks 1 tensor(s) of the model (wte.weight)");
  unchanged();
  CHECK_ERROR(train::load_checkpoint(edited("b.safetensors", replace("model.wte.weight", zeros({16, 16}, DType::f64))),
                                     run.state),
              "'model.wte.weight' is f64[16, 16]", "another model configuration or precision");
  unchanged();
  CHECK_ERROR(train::load_checkpoint(edited("c.safetensors", remove("optimizer.0.exp_avg")), run.state),
              "optimizer state", "no '0.exp_avg'");
  unchanged();
  CHECK_ERROR(train::load_checkpoint(edited("d.safetensors", remove("scaler.scale")), run.state), "scaler state",
              "'scale' is missing");
  unchanged();
  CHECK_ERROR(
      train::load_checkpoint(edited("e.safetensors", replace("counter.step", zeros({3}, DType::i64))), run.state),
      "'counter.step' is i64[3]", "expected i64[1]");
  unchanged();
  CHECK_ERROR(train::load_checkpoint(edited("f.safetensors", remove("mt19937_64.data")), run.state),
              "has no 'mt19937_64.data'");
  unchanged();
  CHECK_ERROR(train::load_checkpoint(edited("g.safetensors",
                                            [](safetensors::NamedTensors& t) {
                                              t.emplace_back("extra.surprise", zeros({1}, DType::i64));
                                            }),
                                     run.state),
              "'extra.surprise' is not registered");
  unchanged();
  CHECK_ERROR(train::load_checkpoint(edited("h.safetensors", replace("extra.loader", zeros({2}))), run.state),
              "'extra.loader' is f32[2]", "expected i64[2]");
  unchanged();

  // Metadata: another version, no step.
  for (const auto& [key, value, expected] :
       {std::tuple<std::string, std::string, const char*>{"version", "7", "version '7'"},
        {"step", "soon", "no valid 'step'"}}) {
    safetensors::Metadata metadata = good.metadata;
    metadata[key] = value;
    const std::string out = dir.file("meta_" + key + ".safetensors");
    safetensors::save(out, good.tensors, metadata);
    CHECK_ERROR(train::load_checkpoint(out, run.state), expected);
    unchanged();
  }

  // Another architecture (width 32 instead of 16).
  const GeneratorState generator_before = default_generator().state();
  Run wider(11, 32);  // seeds the global generator, which `run` registers too: put it back
  default_generator().set_state(generator_before);
  const auto wider_before = wider.snapshot();
  CHECK_ERROR(train::load_checkpoint(path, wider.state), "another model configuration");
  CHECK(wider.snapshot() == wider_before);

  // A run that registers less than the file holds.
  train::TrainingState partial;
  partial.model(*run.model);
  CHECK_ERROR(train::load_checkpoint(path, partial), "but this run registers no");
  unchanged();

  // And the good file loads.
  CHECK(train::load_checkpoint(path, run.state) == 2);
  CHECK(run.step == 2);
}

TEST_CASE("TrainingState registration errors") {
  int64_t a = 0, b = 0;
  train::TrainingState state;
  state.counter("step", a);
  CHECK_ERROR(state.counter("step", b), "counter 'step' is registered twice");
  CHECK_ERROR(state.counter("a.b", b), "counter name 'a.b' is invalid");
  Tensor undefined;
  CHECK_ERROR(state.extra("x", undefined), "extra 'x' is an undefined tensor");
}

#endif  // !HG_CHECKPOINT_ON_CUDA
