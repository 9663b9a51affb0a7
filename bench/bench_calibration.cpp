// Calibrated CPU GEMM dispatch (issue 41): what calibration costs a program's start and how stable
// its choice is. For each dtype with a choice to make on this CPU, `--repeats` times: the plan is
// reset and settled with an empty cache directory (a first run on this machine: measure + write the
// file) and then again from the file (every later run). Prints one JSON line per settle, then one
// summary line per dtype: median cold and cached milliseconds, the choices and how often each came
// out, and the per-candidate timings of the last cold run.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "json_line.h"
#include "kernels/cpu/gemm_calibration.h"
#include "kernels/cpu/gemm_plan.h"

namespace {

using namespace hg;
namespace d = kernels::cpu::detail;

const char* kUsage =
    "usage: bench_calibration [--repeats N] [--threads N]\n"
    "What calibrated CPU GEMM dispatch costs at start and how stable its choice is: per dtype with\n"
    "more than one path on this CPU, the plan settled N times from an empty cache directory (measure\n"
    "and write) and from the file it wrote. JSON lines on stdout.\n"
    "  --repeats N   cold settles per dtype (default 5)\n"
    "  --threads N   OpenMP threads (default: OMP_NUM_THREADS or all cores)\n"
    "  -h, --help    this text\n";

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// The plan's choice per shape class for `dtype`, as "square=..,skinny=..,k_small=..".
std::string choices(d::GemmPlanDType dtype) {
  std::string out;
  for (int shape = 0; shape < d::kGemmShapeClasses; ++shape) {
    const d::GemmShape s = d::representative_shape(d::GemmShapeClass(shape), 1);
    if (shape > 0) out += ',';
    out += d::gemm_shape_class_name(d::GemmShapeClass(shape));
    out += '=';
    out += d::gemm_candidate_name(d::planned_gemm_candidate(dtype, s.m, s.n, s.k));
  }
  return out;
}

double settle_ms(d::GemmPlanDType dtype) {
  d::reset_gemm_plan();
  const auto start = std::chrono::steady_clock::now();
  (void)d::planned_gemm_candidate(dtype, 512, 512, 512);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

int run(int repeats) {
  if (const char* forced = std::getenv("HG_CPU_GEMM"); forced != nullptr && *forced && std::string(forced) != "auto") {
    std::fprintf(stderr, "bench_calibration: HG_CPU_GEMM=%s turns calibration off; unset it\n", forced);
    return 2;
  }
  char pattern[] = "/tmp/hg_bench_calibration_XXXXXX";
  if (::mkdtemp(pattern) == nullptr) {
    std::perror("bench_calibration: mkdtemp");
    return 1;
  }
  const std::string dir = pattern;
  ::setenv("XDG_CACHE_HOME", dir.c_str(), 1);
  const d::CpuGemmCaps& caps = d::detect_cpu_gemm_caps();
  const std::string identity = d::cpu_identity(caps);
  const int threads = omp_get_max_threads();
  for (int dtype_index = 0; dtype_index < d::kGemmPlanDTypes; ++dtype_index) {
    const d::GemmPlanDType dtype = d::GemmPlanDType(dtype_index);
    if (d::gemm_candidates(dtype, caps).size() < 2) {
      bench::JsonLine("cpu_gemm_calibration")
          .add("dtype", d::gemm_plan_dtype_name(dtype))
          .add("skipped", "one path on this CPU: nothing to measure")
          .print();
      continue;
    }
    std::vector<double> cold, cached;
    std::map<std::string, int> seen;
    std::string last_file;
    for (int r = 0; r < repeats; ++r) {
      std::filesystem::remove_all(dir + "/halfgrad");
      cold.push_back(settle_ms(dtype));
      const std::string chosen = choices(dtype);
      ++seen[chosen];
      cached.push_back(settle_ms(dtype));
      bench::JsonLine("cpu_gemm_calibration_settle")
          .add("dtype", d::gemm_plan_dtype_name(dtype))
          .add("repeat", r)
          .add("cold_ms", cold.back())
          .add("cached_ms", cached.back())
          .add("choice", chosen)
          .add("source", kernels::cpu::gemm_plan_source(dtype == d::GemmPlanDType::f32    ? DType::f32
                                                        : dtype == d::GemmPlanDType::bf16 ? DType::bf16
                                                                                          : DType::f16))
          .print();
    }
    // The timings of the last cold run, from the file it wrote.
    std::string timings;
    {
      std::string text;
      if (FILE* f = std::fopen(d::gemm_cache_path(identity, threads).c_str(), "rb")) {
        char buffer[4096];
        const size_t n = std::fread(buffer, 1, sizeof buffer, f);
        text.assign(buffer, n);
        std::fclose(f);
      }
      std::string error;
      for (const d::GemmDecisionTimings& decision : d::parse_gemm_cache(text, identity, threads, caps, error))
        for (const d::GemmTiming& t : decision.timings) {
          char entry[96];
          std::snprintf(entry, sizeof entry, "%s\"%s/%s\": %.4f", timings.empty() ? "" : ", ",
                        d::gemm_shape_class_name(decision.shape), d::gemm_candidate_name(t.candidate), t.seconds * 1e3);
          timings += entry;
        }
    }
    std::string agreement;
    for (const auto& [chosen, count] : seen)
      agreement += (agreement.empty() ? "" : "; ") + chosen + " x" + std::to_string(count);
    bench::JsonLine("cpu_gemm_calibration")
        .add("dtype", d::gemm_plan_dtype_name(dtype))
        .add("threads", threads)
        .add("repeats", repeats)
        .add("cold_ms_median", median(cold))
        .add("cold_ms_max", *std::max_element(cold.begin(), cold.end()))
        .add("cached_ms_median", median(cached))
        .add("choices", agreement)
        .add_raw("last_timings_ms", "{" + timings + "}")
        .add("cpu", identity)
        .print();
  }
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if ((arg == "--repeats" || arg == "--threads") && i + 1 < argc) {
      char* end = nullptr;
      const long value = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || value < 1 || value > 1000) {
        std::fprintf(stderr, "bench_calibration: %s %s: expected an integer in 1..1000\n", arg.c_str(), argv[i]);
        return 2;
      }
      if (arg == "--repeats")
        repeats = int(value);
      else
        omp_set_num_threads(int(value));
      continue;
    }
    std::fprintf(stderr, "bench_calibration: unknown argument %s\n%s", arg.c_str(), kUsage);
    return 2;
  }
  return run(repeats);
}
