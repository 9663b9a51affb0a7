// The samples' thread defaults (samples/thread_defaults.h) as a pure function: cores, device, flags
// and environment in, OpenMP threads, loader workers and the wait policy out -- every rule and
// every way the user's settings win, plus the parsers of OMP_NUM_THREADS and cgroup cpu.max.
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "samples/thread_defaults.h"

using namespace hg::samples;

namespace {

ThreadInputs inputs(int cores, bool cuda = false) {
  ThreadInputs in;
  in.cores = cores;
  in.cuda = cuda;
  return in;
}

EnvLookup env_of(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

}  // namespace

TEST_CASE("thread defaults: a CPU device builds batches inline and gives OpenMP every usable core") {
  for (int cores : {1, 2, 3, 8, 64, 192}) {
    const ThreadSettings s = choose_thread_settings(inputs(cores));
    CHECK(s.workers == 0);
    CHECK(s.workers_from == "default");
    CHECK(s.threads == cores);
    CHECK(s.threads_from == "cores");
    CHECK(s.set_threads);
  }
}

TEST_CASE("thread defaults: a CUDA device gets one loader worker, counted against the cores") {
  CHECK(choose_thread_settings(inputs(8, true)).workers == 1);
  CHECK(choose_thread_settings(inputs(8, true)).threads == 7);
  CHECK(choose_thread_settings(inputs(2, true)).threads == 1);
  CHECK(choose_thread_settings(inputs(1, true)).threads == 1);  // never 0 threads
}

TEST_CASE("thread defaults: --workers wins, and the OpenMP team shrinks to leave the workers their cores") {
  ThreadInputs in = inputs(2);
  in.workers_flag = 1;
  ThreadSettings s = choose_thread_settings(in);
  CHECK(s.workers == 1);
  CHECK(s.workers_from == "--workers");
  CHECK(s.threads == 1);
  in.workers_flag = 0;
  in.cuda = true;  // an explicit 0 on CUDA stays 0
  s = choose_thread_settings(in);
  CHECK(s.workers == 0);
  CHECK(s.threads == 2);
  in = inputs(4);
  in.workers_flag = 6;  // more workers than cores: OpenMP keeps one thread
  CHECK(choose_thread_settings(in).threads == 1);
}

TEST_CASE("thread defaults: --threads wins over OMP_NUM_THREADS, which wins over the cores") {
  ThreadInputs in = inputs(16);
  in.omp_num_threads = 3;
  ThreadSettings s = choose_thread_settings(in);
  CHECK(s.threads == 3);
  CHECK(s.threads_from == "OMP_NUM_THREADS");
  CHECK_FALSE(s.set_threads);  // libgomp already read it; nothing to override
  in.threads_flag = 5;
  in.workers_flag = 2;  // an explicit thread count is not reduced by the workers
  s = choose_thread_settings(in);
  CHECK(s.threads == 5);
  CHECK(s.threads_from == "--threads");
  CHECK(s.set_threads);
  CHECK(s.workers == 2);
}

TEST_CASE("thread defaults: a program without a loader reports no workers") {
  ThreadInputs in = inputs(4, true);
  in.has_loader = false;
  const ThreadSettings s = choose_thread_settings(in);
  CHECK(s.workers == 0);
  CHECK(s.threads == 4);
  CHECK(s.describe().find("loader") == std::string::npos);
}

TEST_CASE("thread defaults: OMP_NUM_THREADS is read as libgomp reads its first value") {
  CHECK(parse_omp_num_threads(nullptr) == std::nullopt);
  CHECK(parse_omp_num_threads("") == std::nullopt);
  CHECK(parse_omp_num_threads("4") == 4);
  CHECK(parse_omp_num_threads(" 4 ") == 4);
  CHECK(parse_omp_num_threads("4,2") == 4);
  CHECK(parse_omp_num_threads("0") == std::nullopt);
  CHECK(parse_omp_num_threads("-2") == std::nullopt);
  CHECK(parse_omp_num_threads("four") == std::nullopt);
  CHECK(parse_omp_num_threads("4x") == std::nullopt);
  CHECK(parse_omp_num_threads("99999999999") == std::nullopt);
}

TEST_CASE("thread defaults: the cgroup CPU quota caps the affinity's cores") {
  CHECK(cores_from(8, "") == 8);
  CHECK(cores_from(8, "max 100000") == 8);
  CHECK(cores_from(8, "200000 100000") == 2);
  CHECK(cores_from(8, "150000 100000") == 2);  // 1.5 CPUs of time: two threads, rounded up
  CHECK(cores_from(8, "50000 100000") == 1);
  CHECK(cores_from(2, "800000 100000") == 2);  // the quota never raises the affinity
  CHECK(cores_from(0, "") == 1);
  CHECK(cores_from(4, "garbage") == 4);
  CHECK(cores_from(4, "12x 100000") == 4);
}

TEST_CASE("thread defaults: the wait policy in force, the user's named as theirs") {
  const std::string ours = std::to_string(kBoundedSpinCount);
  CHECK(wait_policy_description(env_of({})) == "libgomp's default spin (GOMP_SPINCOUNT unset)");
  CHECK(wait_policy_description(env_of({{"GOMP_SPINCOUNT", ours}, {kSpinDefaultMarker, "1"}})) ==
        "bounded spin, GOMP_SPINCOUNT=" + ours + " (default)");
  CHECK(wait_policy_description(env_of({{"GOMP_SPINCOUNT", ours}})) == "GOMP_SPINCOUNT=" + ours + " (yours)");
  CHECK(wait_policy_description(env_of({{"GOMP_SPINCOUNT", "500"}, {kSpinDefaultMarker, "1"}})) ==
        "GOMP_SPINCOUNT=500 (yours)");
  CHECK(wait_policy_description(env_of({{"OMP_WAIT_POLICY", "passive"}})) == "OMP_WAIT_POLICY=passive (yours)");
  CHECK(wait_policy_description(env_of({{"OMP_WAIT_POLICY", "active"}, {"GOMP_SPINCOUNT", "7"}})) ==
        "OMP_WAIT_POLICY=active (yours), GOMP_SPINCOUNT=7");
}

TEST_CASE("thread defaults: the start-up line names every choice and where it came from") {
  ThreadSettings s = choose_thread_settings(inputs(2));
  s.wait = "bounded spin, GOMP_SPINCOUNT=3000 (default)";
  CHECK(s.describe() ==
        "2 OpenMP threads (cores) on 2 usable cores | 0 loader workers (default) | bounded spin, "
        "GOMP_SPINCOUNT=3000 (default)");
  ThreadInputs in = inputs(1);
  in.workers_flag = 1;
  ThreadSettings one = choose_thread_settings(in);
  one.wait = "passive";
  CHECK(one.describe() == "1 OpenMP thread (cores) on 1 usable core | 1 loader worker (--workers) | passive");
}

TEST_CASE("thread defaults: --help states the spin count in force") {
  const std::string help = HG_THREADS_HELP;
  CHECK(help.find("GOMP_SPINCOUNT=" + std::to_string(kBoundedSpinCount) + " ") != std::string::npos);
}
