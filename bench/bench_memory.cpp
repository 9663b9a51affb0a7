// bench_memory: what activation checkpointing and activation offload buy and cost, one JSON object
// per line. A GPT whose activations dominate its parameters trains (forward + backward + AdamW) under
// four memory strategies:
//   none          every activation kept
//   ckpt_K1       hg::recompute around every block (GPT recompute_every = 1)
//   ckpt_K2       segments of two blocks
//   offload_all   every saved activation moved to host memory (hg::ActivationOffload, mode all)
//   ckpt_K1_offload_inputs   K = 1 with the kept block inputs moved to host memory
// For each: the device's peak allocated bytes during one step above what was allocated before it
// (step_peak: activations, gradients, temporaries; through the allocator), peak_mib = that plus the
// model's parameters and AdamW moments, the median step time and its ratio to none's (measured in this
// process), and the largest batch whose step fits a fixed budget enforced through the allocator
// (set_memory_limit; the budget is what none needs at 4 sequences), found by doubling then bisecting
// on out-of-memory errors.
// The step times are measured round-robin across the strategies, so that load from other processes
// weighs on all alike.
// Usage: bench_memory [--quick] [--steps N] [--threads N] [--device cpu|cuda]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench_args.h"
#include "engine/activation_offload.h"
#include "engine/allocator.h"
#include "engine/cuda/cuda_allocator.h"
#include "engine/cuda/cuda_context.h"
#include "engine/random.h"
#include "json_line.h"
#include "layers/nn.h"
#include "optim/optim.h"

using namespace hg;
using Clock = std::chrono::steady_clock;

namespace {

struct Strategy {
  const char* name;
  int64_t recompute_every;
  bool offload;
  OffloadMode mode;
};

struct Setup {
  int64_t L = 8, H = 4, C = 64, T = 128, V = 256, B = 8;
  int64_t budget_batch = 4;
  int steps = 5;
  Device device = kCPU;
};

void sync(const Device& device) {
  if (device.is_cuda()) cuda::synchronize(device.index);
}

// A model, its optimizer and one training step under a strategy.
class Trainer {
 public:
  Trainer(const Setup& s, const Strategy& strategy) : s_(s), strategy_(strategy) {
    manual_seed(1);
    const auto config =
        nn::GPTConfig().vocab_size(s.V).context(s.T).n_layer(s.L).n_head(s.H).n_embd(s.C).dropout(0.1).recompute_every(
            strategy.recompute_every);
    model_ = std::make_shared<nn::GPT>(config);
    model_->to(s.device);
    model_->train();
    optimizer_ = std::make_unique<optim::AdamW>(model_->parameters(), optim::AdamWOptions().lr(3e-4));
  }

  void step(int64_t batch) {
    const Tensor ids = randint(0, s_.V, {batch, s_.T}, i64, s_.device);
    const Tensor targets = randint(0, s_.V, {batch, s_.T}, i64, s_.device);
    Tensor loss;
    if (strategy_.offload) {
      ActivationOffload offload(strategy_.mode);
      loss = model_->loss(ids, targets);
    } else {
      loss = model_->loss(ids, targets);
    }
    loss.backward();
    optimizer_->step();
    optimizer_->zero_grad();
    sync(s_.device);
  }
  // Parameters and the two AdamW moments (f32): what stays allocated between steps.
  int64_t model_state_bytes() const { return 3 * model_->parameter_count() * 4; }
  // After a failed step: no gradient left behind to weigh on the next one.
  void drop_gradients() {
    for (const Tensor& p : model_->parameters()) p.set_grad(Tensor());
  }

 private:
  const Setup& s_;
  Strategy strategy_;
  std::shared_ptr<nn::GPT> model_;
  std::unique_ptr<optim::AdamW> optimizer_;
};

// Whether one step at `batch` fits in `budget` reserved bytes (after a first step, so the optimizer's
// state exists).
bool fits(Trainer& trainer, const Device& device, int64_t batch, int64_t budget) {
  empty_cache(device);
  set_memory_limit(device, budget);
  bool ok = true;
  try {
    trainer.step(batch);
  } catch (const Error&) {
    ok = false;
    trainer.drop_gradients();
  }
  set_memory_limit(device, 0);
  empty_cache(device);
  return ok;
}

int64_t largest_batch(Trainer& trainer, const Device& device, int64_t budget, int64_t cap) {
  int64_t good = 0, bad = 0;
  for (int64_t b = 1; b <= cap; b *= 2) {
    if (!fits(trainer, device, b, budget)) {
      bad = b;
      break;
    }
    good = b;
  }
  if (bad == 0) return good;  // fits up to the cap
  while (bad - good > 1) {
    const int64_t mid = (good + bad) / 2;
    (fits(trainer, device, mid, budget) ? good : bad) = mid;
  }
  return good;
}

}  // namespace

constexpr const char* kUsage =
    "usage: bench_memory [--quick] [--steps N] [--threads N] [--device cpu|cuda]\n"
    "Activation checkpointing and offload: a GPT trained under each memory strategy (none, ckpt_K1,\n"
    "ckpt_K2, offload_all, ckpt_K1_offload_inputs). Prints JSON lines to stdout: step peak, peak MiB,\n"
    "median step time and its ratio to none's, the largest batch within a fixed budget.\n"
    "  --quick            a small model, 2 steps (smoke runs)\n"
    "  --steps N          timed steps per strategy (default 5)\n"
    "  --threads N        OpenMP threads\n"
    "  --device cpu|cuda  where it trains (default cpu)\n"
    "  -h, --help         this text\n";

int main(int argc, char** argv) {
  Setup s;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (hg::bench::is_help(argv[i])) hg::bench::exit_with_usage(kUsage);
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    else if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc) s.steps = std::max(1, std::atoi(argv[++i]));
    else if (std::strcmp(argv[i], "--device") == 0 && i + 1 < argc) s.device = Device::parse(argv[++i]);
    else if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
      omp_set_num_threads(std::max(1, std::atoi(argv[++i])));
    else hg::bench::exit_unknown_argument("bench_memory", argv[i], kUsage);
  }
  if (quick) {
    s.L = 4;
    s.T = 64;
    s.steps = 2;
  }
  const std::vector<Strategy> strategies = {
      {"none", 0, false, OffloadMode::all},
      {"ckpt_K1", 1, false, OffloadMode::all},
      {"ckpt_K2", 2, false, OffloadMode::all},
      {"offload_all", 0, true, OffloadMode::all},
      {"ckpt_K1_offload_inputs", 1, true, OffloadMode::recompute_inputs},
  };
  try {
    // All trainers first, so their step times can be measured interleaved (round-robin): load from
    // other processes then weighs on every strategy alike.
    std::vector<std::unique_ptr<Trainer>> trainers;
    for (const Strategy& strategy : strategies) {
      trainers.push_back(std::make_unique<Trainer>(s, strategy));
      trainers.back()->step(s.B);  // optimizer state, caches
    }
    // Peak: one step from a settled state, alone.
    std::vector<int64_t> peak(strategies.size()), base(strategies.size()), host_peak(strategies.size());
    for (size_t i = 0; i < strategies.size(); ++i) {
      empty_cache(s.device);
      base[i] = memory_stats(s.device).allocated_bytes;
      reset_peak_memory(s.device);
      host_offload_allocator().reset_peak();
      if (s.device.is_cuda()) cuda::pinned_allocator().reset_peak();
      const int64_t host_before =
          s.device.is_cpu() ? host_offload_allocator().stats().allocated_bytes : pinned_memory_stats().allocated_bytes;
      trainers[i]->step(s.B);
      peak[i] = memory_stats(s.device).peak_allocated_bytes;
      host_peak[i] = (s.device.is_cpu() ? host_offload_allocator().stats().peak_allocated_bytes
                                        : pinned_memory_stats().peak_allocated_bytes) -
                     host_before;
    }
    // Time, round-robin.
    std::vector<std::vector<double>> ms(strategies.size());
    for (int round = 0; round < s.steps; ++round) {
      for (size_t i = 0; i < strategies.size(); ++i) {
        const auto start = Clock::now();
        trainers[i]->step(s.B);
        ms[i].push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
      }
    }
    std::vector<double> median_ms(strategies.size());
    for (size_t i = 0; i < strategies.size(); ++i) {
      std::sort(ms[i].begin(), ms[i].end());
      median_ms[i] = ms[i][ms[i].size() / 2];
    }
    // The budget: what none reserves at budget_batch sequences.
    empty_cache(s.device);
    reset_peak_memory(s.device);
    trainers[0]->step(s.budget_batch);
    const int64_t budget = memory_stats(s.device).peak_reserved_bytes;
    // Every trainer's parameters and AdamW moments stay resident during the search: the budget is
    // that plus what none's step needs at budget_batch, the same for every strategy.
    const int64_t resident = base[0];
    const int64_t model_state = trainers[0]->model_state_bytes();
    const int64_t cap = s.budget_batch * s.L * 4;
    int64_t none_max_batch = 0;
    for (size_t i = 0; i < strategies.size(); ++i) {
      const int64_t max_batch = largest_batch(*trainers[i], s.device, budget, cap);
      if (i == 0) none_max_batch = max_batch;
      bench::JsonLine("memory")
          .add("strategy", strategies[i].name)
          .add("model", "gpt_L" + std::to_string(s.L) + "_H" + std::to_string(s.H) + "_C" + std::to_string(s.C) + "_T" +
                            std::to_string(s.T))
          .add("layers", (long long)s.L)
          .add("batch", (long long)s.B)
          .add("model_state_mib", double(model_state) / (1 << 20))
          .add("step_peak_mib", double(peak[i] - base[i]) / (1 << 20))
          .add("peak_mib", double(model_state + peak[i] - base[i]) / (1 << 20))
          .add("step_peak_ratio", double(peak[i] - base[i]) / double(peak[0] - base[0]))
          .add("host_peak_mib", double(host_peak[i]) / (1 << 20))
          .add("median_ms", median_ms[i])
          .add("time_ratio", median_ms[i] / median_ms[0])
          .add("step_budget_mib", double(budget - resident) / (1 << 20))
          .add("max_batch_in_budget", (long long)max_batch)
          .add("batch_gain", double(max_batch) / double(none_max_batch))
          .add("batch_cap", (long long)cap)
          .add("threads", omp_get_max_threads())
          .add("device", s.device.str())
          .add("steps", s.steps)
          .print();
    }
  } catch (const Error& e) {
    bench::JsonLine("memory").add("device", s.device.str()).add("error", e.what()).print();
    return 1;
  }
  return 0;
}
