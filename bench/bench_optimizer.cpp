// 8-bit AdamW (kernels/adamw8bit_math.h) against 32-bit AdamW, kernels only, in the same run. Prints one
// JSON object per line:
//
//   {"bench":"adamw_state_bytes", ...}  optimizer-state bytes per parameter: 32-bit AdamW's m and v (8) and
//                                       8-bit AdamW's codes plus block absmax (2 + 8 / 2048), for n
//                                       parameters (exact, from kAdamW8BitBlock), and the ratio.
//   {"bench":"cpu_adamw_8bit", ...}     one step over n parameters (16M; --quick: 1M) on the CPU, best of
//                                       --repeats: kernels::cpu::adamw_step_device (32-bit moments) and
//                                       adamw8bit_step_device on each path this CPU runs (scalar, avx512),
//                                       f32 parameters alone and bf16 parameters with an fp32 master.
//                                       gbs = bytes the kernel must move / time (32-bit, f32: 28 B/param;
//                                       8-bit, f32: 16 B/param + absmax; with a master copy the master is
//                                       read and written, 8 B, the bf16 parameter only written, 2 B, and
//                                       the bf16 gradient read, 2 B: 12 B, as f32's 8 + 4), and
//                                       mparams_per_s, the figure to compare (the 8-bit step moves fewer
//                                       bytes per parameter).
//   {"bench":"cpu_gradient_pass", ...} the clip's sum of squares and scaling pass and the loss scaler's
//                                       inf/NaN check over n gradient elements in f32, bf16 and f16
//                                       (cpu_gradient_passes below), ms and GB/s.
//   {"bench":"cuda_adamw_8bit", ...}    the same two kernels on a CUDA device, timed with events (best of
//                                       --repeats); on a build without a device a line with "skipped" and
//                                       why. The emulator is not timed (its figures would say nothing).
// Inputs: every parameter and gradient differs (a hash of its index: theta uniform in [-1, 1), g of random
// sign and magnitude 10^[-4, 0)), and each kernel runs kWarmupSteps steps before it is timed, so the 8-bit
// codes spread over the map (the map reads and the quantisation's descent see realistic, scattered
// indices rather than one repeated code).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench_args.h"
#include "json_line.h"
#include "timing.h"
#include "kernels/adamw8bit_math.h"
#include "kernels/cpu/adamw8bit_block.h"
#include "kernels/half.h"
#include "kernels/kernels.h"
#include "kernels/step_kernels.h"
#if defined(HALFGRAD_HAS_CUDA)
#include "kernels/cuda/check.h"
#endif

namespace hg::bench {
namespace {

using kernels::AdamWStepScalars;
using kernels::QuantizedMoments;
using kernels::cpu::AdamWIsa;

constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8, kDecay = 0.01, kLr = 1e-4;
// Untimed steps before the timed ones: the moments (and the 8-bit codes) leave their initial zeros.
constexpr int kWarmupSteps = 3;

// splitmix64's finaliser: element i's pseudo-random bits.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

double unit(uint64_t stream, int64_t i) { return double(mix(mix(stream) ^ uint64_t(i)) >> 11) * 0x1p-53; }

// theta_i uniform in [-1, 1).
double param_value(int64_t i) { return 2.0 * unit(1, i) - 1.0; }

// g_i: random sign, magnitude 10^[-4, 0) (spread over the map's decades).
double grad_value(int64_t i) { return (unit(2, i) < 0.5 ? -1.0 : 1.0) * std::pow(10.0, -4.0 * unit(3, i)); }

template <class T>
void fill_as(T* p, int64_t n, double (*value)(int64_t)) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) p[i] = T(float(value(i)));
}

// p[i] = value(i) in dtype (f32 or bf16).
void fill_values(void* p, DType dtype, int64_t n, double (*value)(int64_t)) {
  if (dtype == DType::bf16) {
    fill_as(static_cast<bfloat16*>(p), n, value);
  } else {
    fill_as(static_cast<float*>(p), n, value);
  }
}

// 64-byte aligned host memory, first touched by the OpenMP threads (as the kernels will touch it).
struct HostArray {
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, Free> memory;
  explicit HostArray(size_t bytes, unsigned char fill) : memory(std::aligned_alloc(64, (bytes + 63) / 64 * 64)) {
    auto* p = static_cast<unsigned char*>(memory.get());
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < int64_t(bytes); ++i) p[i] = fill;
  }
  template <class T = void>
  T* get() const {
    return static_cast<T*>(memory.get());
  }
};

// Bytes one step must move per parameter, without the absmax arrays. The same for the 32-bit and the
// 8-bit kernels but for the moments: with a master copy theta is read from the master (written back)
// and the bf16 parameter is only written.
double bytes_per_param(bool eight_bit, bool mixed) {
  const double param = mixed ? 2 : 2 * 4;  // mixed: written only; f32: read + write
  const double grad = mixed ? 2 : 4;
  const double master = mixed ? 2 * 4 : 0;  // read + write
  const double moments = eight_bit ? 2 * 2 : 2 * 2 * 4;
  return param + grad + master + moments;
}

double total_bytes(int64_t n, bool eight_bit, bool mixed) {
  const double absmax = eight_bit ? 2.0 * 2 * 4 * double(kernels::adamw8bit_blocks(n)) : 0.0;
  return bytes_per_param(eight_bit, mixed) * double(n) + absmax;
}

void report(const char* bench, const std::string& variant, int64_t n, bool eight_bit, bool mixed, double seconds) {
  JsonLine(bench)
      .add("variant", variant)
      .add("state_bits", eight_bit ? 8 : 32)
      .add("param", mixed ? "bf16+f32_master" : "f32")
      .add("params", (long long)n)
      .add("threads", omp_get_max_threads())
      .add("ms", seconds * 1e3)
      .add("gbs", total_bytes(n, eight_bit, mixed) / seconds / 1e9)
      .add("mparams_per_s", double(n) / seconds / 1e6)
      .print();
}

void state_bytes(int64_t n) {
  const double eight = (2.0 * double(n) + 2.0 * 4.0 * double(kernels::adamw8bit_blocks(n))) / double(n);
  JsonLine("adamw_state_bytes")
      .add("params", (long long)n)
      .add("bytes_per_param_32bit", 8.0)
      .add("bytes_per_param_8bit", eight)
      .add("formula_8bit", "2 + 8 / 2048")
      .add("ratio", 8.0 / eight)
      .print();
}

void cpu_bench(int64_t n, int repeats) {
  const int64_t blocks = kernels::adamw8bit_blocks(n);
  HostArray param(size_t(n) * 4, 0x3c), grad(size_t(n) * 4, 0x3a), master(size_t(n) * 4, 0x3c);
  HostArray m32(size_t(n) * 4, 0), v32(size_t(n) * 4, 0);
  HostArray m8(size_t(n), kernels::kAdamW8BitSignedZeroCode), v8(size_t(n), kernels::kAdamW8BitUnsignedZeroCode);
  HostArray absmax_m(size_t(blocks) * 4, 0), absmax_v(size_t(blocks) * 4, 0);
  const QuantizedMoments q{m8.get<uint8_t>(), v8.get<uint8_t>(), absmax_m.get<float>(), absmax_v.get<float>()};
  int64_t count[2] = {0, 0};
  AdamWStepScalars s;
  s.lr_value = kLr;
  s.step = count;
  for (const bool mixed : {false, true}) {
    const DType dtype = mixed ? DType::bf16 : DType::f32;
    void* master_ptr = mixed ? master.get() : nullptr;
    fill_values(param.get(), dtype, n, param_value);
    fill_values(grad.get(), dtype, n, grad_value);
    fill_values(master.get(), DType::f32, n, param_value);
    count[0] = 0;
    report("cpu_adamw_8bit", "adamw_step_device", n, false, mixed, best_seconds(repeats, [&] {
             kernels::cpu::adamw_step_device(param.get(), master_ptr, grad.get(), m32.get(), v32.get(), n, s, kBeta1,
                                             kBeta2, kEps, kDecay, dtype);
             count[0] = count[1];
           }, kWarmupSteps));
    for (const AdamWIsa isa : {AdamWIsa::scalar, AdamWIsa::avx512}) {
      if (int(isa) > int(kernels::cpu::adamw8bit_best_isa())) continue;
      const AdamWIsa previous = kernels::cpu::set_adamw8bit_isa(isa);
      count[0] = 0;
      report("cpu_adamw_8bit", std::string("adamw8bit_step_device_") + kernels::cpu::adamw_isa_name(isa), n, true,
             mixed, best_seconds(repeats, [&] {
               kernels::cpu::adamw8bit_step_device(param.get(), master_ptr, grad.get(), q, n, s, kBeta1, kBeta2, kEps,
                                                   kDecay, dtype);
               count[0] = count[1];
             }, kWarmupSteps));
      kernels::cpu::set_adamw8bit_isa(previous);
    }
  }
}

// The gradient passes around the optimizer step, over one gradient of n elements per dtype (f32, bf16,
// f16; CPU): the clip's sum of squares (reads n), its scaling pass (reads and writes n) and the loss
// scaler's inf/NaN check (inv_scale 1: reads n). gbs = those bytes / time, so a half pass running at
// f32's gbs does its elements in half the time.
void cpu_gradient_passes(int64_t n, int repeats) {
  HostArray grad(size_t(n) * 4, 0);
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    const double size = double(dtype_size(dtype));
    if (dtype == DType::f16) {
      fill_as(grad.get<half>(), n, grad_value);
    } else {
      fill_values(grad.get(), dtype, n, grad_value);
    }
    const kernels::TensorSpan span{grad.get(), n, dtype};
    const auto line = [&](const char* pass, double bytes_per_element, double seconds) {
      JsonLine("cpu_gradient_pass")
          .add("pass", pass)
          .add("dtype", dtype_name(dtype))
          .add("elements", (long long)n)
          .add("threads", omp_get_max_threads())
          .add("ms", seconds * 1e3)
          .add("gbs", bytes_per_element * size * double(n) / seconds / 1e9)
          .print();
    };
    double sink = 0;
    line("sum_of_squares", 1,
         best_seconds(repeats, [&] { sink += kernels::cpu::sum_of_squares(grad.get(), n, dtype); }, kWarmupSteps));
    double sum_sq = 4.0;  // a norm of 2 clipped to 1.999: every element *= ~0.9995, written
    kernels::GradientMultiplier clip;
    clip.kind = kernels::GradientMultiplier::clip;
    clip.sum_sq = &sum_sq;
    clip.max_norm = 1.999;
    line("clip_scale", 2,
         best_seconds(
             repeats, [&] { kernels::cpu::scale_gradients(&span, 1, clip, nullptr); }, kWarmupSteps));
    line("inf_check", 1,
         best_seconds(
             repeats, [&] { sink += kernels::cpu::unscale_and_check(&span, 1, 1.0); }, kWarmupSteps));
    if (sink == -1) std::printf("%g\n", sink);  // keeps the results live
  }
}

#if defined(HALFGRAD_HAS_CUDA) && !defined(HALFGRAD_EMULATED_CUDA)
struct DeviceArray {
  void* p = nullptr;
  DeviceArray(size_t bytes, int fill) {
    HG_CUDA_CHECK(cudaMalloc(&p, bytes));
    HG_CUDA_CHECK(cudaMemset(p, fill, bytes));
  }
  ~DeviceArray() { cudaFree(p); }
  // The first n elements = value(i) in dtype (staged on the host).
  void upload(DType dtype, int64_t n, double (*value)(int64_t)) {
    const size_t bytes = size_t(n) * (dtype == DType::bf16 ? 2 : 4);
    std::vector<unsigned char> host(bytes);
    fill_values(host.data(), dtype, n, value);
    HG_CUDA_CHECK(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice));
  }
  template <class T = void>
  T* get() const {
    return static_cast<T*>(p);
  }
};

template <class F>
double best_device_seconds(int repeats, cudaStream_t stream, F&& fn) {
  cudaEvent_t start, stop;
  HG_CUDA_CHECK(cudaEventCreate(&start));
  HG_CUDA_CHECK(cudaEventCreate(&stop));
  for (int w = 0; w < kWarmupSteps; ++w) fn();
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    HG_CUDA_CHECK(cudaEventRecord(start, stream));
    fn();
    HG_CUDA_CHECK(cudaEventRecord(stop, stream));
    HG_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    HG_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    best = std::min(best, double(ms) / 1e3);
  }
  HG_CUDA_CHECK(cudaEventDestroy(start));
  HG_CUDA_CHECK(cudaEventDestroy(stop));
  return best;
}

void cuda_bench(int64_t n, int repeats) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    JsonLine("cuda_adamw_8bit").add("skipped", "no CUDA device").print();
    return;
  }
  const int64_t blocks = kernels::adamw8bit_blocks(n);
  cudaStream_t stream = nullptr;
  HG_CUDA_CHECK(cudaStreamCreate(&stream));
  DeviceArray param(size_t(n) * 4, 0x3c), grad(size_t(n) * 4, 0x3a), master(size_t(n) * 4, 0x3c);
  DeviceArray m32(size_t(n) * 4, 0), v32(size_t(n) * 4, 0);
  DeviceArray m8(size_t(n), kernels::kAdamW8BitSignedZeroCode), v8(size_t(n), kernels::kAdamW8BitUnsignedZeroCode);
  DeviceArray absmax_m(size_t(blocks) * 4, 0), absmax_v(size_t(blocks) * 4, 0), count(3 * sizeof(int64_t), 0);
  const QuantizedMoments q{m8.get<uint8_t>(), v8.get<uint8_t>(), absmax_m.get<float>(), absmax_v.get<float>()};
  AdamWStepScalars s;
  s.lr_value = kLr;
  s.step = count.get<int64_t>();
  s.blocks_done = reinterpret_cast<unsigned long long*>(count.get<int64_t>() + 2);
  for (const bool mixed : {false, true}) {
    const DType dtype = mixed ? DType::bf16 : DType::f32;
    void* master_ptr = mixed ? master.get() : nullptr;
    param.upload(dtype, n, param_value);
    grad.upload(dtype, n, grad_value);
    master.upload(DType::f32, n, param_value);
    report("cuda_adamw_8bit", "adamw_step_device", n, false, mixed, best_device_seconds(repeats, stream, [&] {
             kernels::cuda::adamw_step_device(param.get(), master_ptr, grad.get(), m32.get(), v32.get(), n, s, kBeta1,
                                              kBeta2, kEps, kDecay, dtype, stream);
           }));
    report("cuda_adamw_8bit", "adamw8bit_step_device", n, true, mixed, best_device_seconds(repeats, stream, [&] {
             kernels::cuda::adamw8bit_step_device(param.get(), master_ptr, grad.get(), q, n, s, kBeta1, kBeta2, kEps,
                                                  kDecay, dtype, stream);
           }));
  }
  HG_CUDA_CHECK(cudaStreamDestroy(stream));
}
#else
void cuda_bench(int64_t, int) {
#if defined(HALFGRAD_EMULATED_CUDA)
  JsonLine("cuda_adamw_8bit").add("skipped", "emulated CUDA build (not timed)").print();
#else
  JsonLine("cuda_adamw_8bit").add("skipped", "built without a CUDA backend").print();
#endif
}
#endif

}  // namespace
}  // namespace hg::bench

constexpr const char* kUsage =
    "usage: bench_optimizer [--quick] [--repeats N]\n"
    "8-bit against 32-bit AdamW, kernels only, in the same run. Prints JSON lines to stdout:\n"
    "adamw_state_bytes, cpu_adamw_8bit (GB/s, parameters/s per CPU path), cpu_gradient_pass (the clip's\n"
    "and the loss scaler's passes over the gradients per dtype, GB/s), cuda_adamw_8bit (or skipped).\n"
    "  --quick      1M parameters instead of 16M (smoke runs)\n"
    "  --repeats N  best of N timed steps (default 5)\n"
    "  -h, --help   this text\n";

int main(int argc, char** argv) {
  bool quick = false;
  int repeats = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (hg::bench::is_help(argv[i])) hg::bench::exit_with_usage(kUsage);
    if (arg == "--quick") {
      quick = true;
    } else if (arg == "--repeats" && i + 1 < argc) {
      repeats = std::max(1, std::atoi(argv[++i]));
    } else {
      hg::bench::exit_unknown_argument("bench_optimizer", argv[i], kUsage);
    }
  }
  const int64_t n = quick ? (int64_t(1) << 20) : (int64_t(1) << 24);
  hg::bench::state_bytes(n);
  hg::bench::cpu_bench(n, repeats);
  hg::bench::cpu_gradient_passes(n, repeats);
  hg::bench::cuda_bench(quick ? n : (int64_t(1) << 28), repeats);
  return 0;
}
