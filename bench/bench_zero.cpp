// ZeRO and optimizer offload, measured. Prints one JSON object per line:
//
//   {"bench":"host_bandwidth", ...}   this machine's memory bandwidth in the same process: memcpy on one
//                                     thread and split over the OpenMP threads (read + write bytes), and
//                                     the STREAM triad a = b + s c (24 bytes/element) over the threads;
//   {"bench":"cpu_adamw", ...}        one AdamW step over n fp32 parameters (10M; --quick: 1M), GB/s of
//                                     optimizer-state traffic = 28 bytes/element (param, grad, m, v read;
//                                     param, m, v written) / best time, for: a plain loop (one thread,
//                                     what a straightforward implementation does), the project's fused
//                                     kernels::cpu::adamw_step, and adamw_offload_step on each SIMD path
//                                     it can run here (scalar, avx2, avx512), plus the offload layout
//                                     (bf16 gradient in, bf16 parameter out: 28 bytes/element as well).
//                                     Baseline "state_stream": the same 4 streams read and 3 written
//                                     with trivial math, over the threads — the most an optimizer pass
//                                     can reach here; fraction_of_stream is each variant's share of it.
//   {"bench":"zero_stage", ...}       (any world size: run it under mpirun -np N) a bf16 GPT (L2 C128,
//                                     0.44M parameters) trained with ZeroOptimizer at each stage, with and
//                                     without offload: model-state MiB per rank (ZeroOptimizer's count and
//                                     the allocator's), the ZeRO formula, and the median step time.
//   {"bench":"zero_capacity", ...}    from the measured bytes per parameter per rank: the largest
//                                     model whose model state fits a 16 GiB (or --budget-gib) budget per
//                                     rank, per stage (activations excluded).
//   {"bench":"zero_max_model", ...}   measured: per stage (kCapacityStages) with and without offload, the
//                                     largest bf16 GPT (width 128, n_layer found by doubling, then
//                                     bisection) whose training steps (forward, backward, step; two of
//                                     them) run within a per-rank budget of the CPU device's allocator
//                                     (32 MiB, --quick 16, --capacity-budget-mib X): see try_training.
//                                     Offloaded optimizer state lives in the host offload pool, outside
//                                     the budget (as it would be outside a GPU's memory);
//                                     vs_stage0 = params / stage 0's (no offload) in the same run.
// Times: best of `repeats` calls after one warm-up call; buffers first-touched in parallel before timing.
// Under mpirun only rank 0 prints, and the single-process CPU AdamW lines are skipped.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "bench_args.h"
#include "json_line.h"
#include "timing.h"
#include "dist/bootstrap.h"
#include "dist/communicator.h"
#include "dist/zero_optimizer.h"
#include "engine/allocator.h"
#include "engine/ops.h"
#include "engine/random.h"
#include "kernels/kernels.h"
#include "layers/gpt.h"

namespace hg::bench {
namespace {


struct Buffer {
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, Free> memory;
  explicit Buffer(size_t bytes) : memory(std::aligned_alloc(64, (bytes + 63) / 64 * 64)) {
    auto* p = static_cast<float*>(memory.get());
    const int64_t n = int64_t(bytes / sizeof(float));
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) p[i] = 0.001f * float(i % 1000);
  }
  template <class T = float>
  T* get() const {
    return static_cast<T*>(memory.get());
  }
};

void host_bandwidth(int64_t n, int repeats) {
  const size_t bytes = size_t(n) * sizeof(float);
  Buffer a(bytes), b(bytes), c(bytes);
  const double one = best_seconds(repeats, [&] { std::memcpy(a.get(), b.get(), bytes); });
  const double split = best_seconds(repeats, [&] {
#pragma omp parallel
    {
      const int64_t t = omp_get_thread_num(), threads = omp_get_num_threads();
      const int64_t begin = n * t / threads, end = n * (t + 1) / threads;
      std::memcpy(a.get() + begin, b.get() + begin, size_t(end - begin) * sizeof(float));
    }
  });
  float* x = a.get();
  const float* y = b.get();
  const float* z = c.get();
  const double triad = best_seconds(repeats, [&] {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) x[i] = y[i] + 0.5f * z[i];
  });
  const double triad_gbs = 3.0 * double(bytes) / triad / 1e9;
  JsonLine("host_bandwidth")
      .add("elements", (long long)n)
      .add("threads", omp_get_max_threads())
      .add("memcpy_1thread_gbs", 2.0 * double(bytes) / one / 1e9)
      .add("memcpy_threads_gbs", 2.0 * double(bytes) / split / 1e9)
      .add("triad_gbs", triad_gbs)
      .print();
}

// The textbook loop: one thread, per element, bias corrections hoisted.
void plain_adamw(float* p, const float* g, float* m, float* v, int64_t n, float lr, float b1, float b2, float eps,
                 float wd, int64_t step) {
  const float bc1 = 1.0f - std::pow(b1, float(step));
  const float bc2 = 1.0f - std::pow(b2, float(step));
  for (int64_t i = 0; i < n; ++i) {
    p[i] *= 1.0f - lr * wd;
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    const float m_hat = m[i] / bc1;
    const float v_hat = v[i] / bc2;
    p[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
  }
}

void report(const char* variant, int64_t n, double seconds, double stream_gbs) {
  const double gbs = 28.0 * double(n) / seconds / 1e9;
  JsonLine("cpu_adamw")
      .add("variant", variant)
      .add("params", (long long)n)
      .add("threads", omp_get_max_threads())
      .add("ms", seconds * 1e3)
      .add("gbs", gbs)
      .add("state_stream_gbs", stream_gbs)
      .add("fraction_of_stream", gbs / stream_gbs)
      .print();
}

void cpu_adamw_bench(int64_t n, int repeats) {
  const size_t bytes = size_t(n) * sizeof(float);
  Buffer p(bytes), g(bytes), m(bytes), v(bytes), g16(bytes / 2), p16(bytes / 2);
  float* pp = p.get();
  const float* gp = g.get();
  float* mp = m.get();
  float* vp = v.get();
  const double stream_seconds = best_seconds(repeats, [&] {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      pp[i] += gp[i];
      mp[i] += gp[i];
      vp[i] += gp[i];
    }
  });
  const double triad_gbs = 28.0 * double(n) / stream_seconds / 1e9;
  report("state_stream", n, stream_seconds, triad_gbs);
  int64_t step = 0;
  report("plain_loop", n, best_seconds(repeats, [&] {
    plain_adamw(p.get(), g.get(), m.get(), v.get(), n, 1e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, ++step);
  }), triad_gbs);
  step = 0;
  report("fused_adamw_step", n, best_seconds(repeats, [&] {
    kernels::cpu::adamw_step(p.get(), nullptr, g.get(), m.get(), v.get(), n, 1e-4, 0.9, 0.999, 1e-8, 0.01, ++step,
                             DType::f32);
  }), triad_gbs);
  using kernels::cpu::AdamWIsa;
  for (AdamWIsa isa : {AdamWIsa::scalar, AdamWIsa::avx2, AdamWIsa::avx512}) {
    if (int(isa) > int(kernels::cpu::adamw_offload_best_isa())) continue;
    step = 0;
    const std::string name = std::string("offload_") + kernels::cpu::adamw_isa_name(isa);
    report(name.c_str(), n, best_seconds(repeats, [&] {
      kernels::cpu::adamw_offload_step(p.get(), g.get(), DType::f32, m.get(), v.get(), nullptr, DType::f32, n, 1e-4,
                                       0.9, 0.999, 1e-8, 0.01, ++step, 1.0, isa);
    }), triad_gbs);
  }
  step = 0;
  const std::string mixed = std::string("offload_") +
                            kernels::cpu::adamw_isa_name(kernels::cpu::adamw_offload_best_isa()) +
                            "_bf16_grad_bf16_param";
  report(mixed.c_str(), n, best_seconds(repeats, [&] {
    kernels::cpu::adamw_offload_step(p.get(), g16.get<uint16_t>(), DType::bf16, m.get(), v.get(), p16.get<uint16_t>(),
                                     DType::bf16, n, 1e-4, 0.9, 0.999, 1e-8, 0.01, ++step);
  }), triad_gbs);
}

void zero_stages(dist::Communicator& comm, double budget_gib) {
  const int world = comm.world_size();
  const auto config = nn::GPTConfig().vocab_size(256).context(32).n_layer(2).n_head(2).n_embd(128);
  for (int stage : {0, 1, 2, 3})
    for (bool offload : {false, true}) {
      const int64_t before = memory_stats().allocated_bytes;
      const int64_t host_before = host_offload_allocator().stats().allocated_bytes;
      manual_seed(1);
      nn::GPT model(config);
      model.to(DType::bf16);
      dist::ZeroOptimizer opt(model, comm, dist::ZeroOptions().stage(stage).offload_optimizer(offload));
      Tensor ids = randint(0, 256, {2, 32}), targets = randint(0, 256, {2, 32});
      std::vector<double> ms;
      int64_t state_allocated = 0, host_allocated = 0;
      for (int step = 0; step < 4; ++step) {
        const auto start = Clock::now();
        {
          Tensor loss = model.loss(ids, targets);
          loss.backward();
        }
        opt.step();
        opt.zero_grad();
        ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
        if (step == 0) {
          state_allocated = memory_stats().allocated_bytes - before - 2 * ids.numel() * 8;
          host_allocated = host_offload_allocator().stats().allocated_bytes - host_before;
        }
      }
      std::sort(ms.begin(), ms.end());
      const double psi = double(opt.padded_numel());
      const double formula = stage == 0   ? 16 * psi
                             : stage == 1 ? 4 * psi + 12 * psi / world
                             : stage == 2 ? 2 * psi + 14 * psi / world
                                          : 16 * psi / world;
      const double mib = 1024.0 * 1024.0;
      const double bytes_per_param = double(opt.model_state_bytes().total()) / double(opt.numel());
      if (comm.rank() == 0) {
        JsonLine("zero_stage")
            .add("world", world)
            .add("stage", stage)
            .add("offload", offload)
            .add("params", (long long)opt.numel())
            .add("state_mib_per_rank", double(opt.model_state_bytes().total()) / mib)
            .add("allocator_mib_per_rank", double(state_allocated) / mib)
            .add("host_offload_mib_per_rank", double(host_allocated) / mib)
            .add("formula_mib", formula / mib)
            .add("bytes_per_param_per_rank", bytes_per_param)
            .add("step_ms_median", ms[ms.size() / 2])
            .add("backend", comm.backend())
            .print();
        if (!offload)
          JsonLine("zero_capacity")
              .add("world", world)
              .add("stage", stage)
              .add("budget_gib", budget_gib)
              .add("max_params_millions", budget_gib * 1024 * mib / bytes_per_param / 1e6)
              .add("note", "model state only (bf16 params + grads, fp32 master + Adam moments), activations excluded")
              .print();
      }
    }
}

// ---- the largest model per memory budget, measured ----

// The stages the capacity search covers (a new stage is one more entry).
constexpr int kCapacityStages[] = {0, 1, 2, 3};

nn::GPTConfig capacity_config(int n_layer) {
  return nn::GPTConfig().vocab_size(256).context(32).n_layer(n_layer).n_head(4).n_embd(128);
}

struct Attempt {
  bool fits = false;
  int64_t params = 0;
  int64_t step_peak_bytes = 0;   // the CPU device allocator's peak allocated bytes (rank 0) in the steps
  int64_t host_state_bytes = 0;  // optimizer state in the host offload pool
};

// Builds the GPT with `n_layer` layers and its ZeroOptimizer (no limit: the f32 initialisation and the
// construction's temporaries are not what is measured), then runs two training steps. It fits when no
// rank's CPU allocator had more than `budget` bytes allocated at any moment (peak_allocated_bytes;
// combined over the ranks, so every rank goes on alike). With this allocator that is exactly when an
// allocation would fail under set_memory_limit(budget) — past the limit it releases its cache and retries,
// so a request fails iff allocated + request > limit. One process runs under that limit and takes its
// out-of-memory hg::Error as the answer; several do not, since the ranks' peaks differ (stage 2 frees a
// bucket when its collective completes) and a rank that failed mid-backward would leave the others
// waiting in a collective.
Attempt try_training(dist::Communicator& comm, int stage, bool offload, int n_layer, int64_t budget) {
  empty_cache(kCPU);
  host_offload_allocator().empty_cache();
  const int64_t oom_before = memory_stats().oom_count;
  Attempt a;
  double failed = 0;
  {
    manual_seed(1);
    nn::GPT model(capacity_config(n_layer));
    model.to(DType::bf16);
    // Buckets of budget / 64 so that stage 2 frees full-size gradients as backward goes (one bucket
    // per model would keep them all, as the default 25 MiB buckets do for small models).
    dist::ZeroOptimizer opt(model, comm,
                            dist::ZeroOptions().stage(stage).offload_optimizer(offload).bucket_bytes(budget / 64));
    a.params = opt.numel();
    a.host_state_bytes = host_offload_allocator().stats().allocated_bytes;
    empty_cache(kCPU);  // the f32 model and the construction's temporaries
    double over = memory_stats().allocated_bytes > budget ? 1 : 0;
    comm.all_reduce(&over, 1, DType::f64, dist::ReduceOp::max).wait();
    if (over == 0) {
      reset_peak_memory(kCPU);
      if (comm.world_size() == 1) set_memory_limit(kCPU, budget);
      try {
        for (int step = 0; step < 2; ++step) {
          Tensor ids = randint(0, 256, {1, 32}), targets = randint(0, 256, {1, 32});
          {
            Tensor loss = model.loss(ids, targets);
            loss.backward();
          }
          opt.step();
          opt.zero_grad();
        }
      } catch (const Error&) {
        if (memory_stats().oom_count == oom_before) {
          set_memory_limit(kCPU, 0);
          throw;  // not an out-of-memory error
        }
        failed = 1;
      }
      set_memory_limit(kCPU, 0);
      a.step_peak_bytes = memory_stats().peak_allocated_bytes;
      if (a.step_peak_bytes > budget) failed = 1;
    } else {
      failed = 1;
    }
  }  // the optimizer waits for its collectives before the model and its buffers go
  comm.all_reduce(&failed, 1, DType::f64, dist::ReduceOp::max).wait();
  a.fits = failed == 0;
  return a;
}

// The largest n_layer that fits: doubling from 1 until a try fails, then bisection.
void largest_model(dist::Communicator& comm, int stage, bool offload, int64_t budget, int64_t* stage0_params) {
  const auto start = Clock::now();
  int tries = 0;
  int lo = 0, hi = 0;  // lo fits (0: nothing does), hi does not (0: none found yet)
  Attempt best;
  for (int n = 1; hi == 0 && n <= 4096; n *= 2) {
    const Attempt a = try_training(comm, stage, offload, n, budget);
    ++tries;
    if (a.fits) {
      lo = n;
      best = a;
    } else {
      hi = n;
    }
  }
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    const Attempt a = try_training(comm, stage, offload, mid, budget);
    ++tries;
    if (a.fits) {
      lo = mid;
      best = a;
    } else {
      hi = mid;
    }
  }
  if (stage == 0 && !offload) *stage0_params = best.params;
  if (comm.rank() != 0) return;
  const double mib = 1024.0 * 1024.0;
  const nn::GPTConfig config = capacity_config(lo);
  JsonLine("zero_max_model")
      .add("world", comm.world_size())
      .add("stage", stage)
      .add("offload", offload)
      .add("budget_mib_per_rank", double(budget) / mib)
      .add("n_layer", lo)
      .add("n_embd", config.n_embd())
      .add("params", (long long)best.params)
      .add("params_millions", double(best.params) / 1e6)
      .add("step_peak_allocated_mib_rank0", double(best.step_peak_bytes) / mib)
      .add("host_state_mib_per_rank", double(best.host_state_bytes) / mib)
      .add("vs_stage0", *stage0_params > 0 ? double(best.params) / double(*stage0_params) : 0.0)
      .add("tries", tries)
      .add("criterion", comm.world_size() == 1 ? "out-of-memory under set_memory_limit" : "peak allocated <= budget")
      .add("search_s", std::chrono::duration<double>(Clock::now() - start).count())
      .add("note", "bf16 GPT, fp32 master + Adam; batch 1 x 32 tokens; CPU device allocator budget per rank")
      .print();
}

void zero_max_models(dist::Communicator& comm, int64_t budget) {
  int64_t stage0_params = 0;
  for (int stage : kCapacityStages)
    for (bool offload : {false, true}) largest_model(comm, stage, offload, budget, &stage0_params);
}

}  // namespace
}  // namespace hg::bench

constexpr const char* kUsage =
    "usage: bench_zero [--quick] [--budget-gib X] [--capacity-budget-mib X]   (mpirun -np N for N ranks)\n"
    "ZeRO and optimizer offload. Prints JSON lines to stdout: host_bandwidth, cpu_adamw (GB/s per variant\n"
    "against the STREAM-like state_stream), zero_stage (model-state MiB per rank and step time per stage),\n"
    "zero_capacity (the largest model within --budget-gib per rank), zero_max_model (measured).\n"
    "  --quick                  1M parameters instead of 10M, fewer repeats (smoke runs)\n"
    "  --budget-gib X           per-rank budget of the zero_capacity lines, GiB (default 16)\n"
    "  --capacity-budget-mib X  per-rank allocator budget of zero_max_model, MiB (default 32; --quick 16)\n"
    "  -h, --help               this text\n";

int main(int argc, char** argv) {
  bool quick = false;
  double budget_gib = 16.0;
  double capacity_budget_mib = 0;
  for (int i = 1; i < argc; ++i) {
    if (hg::bench::is_help(argv[i])) hg::bench::exit_with_usage(kUsage);
    if (std::string(argv[i]) == "--quick") {
      quick = true;
    } else if (std::string(argv[i]) == "--budget-gib" && i + 1 < argc) {
      budget_gib = std::atof(argv[++i]);
    } else if (std::string(argv[i]) == "--capacity-budget-mib" && i + 1 < argc) {
      capacity_budget_mib = std::atof(argv[++i]);
    } else {
      hg::bench::exit_unknown_argument("bench_zero", argv[i], kUsage);
    }
  }
  try {
    const int64_t n = quick ? 1'000'000 : 10'000'000;
    const int repeats = quick ? 3 : 10;
    if (hg::dist::detect_process().world_size == 1) {
      hg::bench::host_bandwidth(n, repeats);
      hg::bench::cpu_adamw_bench(n, repeats);
    }
    // A collective that does not finish within 120 s ends the run with an error (never a hang).
    hg::dist::Communicator comm(hg::dist::CommunicatorOptions().timeout(std::chrono::seconds(120)));
    hg::bench::zero_stages(comm, budget_gib);
    if (capacity_budget_mib <= 0) capacity_budget_mib = quick ? 16 : 32;
    hg::bench::zero_max_models(comm, int64_t(capacity_budget_mib * 1024 * 1024));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_zero: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
