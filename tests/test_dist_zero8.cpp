// 8-bit AdamW state under ZeRO (dist/zero_quantized_state.cpp, dist/zero_layout.h), run by ctest as a
// world of 1, under mpirun -np 2 and -np 4, over TCP, and (suite "cuda") on the emulated CUDA device,
// also through the emulated NCCL. A GPT whose matrices have 4608 to 9216 elements (2.25 to 4.5 blocks
// of 2048: partial last blocks, and partition boundaries that would cut blocks if the layout did not
// place them) next to tensors under 4096 elements (fp32 moments).
//   - Every rank trains on the WHOLE global batch: the averaged gradients equal one process's exactly
//     (N equal addends, N a power of two), so ZeRO stages 0-3 must give the single-process 8-bit AdamW
//     bit for bit -- a quantisation block cut differently (another absmax) would show in the bits. f32
//     and bf16 (fp32 master). Offload (the CPU kernel cpu::adamw8bit_offload_step) within a few ulps.
//   - Each rank on its share of the batch (the real data-parallel run): within the 32-bit ZeRO tests'
//     tolerance policy (losses 1e-5 relative; parameters a fraction of their tensor's scale).
//   - Shards saved at N ranks resume in one process, and one process's at N ranks, bit for bit; the
//     world-2 -> world-4 re-partition is driven by tests/dist/check_zero8_repartition.sh through the
//     two cases that read HG_ZERO8_SHARDS.
//   - Optimizer state bytes per rank, 8-bit against 32-bit, measured (ModelStateBytes and the
//     allocator), against the formula.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>

#include "data/sampler.h"
#include "dist/communicator.h"
#include "dist/zero_optimizer.h"
#include "engine/cuda/cuda_context.h"
#include "engine/ops.h"
#include "engine/random.h"
#include "engine/safetensors.h"
#include "kernels/adamw8bit_math.h"
#include "layers/gpt.h"
#include "optim/adamw.h"
#include "support/dist_world.h"
#include "support/shared_temp_dir.h"
#include "support/skip_cuda.h"
#include "support/tensor_bytes.h"

using namespace hg;
using namespace hg::dist;
using hg::test::comm;
using hg::test::bytes_of;
using hg::test::SharedTempDir;

namespace {

constexpr int64_t kVocab = 96, kContext = 8, kGlobalBatch = 8;
constexpr int kSteps = 5;

// wte 96x48 = 4608 (2.25 blocks), c_attn 48x144 = 6912 (3.375), c_fc and c_proj 9216 (4.5): 8-bit;
// attn.c_proj 48x48 = 2304, wpe, biases and LayerNorms: fp32 moments.
nn::GPTConfig config() { return nn::GPTConfig().vocab_size(kVocab).context(kContext).n_layer(2).n_head(2).n_embd(48); }

optim::AdamWOptions adamw_options(int bits = 8) {
  return optim::AdamWOptions().lr(3e-3).betas(0.9, 0.95).weight_decay(0.1).decay_only_matrices(true).state_bits(bits);
}

std::pair<Tensor, Tensor> global_batch(int step) {
  std::mt19937 rng(4321 + step);
  std::vector<int64_t> ids(size_t(kGlobalBatch * kContext)), targets(ids.size());
  for (auto& t : ids) t = int64_t(rng() % kVocab);
  for (auto& t : targets) t = int64_t(rng() % kVocab);
  return {from_vector(ids, {kGlobalBatch, kContext}), from_vector(targets, {kGlobalBatch, kContext})};
}

Tensor take_rows(const Tensor& x, const std::vector<int64_t>& rows) {
  std::vector<Tensor> parts;
  for (int64_t r : rows) parts.push_back(x.narrow(0, r, 1));
  return cat(parts, 0);
}

std::vector<int64_t> rows_of_rank(int world, int rank) {
  return data::DistributedBatchSampler(kGlobalBatch,
                                       data::SamplerOptions().shuffle(false).rank(rank).world_size(world))
      .rank_indices(0);
}

struct Run {
  std::vector<double> losses;                 // of steps first_step.. (mean over the global batch)
  std::vector<std::vector<float>> params;     // at the end, widened
  std::vector<std::vector<uint8_t>> bytes;    // at the end, the parameters' own bytes
};

void record_params(Run& run, const std::vector<Tensor>& params) {
  for (const Tensor& p : params) {
    run.params.push_back(p.to(kCPU).to(DType::f32).to_vector<float>());
    run.bytes.push_back(bytes_of(p));
  }
}

std::unique_ptr<nn::GPT> make_model(DType dtype, const Device& device) {
  manual_seed(7);
  auto model = std::make_unique<nn::GPT>(config());
  model->to(dtype);
  model->to(device);
  return model;
}

// One process, the whole global batch, the local 8-bit AdamW (fp32 master for half parameters).
Run reference_run(DType dtype, int steps = kSteps, int bits = 8, double eps = 1e-8, const Device& device = kCPU) {
  const std::unique_ptr<nn::GPT> owner = make_model(dtype, device);
  nn::GPT& model = *owner;
  optim::AdamW opt(model.parameters(), adamw_options(bits).eps(eps));
  Run run;
  for (int s = 0; s < steps; ++s) {
    auto [ids, targets] = global_batch(s);
    opt.zero_grad();
    Tensor loss = model.loss(ids.to(device), targets.to(device));
    loss.backward();
    opt.step();
    run.losses.push_back(loss.item());
  }
  record_params(run, model.parameters());
  return run;
}

struct Plan {
  int stage = 0;
  bool offload = false;
  bool whole_batch = false;  // every rank trains on the whole global batch
  DType dtype = DType::f32;
  Device device = kCPU;
  int bits = 8;
  double eps = 1e-8;  // AdamW's
  Communicator* comm = nullptr;
  int first_step = 0, last_step = kSteps;
  std::string load_prefix, save_prefix;  // optimizer shards + "<prefix>.params.safetensors"
  int64_t persistence_threshold = 0;     // stage 3
};

struct Result {
  Run run;
  ModelStateBytes state;
};

Result zero_run(const Plan& plan) {
  Communicator& c = plan.comm ? *plan.comm : comm();
  const std::unique_ptr<nn::GPT> owner = make_model(plan.dtype, kCPU);
  nn::GPT& model = *owner;
  if (!plan.load_prefix.empty()) {
    const safetensors::File file = safetensors::load(plan.load_prefix + ".params.safetensors");
    const std::vector<Tensor> params = model.parameters();
    NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) params[i].copy_(file.tensors.at(i).second);
  }
  model.to(plan.device);
  const ZeroOptions options =
      ZeroOptions().stage(plan.stage).offload_optimizer(plan.offload).bucket_bytes(16384).adamw(
          adamw_options(plan.bits).eps(plan.eps)).persistence_threshold(plan.persistence_threshold);
  std::unique_ptr<ZeroOptimizer> zero = plan.stage == 3
                                            ? std::make_unique<ZeroOptimizer>(model, c, options)
                                            : std::make_unique<ZeroOptimizer>(model.parameters(), c, options);
  ZeroOptimizer& opt = *zero;
  if (!plan.load_prefix.empty()) opt.load_state(plan.load_prefix);
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < kGlobalBatch; ++r) rows.push_back(r);
  if (!plan.whole_batch) rows = rows_of_rank(c.world_size(), c.rank());
  Result result;
  for (int s = plan.first_step; s < plan.last_step; ++s) {
    auto [ids, targets] = global_batch(s);
    opt.zero_grad();
    Tensor loss = model.loss(take_rows(ids, rows).to(plan.device), take_rows(targets, rows).to(plan.device));
    loss.backward();
    double value = loss.item();
    c.all_reduce(&value, 1, DType::f64, ReduceOp::avg).wait();
    CHECK(opt.step());
    result.run.losses.push_back(value);
  }
  const auto whole = opt.gather_parameters();
  if (!plan.save_prefix.empty()) {
    opt.save_state(plan.save_prefix);
    if (c.rank() == 0) safetensors::save(plan.save_prefix + ".params.safetensors", model.named_parameters());
    c.barrier().wait();
  }
  record_params(result.run, model.parameters());
  result.state = opt.model_state_bytes();
  return result;
}

// The parameters' bytes equal, element by element; a failure names the first tensor that differs.
void check_same_bits(const Run& got, const Run& want, int first_step = 0) {
  REQUIRE(got.bytes.size() == want.bytes.size());
  for (size_t i = 0; i < got.losses.size(); ++i) {
    INFO("step ", first_step + int(i));
    CHECK(got.losses[i] == want.losses[size_t(first_step) + i]);
  }
  for (size_t t = 0; t < want.bytes.size(); ++t) {
    INFO("parameter tensor ", t, " (", want.params[t].size(), " elements)");
    CHECK(got.bytes[t] == want.bytes[t]);
  }
}

// The largest |got - want| of an element over its tensor's largest magnitude; `where` (nullable)
// receives "tensor T (N elements) element I".
double largest_param_difference(const Run& got, const Run& want, std::string* where = nullptr) {
  REQUIRE(got.params.size() == want.params.size());
  double worst = 0;
  for (size_t t = 0; t < want.params.size(); ++t) {
    double scale = 0;
    for (float w : want.params[t]) scale = std::max(scale, double(std::abs(w)));
    for (size_t i = 0; i < want.params[t].size(); ++i) {
      const double d = std::abs(double(got.params[t][i]) - want.params[t][i]) / (scale + 1e-12);
      if (d > worst && where != nullptr)
        *where = "tensor " + std::to_string(t) + " (" + std::to_string(want.params[t].size()) + " elements) element " +
                 std::to_string(i);
      worst = std::max(worst, d);
    }
  }
  return worst;
}

void check_whole_batch_bits(const Device& device, DType dtype) {
  const Run want = reference_run(dtype, kSteps, 8, 1e-8, device);  // on the same device: the same kernels
  // Stage 3 twice: every parameter in a sharded unit, and with the persistent unit holding an 8-bit
  // parameter (wte, 4608 elements) next to fp32-moment ones.
  for (int variant : {0, 1, 2, 3, 4}) {
    const int stage = std::min(variant, 3);
    INFO("stage ", stage, variant == 4 ? " (persistent unit of <= 4608 elements)" : "", " ", dtype_name(dtype), " on ",
         device.str(), ", rank ", comm().rank(), " of ", comm().world_size());
    Plan plan;
    plan.stage = stage;
    plan.persistence_threshold = variant == 4 ? 4608 : 0;
    plan.whole_batch = true;
    plan.dtype = dtype;
    plan.device = device;
    check_same_bits(zero_run(plan).run, want);
  }
}

// Offload runs cpu::adamw8bit_offload_step over the same blocks as the device's adamw8bit_step_device
// (on the CPU device the same per-block code): after one step (same gradients) the 8-bit parameters
// are bit for bit the device run's. The fp32-moment parameters go through cpu::adamw_offload_step (SIMD, fused
// multiply-adds) against adamw_step_device: within 2 ulps of their tensor's scale (measured 1.5). From the
// second step those ulps reach every gradient, and an 8-bit code whose value sits at a rounding
// midpoint may requantise one step the other way; after 5 steps the parameters stay within 5e-4 of
// their tensor's scale (measured 3.8e-4, on an 8-bit matrix). eps = 1e-2 (test_dist_zero.cpp's offload
// test): with 1e-8 the zero-gradient key bias turns the ulps into lr-sized moves of either sign.
void check_offload_like_device(const Device& device) {
  for (int stage : {0, 1, 2, 3}) {
    INFO("stage ", stage, " on ", device.str());
    Plan plan;
    plan.stage = stage;
    plan.whole_batch = true;
    plan.device = device;
    plan.eps = 1e-2;
    for (int steps : {1, kSteps}) {
      INFO(steps, " steps");
      plan.last_step = steps;
      plan.offload = false;
      const Run want = zero_run(plan).run;
      plan.offload = true;
      const Run got = zero_run(plan).run;
      std::string where;
      const double worst = largest_param_difference(got, want, &where);
      INFO("largest difference offload vs device: ", worst, " of the tensor's scale at ", where);
      if (steps > 1) {
        CHECK(worst <= 5e-4);
        continue;
      }
      // One step: every tensor within 2 ulps of its scale; on the CPU device (where the device kernel
      // is the CPU one) the 8-bit tensors bit for bit. (The CUDA kernel rounds its fp32 update in
      // another order: the step's parameters ulps apart, measured 1.0e-7 of the scale.)
      CHECK(worst <= 0x1p-23);
      for (size_t t = 0; device.is_cpu() && t < want.params.size(); ++t)
        if (int64_t(want.params[t].size()) >= kernels::kAdamW8BitMinElements) {
          INFO("8-bit tensor ", t, " (", want.params[t].size(), " elements)");
          CHECK(got.bytes[t] == want.bytes[t]);
        }
    }
  }
}

// Each rank on its share of the batch: the gradients differ from one process's by the rounding of
// per-rank means, as in the 32-bit ZeRO tests (test_dist_zero.cpp check_equal_runs), and Adam
// turns that noise on elements whose true gradient is ~0 into moves of up to lr; the 8-bit state
// may add one quantisation step of m or v to such an element. Same tolerance: losses 1e-5 relative,
// parameters 3e-4 of their tensor's scale (5e-4 on the CUDA device). eps = 1e-3 (test_dist_zero.cpp's
// half-precision tests): with 1e-8 this model's key bias (an fp32-moment tensor, zero true gradient)
// moves by 1.3e-3 of its scale on rounding noise alone, at 1, 2 and 4 ranks, 8-bit state or not.
constexpr double kSharedBatchEps = 1e-3;
void check_sharded_batch(const Device& device, double param_tol) {
  const Run want = reference_run(DType::f32, kSteps, 8, kSharedBatchEps);
  for (int stage : {0, 1, 2, 3})
    for (bool offload : {false, true}) {
      INFO("stage ", stage, std::string(offload ? " + offload" : ""), " on ", device.str(), ", rank ", comm().rank(), " of ",
           comm().world_size());
      Plan plan;
      plan.stage = stage;
      plan.offload = offload;
      plan.device = device;
      plan.eps = kSharedBatchEps;
      const Run got = zero_run(plan).run;
      for (size_t s = 0; s < got.losses.size(); ++s) {
        INFO("step ", s);
        CHECK(std::abs(got.losses[s] - want.losses[s]) <= 1e-5 * std::abs(want.losses[s]));
      }
      std::string where;
      const double worst = largest_param_difference(got, want, &where);
      INFO("largest parameter difference: ", worst, " of the tensor's scale at ", where);
      CHECK(worst <= param_tol);
    }
}

}  // namespace

TEST_CASE("8-bit ZeRO stages 0-3 on the whole batch are the single-process 8-bit AdamW bit for bit") {
  for (DType dtype : {DType::f32, DType::bf16}) check_whole_batch_bits(kCPU, dtype);
}

TEST_CASE("8-bit ZeRO stages 0-3 on the whole batch are the single-process 8-bit AdamW bit for bit on the CUDA device" *
          doctest::test_suite("cuda")) {
  if (!testing::skip_without_cuda("test_dist_zero8")) check_whole_batch_bits(hg::test::rank_cuda_device(), DType::f32);
}

TEST_CASE("8-bit ZeRO with the optimizer offloaded updates like the device optimizer") {
  check_offload_like_device(kCPU);
}

TEST_CASE("8-bit ZeRO with the optimizer offloaded updates like the device optimizer on the CUDA device" *
          doctest::test_suite("cuda")) {
  if (!testing::skip_without_cuda("test_dist_zero8")) check_offload_like_device(hg::test::rank_cuda_device());
}

TEST_CASE("8-bit ZeRO stages 0-3 with and without offload train like one process on the global batch") {
  check_sharded_batch(kCPU, 3e-4);
}

TEST_CASE("8-bit ZeRO stages 0-3 train like one process on the global batch on the CUDA device" *
          doctest::test_suite("cuda")) {
  if (!testing::skip_without_cuda("test_dist_zero8")) check_sharded_batch(hg::test::rank_cuda_device(), 5e-4);
}

TEST_CASE("8-bit shards saved at N ranks resume in one process, and one process's at N ranks, bit for bit") {
  const SharedTempDir dir(comm(), "hg_zero8_ckpt_");
  const std::string prefix = (dir.path / "ckpt").string();
  const Run want = reference_run(DType::bf16);
  Communicator alone(CommunicatorOptions().timeout(std::chrono::seconds(60)).this_process_only(true));
  for (int stage : {1, 2, 3}) {
    INFO("saved at stage ", stage, " by ", comm().world_size(), " ranks; resumed by one process at stage 0 and 3");
    Plan first;
    first.stage = stage;
    first.whole_batch = true;
    first.dtype = DType::bf16;
    first.last_step = 3;
    first.save_prefix = prefix + std::to_string(stage);
    zero_run(first);
    for (int resumed : {0, 3}) {
      Plan rest = first;
      rest.stage = resumed;
      rest.comm = &alone;
      rest.first_step = 3;
      rest.last_step = kSteps;
      rest.save_prefix.clear();
      rest.load_prefix = first.save_prefix;
      check_same_bits(zero_run(rest).run, want, 3);
    }
  }
  // One process (rank 0's files; every rank writes its own copy) at stage 0 with offload, resumed by
  // N ranks at stage 2 and 3.
  Plan one;
  one.stage = 0;
  one.offload = true;
  one.whole_batch = true;
  one.dtype = DType::bf16;
  one.comm = &alone;
  one.last_step = 3;
  one.save_prefix = prefix + "-one." + std::to_string(comm().rank());
  zero_run(one);
  comm().barrier().wait();
  for (int stage : {2, 3}) {
    INFO(comm().world_size(), " ranks at stage ", stage, " from one process's stage-0 state");
    Plan many;
    many.stage = stage;
    many.whole_batch = true;
    many.dtype = DType::bf16;
    many.first_step = 3;
    many.load_prefix = prefix + "-one.0";
    check_same_bits(zero_run(many).run, want, 3);
  }
}

// Driven by tests/dist/check_zero8_repartition.sh: `mpirun -np 2` writes 3 steps of stage-2 8-bit state
// under $HG_ZERO8_SHARDS, `mpirun -np 4` reads them at stage 1 and 3 and continues bit for bit.
TEST_CASE("8-bit shards for another world: written") {
  const char* dir = std::getenv("HG_ZERO8_SHARDS");
  if (dir == nullptr) return;  // only under check_zero8_repartition.sh
  Plan plan;
  plan.stage = 2;
  plan.whole_batch = true;
  plan.dtype = DType::bf16;
  plan.last_step = 3;
  plan.save_prefix = std::string(dir) + "/ckpt";
  zero_run(plan);
  if (comm().rank() == 0) MESSAGE("wrote 8-bit shards at world " << comm().world_size());
}

TEST_CASE("8-bit shards for another world: read") {
  const char* dir = std::getenv("HG_ZERO8_SHARDS");
  if (dir == nullptr) return;
  const std::string prefix = std::string(dir) + "/ckpt";
  const int saved = ZeroOptimizer::saved_world_size(prefix);
  REQUIRE(saved > 0);
  CHECK(saved != comm().world_size());
  const Run want = reference_run(DType::bf16);
  for (int stage : {1, 3}) {
    INFO("stage ", stage, " at world ", comm().world_size(), " from world ", saved);
    Plan plan;
    plan.stage = stage;
    plan.whole_batch = true;
    plan.dtype = DType::bf16;
    plan.first_step = 3;
    plan.load_prefix = prefix;
    check_same_bits(zero_run(plan).run, want, 3);
  }
  if (comm().rank() == 0) MESSAGE("resumed world " << saved << " 8-bit shards at world " << comm().world_size() << " bit for bit");
}

TEST_CASE("8-bit optimizer state per rank against 32-bit") {
  const int world = comm().world_size();
  // What the f32 parameters need (no master): 8-bit ones 2 code bytes per element + 2 absmax floats
  // per block of 2048, the others 8.
  int64_t quantized = 0, blocks = 0, small = 0;
  {
    const std::unique_ptr<nn::GPT> model = make_model(DType::f32, kCPU);
    for (const Tensor& p : model->parameters()) {
      if (p.numel() >= kernels::kAdamW8BitMinElements) {
        quantized += p.numel();
        blocks += kernels::adamw8bit_blocks(p.numel());
      } else {
        small += p.numel();
      }
    }
  }
  REQUIRE(quantized > 4 * small);
  const int64_t want_8bit = 2 * quantized + 8 * blocks + 8 * small;
  const double want_ratio = double(want_8bit) / double(8 * (quantized + small));
  for (int stage : {0, 1, 2, 3}) {
    int64_t optimizer[2] = {0, 0}, total[2] = {0, 0};  // [bits == 8]
    for (int bits : {8, 32}) {
      const std::unique_ptr<nn::GPT> model = make_model(DType::f32, kCPU);
      ZeroOptimizer opt(*model, comm(), ZeroOptions().stage(stage).adamw(adamw_options(bits)));
      optimizer[bits == 8] = total[bits == 8] = opt.model_state_bytes().optimizer;
    }
    comm().all_reduce(&total[0], 2, DType::i64, ReduceOp::sum).wait();
    const double ratio = double(optimizer[1]) / double(optimizer[0]);
    const double summed_ratio = double(total[1]) / double(total[0]);
    INFO("stage ", stage, " rank ", comm().rank(), " of ", world, ": optimizer state ", optimizer[1], " bytes 8-bit, ",
         optimizer[0], " 32-bit (ratio ", ratio, "); over the ranks ", total[1], " and ", total[0], " (ratio ",
         summed_ratio, "); the parameters' own ", want_8bit, " bytes, ratio ", want_ratio);
    // No block is split or duplicated across ranks: the ranks' 8-bit state adds up to the parameters'
    // own exactly (stage 0: each rank holds it all).
    CHECK((stage == 0 ? optimizer[1] : total[1]) == want_8bit);
    // 32-bit state also covers the padding of N x 32 elements: within 2% of the parameters' ratio.
    CHECK(summed_ratio <= want_ratio);
    CHECK(summed_ratio >= 0.98 * want_ratio);
    // Per rank (a partition may hold more of the small tensors than the average): at most 0.6.
    CHECK(ratio < 0.6);
  }
}

TEST_CASE("8-bit ZeRO refuses shards of the other state width with a clear error") {
  const SharedTempDir dir(comm(), "hg_zero8_bad_");
  const std::string prefix = (dir.path / "ckpt").string();
  for (int saved_bits : {32, 8}) {
    const int loaded_bits = saved_bits == 32 ? 8 : 32;
    INFO("saved ", saved_bits, "-bit, loaded ", loaded_bits, "-bit");
    const std::unique_ptr<nn::GPT> saver = make_model(DType::f32, kCPU);
    ZeroOptimizer saving(*saver, comm(), ZeroOptions().stage(1).adamw(adamw_options(saved_bits)));
    saving.save_state(prefix);
    const std::unique_ptr<nn::GPT> loader = make_model(DType::f32, kCPU);
    ZeroOptimizer loading(*loader, comm(), ZeroOptions().stage(2).adamw(adamw_options(loaded_bits)));
    const std::string message = std::to_string(saved_bits) + "-bit AdamW moments but this optimizer keeps " +
                                std::to_string(loaded_bits) + "-bit ones";
    CHECK_THROWS_WITH_AS(loading.load_state(prefix), doctest::Contains(message.c_str()), hg::Error);
    comm().barrier().wait();
  }
  // A range of an 8-bit parameter that starts inside one of its blocks cannot be re-partitioned.
  const std::unique_ptr<nn::GPT> model = make_model(DType::f32, kCPU);
  ZeroOptimizer opt(*model, comm(), ZeroOptions().stage(1).adamw(adamw_options(8)));
  opt.save_state(prefix);
  const std::string path = prefix + ".rank0-of-" + std::to_string(comm().world_size()) + ".safetensors";
  comm().barrier().wait();
  if (comm().rank() == 0) {
    safetensors::File file = safetensors::load(path);
    file.metadata["ranges"] = "100:5000";  // wte's elements 100.. : inside its first block
    safetensors::save(path, file.tensors, file.metadata);
  }
  comm().barrier().wait();
  CHECK_THROWS_WITH_AS(opt.load_state(prefix), doctest::Contains("do not start and end on its quantisation blocks"),
                       hg::Error);
}
