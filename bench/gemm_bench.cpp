// GEMM throughput (f32, bf16, f16) against this machine's own peaks, measured in the same process.
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
//   dpbf16_peak: the same loop with vdpbf16ps (16 lanes x 2 products = 64 flops per instruction) when
//             the CPU has AVX512_BF16: the peak of the bf16 GEMM's micro-kernel instruction.
//   gemm_half: bf16 and f16 GEMMs (gemm() as dispatched, and each packed path called directly) on
//             the 2048 square and the GPT shapes of a C = 256 model with M = B T = 2048 tokens
//             (forward y = x W^T, input gradient dX = dY W, weight gradient dW = dY^T X), C in the
//             inputs' type. fraction_of_peak compares each path with its own instruction's peak:
//             vdpbf16ps path vs dpbf16_peak, paths through fp32 packing vs fma_peak.
//   Every row also has cpu_gflops / cpu_fraction_of_peak from the calling thread's CPU time
//             (CLOCK_THREAD_CPUTIME_ID), meaningful with OMP_NUM_THREADS=1: on a shared, loaded
//             machine that is the figure to tune with; wall-clock figures need a quiet machine.
//   amx_peak, gemm_bf16_amx: the AMX bf16 GEMM against the AMX peak (see "AMX bf16" below).
//   gemm_blocking: the packed kernels under each candidate tile / blocking (f32: Zen 4's 14 x 32
//             rule, and the 48 KiB-L1d rule's 14 x 32 and 6 x 64 tiles; bf16 vdpbf16ps), interleaved
//             round by round in one process so that a shared machine's load hits every candidate
//             alike: best wall and best calling-thread CPU time over the rounds, the fraction of the
//             matching peak, and the median over rounds of each candidate's CPU-time speedup over
//             the Zen 4 rule's run of its dtype in the same round (the robust comparison on a
//             loaded VM).
//             `chosen` marks what this CPU's detected caches select for the shape's k
//             (gemm_avx512_blocking.h). HG_GEMM_BENCH=blocking runs only these rows (with the
//             peaks); tune with OMP_NUM_THREADS=1.
//   gemm_f16_amx: the f16 GEMM as split bf16 on AMX (3 and 4 products) against the fp32 path's f16
//             GEMM (widened while packing) and the f32 GEMM, same shapes and process (see below).
// Full: squares 1024, 2048, 4096 and m = 4096 tokens; --quick: squares 512, 1024 and m = 1024 (half
// rows: the square is 1024 and M = 1024 tokens).
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <type_traits>
#include <string>
#include <vector>

#include "bench_sections.h"
#include "json_line.h"
#include "kernels/cpu/gemm_avx512.h"
#include "kernels/cpu/gemm_avx512_blocking.h"
#include "kernels/kernels.h"

namespace hg::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

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

#define HG_DPBF16_ZMM(r) "vdpbf16ps %%zmm30, %%zmm31, %%zmm" #r "\n\t"
// 16 vdpbf16ps per iteration into zmm0..zmm15, each its own dependency chain.
__attribute__((target("avx512f,avx512bf16"))) void dpbf16_loop_avx512(int64_t iterations) {
  asm volatile(
      "vpxord %%zmm30, %%zmm30, %%zmm30\n\t"
      "vpxord %%zmm31, %%zmm31, %%zmm31\n\t"
      "1:\n\t"
      HG_DPBF16_ZMM(0) HG_DPBF16_ZMM(1) HG_DPBF16_ZMM(2)  HG_DPBF16_ZMM(3)  HG_DPBF16_ZMM(4)  HG_DPBF16_ZMM(5)
      HG_DPBF16_ZMM(6) HG_DPBF16_ZMM(7) HG_DPBF16_ZMM(8)  HG_DPBF16_ZMM(9)  HG_DPBF16_ZMM(10) HG_DPBF16_ZMM(11)
      HG_DPBF16_ZMM(12) HG_DPBF16_ZMM(13) HG_DPBF16_ZMM(14) HG_DPBF16_ZMM(15)
      "dec %0\n\t"
      "jnz 1b\n\t"
      : "+r"(iterations)
      :
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12",
        "xmm13", "xmm14", "xmm15", "xmm30", "xmm31", "cc");
}
#undef HG_DPBF16_ZMM

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
  double cpu_gflops_per_thread;  // from the master thread's CPU time (robust to a loaded machine)
};

// Runs `loop` on every OpenMP thread at once, best of a few timed runs; flops_per_iteration is per
// thread.
FmaPeak measure_peak(const char* isa, void (*loop)(int64_t), double flops_per_iteration, bool quick) {
  const int64_t iterations = quick ? 5'000'000 : 20'000'000;
  int threads = 1;
  double best = 1e30, best_cpu = 1e30;
  for (int run = 0; run < 4; ++run) {  // the first run is the warm-up (clocks, thread start)
    const auto start = Clock::now();
    double cpu = 0;
#pragma omp parallel
    {
      const double cpu_start = thread_cpu_seconds();
      loop(iterations);
#pragma omp master
      {
        threads = omp_get_num_threads();
        cpu = thread_cpu_seconds() - cpu_start;
      }
    }
    if (run > 0) best = std::min(best, seconds_since(start)), best_cpu = std::min(best_cpu, cpu);
  }
  const double flops = flops_per_iteration * double(iterations);
  return {isa, threads, flops * threads / best / 1e9, flops / best_cpu / 1e9};
}

FmaPeak measure_fma_peak(bool quick) {
  if (__builtin_cpu_supports("avx512f")) return measure_peak("avx512", fma_loop_avx512, 2.0 * 16 * 16, quick);
  return measure_peak("avx2", fma_loop_avx2, 2.0 * 8 * 14, quick);
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

// Best wall time and best calling-thread CPU time of fn after one warm-up call: at least 3 timed
// calls and about 0.5 s (quick: 0.1 s).
struct Timing {
  double wall, cpu;
};
template <class F>
Timing best_timing(bool quick, F&& fn) {
  fn();
  const double budget = quick ? 0.1 : 0.5;
  Timing best{1e30, 1e30};
  double total = 0;
  for (int run = 0; run < 20 && (run < 3 || total < budget); ++run) {
    const auto start = Clock::now();
    const double cpu_start = thread_cpu_seconds();
    fn();
    const double cpu = thread_cpu_seconds() - cpu_start, t = seconds_since(start);
    best = {std::min(best.wall, t), std::min(best.cpu, cpu)};
    total += t;
  }
  return best;
}
template <class F>
double best_seconds(bool quick, F&& fn) {
  return best_timing(quick, fn).wall;
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
      .add("tile", kernels::cpu::detail::cpu_has_avx512_gemm()
                       ? kernels::cpu::detail::gemm_tile_name(kernels::cpu::detail::f32_blocking(s.m, s.n, s.k).tile)
                       : "none")
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

// ---- half-precision GEMMs ---------------------------------------------------------------------------

std::vector<GemmShape> half_gemm_shapes(bool quick) {
  const int64_t tokens = quick ? 1024 : 2048, c = 256, square = quick ? 1024 : 2048;
  return {{"square", square, square, square, false, false},
          {"gpt_c256_qkv_forward", tokens, 3 * c, c, false, true},    // y = x W^T, W [3C, C]
          {"gpt_c256_qkv_input_grad", tokens, c, 3 * c, false, false},  // dX = dY W
          {"gpt_c256_qkv_weight_grad", 3 * c, c, tokens, true, false},  // dW = dY^T X
          {"gpt_c256_mlp_up_forward", tokens, 4 * c, c, false, true},
          {"gpt_c256_mlp_down_forward", tokens, c, 4 * c, false, true},
          {"gpt_c256_mlp_down_weight_grad", c, 4 * c, tokens, true, false}};
}

template <class T>
std::vector<T> rounded(const std::vector<float>& values) {
  return std::vector<T>(values.begin(), values.end());
}

// One half-precision GEMM path on one shape: A, B, C of T (C in T too).
template <class T>
void bench_half_path(const GemmShape& s, DType dtype, const char* path, const FmaPeak& peak, bool quick) {
  const int64_t lda = s.trans_a ? s.m : s.k, ldb = s.trans_b ? s.k : s.n;
  const std::vector<T> a = rounded<T>(random_matrix(s.m * s.k, 1)), b = rounded<T>(random_matrix(s.k * s.n, 2));
  std::vector<T> c = rounded<T>(random_matrix(s.m * s.n, 3));
  const double flops = 2.0 * double(s.m) * double(s.n) * double(s.k);
  const std::string which = path;
  const Timing t = best_timing(quick, [&] {
    if (which == "gemm") {
      kernels::cpu::gemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0, a.data(), lda, b.data(), ldb, 0.0, c.data(), s.n,
                         dtype);
    } else if constexpr (std::is_same_v<T, bfloat16>) {
      if (which == "vdpbf16ps")
        kernels::cpu::detail::gemm_bf16_avx512(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb,
                                               0.0f, c.data(), s.n, true);
      else
        kernels::cpu::detail::gemm_half_via_f32_avx512(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, a.data(), lda,
                                                       b.data(), ldb, 0.0f, c.data(), s.n, true);
    } else {
      kernels::cpu::detail::gemm_half_via_f32_avx512(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, a.data(), lda,
                                                     b.data(), ldb, 0.0f, c.data(), s.n, true);
    }
  });
  const double gflops = flops / t.wall / 1e9, cpu_gflops = flops / t.cpu / 1e9;
  JsonLine("gemm_half")
      .add("shape", s.name)
      .add("dtype", dtype_name(dtype))
      .add("path", path)
      .add("peak", peak.isa)
      .add("m", (long long)s.m)
      .add("n", (long long)s.n)
      .add("k", (long long)s.k)
      .add("trans_a", int(s.trans_a))
      .add("trans_b", int(s.trans_b))
      .add("threads", omp_get_max_threads())
      .add("ms", t.wall * 1e3)
      .add("gflops", gflops)
      .add("fraction_of_peak", gflops / peak.gflops)
      .add("cpu_gflops", cpu_gflops)
      .add("cpu_fraction_of_peak", cpu_gflops / peak.cpu_gflops_per_thread)
      .print();
}

void run_half_gemm_bench(const FmaPeak& fma_peak, bool quick) {
  if (!kernels::cpu::detail::cpu_has_avx512_gemm()) {
    JsonLine("gemm_half").add("skipped", "no AVX-512: f16/bf16 GEMMs go through f32 temporaries and Eigen").print();
    return;
  }
  const bool has_bf16 = kernels::cpu::detail::cpu_has_avx512_bf16_gemm();
  FmaPeak dpbf16_peak{"none", 0, 0, 0};
  if (has_bf16) {
    dpbf16_peak = measure_peak("avx512_bf16", dpbf16_loop_avx512, 4.0 * 16 * 16, quick);
    JsonLine("dpbf16_peak")
        .add("isa", dpbf16_peak.isa)
        .add("threads", dpbf16_peak.threads)
        .add("gflops", dpbf16_peak.gflops)
        .add("gflops_per_thread", dpbf16_peak.gflops / dpbf16_peak.threads)
        .add("cpu_gflops_per_thread", dpbf16_peak.cpu_gflops_per_thread)
        .add("fma_cpu_gflops_per_thread", fma_peak.cpu_gflops_per_thread)
        .print();
  }
  for (const GemmShape& shape : half_gemm_shapes(quick)) {
    // gemm() picks the vdpbf16ps path for bf16 where the CPU has it and no AMX (gemm.cpp); with AMX
    // the dispatched bf16 rows are the gemm_bf16_amx lines' gemm_* figures.
    if (!kernels::cpu::detail::cpu_has_amx_bf16_gemm())
      bench_half_path<bfloat16>(shape, DType::bf16, "gemm", has_bf16 ? dpbf16_peak : fma_peak, quick);
    if (has_bf16) bench_half_path<bfloat16>(shape, DType::bf16, "vdpbf16ps", dpbf16_peak, quick);
    bench_half_path<bfloat16>(shape, DType::bf16, "via_f32", fma_peak, quick);
    bench_half_path<half>(shape, DType::f16, "gemm", fma_peak, quick);
  }
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
// The A and B tiles hold ordinary bf16 values (0.5 .. 1.5, none zero): tiles of zeros run ~1.3x
// faster on Sapphire Rapids (measured: 1390 against 1050 GFLOP/s per core), which no GEMM sees.
void amx_loop(int64_t iterations) {
  const AmxTileConfig config;
  alignas(64) uint16_t operand[16 * 32];
  for (int i = 0; i < 16 * 32; ++i) operand[i] = uint16_t(0x3f00 + (i * 37) % 128);  // bf16 0.5 .. ~1.5
  const int64_t stride = 64;
  asm volatile(
      "ldtilecfg %1\n\t"
      "tilezero %%tmm0\n\t tilezero %%tmm1\n\t tilezero %%tmm2\n\t tilezero %%tmm3\n\t"
      "tileloadd (%2,%3,1), %%tmm4\n\t tileloadd (%2,%3,1), %%tmm5\n\t"
      "tileloadd (%2,%3,1), %%tmm6\n\t tileloadd (%2,%3,1), %%tmm7\n\t"
      "1:\n\t"
      "tdpbf16ps %%tmm6, %%tmm4, %%tmm0\n\t"
      "tdpbf16ps %%tmm7, %%tmm4, %%tmm1\n\t"
      "tdpbf16ps %%tmm6, %%tmm5, %%tmm2\n\t"
      "tdpbf16ps %%tmm7, %%tmm5, %%tmm3\n\t"
      "dec %0\n\t"
      "jnz 1b\n\t"
      "tilerelease\n\t"
      : "+r"(iterations)
      : "m"(config), "r"(operand), "r"(stride)
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

// f16 A, B, C on the AMX shapes: gemm_f16_amx with 3 (amx3_*) and 4 (amx4_*) products, the fp32
// path's f16 GEMM (fp32path_*: gemm_half_via_f32_avx512, what gemm() took before), gemm() as
// dispatched (gemm_*, HG_CPU_GEMM honoured) and the f32 GEMM on the same values (f32_*), timed
// interleaved round by round (5 rounds, best of each), wall and calling-thread CPU time. GFLOP/s
// count 2 m n k, the useful work (the tiles do 3x or 4x that). amx3_over_fp32path is the speed-up
// of the new path; amx3_over_f32 the figure the fp16 step needs (>= 1: an f16 GEMM at least as
// fast as the f32 one). HG_GEMM_BENCH=half skips the f32 rows before these.
void bench_f16_amx_shape(const GemmShape& s, bool quick) {
  const int64_t lda = s.trans_a ? s.m : s.k, ldb = s.trans_b ? s.k : s.n;
  const std::vector<float> af = random_matrix(s.m * s.k, 1), bf = random_matrix(s.k * s.n, 2);
  const std::vector<half> a(af.begin(), af.end()), b(bf.begin(), bf.end());
  std::vector<half> c(size_t(s.m * s.n));
  const std::vector<float> a32(a.begin(), a.end()), b32(b.begin(), b.end());
  std::vector<float> c32(size_t(s.m * s.n));
  const double flops = 2.0 * double(s.m) * double(s.n) * double(s.k);
  namespace d = kernels::cpu::detail;
  const auto amx3 = [&] { d::gemm_f16_amx(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), s.n, true, 3); };
  const auto amx4 = [&] { d::gemm_f16_amx(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), s.n, true, 4); };
  const auto fp32path = [&] {
    d::gemm_half_via_f32_avx512(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f,
                                c.data(), s.n, true);
  };
  const auto gemm = [&] {
    kernels::cpu::gemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0, a.data(), lda, b.data(), ldb, 0.0, c.data(), s.n,
                       DType::f16);
  };
  const auto f32 = [&] {
    kernels::cpu::gemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0, a32.data(), lda, b32.data(), ldb, 0.0, c32.data(),
                       s.n, DType::f32);
  };
  Timing t[5] = {{1e30, 1e30}, {1e30, 1e30}, {1e30, 1e30}, {1e30, 1e30}, {1e30, 1e30}};
  for (int round = 0; round < 5; ++round) {
    const Timing r[5] = {best_timing(true, amx3), best_timing(true, amx4), best_timing(true, fp32path),
                         best_timing(true, gemm), best_timing(true, f32)};
    for (int i = 0; i < 5; ++i) t[i] = {std::min(t[i].wall, r[i].wall), std::min(t[i].cpu, r[i].cpu)};
    if (quick && round == 1) break;
  }
  const char* names[5] = {"amx3", "amx4", "fp32path", "gemm", "f32"};
  JsonLine row("gemm_f16_amx");
  row.add("shape", s.name)
      .add("m", (long long)s.m)
      .add("n", (long long)s.n)
      .add("k", (long long)s.k)
      .add("trans_a", int(s.trans_a))
      .add("trans_b", int(s.trans_b))
      .add("c", "f16")
      .add("threads", omp_get_max_threads());
  for (int i = 0; i < 5; ++i)
    row.add(std::string(names[i]) + "_ms", t[i].wall * 1e3)
        .add(std::string(names[i]) + "_gflops", flops / t[i].wall / 1e9)
        .add(std::string(names[i]) + "_cpu_gflops", flops / t[i].cpu / 1e9);
  row.add("amx3_over_fp32path", t[2].wall / t[0].wall)
      .add("amx3_over_f32", t[4].wall / t[0].wall)
      .add("amx3_over_f32_cpu", t[4].cpu / t[0].cpu)
      .add("amx4_over_f32_cpu", t[4].cpu / t[1].cpu)
      .print();
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
  for (const GemmShape& shape : amx_shapes(quick)) bench_f16_amx_shape(shape, quick);
}

// ---- tile and blocking candidates (issue 20 follow-up) ----------------------------------------------

struct BlockingCandidate {
  const char* name;
  bool bf16;  // vdpbf16ps kernel on bf16 inputs; else the f32 kernel on f32 inputs
  kernels::cpu::detail::GemmBlocking blocking;
  bool chosen;
};

// The candidates for an m x n x k product: f32 under Zen 4's rule (14 x 32, panel-packed A) and
// each tile under the 48 KiB-L1d rule (14 x 32 and 6 x 64, A^T packed by rows); bf16 vdpbf16ps under
// the 1 MiB-L2 (KC = 1024) and 2 MiB-L2 (KC = 2048) rules.
std::vector<BlockingCandidate> blocking_candidates(bool has_bf16, int64_t m, int64_t n, int64_t k) {
  namespace d = kernels::cpu::detail;
  auto same = [](const d::GemmBlocking& x, const d::GemmBlocking& y) {
    return x.tile == y.tile && x.kc == y.kc && x.mc == y.mc && x.nc == y.nc && x.pack_a_by_rows == y.pack_a_by_rows;
  };
  const d::GemmBlocking chosen = d::f32_blocking(m, n, k);
  const d::GemmBlocking zen4 = d::f32_blocking_for({32 * 1024, 1024 * 1024}, k);
  const d::GemmBlocking l1d48_shallow = d::f32_blocking_for({48 * 1024, 2048 * 1024}, 1);
  const d::GemmBlocking l1d48_deep = d::f32_blocking_for({48 * 1024, 2048 * 1024}, 1 << 20);
  std::vector<BlockingCandidate> out = {{"f32_14x32_zen4", false, zen4, same(zen4, chosen)},
                                        {"f32_14x32_l1d48k", false, l1d48_shallow, same(l1d48_shallow, chosen)},
                                        {"f32_6x64_l1d48k", false, l1d48_deep, same(l1d48_deep, chosen)}};
  if (has_bf16) {
    const d::GemmBlocking bf16_l2_1m = d::bf16_blocking_for({32 * 1024, 1024 * 1024});
    const d::GemmBlocking bf16_l2_2m = d::bf16_blocking_for({48 * 1024, 2048 * 1024});
    out.push_back({"bf16_vdpbf16ps_l2_1m", true, bf16_l2_1m, same(bf16_l2_1m, d::bf16_blocking())});
    out.push_back({"bf16_vdpbf16ps_l2_2m", true, bf16_l2_2m, same(bf16_l2_2m, d::bf16_blocking())});
    // KC = 2048 with a smaller A block, for a 1 MiB L2 (224 x 2048 bf16 is 896 KiB there).
    for (const int64_t mc : {112, 168}) {
      const d::GemmBlocking b{d::GemmTile::mr14_nr32, 2048, mc, 2048, true};
      out.push_back({mc == 112 ? "bf16_vdpbf16ps_kc2048_mc112" : "bf16_vdpbf16ps_kc2048_mc168", true, b,
                     same(b, d::bf16_blocking())});
    }
  }
  return out;
}

void run_blocking_bench(const FmaPeak& fma_peak, bool quick) {
  if (!kernels::cpu::detail::cpu_has_avx512_gemm()) {
    JsonLine("gemm_blocking").add("skipped", "no AVX-512: the packed kernels do not run here").print();
    return;
  }
  const bool has_bf16 = kernels::cpu::detail::cpu_has_avx512_bf16_gemm();
  const FmaPeak dpbf16_peak = has_bf16 ? measure_peak("avx512_bf16", dpbf16_loop_avx512, 4.0 * 16 * 16, quick)
                                       : FmaPeak{"none", 0, 0, 0};
  if (has_bf16)
    JsonLine("dpbf16_peak")
        .add("isa", dpbf16_peak.isa)
        .add("threads", dpbf16_peak.threads)
        .add("gflops", dpbf16_peak.gflops)
        .add("gflops_per_thread", dpbf16_peak.gflops / dpbf16_peak.threads)
        .add("cpu_gflops_per_thread", dpbf16_peak.cpu_gflops_per_thread)
        .add("fma_cpu_gflops_per_thread", fma_peak.cpu_gflops_per_thread)
        .print();
  const kernels::cpu::detail::CpuCaches caches = kernels::cpu::detail::detect_cpu_caches();
  std::vector<GemmShape> shapes = half_gemm_shapes(quick);
  shapes.push_back({"gpt_c768_mlp_up", quick ? 1024 : 4096, 3072, 768, false, false});
  shapes.push_back({"gpt_c768_mlp_up_weight_grad", 3072, 768, quick ? 1024 : 4096, true, false});
  const int rounds = quick ? 3 : 8;
  for (const GemmShape& s : shapes) {
    const int64_t lda = s.trans_a ? s.m : s.k, ldb = s.trans_b ? s.k : s.n;
    const std::vector<float> a = random_matrix(s.m * s.k, 1), b = random_matrix(s.k * s.n, 2);
    std::vector<float> c = random_matrix(s.m * s.n, 3);
    const std::vector<bfloat16> a16 = rounded<bfloat16>(a), b16 = rounded<bfloat16>(b);
    std::vector<bfloat16> c16 = rounded<bfloat16>(c);
    const double flops = 2.0 * double(s.m) * double(s.n) * double(s.k);
    const std::vector<BlockingCandidate> candidates = blocking_candidates(has_bf16, s.m, s.n, s.k);
    std::vector<Timing> best(candidates.size(), Timing{1e30, 1e30});
    // Per round, each candidate's time over the first's (the f32 Zen 4 rule): the median of these
    // paired ratios is robust to a load that drifts between rounds.
    std::vector<std::vector<double>> speedups(candidates.size());
    double first_cpu = 0, first_bf16_cpu = 0;
    for (int round = 0; round <= rounds; ++round)  // round 0 warms up (pack buffers, pages)
      for (size_t i = 0; i < candidates.size(); ++i) {
        const BlockingCandidate& cand = candidates[i];
        if (i == 0) first_bf16_cpu = 0;
        const auto start = Clock::now();
        const double cpu_start = thread_cpu_seconds();
        if (cand.bf16)
          kernels::cpu::detail::gemm_bf16_avx512_blocked(cand.blocking, s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f,
                                                         a16.data(), lda, b16.data(), ldb, 0.0f, c16.data(), s.n,
                                                         true);
        else
          kernels::cpu::detail::gemm_f32_avx512_blocked(cand.blocking, s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f,
                                                        a.data(), lda, b.data(), ldb, 0.0f, c.data(), s.n);
        const double cpu = thread_cpu_seconds() - cpu_start, wall = seconds_since(start);
        if (i == 0) first_cpu = cpu;
        if (cand.bf16 && first_bf16_cpu == 0) first_bf16_cpu = cpu;
        if (round > 0) {
          best[i] = {std::min(best[i].wall, wall), std::min(best[i].cpu, cpu)};
          speedups[i].push_back((cand.bf16 ? first_bf16_cpu : first_cpu) / cpu);
        }
      }
    for (size_t i = 0; i < candidates.size(); ++i) {
      const BlockingCandidate& cand = candidates[i];
      const FmaPeak& peak = cand.bf16 ? dpbf16_peak : fma_peak;
      const double gflops = flops / best[i].wall / 1e9, cpu_gflops = flops / best[i].cpu / 1e9;
      std::vector<double> ratios = speedups[i];
      std::sort(ratios.begin(), ratios.end());
      JsonLine("gemm_blocking")
          .add("shape", s.name)
          .add("dtype", cand.bf16 ? "bf16" : "f32")
          .add("candidate", cand.name)
          .add("tile", kernels::cpu::detail::gemm_tile_name(cand.blocking.tile))
          .add("kc", (long long)cand.blocking.kc)
          .add("mc", (long long)cand.blocking.mc)
          .add("nc", (long long)cand.blocking.nc)
          .add("pack_a_by_rows", cand.blocking.pack_a_by_rows)
          .add("chosen", cand.chosen)
          .add("l1d_bytes", (long long)caches.l1d)
          .add("l2_bytes", (long long)caches.l2)
          .add("peak", peak.isa)
          .add("m", (long long)s.m)
          .add("n", (long long)s.n)
          .add("k", (long long)s.k)
          .add("trans_a", int(s.trans_a))
          .add("trans_b", int(s.trans_b))
          .add("threads", omp_get_max_threads())
          .add("rounds", rounds)
          .add("ms", best[i].wall * 1e3)
          .add("gflops", gflops)
          .add("fraction_of_peak", gflops / peak.gflops)
          .add("cpu_gflops", cpu_gflops)
          .add("cpu_fraction_of_peak", cpu_gflops / peak.cpu_gflops_per_thread)
          .add("cpu_speedup_vs_zen4_rule_median", ratios[ratios.size() / 2])
          .print();
    }
  }
}

}  // namespace

void run_gemm_bench(bool quick) {
  const FmaPeak peak = measure_fma_peak(quick);
  JsonLine("fma_peak")
      .add("isa", peak.isa)
      .add("threads", peak.threads)
      .add("gflops", peak.gflops)
      .add("gflops_per_thread", peak.gflops / peak.threads)
      .add("cpu_gflops_per_thread", peak.cpu_gflops_per_thread)
      .print();
  // HG_GEMM_BENCH=half runs only the half-precision rows, =blocking only the tile / blocking
  // candidates (for tuning them).
  const char* only_env = std::getenv("HG_GEMM_BENCH");
  const std::string only = only_env ? only_env : "";
  if (only == "blocking") return run_blocking_bench(peak, quick);
  if (only != "half")
    for (const GemmShape& shape : gemm_shapes(quick)) bench_gemm_shape(shape, peak, quick);
  run_half_gemm_bench(peak, quick);
  run_amx_bench(quick);
  if (only != "half") run_blocking_bench(peak, quick);
}

}  // namespace hg::bench
