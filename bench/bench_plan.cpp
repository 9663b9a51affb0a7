// bench_plan: the memory planner's error distribution. For a grid of GPT shapes x training
// configurations (tests/support/plan_grid.h's techniques on each shape), measures one training step's
// allocator peak (plan::measure_memory) and compares plan::predict_memory with it. One JSON line per
// configuration (predicted, measured, error; host bytes where offload makes them non-trivial) and a
// summary line per device: mean error, mean / p90 / max |error|.
//
//   bench_plan                      the CPU device, then cuda:0 when a CUDA device answers
//   bench_plan --device cpu|cuda    one device
//   bench_plan --quick              the first two shapes only
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_args.h"
#include "engine/cuda/cuda_context.h"
#include "json_line.h"
#include "kernels/error.h"
#include "support/plan_grid.h"

using namespace hg;

namespace {

plan::ModelShape shape(int64_t layers, int64_t heads, int64_t dim, int64_t context, int64_t vocab) {
  plan::ModelShape m;
  m.layers = layers, m.heads = heads, m.dim = dim, m.context = context, m.vocab = vocab;
  return m;
}

void run_device(const Device& device, bool quick) {
  // CUDA's fused attention takes head dimension 64 or 128: every shape here has D = 64 on CUDA.
  const bool cuda = device.is_cuda();
  std::vector<plan::ModelShape> shapes = {
      shape(4, cuda ? 1 : 4, 64, 32, 256),
      shape(4, 2, 128, 64, 256),
      shape(6, 2, 128, 64, 512),
      shape(2, 4, 256, 64, 1024),
      shape(8, cuda ? 1 : 4, 64, 128, 256),
  };
  if (quick) shapes.resize(2);
  std::vector<double> errors;
  for (const plan::ModelShape& base : shapes) {
    for (const test::PlanCase& c : test::plan_grid(base)) {
      const test::PlanRow r = test::run_plan_case(c, device);
      errors.push_back(r.error());
      bench::JsonLine line("plan");
      line.add("device", device.str())
          .add("config", r.label)
          .add("predicted", (long long)r.predicted)
          .add("measured", (long long)r.measured)
          .add("error", r.error());
      if (r.measured_host > 0 || r.predicted_host > 0)
        line.add("host_predicted", (long long)r.predicted_host).add("host_measured", (long long)r.measured_host);
      line.print();
    }
  }
  std::vector<double> magnitude;
  double sum = 0;
  for (double e : errors) magnitude.push_back(std::abs(e)), sum += e;
  std::sort(magnitude.begin(), magnitude.end());
  double abs_sum = 0;
  for (double m : magnitude) abs_sum += m;
  const size_t n = magnitude.size();
  bench::JsonLine("plan_summary")
      .add("device", device.str())
      .add("configurations", (long long)n)
      .add("mean_error", sum / double(n))
      .add("mean_abs_error", abs_sum / double(n))
      .add("p90_abs_error", magnitude[std::min(n - 1, size_t(std::ceil(0.9 * double(n))) - 1)])
      .add("max_abs_error", magnitude.back())
      .add("within_10_percent",
           (long long)std::count_if(magnitude.begin(), magnitude.end(), [](double m) { return m <= 0.10; }))
      .print();
}

}  // namespace

constexpr const char* kUsage =
    "usage: bench_plan [--quick] [--device cpu|cuda]\n"
    "The memory planner's prediction against measured allocator peaks over a grid of GPT shapes x\n"
    "training configurations. Prints JSON lines to stdout: one per configuration (predicted, measured,\n"
    "error), then a summary per device (mean error, mean / p90 / max |error|).\n"
    "  --quick            the first two shapes only\n"
    "  --device cpu|cuda  one device (default: cpu, then cuda:0 when a CUDA device answers)\n"
    "  -h, --help         this text\n";

int main(int argc, char** argv) {
  bool quick = false;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (hg::bench::is_help(argv[i])) hg::bench::exit_with_usage(kUsage);
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    else if (std::strcmp(argv[i], "--device") == 0 && i + 1 < argc) only = argv[++i];
    else hg::bench::exit_unknown_argument("bench_plan", argv[i], kUsage);
  }
  try {
    if (only.empty() || only == "cpu") run_device(kCPU, quick);
    if (only.empty() || only == "cuda") {
      if (cuda::is_available())
        run_device(Device::cuda(0), quick);
      else
        std::printf("{\"bench\": \"plan_summary\", \"device\": \"cuda:0\", \"skipped\": \"%s\"}\n",
                    cuda::unavailable_reason().c_str());
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_plan: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
