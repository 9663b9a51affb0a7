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
//                                       8-bit, f32: 16 B/param + absmax; master adds 8 B/param, bf16
//                                       parameter and gradient 6 instead of 12), and mparams_per_s, the
//                                       figure to compare (the 8-bit step moves fewer bytes per parameter).
//   {"bench":"cuda_adamw_8bit", ...}    the same two kernels on a CUDA device, timed with events (best of
//                                       --repeats); on a build without a device a line with "skipped" and
//                                       why. The emulator is not timed (its figures would say nothing).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "json_line.h"
#include "kernels/adamw8bit_math.h"
#include "kernels/cpu/adamw8bit_block.h"
#include "kernels/step_kernels.h"
#if defined(HALFGRAD_HAS_CUDA)
#include "kernels/cuda/check.h"
#endif

namespace hg::bench {
namespace {

using Clock = std::chrono::steady_clock;
using kernels::cpu::AdamWIsa;
using kernels::AdamWStepScalars;
using kernels::QuantizedMoments;

constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8, kDecay = 0.01, kLr = 1e-4;

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

// Bytes one step must move per parameter (read + write), without the absmax arrays.
double bytes_per_param(bool eight_bit, bool mixed) {
  const double param = mixed ? 2 * 2 : 2 * 4;  // read + write
  const double grad = mixed ? 2 : 4;
  const double master = mixed ? 2 * 4 : 0;
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
    count[0] = 0;
    report("cpu_adamw_8bit", "adamw_step_device", n, false, mixed, best_seconds(repeats, [&] {
      kernels::cpu::adamw_step_device(param.get(), master_ptr, grad.get(), m32.get(), v32.get(), n, s, kBeta1, kBeta2,
                                      kEps, kDecay, dtype);
      count[0] = count[1];
    }));
    for (const AdamWIsa isa : {AdamWIsa::scalar, AdamWIsa::avx512}) {
      if (int(isa) > int(kernels::cpu::adamw8bit_best_isa())) continue;
      const AdamWIsa previous = kernels::cpu::set_adamw8bit_isa(isa);
      count[0] = 0;
      report("cpu_adamw_8bit", std::string("adamw8bit_step_device_") + kernels::cpu::adamw_isa_name(isa), n, true,
             mixed, best_seconds(repeats, [&] {
               kernels::cpu::adamw8bit_step_device(param.get(), master_ptr, grad.get(), q, n, s, kBeta1, kBeta2, kEps,
                                                   kDecay, dtype);
               count[0] = count[1];
             }));
      kernels::cpu::set_adamw8bit_isa(previous);
    }
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
  fn();
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
    report("cuda_adamw_8bit", "adamw_step_device", n, false, mixed, best_device_seconds(repeats, stream, [&] {
      kernels::cuda::adamw_step_device(param.get(), master_ptr, grad.get(), m32.get(), v32.get(), n, s, kBeta1, kBeta2,
                                       kEps, kDecay, dtype, stream);
    }));
    report("cuda_adamw_8bit", "adamw8bit_step_device", n, true, mixed, best_device_seconds(repeats, stream, [&] {
      kernels::cuda::adamw8bit_step_device(param.get(), master_ptr, grad.get(), q, n, s, kBeta1, kBeta2, kEps, kDecay,
                                           dtype, stream);
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

int main(int argc, char** argv) {
  bool quick = false;
  int repeats = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else if (arg == "--repeats" && i + 1 < argc) {
      repeats = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--repeats N]\n", argv[0]);
      return 2;
    }
  }
  const int64_t n = quick ? (int64_t(1) << 20) : (int64_t(1) << 24);
  hg::bench::state_bytes(n);
  hg::bench::cpu_bench(n, repeats);
  hg::bench::cuda_bench(quick ? n : (int64_t(1) << 28), repeats);
  return 0;
}
