// bench_kernels: the hand-written CUDA kernels on the device, one JSON object per line.
// Memory-bound kernels report bytes moved, median time, GB/s and the fraction of the measured
// device-to-device copy rate (the roofline for them); GEMM reports TFLOP/s per dtype. On the SIMT
// emulator the figures are CPU timings of an interpreter and mean nothing about a GPU: every line
// then carries "emulated": true.
// Usage: bench_kernels [--device cuda] [--quick]
#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "engine/cuda/cuda_context.h"
#include "json_line.h"
#include "kernels/cuda/check.h"
#include "kernels/kernels_cuda.h"

using namespace hg;

namespace {

struct Bench {
  cuda::Stream stream;
  int repeats;
  // Median milliseconds of `work` over `repeats` timed runs after one warm-up, timed with events.
  double median_ms(const std::function<void()>& work) const {
    work();
    std::vector<double> ms;
    for (int i = 0; i < repeats; ++i) {
      cuda::Event start, stop;
      start.record(stream);
      work();
      stop.record(stream);
      stop.synchronize();
      ms.push_back(stop.elapsed_ms_since(start));
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  }
};

void* device_buffer(size_t bytes) {
  void* p = nullptr;
  HG_CUDA_CHECK(cudaMalloc(&p, bytes));
  HG_CUDA_CHECK(cudaMemset(p, 0, bytes));
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) quick |= std::strcmp(argv[i], "--quick") == 0;
  if (!cuda::is_available()) {
    bench::JsonLine("bench_kernels").add("skipped", cuda::unavailable_reason()).print();
    return 0;
  }
  const bool emulated = cuda::is_emulated();
  if (emulated) quick = true;  // an interpreter: keep it short
  Bench b{cuda::compute_stream(0), quick ? 3 : 20};
  const int64_t rows = quick ? 64 : 16384, cols = quick ? 1024 : 4096, n = rows * cols;
  auto line = [&](const char* kernel, DType dtype, double bytes, double ms, double copy_gbs) {
    const double gbs = bytes / (ms * 1e-3) / 1e9;
    bench::JsonLine("cuda_kernel")
        .add("kernel", kernel)
        .add("dtype", dtype_name(dtype))
        .add("rows", (long long)rows)
        .add("cols", (long long)cols)
        .add("bytes", bytes)
        .add("median_ms", ms)
        .add("gbs", gbs)
        .add("fraction_of_copy", copy_gbs > 0 ? gbs / copy_gbs : 0.0)
        .add("device", cuda::device_name(0))
        .add("emulated", emulated)
        .print();
    return gbs;
  };

  // The roofline: a device-to-device copy of the same size as the f32 tensors.
  const size_t bytes32 = size_t(n) * 4;
  void* x = device_buffer(bytes32 * 2);
  void* y = device_buffer(bytes32 * 2);
  void* w = device_buffer(size_t(cols) * 4);
  void* stats = device_buffer(size_t(rows) * 8 * 2);
  void* m = device_buffer(bytes32);
  void* v = device_buffer(bytes32);
  const double copy_ms = b.median_ms([&] { HG_CUDA_CHECK(cudaMemcpyAsync(y, x, bytes32, cudaMemcpyDeviceToDevice, b.stream)); });
  const double copy_gbs = line("d2d_copy", f32, 2.0 * double(bytes32), copy_ms, 0);

  for (DType dtype : {f32, bf16, f16}) {
    const double bytes = double(n) * double(dtype_size(dtype));
    line("softmax_forward", dtype, 2 * bytes,
         b.median_ms([&] { kernels::cuda::softmax_forward(x, y, rows, cols, false, 0, dtype, b.stream); }), copy_gbs);
    line("layer_norm_forward", dtype, 2 * bytes, b.median_ms([&] {
           kernels::cuda::layer_norm_forward(x, w, w, y, stats, static_cast<char*>(stats) + rows * 4, rows, cols, 1e-5,
                                             dtype, b.stream);
         }),
         copy_gbs);
    line("gelu_forward", dtype, 2 * bytes, b.median_ms([&] {
           kernels::cuda::unary_forward(kernels::UnaryOp::GeluTanh, x, y, n, 0.0, dtype, b.stream);
         }),
         copy_gbs);
    // param read+write and grad read in dtype, fp32 moments read+write: the optimizer's traffic.
    line("adamw_step", dtype, double(n) * (3.0 * double(dtype_size(dtype)) + 16.0), b.median_ms([&] {
           kernels::cuda::adamw_step(x, nullptr, y, m, v, n, 1e-3, 0.9, 0.999, 1e-8, 0.0, 1, dtype, b.stream);
         }),
         copy_gbs);
  }

  // GEMM (cuBLASLt on a GPU).
  const int64_t g = quick ? 256 : 8192;
  void* ga = device_buffer(size_t(g * g) * 4);
  void* gb = device_buffer(size_t(g * g) * 4);
  void* gc = device_buffer(size_t(g * g) * 4);
  for (DType dtype : {bf16, f16, f32}) {
    const double ms = b.median_ms([&] {
      kernels::cuda::gemm(false, false, g, g, g, 1.0, ga, g, gb, g, 0.0, gc, g, dtype, b.stream);
    });
    bench::JsonLine("cuda_gemm")
        .add("dtype", dtype_name(dtype))
        .add("m", (long long)g)
        .add("median_ms", ms)
        .add("tflops", 2.0 * double(g) * double(g) * double(g) / (ms * 1e-3) / 1e12)
        .add("emulated", emulated)
        .print();
  }
  for (void* p : {x, y, w, stats, m, v, ga, gb, gc}) HG_CUDA_CHECK(cudaFree(p));
  return 0;
}
