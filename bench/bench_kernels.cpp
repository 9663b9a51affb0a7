// bench_kernels: the hand-written CUDA kernels on the device, one JSON object per line.
//
// Timing mode (default; a GPU under scripts/gpu-check): every case of kernel_cases.h that a GPU runs,
// at rows x cols = 16384 x 4096 (67M elements), median time over 20 runs; memory-bound kernels report
// their minimum bytes (each input read once, each output written once), GB/s and the fraction of the
// measured device-to-device copy rate (the roofline for them); GEMM reports TFLOP/s per dtype. On the
// SIMT emulator the figures are CPU timings of an interpreter and mean nothing about a GPU: every line
// then carries "emulated": true (and the size is 64 x 1024).
//
// Audit mode (--audit; the emulated audit build, build-audit/): each case recorded once at 256 x 1024
// and judged by the gate (kernel_audit.h, audit/gate.h, docs/kernel_audit.md). The "kernel" names of
// both modes are the same, so scripts/audit-vs-measured joins measured time and prediction.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "engine/cuda/cuda_context.h"
#include "json_line.h"
#include "kernel_cases.h"
#include "kernels/cuda/check.h"
#include "kernels/kernels_cuda.h"
#if defined(HALFGRAD_EMULATED_CUDA)
#include "kernel_audit.h"
#endif

using namespace hg;

namespace {

constexpr const char* kUsage =
    "usage: bench_kernels [--device cuda] [--quick] [--only NAME]\n"
    "       bench_kernels --audit [--gate] [--only NAME] [--no-gpt-step] [--rows R] [--cols C] [--l2-bytes B]\n"
    "                            [--resources FILE]\n"
    "  (default)      time every kernel case on the CUDA device (a GPU; on the emulator the figures are\n"
    "                 an interpreter's and say \"emulated\": true)\n"
    "  --quick        a small size and 3 repeats\n"
    "  --only NAME    only the cases whose name contains NAME\n"
    "  --audit        the emulated audit build (build-audit/): record every kernel case at 256 x 1024\n"
    "                 (--rows/--cols), one JSON line per (kernel, dtype) with its access figures, DRAM\n"
    "                 bytes against the op's minimum, the H200 roofline prediction and the gate's findings;\n"
    "                 then a small GPT training step's predicted time\n"
    "  --gate         with --audit: exit status 1 when the gate finds a violation (all printed first)\n"
    "  --no-gpt-step  with --audit: skip the GPT step\n"
    "  --l2-bytes B   with --audit: the modelled L2's size for the kernel cases (default: the H200's 50 MiB\n"
    "                 scaled by the audited over the timed elements, 200 KiB at 256 x 1024)\n"
    "  --resources F  with --audit: the nvcc build's ptxas report (build/kernel_resources.txt; default: the\n"
    "                 file named by HG_KERNEL_RESOURCES): each kernel's registers, spills and occupancy at its\n"
    "                 launch configuration; a spill is a gate violation\n";

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

int time_kernels(bool quick, const char* only) {
  if (!cuda::is_available()) {
    bench::JsonLine("bench_kernels").add("skipped", cuda::unavailable_reason()).print();
    return 0;
  }
  const bool emulated = cuda::is_emulated();
  if (emulated) quick = true;  // an interpreter: keep it short
  Bench b{cuda::compute_stream(0), quick ? 3 : 20};
  const bench::CaseSize size{quick ? 64 : bench::kTimedRows, quick ? 1024 : bench::kTimedCols};

  // The roofline: a device-to-device copy of the size of the f32 tensors.
  const size_t bytes32 = size_t(size.n()) * 4;
  void* x = device_buffer(bytes32);
  void* y = device_buffer(bytes32);
  const double copy_ms =
      b.median_ms([&] { HG_CUDA_CHECK(cudaMemcpyAsync(y, x, bytes32, cudaMemcpyDeviceToDevice, b.stream)); });
  const double copy_gbs = 2.0 * double(bytes32) / (copy_ms * 1e-3) / 1e9;
  auto line = [&](const std::string& kernel, const char* dtype, const std::string& shape, double bytes, double ms,
                  double roof_gbs) {
    const double gbs = bytes / (ms * 1e-3) / 1e9;
    bench::JsonLine("cuda_kernel")
        .add("kernel", kernel)
        .add("dtype", dtype)
        .add("rows", (long long)size.rows)
        .add("cols", (long long)size.cols)
        .add("shape", shape)
        .add("bytes", bytes)
        .add("median_ms", ms)
        .add("gbs", gbs)
        .add("fraction_of_copy", roof_gbs > 0 ? gbs / roof_gbs : 0.0)
        .add("device", cuda::device_name(0))
        .add("emulated", emulated)
        .print();
  };
  line("d2d_copy", "f32", std::to_string(size.n()), 2.0 * double(bytes32), copy_ms, 0);
  HG_CUDA_CHECK(cudaFree(x));
  HG_CUDA_CHECK(cudaFree(y));

  for (const bench::KernelCase& c : bench::kernel_cases()) {
    if (c.audit_only || (only && c.name.find(only) == std::string::npos)) continue;
    const std::vector<DType> dtypes = c.dtypes.empty() ? std::vector<DType>{DType::f32} : c.dtypes;
    for (DType dtype : dtypes) {
      bench::DeviceArena arena(b.stream);
      const bench::PreparedCase p = c.prepare(size, dtype, arena);
      line(c.name, c.dtypes.empty() ? "none" : dtype_name(dtype), p.shape, double(p.min_bytes), b.median_ms(p.run),
           copy_gbs);
    }
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
  for (void* p : {ga, gb, gc}) HG_CUDA_CHECK(cudaFree(p));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, audit = false, gate = false;
  [[maybe_unused]] bool gpt_step = true;
  const char* only = nullptr;
  const char* resources = std::getenv("HG_KERNEL_RESOURCES");
  int64_t rows = 256, cols = 1024, l2_bytes = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (arg == "--quick") {
      quick = true;
    } else if (arg == "--audit") {
      audit = true;
    } else if (arg == "--gate") {
      gate = true;
    } else if (arg == "--no-gpt-step") {
      gpt_step = false;
    } else if (arg == "--only" && has_value) {
      only = argv[++i];
    } else if (arg == "--rows" && has_value) {
      rows = std::atoll(argv[++i]);
    } else if (arg == "--cols" && has_value) {
      cols = std::atoll(argv[++i]);
    } else if (arg == "--resources" && has_value) {
      resources = argv[++i];
    } else if (arg == "--l2-bytes" && has_value) {
      l2_bytes = std::atoll(argv[++i]);
      if (l2_bytes < 32) {
        std::fprintf(stderr, "bench_kernels: --l2-bytes must be at least one 32-byte sector, got '%s'\n", argv[i]);
        return 2;
      }
    } else if (arg == "--device" && has_value && std::strcmp(argv[i + 1], "cuda") == 0) {
      ++i;
    } else {
      std::fprintf(stderr, "bench_kernels: unknown or incomplete argument '%s'\n%s", arg.c_str(), kUsage);
      return 2;
    }
  }
  if (gate && !audit) {
    std::fprintf(stderr, "bench_kernels: --gate needs --audit\n%s", kUsage);
    return 2;
  }
  if (rows <= 0 || cols <= 0) {
    std::fprintf(stderr, "bench_kernels: --rows and --cols must be positive, got %lld x %lld\n", (long long)rows,
                 (long long)cols);
    return 2;
  }
  if (audit) {
#if defined(HALFGRAD_EMULATED_CUDA)
    bench::AuditOptions options;
    options.rows = rows;
    options.cols = cols;
    options.l2_bytes = l2_bytes;
    options.resources = resources && *resources ? resources : nullptr;
    options.gate = gate;
    options.gpt_step = gpt_step;
    options.only = only;
    return bench::run_audit(options);
#else
    std::fprintf(stderr, "bench_kernels: --audit runs on the SIMT emulator: build with -DHALFGRAD_CUDA=EMULATED "
                         "-DHALFGRAD_EMU_AUDIT=ON (build-audit/, make test-audit)\n");
    return 2;
#endif
  }
  return time_kernels(quick, only);
}
