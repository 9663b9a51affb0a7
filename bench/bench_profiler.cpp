// bench_profiler: what the profiler costs, one JSON object per line.
//   (a) dispatch: a 1-element kernel called through HG_KERNEL with the per-op hook off, against the
//       same kernel called directly (no hook compiled in: the baseline, same process, same loop), and
//       with op ranges on. Gives the hook's cost when off and one per-op range's cost when on.
//   (b) train_step: a GPT training step (train_gpt's default model and batch) with the profiler
//       stopped (twice, interleaved: the noise floor), recording phase ranges, and recording phase +
//       per-op ranges. Reports median ms/step and ratios to the stopped run, plus the hook's modelled
//       cost per step (kernel calls per step x measured off-cost per call).
// Usage: bench_profiler [--quick] [--device cpu|cuda]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>

#include "bench_args.h"
#include "engine/cuda/cuda_context.h"
#include "engine/kernel_dispatch.h"
#include "engine/profiler/profiler.h"
#include "engine/random.h"
#include "json_line.h"
#include "timing.h"
#include "layers/nn.h"
#include "optim/optim.h"

using namespace hg;
using hg::bench::Clock;
using hg::bench::median;

namespace {

// ns per call of `call` in one round of `calls` calls.
template <class Call>
double ns_per_call(int64_t calls, Call&& call) {
  const auto start = Clock::now();
  for (int64_t i = 0; i < calls; ++i) call();
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count() / double(calls);
}

// Keeps the compiler from hoisting the flag load or merging loops: the kernel writes through memory.
float g_x = 1.0f, g_y = 0.0f;

__attribute__((noinline)) void direct_call() { kernels::cpu::affine(&g_x, &g_y, 1, 1.0001, 0.0, f32); }
__attribute__((noinline)) void hooked_call() { HG_KERNEL(kCPU, affine, &g_x, &g_y, 1, 1.0001, 0.0, f32); }

double g_off_ns_per_call = 0;

void bench_dispatch(bool quick) {
  // Short rounds, interleaved, and the minimum over many of them: a round that the scheduler
  // interrupted (the machine may be shared) is simply not the minimum, and drift hits all three alike.
  const int64_t calls = 2000;
  const int rounds = quick ? 100 : 1000;
  const auto options = profiler::Options().op_ranges(true).max_ranges(size_t(calls) * size_t(rounds) + 16);
  double direct = 1e30, off = 1e30, on = 1e30;
  for (int r = 0; r < rounds; ++r) {
    direct = std::min(direct, ns_per_call(calls, direct_call));
    off = std::min(off, ns_per_call(calls, hooked_call));
    profiler::start(options);
    on = std::min(on, ns_per_call(calls, hooked_call));
    const profiler::Profile round = profiler::stop();
    if (r == 0 && round.ranges.size() != size_t(calls)) {
      std::fprintf(stderr, "bench_profiler: expected %lld op ranges, recorded %zu\n", (long long)calls,
                   round.ranges.size());
      std::exit(1);
    }
  }
  g_off_ns_per_call = std::max(0.0, off - direct);
  bench::JsonLine("profiler_dispatch")
      .add("kernel", "affine n=1 f32 (cpu)")
      .add("direct_ns_per_call", direct)
      .add("hook_off_ns_per_call", off)
      .add("hook_off_over_direct", off / direct)
      .add("hook_off_cost_ns", off - direct)
      .add("op_range_on_ns_per_call", on)
      .add("op_range_cost_ns", on - direct)
      .add("calls_per_round", (long long)calls)
      .add("rounds", rounds)
      .print();
}

void bench_train_step(const Device& device, bool quick) {
  manual_seed(1);
  const auto config = nn::GPTConfig().vocab_size(256).context(16).n_layer(2).n_head(4).n_embd(128);
  nn::GPT model(config);
  model.to(device);
  optim::AdamW optimizer(model.parameters(), optim::AdamWOptions().lr(3e-4).weight_decay(0.1));
  const int64_t B = 64, T = 15;
  const Tensor ids = randint(0, 256, {B, T}, i64, device);
  const Tensor targets = randint(0, 256, {B, T}, i64, device);
  using profiler::Category;
  auto step = [&] {
    profiler::ScopedRange step_range("step", Category::step);
    std::optional<profiler::ScopedRange> phase(std::in_place, "forward", Category::forward, device);
    const Tensor loss = model.loss(ids, targets);
    phase.emplace("backward", Category::backward, device);
    loss.backward();
    phase.emplace("optimizer", Category::optimizer, device);
    optim::clip_grad_norm(model.parameters(), 1.0);
    optimizer.step();
    optimizer.zero_grad();
    phase.reset();
    if (device.is_cuda()) cuda::synchronize(device.index);
  };
  auto time_block = [&](int steps) {
    std::vector<double> ms;
    for (int i = 0; i < steps; ++i) {
      const auto start = Clock::now();
      step();
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    }
    return ms;
  };
  for (int i = 0; i < 5; ++i) step();  // warm the allocator caches
  // Kernel calls per step: one op-range session of one step.
  const auto count_options = profiler::Options().op_ranges(true);
  profiler::start(count_options);
  step();
  int64_t kernel_calls = 0;
  for (const auto& r : profiler::stop().ranges)
    kernel_calls += r.category == Category::op && r.name.find(" backward") == std::string::npos;

  const int block = quick ? 5 : 20, blocks = quick ? 2 : 5;
  std::vector<double> off_a, off_b, phases, ops;
  const auto phase_options = profiler::Options().max_ranges(50'000'000);
  const auto op_options = profiler::Options(phase_options).op_ranges(true);
  for (int b = 0; b < blocks; ++b) {
    auto a = time_block(block);
    off_a.insert(off_a.end(), a.begin(), a.end());
    profiler::start(phase_options);
    auto p = time_block(block);
    profiler::stop();
    phases.insert(phases.end(), p.begin(), p.end());
    profiler::start(op_options);
    auto o = time_block(block);
    profiler::stop();
    ops.insert(ops.end(), o.begin(), o.end());
    auto c = time_block(block);
    off_b.insert(off_b.end(), c.begin(), c.end());
  }
  const double off = median(off_a), off2 = median(off_b);
  bench::JsonLine("profiler_train_step")
      .add("model", "gpt L2 H4 C128 T15 B64 (train_gpt default)")
      .add("device", device.str())
      .add("threads", omp_get_max_threads())
      .add("kernel_calls_per_step", (long long)kernel_calls)
      .add("off_median_ms", off)
      .add("off_again_median_ms", off2)
      .add("off_again_over_off", off2 / off)
      .add("phase_ranges_median_ms", median(phases))
      .add("phase_ranges_over_off", median(phases) / off)
      .add("op_ranges_median_ms", median(ops))
      .add("op_ranges_over_off", median(ops) / off)
      .add("hook_off_modelled_ns_per_step", g_off_ns_per_call * double(kernel_calls))
      .add("hook_off_modelled_fraction", g_off_ns_per_call * double(kernel_calls) / (off * 1e6))
      .add("steps_each", (long long)(block * blocks))
      .print();
}

}  // namespace

constexpr const char* kUsage =
    "usage: bench_profiler [--quick] [--device cpu|cuda]\n"
    "What the profiler costs. Prints JSON lines to stdout: the per-op hook's cost off and on against a\n"
    "direct call, and a GPT training step with the profiler stopped, phase ranges, phase + op ranges.\n"
    "  --quick            fewer calls and steps (smoke runs)\n"
    "  --device cpu|cuda  where the training step runs (default cpu)\n"
    "  -h, --help         this text\n";

int main(int argc, char** argv) {
  bool quick = false;
  Device device = kCPU;
  for (int i = 1; i < argc; ++i) {
    if (hg::bench::is_help(argv[i])) hg::bench::exit_with_usage(kUsage);
    if (!std::strcmp(argv[i], "--quick"))
      quick = true;
    else if (!std::strcmp(argv[i], "--device") && i + 1 < argc)
      device = Device::parse(argv[++i]);
    else
      hg::bench::exit_unknown_argument("bench_profiler", argv[i], kUsage);
  }
  if (device.is_cuda() && !cuda::is_available()) {
    std::fprintf(stderr, "bench_profiler: %s\n", cuda::unavailable_reason().c_str());
    return 1;
  }
  bench_dispatch(quick);
  bench_train_step(device, quick);
  return 0;
}
