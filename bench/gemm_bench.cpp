// f32 GEMM throughput against this machine's own FMA peak, measured in the same process.
//
//   fma_peak: every OpenMP thread runs a loop of independent vector FMA chains in inline assembly
//             (16 on zmm with AVX-512, else 14 on ymm with AVX2+FMA). That covers the FMA latency
//             times the FMA issue rate of current x86 cores (4 cycles x 1-2 per cycle), so the loop
//             is throughput-bound. GFLOP/s = 2 * lanes * FMAs / best wall time of the whole team.
//   gemm:     GFLOP/s = 2 m n k / best wall time of gemm() over a few calls after a warm-up call,
//             fraction_of_peak = GFLOP/s / fma_peak. Shapes: squares, and the GPT-2 small
//             (d = 768, 4096 tokens) projections as nn.Linear runs them: forward y = x W^T
//             (trans_b), the plain product, and a weight gradient dW = dy^T x (trans_a).
//             eigen_gflops is Eigen's GEMM on the same buffers in the same process, for comparison.
//   amx_peak, gemm_bf16_amx: the AMX bf16 GEMM against the AMX peak (see "AMX bf16" below).
// Full: squares 1024, 2048, 4096 and m = 4096 tokens; --quick: squares 512, 1024 and m = 1024.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "bench_sections.h"
#include "json_line.h"
#include "kernels/cpu/gemm_avx512.h"
#include "kernels/kernels.h"

namespace hg::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// ---- FMA peak ------------------------------------------------------------------------------------

// clang-format off
#define HG_FMA_ZMM(r) "vfmadd231ps %%zmm30, %%zmm31, %%zmm" #r "\n\t"
// 16 FMAs per iteration into zmm0..zmm15, each its own dependency chain.
__attribute__((target("avx512f"))) void fma_loop_avx512(int64_t iterations) {
  asm volatile(
      "vxorps %%zmm30, %%zmm30, %%zmm30\n\t"
      "vxorps %%zmm31, %%zmm31, %%zmm31\n\t"
      "1:\n\t"
      HG_FMA_ZMM(0) HG_FMA_ZMM(1) HG_FMA_ZMM(2)  HG_FMA_ZMM(3)  HG_FMA_ZMM(4)  HG_FMA_ZMM(5)  HG_FMA_ZMM(6)  HG_FMA_ZMM(7)
      HG_FMA_ZMM(8) HG_FMA_ZMM(9) HG_FMA_ZMM(10) HG_FMA_ZMM(11) HG_FMA_ZMM(12) HG_FMA_ZMM(13) HG_FMA_ZMM(14) HG_FMA_ZMM(15)
      "dec %0\n\t"
      "jnz 1b\n\t"
      : "+r"(iterations)
      :
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12",
        "xmm13", "xmm14", "xmm15", "xmm30", "xmm31", "cc");
}
#undef HG_FMA_ZMM

#define HG_FMA_YMM(r) "vfmadd231ps %%ymm14, %%ymm15, %%ymm" #r "\n\t"
// AVX2 has 16 ymm registers: 14 chains and the two operands.
__attribute__((target("avx2,fma"))) void fma_loop_avx2(int64_t iterations) {
  asm volatile(
      "vxorps %%ymm14, %%ymm14, %%ymm14\n\t"
      "vxorps %%ymm15, %%ymm15, %%ymm15\n\t"
      "1:\n\t"
      HG_FMA_YMM(0) HG_FMA_YMM(1) HG_FMA_YMM(2)  HG_FMA_YMM(3)  HG_FMA_YMM(4)  HG_FMA_YMM(5)  HG_FMA_YMM(6)
      HG_FMA_YMM(7) HG_FMA_YMM(8) HG_FMA_YMM(9)  HG_FMA_YMM(10) HG_FMA_YMM(11) HG_FMA_YMM(12) HG_FMA_YMM(13)
      "dec %0\n\t"
      "jnz 1b\n\t"
      : "+r"(iterations)
      :
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12",
        "xmm13", "xmm14", "xmm15", "cc");
}
#undef HG_FMA_YMM
// clang-format on

struct FmaPeak {
  const char* isa;
  int threads;
  double gflops;
};

// Runs the FMA loop on every OpenMP thread at once, best of a few timed runs.
FmaPeak measure_fma_peak(bool quick) {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const int lanes = avx512 ? 16 : 8, chains = avx512 ? 16 : 14;
  const int64_t iterations = quick ? 5'000'000 : 20'000'000;
  int threads = 1;
  double best = 1e30;
  for (int run = 0; run < 4; ++run) {  // the first run is the warm-up (clocks, thread start)
    const auto start = Clock::now();
#pragma omp parallel
    {
      if (avx512)
        fma_loop_avx512(iterations);
      else
        fma_loop_avx2(iterations);
#pragma omp master
      threads = omp_get_num_threads();
    }
    if (run > 0) best = std::min(best, seconds_since(start));
  }
  const double flops = 2.0 * lanes * chains * double(iterations) * threads;
  return {avx512 ? "avx512" : "avx2", threads, flops / best / 1e9};
}

// ---- GEMM ----------------------------------------------------------------------------------------

struct GemmShape {
  const char* name;
  int64_t m, n, k;
  bool trans_a, trans_b;
};

// Fills with values in [-1, 1) from a small LCG: cheap, deterministic, never all zeros.
std::vector<float> random_matrix(int64_t size, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(size));
  uint32_t state = seed * 2654435761u + 1u;
  for (float& x : v) {
    state = state * 1664525u + 1013904223u;
    x = float(state >> 8) * (2.0f / 16777216.0f) - 1.0f;
  }
  return v;
}

// Best wall time of fn after one warm-up call: at least 3 timed calls and about 0.5 s (quick: 0.1 s).
template <class F>
double best_seconds(bool quick, F&& fn) {
  fn();
  const double budget = quick ? 0.1 : 0.5;
  double best = 1e30, total = 0;
  for (int run = 0; run < 20 && (run < 3 || total < budget); ++run) {
    const auto start = Clock::now();
    fn();
    const double t = seconds_since(start);
    best = std::min(best, t);
    total += t;
  }
  return best;
}

void bench_gemm_shape(const GemmShape& s, const FmaPeak& peak, bool quick) {
  const int64_t lda = s.trans_a ? s.m : s.k, ldb = s.trans_b ? s.k : s.n;
  const std::vector<float> a = random_matrix(s.m * s.k, 1), b = random_matrix(s.k * s.n, 2);
  std::vector<float> c = random_matrix(s.m * s.n, 3);
  const double flops = 2.0 * double(s.m) * double(s.n) * double(s.k);

  const double t = best_seconds(quick, [&] {
    kernels::cpu::gemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0, a.data(), lda, b.data(), ldb, 0.0, c.data(), s.n,
                       DType::f32);
  });
  const double t_eigen = best_seconds(quick, [&] {
    kernels::cpu::detail::gemm_f32_eigen(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f,
                                         c.data(), s.n);
  });
  const double gflops = flops / t / 1e9, eigen_gflops = flops / t_eigen / 1e9;
  JsonLine("gemm")
      .add("shape", s.name)
      .add("dtype", "f32")
      .add("m", (long long)s.m)
      .add("n", (long long)s.n)
      .add("k", (long long)s.k)
      .add("trans_a", int(s.trans_a))
      .add("trans_b", int(s.trans_b))
      .add("path", kernels::cpu::gemm_f32_path())
      .add("threads", omp_get_max_threads())
      .add("ms", t * 1e3)
      .add("gflops", gflops)
      .add("fraction_of_peak", gflops / peak.gflops)
      .add("eigen_gflops", eigen_gflops)
      .add("eigen_fraction_of_peak", eigen_gflops / peak.gflops)
      .print();
}

std::vector<GemmShape> gemm_shapes(bool quick) {
  const int64_t tokens = quick ? 1024 : 4096, d = 768;
  std::vector<GemmShape> shapes;
  for (int64_t size : quick ? std::vector<int64_t>{512, 1024} : std::vector<int64_t>{1024, 2048, 4096})
    shapes.push_back({"square", size, size, size, false, false});
  shapes.push_back({"gpt_attn_proj", tokens, d, d, false, false});
  shapes.push_back({"gpt_qkv", tokens, 3 * d, d, false, false});
  shapes.push_back({"gpt_qkv_linear", tokens, 3 * d, d, false, true});  // y = x W^T, W [3d, d]
  shapes.push_back({"gpt_mlp_up", tokens, 4 * d, d, false, false});
  shapes.push_back({"gpt_mlp_down", tokens, d, 4 * d, false, false});
  shapes.push_back({"gpt_mlp_up_weight_grad", 4 * d, d, tokens, true, false});  // dW = dy^T x
  return shapes;
}

// ---- AMX bf16 (issue 20) -------------------------------------------------------------------------
//   amx_peak: every OpenMP thread configures 8 tiles of 16 x 64 bytes and runs a loop of 4
//             independent tdpbf16ps (C tiles tmm0..3 from A tiles tmm4, tmm5 and B tiles tmm6, tmm7),
//             the micro-kernel's pattern without its loads. GFLOP/s = 4 * 16384 FLOPs * iterations *
//             threads / best wall time of the team, measured like fma_peak.
//   gemm_bf16_amx: bf16 A, B, bf16 C through gemm_bf16_amx directly (amx_*) and through gemm()
//             (gemm_*: the dispatch, HG_CPU_GEMM honoured), GFLOP/s and fraction of amx_peak; the
//             f32 GEMM on the same shape is f32_gflops. Shapes: 2048^3 and the GPT (C = 256, 2048
//             tokens) linears: forward y = x W^T (trans_b), dX = dY W, dW = dY^T X (trans_a).

struct alignas(64) AmxTileConfig {
  uint8_t palette_id = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

// 4 independent tdpbf16ps per iteration; the tile contents do not matter for the timing.
void amx_loop(int64_t iterations) {
  const AmxTileConfig config;
  asm volatile(
      "ldtilecfg %1\n\t"
      "tilezero %%tmm0\n\t tilezero %%tmm1\n\t tilezero %%tmm2\n\t tilezero %%tmm3\n\t"
      "tilezero %%tmm4\n\t tilezero %%tmm5\n\t tilezero %%tmm6\n\t tilezero %%tmm7\n\t"
      "1:\n\t"
      "tdpbf16ps %%tmm6, %%tmm4, %%tmm0\n\t"
      "tdpbf16ps %%tmm7, %%tmm4, %%tmm1\n\t"
      "tdpbf16ps %%tmm6, %%tmm5, %%tmm2\n\t"
      "tdpbf16ps %%tmm7, %%tmm5, %%tmm3\n\t"
      "dec %0\n\t"
      "jnz 1b\n\t"
      "tilerelease\n\t"
      : "+r"(iterations)
      : "m"(config)
      : "cc", "memory");
}

struct AmxPeak {
  int threads;
  double gflops;
};

AmxPeak measure_amx_peak(bool quick) {
  const int64_t iterations = quick ? 200'000 : 1'000'000;
  int threads = 1;
  double best = 1e30;
  for (int run = 0; run < 4; ++run) {  // the first run is the warm-up
    const auto start = Clock::now();
#pragma omp parallel
    {
      amx_loop(iterations);
#pragma omp master
      threads = omp_get_num_threads();
    }
    if (run > 0) best = std::min(best, seconds_since(start));
  }
  return {threads, 4.0 * 16384.0 * double(iterations) * threads / best / 1e9};
}

std::vector<bfloat16> random_bf16_matrix(int64_t size, uint32_t seed) {
  const std::vector<float> f = random_matrix(size, seed);
  return std::vector<bfloat16>(f.begin(), f.end());
}

void bench_amx_shape(const GemmShape& s, const AmxPeak& peak, bool quick) {
  const int64_t lda = s.trans_a ? s.m : s.k, ldb = s.trans_b ? s.k : s.n;
  const std::vector<bfloat16> a = random_bf16_matrix(s.m * s.k, 1), b = random_bf16_matrix(s.k * s.n, 2);
  std::vector<bfloat16> c = random_bf16_matrix(s.m * s.n, 3);
  const std::vector<float> a32(a.begin(), a.end()), b32(b.begin(), b.end());
  std::vector<float> c32(c.begin(), c.end());
  const double flops = 2.0 * double(s.m) * double(s.n) * double(s.k);
  const double t_amx = best_seconds(quick, [&] {
    kernels::cpu::detail::gemm_bf16_amx(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f,
                                        c.data(), s.n, true);
  });
  const double t_gemm = best_seconds(quick, [&] {
    kernels::cpu::gemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0, a.data(), lda, b.data(), ldb, 0.0, c.data(), s.n,
                       DType::bf16);
  });
  const double t_f32 = best_seconds(quick, [&] {
    kernels::cpu::gemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0, a32.data(), lda, b32.data(), ldb, 0.0, c32.data(),
                       s.n, DType::f32);
  });
  const double amx = flops / t_amx / 1e9, gemm = flops / t_gemm / 1e9, f32 = flops / t_f32 / 1e9;
  JsonLine("gemm_bf16_amx")
      .add("shape", s.name)
      .add("m", (long long)s.m)
      .add("n", (long long)s.n)
      .add("k", (long long)s.k)
      .add("trans_a", int(s.trans_a))
      .add("trans_b", int(s.trans_b))
      .add("c", "bf16")
      .add("threads", omp_get_max_threads())
      .add("amx_ms", t_amx * 1e3)
      .add("amx_gflops", amx)
      .add("amx_fraction_of_peak", amx / peak.gflops)
      .add("gemm_gflops", gemm)
      .add("gemm_fraction_of_peak", gemm / peak.gflops)
      .add("f32_gflops", f32)
      .add("amx_over_f32", amx / f32)
      .print();
}

std::vector<GemmShape> amx_shapes(bool quick) {
  const int64_t tokens = quick ? 512 : 2048, c = 256;
  std::vector<GemmShape> shapes;
  shapes.push_back({"square", tokens, tokens, tokens, false, false});
  const struct {
    const char* name;
    int64_t in, out;
  } linears[] = {{"qkv", c, 3 * c}, {"attn_proj", c, c}, {"mlp_up", c, 4 * c}, {"mlp_down", 4 * c, c}};
  for (const auto& l : linears) {
    shapes.push_back({l.name, tokens, l.out, l.in, false, true});                       // y = x W^T
    shapes.push_back({l.name, tokens, l.in, l.out, false, false});                      // dX = dY W
    shapes.push_back({l.name, l.out, l.in, tokens, true, false});                       // dW = dY^T X
  }
  return shapes;
}

void run_amx_bench(bool quick) {
  if (!kernels::cpu::detail::cpu_has_amx_bf16_gemm()) {
    JsonLine("amx_peak").add("available", false).print();
    return;
  }
  const AmxPeak peak = measure_amx_peak(quick);
  JsonLine("amx_peak")
      .add("available", true)
      .add("threads", peak.threads)
      .add("gflops", peak.gflops)
      .add("gflops_per_thread", peak.gflops / peak.threads)
      .print();
  for (const GemmShape& shape : amx_shapes(quick)) bench_amx_shape(shape, peak, quick);
}

}  // namespace

void run_gemm_bench(bool quick) {
  const FmaPeak peak = measure_fma_peak(quick);
  JsonLine("fma_peak")
      .add("isa", peak.isa)
      .add("threads", peak.threads)
      .add("gflops", peak.gflops)
      .add("gflops_per_thread", peak.gflops / peak.threads)
      .print();
  for (const GemmShape& shape : gemm_shapes(quick)) bench_gemm_shape(shape, peak, quick);
  run_amx_bench(quick);  // [amx]
}

}  // namespace hg::bench
