// One optimizer step of every optimizer over n f32 parameters (10M; --quick: 1M) on the CPU, in GB/s, next
// to the machine's stream bandwidth measured in the same run. Prints one JSON object per line:
//
//   {"bench":"stream_triad", ...}   a[i] = b[i] + s * c[i] over 3 arrays of n floats, OpenMP over all
//                                   threads: 12 bytes per element (two reads, one write; the write
//                                   allocation is not counted), best of --repeats. The ceiling a memory-bound
//                                   optimizer step can approach.
//   {"bench":"optimizer_step", ...} optimizer.step() over one f32 parameter of n elements with a gradient,
//                                   after one warm-up step (which creates the state), best of --repeats:
//                                   "bytes_per_param" = what the update must move (parameter read and
//                                   written, gradient read, each state buffer read and written: 4 B each),
//                                   gbs = n * bytes_per_param / time, fraction_of_stream = gbs / triad's.
//                                   Every optimizer runs one fused pass (kernels/optimizer_kernels.h).
// Flags: --n N, --repeats R (default 5), --quick. Run it on a quiet machine: the figures are wall-clock.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench_args.h"
#include "engine/ops.h"
#include "engine/random.h"
#include "json_line.h"
#include "optim/optim.h"

using namespace hg;
using hg::bench::JsonLine;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double stream_triad_gbs(int64_t n, int repeats) {
  const auto size = static_cast<size_t>(n);
  std::vector<float> a(size), b(size), c(size);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) a[size_t(i)] = 0.0f, b[size_t(i)] = 1.0f, c[size_t(i)] = 2.0f;
  double best = 1e30;
  for (int r = 0; r <= repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    float* __restrict pa = a.data();
    const float* __restrict pb = b.data();
    const float* __restrict pc = c.data();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + 0.5f * pc[i];
    if (r > 0) best = std::min(best, seconds_since(start));  // r = 0: warm-up
  }
  return 12.0 * double(n) / best / 1e9;
}

struct Case {
  const char* name;
  int states;  // state buffers per parameter
  std::function<std::unique_ptr<optim::LocalOptimizer>(std::vector<Tensor>)> make;
};

}  // namespace

constexpr const char* kUsage =
    "usage: bench_optimizer_step [--n N] [--repeats R] [--quick]\n"
    "  one step of every optimizer over N f32 parameters (10M; --quick: 1M), best of R (5), in GB/s,\n"
    "  next to a stream triad measured in the same run; one JSON object per line\n";

int main(int argc, char** argv) {
  int64_t n = 10'000'000;
  int repeats = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (bench::is_help(argv[i])) bench::exit_with_usage(kUsage);
    if (arg == "--quick") {
      n = 1'000'000;
    } else if (arg == "--n" && i + 1 < argc) {
      n = std::atoll(argv[++i]);
    } else if (arg == "--repeats" && i + 1 < argc) {
      repeats = std::atoi(argv[++i]);
    } else {
      bench::exit_unknown_argument("bench_optimizer_step", argv[i], kUsage);
    }
  }
  const double triad = stream_triad_gbs(n, repeats);
  JsonLine("stream_triad").add("n", (long long)n).add("threads", omp_get_max_threads()).add("gbs", triad).print();

  const std::vector<Case> cases = {
      {"SGD momentum", 1,
       [](auto p) { return std::make_unique<optim::SGD>(std::move(p), optim::SGDOptions().momentum(0.9)); }},
      {"AdamW", 2, [](auto p) { return std::make_unique<optim::AdamW>(std::move(p)); }},
      {"Adam", 2, [](auto p) { return std::make_unique<optim::Adam>(std::move(p)); }},
      {"Adam amsgrad", 3,
       [](auto p) { return std::make_unique<optim::Adam>(std::move(p), optim::AdamOptions().amsgrad(true)); }},
      {"RMSprop", 1, [](auto p) { return std::make_unique<optim::RMSprop>(std::move(p)); }},
      {"RMSprop momentum centered", 3,
       [](auto p) {
         return std::make_unique<optim::RMSprop>(std::move(p), optim::RMSpropOptions().momentum(0.9).centered(true));
       }},
      {"Adagrad", 1, [](auto p) { return std::make_unique<optim::Adagrad>(std::move(p)); }},
      {"Lion", 1, [](auto p) { return std::make_unique<optim::Lion>(std::move(p)); }},
  };
  manual_seed(1);
  for (const Case& c : cases) {
    const Tensor param = randn({n}).requires_grad_();
    param.set_grad(randn({n}));
    const auto opt = c.make({param});
    opt->step();  // creates the state
    double best = 1e30;
    for (int r = 0; r < repeats; ++r) {
      const auto start = std::chrono::steady_clock::now();
      opt->step();
      best = std::min(best, seconds_since(start));
    }
    const int bytes_per_param = 4 * (3 + 2 * c.states);
    const double gbs = double(bytes_per_param) * double(n) / best / 1e9;
    JsonLine("optimizer_step")
        .add("optimizer", c.name)
        .add("n", (long long)n)
        .add("threads", omp_get_max_threads())
        .add("bytes_per_param", bytes_per_param)
        .add("ms", best * 1e3)
        .add("gbs", gbs)
        .add("fraction_of_stream", gbs / triad)
        .print();
  }
  return 0;
}
