// Half-precision elementwise kernels against their f32 versions, on the GPT activation shapes
// ([2048, 256] and [2048, 1024]: small enough to live in L2/L3 as in a training step), one OpenMP
// thread, single-thread CPU time (CLOCK_THREAD_CPUTIME_ID, so time lost to other processes on a
// shared machine is not counted), best of `repeats` with the dtypes interleaved inside each
// repetition (f32, bf16, f16, f32, ...) so all see the same machine state. Then a second pass on
// every core (omp_get_num_procs threads, wall clock; "threads" and "timer" say which pass a line is
// from; skipped when OMP_NUM_THREADS is set) over [2048, 1024] and [16384, 1024]: there the cores
// share one memory system, so the f32 kernels become bound by bytes, which is where halving the
// bytes must pay.
//
// Each line: elements/s and bytes/s (bytes read + written by one call, at the dtype's size), and for
// the half dtypes the ratio to f32 measured in the same process: elements_ratio (2.0 means twice the
// f32 elements/s) and bytes_ratio (1.0 means the same bytes/s as f32: the target for the
// bandwidth-bound kernels). The conversions alone (convert.h to_float / from_float) are printed too,
// per tier, against a float copy of the same length.
//
// Softmax, GELU (unary and bias_gelu) and LayerNorm (alone and fused with the residual add) run
// once per vector-math tier this CPU has (field "vector_math": "portable" is the compiler-vectorised
// std::/libmvec loops, "avx512" the explicit AVX-512 loops; kernels/cpu/vector_math.h), so before/after are measured in the same process.
// Shapes: [16, 256] (L1-resident: what the arithmetic allows), the in-cache GPT activations, and
// [16384, 1024] (64 MiB per f32 tensor, far beyond L3) where bytes/s shows what the memory system
// allows (fewer repeats there).
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bench_sections.h"
#include "json_line.h"
#include "kernels/cpu/bias_gelu.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/gelu_table.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/kernels.h"

namespace hg::bench {
namespace {

// How a pass of the benchmark runs: one thread timed by its own CPU time, or every core timed by the
// wall clock (OpenMP's threads' CPU time is not the caller's, and the point there is the memory
// system shared by all cores).
struct Pass {
  int threads = 1;
  bool wall = false;
};
Pass g_pass;

double now_seconds() {
  timespec t;
  clock_gettime(g_pass.wall ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// One kernel call at one dtype, with the bytes it moves.
struct Variant {
  std::string dtype;
  double bytes;
  std::function<void()> run;
};

// Times the variants interleaved (one warm-up each, then `repeats` rounds of every variant) and
// prints one line per variant; half variants get their ratio to the "f32" variant.
void measure(const std::string& kernel, int64_t rows, int64_t cols, int repeats, std::vector<Variant> variants,
             const char* vector_math = nullptr, const char* gelu = nullptr) {
  std::vector<double> best(variants.size(), 1e30);
  for (auto& v : variants) v.run();
  for (int r = 0; r < repeats; ++r) {
    for (size_t i = 0; i < variants.size(); ++i) {
      const double start = now_seconds();
      variants[i].run();
      best[i] = std::min(best[i], now_seconds() - start);
    }
  }
  const double n = double(rows * cols);
  double f32_eps = 0, f32_bps = 0;
  for (size_t i = 0; i < variants.size(); ++i) {
    if (variants[i].dtype == "f32") {
      f32_eps = n / best[i];
      f32_bps = variants[i].bytes / best[i];
    }
  }
  for (size_t i = 0; i < variants.size(); ++i) {
    const double eps = n / best[i], bps = variants[i].bytes / best[i];
    JsonLine line("half_ops");
    line.add("kernel", kernel)
        .add("dtype", variants[i].dtype)
        .add("rows", (long long)rows)
        .add("cols", (long long)cols)
        .add("threads", g_pass.threads)
        .add("timer", g_pass.wall ? "wall" : "thread_cpu")
        .add("repeats", repeats)
        .add("best_us", best[i] * 1e6)
        .add("elements_per_s", eps)
        .add("bytes", (long long)variants[i].bytes)
        .add("gbs", bps / 1e9);
    if (vector_math != nullptr) line.add("vector_math", vector_math);
    if (gelu != nullptr) line.add("gelu", gelu);
    if (variants[i].dtype != "f32" && f32_eps > 0) {
      line.add("elements_ratio", eps / f32_eps).add("bytes_ratio", bps / f32_bps);
    }
    line.print();
  }
}

// Random tensors of every dtype for one shape, filled once (first touch before timing).
struct Tensors {
  std::map<DType, std::vector<std::vector<char>>> by_dtype;
  void* get(DType d, int k) { return by_dtype[d][size_t(k)].data(); }
};

Tensors make_tensors(int64_t n, int count, const std::vector<DType>& dtypes) {
  Tensors t;
  for (DType d : dtypes) {
    for (int k = 0; k < count; ++k) {
      t.by_dtype[d].emplace_back(size_t(n) * dtype_size(d));
      kernels::cpu::uniform_fill(t.by_dtype[d].back().data(), n, -3.0, 3.0, uint64_t(100 + k), 0, d);
    }
  }
  return t;
}

void bench_shape(int64_t rows, int64_t cols, int repeats) {
  namespace k = kernels;
  namespace cpu = kernels::cpu;
  const int64_t n = rows * cols;
  const std::vector<DType> dtypes{DType::f32, DType::bf16, DType::f16};
  // Slots: 0..2 inputs, 3..5 outputs, 6 weight row, 7 bias row.
  Tensors t = make_tensors(n, 6, dtypes);
  std::map<DType, std::vector<float>> stats;  // mean and rstd rows (f32 for every dtype here)
  for (DType d : dtypes) stats[d].assign(size_t(2 * rows), 0.0f);

  const auto each = [&](double bytes_per_element_times_size, auto&& body) {
    std::vector<Variant> v;
    for (DType d : dtypes)
      v.push_back({dtype_name(d), bytes_per_element_times_size * double(n) * double(dtype_size(d)),
                   [&, d, body] { body(d); }});
    return v;
  };

  // Softmax, GELU and LayerNorm on every vector-math tier (before / after in one process).
  std::vector<kernels::cpu::VectorMath> tiers{kernels::cpu::VectorMath::portable};
  if (kernels::cpu::vector_math_best() == kernels::cpu::VectorMath::avx512)
    tiers.push_back(kernels::cpu::VectorMath::avx512);
  for (const kernels::cpu::VectorMath tier : tiers) {
    kernels::cpu::vector_math_force(tier);
    const char* tn = kernels::cpu::vector_math_name(tier);
    measure("softmax_forward", rows, cols, repeats,
            each(2, [&](DType d) { cpu::softmax_forward(t.get(d, 0), t.get(d, 3), rows, cols, false, 0, d); }), tn);
    measure("softmax_backward", rows, cols, repeats, each(3, [&](DType d) {
              cpu::softmax_backward(t.get(d, 3), t.get(d, 1), t.get(d, 4), rows, cols, false, d);
            }), tn);
    // On the AVX-512 tier bf16 GELU is looked up (gelu_table.h); "gelu": "evaluate" is the same tier
    // with the lookup off, so the tables' gain is measured in the same process (f32 and f16 evaluate
    // in both).
    const bool avx512 = tier == kernels::cpu::VectorMath::avx512;
    for (const bool lookup : avx512 ? std::vector<bool>{false, true} : std::vector<bool>{true}) {
      kernels::cpu::gelu_lookup_enable(lookup);
      const char* mode = avx512 ? (lookup ? "lookup" : "evaluate") : nullptr;
      measure("gelu_forward", rows, cols, repeats, each(2, [&](DType d) {
                cpu::unary_forward(k::UnaryOp::GeluTanh, t.get(d, 0), t.get(d, 3), n, 0.0, d);
              }), tn, mode);
      measure("gelu_backward", rows, cols, repeats, each(3, [&](DType d) {
                cpu::unary_backward(k::UnaryOp::GeluTanh, t.get(d, 0), nullptr, t.get(d, 1), t.get(d, 4), n, 0.0, d);
              }), tn, mode);
    }
    kernels::cpu::gelu_lookup_enable(true);
    // bias: the first `cols` elements of slot 2; dbias into slot 5.
    measure("bias_gelu_forward", rows, cols, repeats, each(2, [&](DType d) {
              cpu::bias_gelu_forward(t.get(d, 0), t.get(d, 2), t.get(d, 3), rows, cols, false, d);
            }), tn);
    measure("bias_gelu_backward", rows, cols, repeats, each(3, [&](DType d) {
              cpu::bias_gelu_backward(t.get(d, 0), t.get(d, 2), t.get(d, 1), t.get(d, 4), t.get(d, 5), rows, cols,
                                      false, d);
            }), tn);
    measure("layer_norm_forward", rows, cols, repeats, each(2, [&](DType d) {
              float* s = stats[d].data();
              cpu::layer_norm_forward(t.get(d, 0), t.get(d, 1), t.get(d, 2), t.get(d, 3), s, s + rows, rows, cols,
                                      1e-5, d);
            }), tn);
    // dweight/dbias land in slot 5's first 2 * cols elements.
    measure("layer_norm_backward", rows, cols, repeats, each(3, [&](DType d) {
              float* s = stats[d].data();
              char* p = static_cast<char*>(t.get(d, 5));
              cpu::layer_norm_backward(t.get(d, 0), t.get(d, 1), s, s + rows, t.get(d, 2), t.get(d, 4), p,
                                       p + cols * dtype_size(d), rows, cols, d);
            }), tn);
    // Residual add + LayerNorm fused: x, residual in, h (slot 4) and y out; backward h, dy, dh in, dx out.
    measure("add_layer_norm_forward", rows, cols, repeats, each(4, [&](DType d) {
              float* s = stats[d].data();
              cpu::add_layer_norm_forward(t.get(d, 0), t.get(d, 1), t.get(d, 1), t.get(d, 2), t.get(d, 4),
                                          t.get(d, 3), s, s + rows, rows, cols, 1e-5, d);
            }), tn);
    measure("add_layer_norm_backward", rows, cols, repeats, each(4, [&](DType d) {
              float* s = stats[d].data();
              char* p = static_cast<char*>(t.get(d, 5));
              cpu::add_layer_norm_backward(t.get(d, 0), t.get(d, 1), s, s + rows, t.get(d, 2), t.get(d, 1),
                                           t.get(d, 4), p, p + cols * dtype_size(d), rows, cols, d);
            }), tn);
  }
  kernels::cpu::vector_math_reset();
  const int64_t shape[2] = {rows, cols}, dense[2] = {cols, 1}, row_bcast[2] = {0, 1};
  measure("add", rows, cols, repeats, each(3, [&](DType d) {
            cpu::binary_forward(k::BinaryOp::Add, t.get(d, 0), dense, t.get(d, 1), dense, t.get(d, 3), shape, 2, d);
          }));
  measure("add_bias", rows, cols, repeats, each(2, [&](DType d) {
            cpu::binary_forward(k::BinaryOp::Add, t.get(d, 0), dense, t.get(d, 1), row_bcast, t.get(d, 3), shape, 2,
                                d);
          }));
  // cast: f32 -> dtype and dtype -> f32 (the f32 row is a 4-byte copy); bytes = n * (4 + size).
  const auto cast_variants = [&](bool to_half) {
    std::vector<Variant> v;
    for (DType d : dtypes) {
      v.push_back({dtype_name(d), double(n) * double(4 + dtype_size(d)), [&, d, to_half] {
                     if (to_half)
                       cpu::cast(t.get(DType::f32, 0), DType::f32, t.get(d, 3), d, n);
                     else
                       cpu::cast(t.get(d, 0), d, t.get(DType::f32, 4), DType::f32, n);
                   }});
    }
    return v;
  };
  measure("cast_from_f32", rows, cols, repeats, cast_variants(true));
  measure("cast_to_f32", rows, cols, repeats, cast_variants(false));

  // The conversions alone, per tier (f32 row: a float copy of the same length).
  const auto* f = static_cast<const float*>(t.get(DType::f32, 0));
  auto* fo = static_cast<float*>(t.get(DType::f32, 4));
  auto* h = static_cast<half*>(t.get(DType::f16, 3));
  auto* b = static_cast<bfloat16*>(t.get(DType::bf16, 3));
  for (int tier = 0; tier <= int(cpu::convert_best_isa()); ++tier) {
    const auto isa = cpu::ConvertIsa(tier);
    const std::string name = std::string("convert_") + cpu::convert_isa_name(isa);
    measure(name + "_narrow", rows, cols, repeats,
            {{"f32", double(n) * 8, [&] { cpu::from_float(f, fo, n); }},
             {"bf16", double(n) * 6, [&, isa] { cpu::from_float(f, b, n, isa); }},
             {"f16", double(n) * 6, [&, isa] { cpu::from_float(f, h, n, isa); }}});
    measure(name + "_widen", rows, cols, repeats,
            {{"f32", double(n) * 8, [&] { cpu::to_float(f, fo, n); }},
             {"bf16", double(n) * 6, [&, isa] { cpu::to_float(b, fo, n, isa); }},
             {"f16", double(n) * 6, [&, isa] { cpu::to_float(h, fo, n, isa); }}});
  }
}

void print_setup() {
  JsonLine("half_ops_setup")
      .add("convert_tier", kernels::cpu::convert_isa_name(kernels::cpu::convert_best_isa()))
      .add("threads", g_pass.threads)
      .add("timer", g_pass.wall ? "wall" : "thread_cpu")
      .print();
}

}  // namespace

void run_half_ops_bench(bool quick) {
  const int saved_threads = omp_get_max_threads();
  g_pass = {1, false};
  omp_set_num_threads(1);
  print_setup();
  const int repeats = quick ? 3 : 20;
  bench_shape(16, 256, repeats * 10);  // 4096 elements, L1-resident: the kernels' compute bound
  bench_shape(2048, 256, repeats);
  bench_shape(2048, 1024, repeats);
  if (!quick) bench_shape(16384, 1024, 5);  // out of cache: DRAM bandwidth
  // Every core, wall clock: what a training step sees, where the cores share one memory system. Not
  // when the caller chose a thread count (OMP_NUM_THREADS: scripts/bench-cpu-peers runs bench_ops
  // once per count and would repeat the pass).
  const int cores = omp_get_num_procs();
  if (cores > 1 && !quick && std::getenv("OMP_NUM_THREADS") == nullptr) {
    g_pass = {cores, true};
    omp_set_num_threads(cores);
    print_setup();
    bench_shape(2048, 1024, repeats);
    bench_shape(16384, 1024, 5);
  }
  g_pass = {1, false};
  omp_set_num_threads(saved_threads);
}

}  // namespace hg::bench
