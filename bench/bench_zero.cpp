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

#include "json_line.h"
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

using Clock = std::chrono::steady_clock;

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

template <class F>
double best_seconds(int repeats, F&& fn) {
  fn();
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

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

void zero_stages(double budget_gib) {
  dist::Communicator comm;
  const int world = comm.world_size();
  nn::GPTConfig config;
  config.vocab_size = 256;
  config.context = 32;
  config.n_layer = 2;
  config.n_head = 2;
  config.n_embd = 128;
  for (int stage : {0, 1, 2})
    for (bool offload : {false, true}) {
      const int64_t before = memory_stats().allocated_bytes;
      manual_seed(1);
      nn::GPT model(config);
      model.to(DType::bf16);
      dist::ZeroOptimizer opt(model.parameters(), comm, dist::ZeroOptions().stage(stage).offload_optimizer(offload));
      Tensor ids = randint(0, 256, {2, 32}), targets = randint(0, 256, {2, 32});
      std::vector<double> ms;
      int64_t state_allocated = 0;
      for (int step = 0; step < 4; ++step) {
        const auto start = Clock::now();
        {
          Tensor loss = model.loss(ids, targets);
          loss.backward();
        }
        opt.step();
        opt.zero_grad();
        ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
        if (step == 0) state_allocated = memory_stats().allocated_bytes - before - 2 * ids.numel() * 8;
      }
      std::sort(ms.begin(), ms.end());
      const double psi = double(opt.padded_numel());
      const double formula = stage == 0 ? 16 * psi : stage == 1 ? 4 * psi + 12 * psi / world : 2 * psi + 14 * psi / world;
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

}  // namespace
}  // namespace hg::bench

int main(int argc, char** argv) {
  bool quick = false;
  double budget_gib = 16.0;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--quick") {
      quick = true;
    } else if (std::string(argv[i]) == "--budget-gib" && i + 1 < argc) {
      budget_gib = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--budget-gib X]\n", argv[0]);
      return 2;
    }
  }
  try {
    const int64_t n = quick ? 1'000'000 : 10'000'000;
    const int repeats = quick ? 3 : 10;
    if (hg::dist::detect_process().world_size == 1) {
      hg::bench::host_bandwidth(n, repeats);
      hg::bench::cpu_adamw_bench(n, repeats);
    }
    hg::bench::zero_stages(budget_gib);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_zero: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
