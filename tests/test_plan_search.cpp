// The planner's search and step-time model (plan/search.cpp, plan/step_time.cpp): the enumeration
// covers the stated space, the ranking is monotone in step time (at the planner's 1% resolution),
// flags() parses back to the configuration, budgets are respected, a bigger budget never recommends a
// slower configuration, and each step-time term responds to the technique that causes it.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "engine/cuda/cuda_context.h"
#include "kernels/error.h"
#include "plan/plan.h"
#include "plan/search.h"
#include "support/test_seed.h"

using namespace hg;
using namespace hg::plan;

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// A random small GPT (fresh shapes each run of the seed), its batch and an H200.
PlanRequest random_request(std::mt19937& rng, int world) {
  PlanRequest r;
  const int64_t heads = 1 + int64_t(rng() % 8);
  r.model.heads = heads;
  r.model.dim = heads * 16 * (1 + int64_t(rng() % 4));
  r.model.layers = 2 + int64_t(rng() % 10);
  r.model.context = 32 << (rng() % 4);
  r.model.vocab = 256 + int64_t(rng() % 2000);
  r.world = world;
  r.batch_tokens = r.model.context * world * (int64_t(1) << (rng() % 6));
  r.machine = Machine::h200();
  r.device_budget_bytes = int64_t(64) << 30;
  return r;
}

// The device budget whose usable part (less the CUDA headroom, which grows with the budget) is `usable`.
int64_t budget_for_usable(PlanRequest r, int64_t usable) {
  r.device_budget_bytes = usable;
  while (r.device_budget_bytes - device_headroom_bytes(r) < usable)
    r.device_budget_bytes += usable - (r.device_budget_bytes - device_headroom_bytes(r));
  while (r.device_budget_bytes - device_headroom_bytes(r) > usable) --r.device_budget_bytes;
  return r.device_budget_bytes;
}

// train_gpt's flags back into a configuration (train_gpt's defaults for what they leave out).
TrainingConfig parse_flags(const std::vector<std::string>& flags, int world) {
  TrainingConfig c;
  for (size_t i = 0; i < flags.size(); ++i) {
    const std::string& f = flags[i];
    auto value = [&] {
      REQUIRE(i + 1 < flags.size());
      return flags[++i];
    };
    if (f == "--precision") {
      const std::string v = value();
      c.precision = v == "bf16" ? Precision::bf16 : v == "fp16" ? Precision::fp16 : Precision::fp32;
      CHECK(name(c.precision) == v);
    } else if (f == "--no-master-weights") {
      c.master_weights = false;
    } else if (f == "--batch") {
      const int64_t global = std::stoll(value());
      CHECK(global % world == 0);
      c.micro_batch = global / world;
    } else if (f == "--grad-accum") {
      c.grad_accum = std::stoll(value());
    } else if (f == "--recompute-every") {
      c.recompute_every = std::stoll(value());
    } else if (f == "--offload-activations") {
      const std::string v = value();
      c.offload_activations = v == "all"      ? OffloadMode::all
                              : v == "inputs" ? OffloadMode::recompute_inputs
                                              : OffloadMode::off;
      CHECK(offload_mode_name(c.offload_activations) == v);
    } else if (f == "--zero") {
      c.zero_stage = std::stoi(value());
    } else if (f == "--offload-optimizer") {
      c.offload_optimizer = true;
    } else if (f == "--optimizer-state-bits") {
      c.state_bits = std::stoi(value());
    } else if (f == "--fp32-grads") {
      c.fp32_grads = true;
    } else {
      FAIL("unexpected flag " << f);
    }
  }
  return c;
}

auto key(const TrainingConfig& c) {
  return std::make_tuple(int(c.precision), c.master_weights, c.fp32_grads, c.micro_batch, c.grad_accum,
                         c.recompute_every, int(c.offload_activations), c.zero_stage, c.offload_optimizer,
                         c.state_bits);
}

}  // namespace

TEST_CASE("plan: the enumeration covers the stated space and only valid configurations") {
  std::mt19937 rng = hg::testing::seeded_rng();
  for (int world : {1, 8}) {
    PlanRequest r = random_request(rng, world);
    r.model.layers = 8;
    r.batch_tokens = r.model.context * world * 12;  // 12 sequences per rank: micro-batches 1, 2, 4, 12
    CHECK(sequences_per_rank(r) == 12);
    const std::vector<TrainingConfig> configs = enumerate(r);
    std::set<decltype(key(configs[0]))> unique;
    std::set<int64_t> micro, every;
    std::set<int> zero, bits;
    std::set<Precision> precisions;
    std::set<OffloadMode> offloads;
    bool masterless = false, optimizer_offload = false;
    for (const TrainingConfig& c : configs) {
      unique.insert(key(c));
      CHECK(c.micro_batch * c.grad_accum == 12);
      micro.insert(c.micro_batch);
      every.insert(c.recompute_every);
      zero.insert(c.zero_stage);
      bits.insert(c.state_bits);
      precisions.insert(c.precision);
      offloads.insert(c.offload_activations);
      masterless = masterless || !c.master_weights;
      optimizer_offload = optimizer_offload || c.offload_optimizer;
      if (!c.master_weights) CHECK((c.precision != Precision::fp32 && c.zero_stage == -1));
      if (c.offload_activations == OffloadMode::recompute_inputs) CHECK(c.recompute_every > 0);
      if (c.offload_optimizer) CHECK(c.zero_stage >= 0);
    }
    CHECK(unique.size() == configs.size());
    CHECK(micro == std::set<int64_t>{1, 2, 4, 12});
    CHECK(every == std::set<int64_t>{0, 1, 2, 4});
    CHECK(zero == (world == 1 ? std::set<int>{-1, 0} : std::set<int>{0, 1, 2, 3}));
    CHECK(bits == std::set<int>{8, 32});
    CHECK(precisions.size() == 3);
    CHECK(offloads.size() == 3);
    CHECK(masterless == (world == 1));
    CHECK(optimizer_offload);
    // The count: precision x master (fp32: 1, half: 2 at world 1) x 4 micro-batches x
    // (checkpoint 0: off/all; 1, 2, 4: off/inputs/all = 11) x ZeRO x optimizer offload x 2 widths.
    const size_t precision_master = world == 1 ? 5 : 3;
    const size_t zero_offload = world == 1 ? 3 : 8;  // -1; 0 +- offload | 0..3 +- offload
    // world 1: the master-less ones have only ZeRO -1 (1 of 3 zero/offload choices)
    const size_t expected =
        world == 1 ? (3 * zero_offload + 2 * 1) * 4 * 11 * 2 : precision_master * 4 * 11 * zero_offload * 2;
    CHECK(configs.size() == expected);
  }
  // The CPU device: no offload of either kind (the host is the device).
  PlanRequest cpu = random_request(rng, 1);
  cpu.machine.kind = DeviceKind::cpu;
  for (const TrainingConfig& c : enumerate(cpu))
    CHECK((c.offload_activations == OffloadMode::off && !c.offload_optimizer));
}

TEST_CASE("plan: budgets are respected, the ranking is monotone in step time, nothing fits is empty") {
  std::mt19937 rng = hg::testing::seeded_rng();
  for (int trial = 0; trial < 4; ++trial) {
    PlanRequest r = random_request(rng, trial % 2 ? 4 : 1);
    // A budget between the smallest and the largest predicted peak, so some fit and some do not.
    int64_t smallest = INT64_MAX, largest = 0;
    for (const TrainingConfig& c : enumerate(r)) {
      const int64_t peak = evaluate(r, c).memory.device_peak();
      smallest = std::min(smallest, peak);
      largest = std::max(largest, peak);
    }
    r.device_budget_bytes = budget_for_usable(r, smallest + (largest - smallest) / 3);
    const int64_t usable = r.device_budget_bytes - device_headroom_bytes(r);
    const std::vector<Candidate> ranked = plan::plan(r);
    REQUIRE(!ranked.empty());
    CHECK(ranked.size() < enumerate(r).size());
    // Monotone to the planner's 1% resolution: no candidate is more than 1% faster than any ranked before it.
    double slowest_so_far = 0;
    int over_budget = 0, wrong_world = 0, out_of_order = 0;
    for (const Candidate& c : ranked) {
      over_budget += c.memory.device_peak() > usable;
      wrong_world += c.world != r.world;
      out_of_order += slowest_so_far > ranking_seconds(c) * 1.01;
      slowest_so_far = std::max(slowest_so_far, ranking_seconds(c));
    }
    CHECK(over_budget == 0);
    CHECK(wrong_world == 0);
    CHECK(out_of_order == 0);
    CHECK(ranking_seconds(ranked.front()) < ranking_seconds(ranked.back()));
    // A configuration that changes the numerics ranks ahead of every standard one only when it is
    // faster by more than its charge (kNumericsPenalty per unit of numerics_cost).
    for (const Candidate& c : ranked) {
      if (numerics_cost(c.config) != 0) continue;
      const Candidate& best = ranked.front();
      if (numerics_cost(best.config) > 0)
        CHECK(best.time.total * (1 + kNumericsPenalty * numerics_cost(best.config)) <= c.time.total * 1.01);
      break;
    }

    // A host budget below what optimizer offload needs removes every offloading configuration.
    PlanRequest host_limited = r;
    host_limited.device_budget_bytes = budget_for_usable(r, largest);
    host_limited.host_budget_bytes = 1;
    for (const Candidate& c : plan::plan(host_limited)) CHECK(c.memory.host * std::min(r.world, 8) <= 1);

    PlanRequest tiny = r;
    tiny.device_budget_bytes = budget_for_usable(r, smallest - 1);
    CHECK(plan::plan(tiny).empty());
    const std::string why = nothing_fits_message(tiny);
    CHECK(why.find("nothing fits") != std::string::npos);
    CHECK(why.find("smallest predicted peak") != std::string::npos);
    CHECK(why.find("--memory-budget") != std::string::npos);
  }
}

TEST_CASE("plan: flags() parses back to the configuration") {
  std::mt19937 rng = hg::testing::seeded_rng();
  for (int world : {1, 2, 8}) {
    const PlanRequest r = random_request(rng, world);
    for (const TrainingConfig& c : enumerate(r)) {
      Candidate candidate;
      candidate.config = c;
      candidate.world = world;
      const TrainingConfig back = parse_flags(candidate.flags(), world);
      CHECK(key(back) == key(c));
    }
  }
}

TEST_CASE("plan: a bigger budget never recommends a slower configuration") {
  std::mt19937 rng = hg::testing::seeded_rng();
  for (int world : {1, 8}) {
    PlanRequest r = random_request(rng, world);
    double previous = 0;
    bool any = false;
    for (double gib = 0.05; gib <= 64; gib *= 1.5) {
      r.device_budget_bytes = int64_t(gib * kGiB);
      const std::vector<Candidate> ranked = plan::plan(r);
      if (ranked.empty()) {
        CHECK(!any);  // once something fits, more memory keeps it fitting
        continue;
      }
      if (any) CHECK(ranking_seconds(ranked.front()) <= previous * 1.01);
      previous = ranking_seconds(ranked.front());
      any = true;
    }
    CHECK(any);
  }
}

TEST_CASE("plan: step-time terms respond to the techniques that cause them") {
  std::mt19937 rng = hg::testing::seeded_rng();
  PlanRequest r = random_request(rng, 8);  // a random context; a shape where the blocks dominate the head
  r.model.layers = 8;
  r.model.heads = 4;
  r.model.dim = 256;
  r.model.vocab = 512;
  TrainingConfig base;
  base.precision = Precision::bf16;
  base.micro_batch = 2;
  base.grad_accum = 2;
  base.zero_stage = 0;
  const Machine h200 = Machine::h200();
  const int64_t tokens = 2 * 2 * 8 * r.model.context;
  const StepTime t0 = predict_step_time(r.model, base, 8, tokens, h200);
  CHECK(t0.compute > 0);
  CHECK(t0.recompute == 0);
  CHECK(t0.offload == 0);
  CHECK(t0.collectives > 0);
  CHECK(t0.optimizer > 0);
  CHECK(t0.total >= t0.compute);

  // Checkpointing adds the recomputed forward of every block: about a third of the blocks' compute.
  TrainingConfig ckpt = base;
  ckpt.recompute_every = 2;
  const StepTime t1 = predict_step_time(r.model, ckpt, 8, tokens, h200);
  CHECK(t1.recompute > 0.2 * t0.compute);
  CHECK(t1.recompute < 0.34 * t0.compute);
  CHECK(t1.total > t0.total);

  // Offload adds host-link time: activations (both ways), optimizer offload (gradients down, parameters up).
  TrainingConfig act = base;
  act.offload_activations = OffloadMode::all;
  CHECK(predict_step_time(r.model, act, 8, tokens, h200).offload > 0);
  TrainingConfig opt = base;
  opt.offload_optimizer = true;
  const StepTime t3 = predict_step_time(r.model, opt, 8, tokens, h200);
  const double P = double(r.model.parameters());
  CHECK(t3.offload == doctest::Approx(P * (2 + 2) / h200.host_link_bandwidth));  // stage 0: all of it, bf16
  CHECK(t3.optimizer > t0.optimizer);                                            // the CPU AdamW is slower than HBM
  // Faster host link, less offload time.
  Machine fast = h200;
  fast.host_link_bandwidth *= 4;
  CHECK(predict_step_time(r.model, opt, 8, tokens, fast).offload == doctest::Approx(t3.offload / 4));

  // Collectives: stage 0 all-reduce = 2 (N-1)/N P g; stage 1/2: reduce-scatter + all-gather, the same
  // bytes; stage 3 adds two parameter gathers per micro-batch; one rank: none.
  const double ring = 7.0 / 8.0 / h200.interconnect_bandwidth;
  CHECK(t0.collectives == doctest::Approx(2 * P * 2 * ring));
  TrainingConfig z2 = base, z3 = base;
  z2.zero_stage = 2;
  z3.zero_stage = 3;
  CHECK(predict_step_time(r.model, z2, 8, tokens, h200).collectives == doctest::Approx(2 * P * 2 * ring));
  const StepTime t5 = predict_step_time(r.model, z3, 8, tokens, h200);
  CHECK(t5.collectives == doctest::Approx(P * 2 * ring + 2 * 2 * P * 2 * ring));
  CHECK(predict_step_time(r.model, base, 1, tokens / 8, h200).collectives == 0);
  // Stage 3 with checkpointing gathers a third time per micro-batch (the backward reruns the forward).
  TrainingConfig z3_ckpt = z3;
  z3_ckpt.recompute_every = 1;
  CHECK(predict_step_time(r.model, z3_ckpt, 8, tokens, h200).collectives ==
        doctest::Approx(P * 2 * ring + 2 * 3 * P * 2 * ring));
  // The node's CPU AdamW is shared by its ranks: stage 0 offloaded (the whole state on each rank) at 8
  // ranks takes 8x one rank's optimizer time; at 16 ranks (two nodes) still 8x.
  const double offloaded_alone = predict_step_time(r.model, opt, 1, tokens / 8, h200).optimizer;
  CHECK(t3.optimizer == doctest::Approx(8 * offloaded_alone));
  CHECK(predict_step_time(r.model, opt, 16, 2 * tokens, h200).optimizer == doctest::Approx(8 * offloaded_alone));
  // FlashAttention-2's backward: 2.5x its forward's 4 T C per token per block; composed: 2x.
  ModelShape composed = r.model;
  composed.fused_attention = false;
  const double rank_tokens = 2.0 * 2.0 * double(r.model.context);
  const double attention_half = 0.5 * 4 * double(r.model.layers * r.model.context * r.model.dim) * rank_tokens;
  CHECK(t0.compute - predict_step_time(composed, base, 8, tokens, h200).compute ==
        doctest::Approx(attention_half / h200.device_flops));
  // ZeRO 1-3 update a 1/N shard: the optimizer takes 1/N of stage 0's time.
  CHECK(t5.optimizer == doctest::Approx(t0.optimizer / 8));

  // 8-bit state moves fewer bytes than 32-bit; fp32 compute is slower than bf16 on the H200.
  TrainingConfig q8 = base;
  q8.state_bits = 8;
  CHECK(predict_step_time(r.model, q8, 8, tokens, h200).optimizer < 0.7 * t0.optimizer);
  // ... but not on a CPU, whose 8-bit kernel (a search over the code map per element) has its own rate.
  TrainingConfig q8_offload = opt;
  q8_offload.state_bits = 8;
  const StepTime t8 = predict_step_time(r.model, q8_offload, 8, tokens, h200);
  CHECK(t8.optimizer > t3.optimizer);
  Machine fast8 = h200;
  fast8.cpu_adam8_bandwidth *= 100;
  CHECK(predict_step_time(r.model, q8_offload, 8, tokens, fast8).optimizer < t8.optimizer);
  TrainingConfig fp32 = base;
  fp32.precision = Precision::fp32;
  CHECK(predict_step_time(r.model, fp32, 8, tokens, h200).compute > 5 * t0.compute);

  // Compute scales with tokens (same micro-batch, twice the accumulation).
  TrainingConfig twice = base;
  twice.grad_accum = 4;
  CHECK(predict_step_time(r.model, twice, 8, 2 * tokens, h200).compute == doctest::Approx(2 * t0.compute));

  // On the CPU device the same cores issue the ops and run them: the issue floor adds to each
  // micro-batch, so the same tokens in 16 micro-batches take longer than in one (on a GPU it overlaps).
  const Machine cpu = Machine::cpu_nominal();
  TrainingConfig whole;
  whole.micro_batch = 16;
  TrainingConfig split = whole;
  split.micro_batch = 1;
  split.grad_accum = 16;
  const int64_t cpu_tokens = 16 * r.model.context;
  const double whole_seconds = predict_step_time(r.model, whole, 1, cpu_tokens, cpu).total;
  const double split_seconds = predict_step_time(r.model, split, 1, cpu_tokens, cpu).total;
  CHECK(split_seconds - whole_seconds == doctest::Approx(15 * (r.model.layers + 1) * cpu.block_seconds));
}

TEST_CASE("plan: the H200 constants and this CPU's calibration are positive and ordered") {
  const Machine h = Machine::h200();
  CHECK(h.kind == DeviceKind::cuda);
  CHECK(h.device_flops > h.device_flops_fp32);
  CHECK(h.device_bandwidth > h.interconnect_bandwidth);
  CHECK(h.interconnect_bandwidth > h.host_link_bandwidth);
  CHECK(h.device_flops < 989.4e12);  // derated below the datasheet peak
  const Machine cpu = calibrate(DeviceKind::cpu, 0.2);
  MESSAGE("this CPU: GEMM f32 " << cpu.device_flops_fp32 / 1e9 << " GFLOP/s, bf16 " << cpu.device_flops / 1e9
                                << " GFLOP/s, copy " << cpu.device_bandwidth / 1e9 << " GB/s, AdamW "
                                << cpu.host_adam_bandwidth / 1e9 << " GB/s, 8-bit AdamW "
                                << cpu.cpu_adam8_bandwidth / 1e9 << " GB/s, block " << cpu.block_seconds * 1e6
                                << " us");
  CHECK(cpu.kind == DeviceKind::cpu);
  CHECK(cpu.block_seconds < 1.0);  // (>= 0 by construction: a median clamped at 0)
  // The fixed figures every rank of a multi-process run plans with: the same in every call, every rate
  // positive, a CPU's.
  const Machine nominal = Machine::cpu_nominal();
  CHECK(nominal.kind == DeviceKind::cpu);
  for (double rate : {nominal.device_flops, nominal.device_flops_fp32, nominal.device_bandwidth,
                      nominal.host_link_bandwidth, nominal.interconnect_bandwidth, nominal.host_adam_bandwidth,
                      nominal.cpu_adam8_bandwidth, nominal.block_seconds})
    CHECK(rate > 0);
  CHECK(nominal.device_flops_fp32 < 1e14);
  for (double rate : {cpu.device_flops, cpu.device_flops_fp32, cpu.device_bandwidth, cpu.host_link_bandwidth,
                      cpu.interconnect_bandwidth, cpu.host_adam_bandwidth, cpu.cpu_adam8_bandwidth})
    CHECK(rate > 0);
  CHECK(cpu.device_flops_fp32 < 1e14);  // a CPU, not a GPU
  CHECK_THROWS_AS(calibrate(DeviceKind::cpu, 0), Error);
  PlanRequest bad;
  bad.device_budget_bytes = 1 << 30;  // a default Machine has no rates
  CHECK_THROWS_WITH_AS(plan::plan(bad), doctest::Contains("constant <= 0"), Error);
}

TEST_CASE("plan: calibrate(cuda) measures a CUDA device, or names why there is none") {
  if (!cuda::is_available()) {
    CHECK_THROWS_WITH_AS(calibrate(DeviceKind::cuda, 0.2), doctest::Contains("no CUDA device answers"), Error);
    return;
  }
  const Machine m = calibrate(DeviceKind::cuda, 0.5);
  CHECK(m.kind == DeviceKind::cuda);
  CHECK(m.name.find("(calibrated)") != std::string::npos);
  for (double rate : {m.device_flops, m.device_flops_fp32, m.device_bandwidth, m.host_link_bandwidth,
                      m.host_adam_bandwidth, m.cpu_adam8_bandwidth})
    CHECK(rate > 0);
  CHECK(m.interconnect_bandwidth == Machine::h200().interconnect_bandwidth);  // not measurable in one process
}

TEST_CASE("plan: the table lists the recommended first with its flags and the counts") {
  PlanRequest r;
  r.model.layers = 4;
  r.model.dim = 128;
  r.model.heads = 4;
  r.model.context = 64;
  r.world = 2;
  r.batch_tokens = 64 * 2 * 8;
  r.machine = Machine::h200();
  r.device_budget_bytes = budget_for_usable(r, int64_t(1) << 30);
  const std::vector<Candidate> ranked = plan::plan(r);
  REQUIRE(ranked.size() > 3);
  const std::string table = format_table(r, ranked, 3);
  std::string first_flags;
  for (const std::string& f : ranked.front().flags()) first_flags += (first_flags.empty() ? "" : " ") + f;
  CHECK(table.find("1*") != std::string::npos);
  CHECK(table.find("* recommended: " + first_flags + "\n") != std::string::npos);
  CHECK(table.find(std::to_string(enumerate(r).size()) + " configurations considered, " +
                   std::to_string(ranked.size()) + " fit, 3 shown") != std::string::npos);
  CHECK(std::count(table.begin(), table.end(), '\n') == 1 + 1 + 3 + 1 + 1);
}

TEST_CASE("plan: a CUDA rank's headroom comes off the budget, the CPU device has none") {
  std::mt19937 rng = hg::testing::seeded_rng();
  for (int world : {1, 8}) {
    PlanRequest r = random_request(rng, world);
    r.device_budget_bytes = int64_t(100) << 30;
    // context 500 MiB + cuBLASLt workspace 32 MiB (+ NCCL buffers 640 MiB at world > 1) + 5% of the budget
    const int64_t expected =
        (int64_t(532) << 20) + (world > 1 ? int64_t(640) << 20 : 0) + int64_t(5) * (int64_t(1) << 30);
    CHECK(device_headroom_bytes(r) == expected);
    PlanRequest cpu = r;
    cpu.machine.kind = DeviceKind::cpu;
    CHECK(device_headroom_bytes(cpu) == 0);
    // The configurations whose peak fits the budget but not the budget less the headroom are left out.
    std::vector<int64_t> peaks;
    for (const TrainingConfig& c : enumerate(r)) peaks.push_back(evaluate(r, c).memory.device_peak());
    std::sort(peaks.begin(), peaks.end());
    r.device_budget_bytes = budget_for_usable(r, peaks[peaks.size() / 2]);
    const int64_t usable = r.device_budget_bytes - device_headroom_bytes(r);
    const auto count_within = [&](int64_t bytes) {
      return int64_t(std::count_if(peaks.begin(), peaks.end(), [&](int64_t p) { return p <= bytes; }));
    };
    const std::vector<Candidate> ranked = plan::plan(r);
    CHECK(int64_t(ranked.size()) == count_within(usable));                // the host budget is unlimited
    CHECK(count_within(r.device_budget_bytes) > int64_t(ranked.size()));  // the headroom left some out
    for (const Candidate& c : ranked) CHECK(c.memory.device_peak() <= usable);
    if (!ranked.empty()) {
      const std::string table = format_table(r, ranked, 1);
      CHECK(table.find(" - headroom ") != std::string::npos);
      CHECK(format_table(cpu, ranked, 1).find("headroom") == std::string::npos);
    }
  }
}
