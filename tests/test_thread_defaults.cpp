// The samples' thread defaults (app/thread_defaults.h) as a pure function: cores, device, flags
// and environment in, OpenMP threads, loader workers and the wait policy out -- every rule and
// every way the user's settings win, plus the parsers of OMP_NUM_THREADS and cgroup cpu.max.
#include <doctest/doctest.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "app/thread_defaults.h"

using namespace hg::app;

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
  CHECK(cores_from(8, std::nullopt) == 8);
  CHECK(cores_from(8, cpu_max_cores("max 100000")) == 8);
  CHECK(cores_from(8, cpu_max_cores("200000 100000\n")) == 2);
  CHECK(cores_from(8, cpu_max_cores("150000 100000")) == 2);  // 1.5 CPUs of time: two threads, rounded up
  CHECK(cores_from(8, cpu_max_cores("50000 100000")) == 1);
  CHECK(cores_from(2, cpu_max_cores("800000 100000")) == 2);  // the quota never raises the affinity
  CHECK(cores_from(0, std::nullopt) == 1);
  CHECK(cores_from(8, cfs_cores("250000\n", "100000\n")) == 3);  // cgroup v1
  CHECK(cores_from(8, cfs_cores("-1\n", "100000\n")) == 8);      // v1's "no quota"
}

TEST_CASE("thread defaults: the quota parsers reject hostile text and never overflow") {
  CHECK(quota_cores(INT64_MAX, 1) == INT64_MAX);  // q + period - 1 would overflow here
  CHECK(quota_cores(INT64_MAX, 100000) == INT64_MAX / 100000 + 1);
  CHECK(quota_cores(INT64_MAX - 1, INT64_MAX) == 1);
  CHECK(quota_cores(0, 100000) == std::nullopt);
  CHECK(quota_cores(100000, 0) == std::nullopt);
  CHECK(quota_cores(-5, 100000) == std::nullopt);
  CHECK(cpu_max_cores("9223372036854775807 100000") == INT64_MAX / 100000 + 1);
  for (const char* bad : {"", "garbage", "12x 100000", "100000", "100000 100000 7", "100000 100000x", "-100000 100000",
                          "+100000 100000", "100000 -1", "100000 0", "99999999999999999999 100000", "max", "max 0",
                          "100000  100000", "0x10 100000", "1e5 100000", "100000\n100000"})
    CHECK_MESSAGE(cpu_max_cores(bad) == std::nullopt, (std::string("cpu.max '") + bad + "'"));
  CHECK(cfs_cores("100000", "100000") == 1);
  for (auto [quota, period] : std::vector<std::pair<const char*, const char*>>{{"", "100000"},
                                                                               {"100000", ""},
                                                                               {"-1", "100000"},
                                                                               {"12x", "100000"},
                                                                               {"100000", "1e5"},
                                                                               {"0", "100000"},
                                                                               {"100000", "0"},
                                                                               {"18446744073709551616", "100000"},
                                                                               {"100000 5", "100000"}})
    CHECK_MESSAGE(cfs_cores(quota, period) == std::nullopt, (std::string("cfs '") + quota + "' / '" + period + "'"));
}

TEST_CASE("thread defaults: /proc/self/cgroup gives the v2 path and v1's cpu controller path") {
  CgroupPaths p = parse_proc_cgroup("0::/user.slice/session-3.scope\n");
  CHECK(p.v2 == "/user.slice/session-3.scope");
  CHECK(p.v1_cpu.empty());
  p = parse_proc_cgroup("9:name=systemd:/\n4:memory:/x\n2:cpuacct:/y\n1:cpu,cpuacct:/docker/abc\n0::/\n");
  CHECK(p.v1_cpu == "/docker/abc");  // "cpuacct" alone is not the cpu controller
  CHECK(p.v2 == "/");
  p = parse_proc_cgroup("0::/a/../../etc\n3:cpu:relative\n5:cpu:/ok:with:colons\ngarbage\n::\n0::\n");
  CHECK(p.v2.empty());  // ".." parts and empty paths are refused
  CHECK(p.v1_cpu == "/ok:with:colons");
  CHECK(parse_proc_cgroup("").v2.empty());
  CHECK(cgroup_ancestry("/a/b/c") == std::vector<std::string>{"/a/b/c", "/a/b", "/a", "/"});
  CHECK(cgroup_ancestry("/a/") == std::vector<std::string>{"/a", "/"});
  CHECK(cgroup_ancestry("/") == std::vector<std::string>{"/"});
  CHECK(cgroup_ancestry("a/b").empty());
  CHECK(cgroup_ancestry("/a/./b").empty());
}

TEST_CASE("thread defaults: ranks that share one unbound mask split its cores") {
  CHECK(local_rank_count(env_of({})) == 1);
  CHECK(local_rank_count(env_of({{"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}})) == 4);
  CHECK(local_rank_count(env_of({{"MPI_LOCALNRANKS", "3"}})) == 3);
  CHECK(local_rank_count(env_of({{"LOCAL_WORLD_SIZE", "2"}, {"WORLD_SIZE", "8"}})) == 2);
  // halfgrad's RANK/WORLD_SIZE launch on one machine (tests/dist/run_env.sh): a loopback master.
  CHECK(local_rank_count(env_of({{"WORLD_SIZE", "4"}, {"MASTER_ADDR", "127.0.0.1"}})) == 4);
  CHECK(local_rank_count(env_of({{"WORLD_SIZE", "4"}, {"MASTER_ADDR", "localhost"}})) == 4);
  CHECK(local_rank_count(env_of({{"WORLD_SIZE", "4"}, {"MASTER_ADDR", "10.0.0.7"}})) == 1);  // other nodes
  CHECK(local_rank_count(env_of({{"OMPI_COMM_WORLD_LOCAL_SIZE", "x"}})) == 1);
  CHECK(local_rank_count(env_of({{"OMPI_COMM_WORLD_LOCAL_SIZE", "0"}})) == 1);
  CHECK(cores_per_rank(8, 4, true) == 2);
  CHECK(cores_per_rank(8, 3, true) == 2);
  CHECK(cores_per_rank(2, 4, true) == 1);   // at least one
  CHECK(cores_per_rank(2, 4, false) == 2);  // the launcher bound each rank to its own CPUs
  CHECK(cores_per_rank(8, 1, true) == 8);
  ThreadInputs in = inputs(cores_per_rank(8, 4, true));
  in.local_ranks = 4;
  ThreadSettings s = choose_thread_settings(in);
  CHECK(s.threads == 2);
  s.wait = "OMP_WAIT_POLICY=passive (yours)";
  CHECK(s.describe() ==
        "2 OpenMP threads (cores) on 2 usable cores (of the mask shared by 4 local ranks) | 0 loader workers "
        "(default) | OMP_WAIT_POLICY=passive (yours)");
}

TEST_CASE("thread defaults: a program's own default loses to OMP_NUM_THREADS and --threads") {
  ThreadInputs in = inputs(8);
  in.threads_flag = -1;  // train_mlp's "not chosen"
  in.default_threads = 1;
  in.has_loader = false;
  ThreadSettings s = choose_thread_settings(in);
  CHECK(s.threads == 1);
  CHECK(s.threads_from == "default");
  CHECK(s.set_threads);
  in.omp_num_threads = 3;
  s = choose_thread_settings(in);
  CHECK(s.threads == 3);
  CHECK(s.threads_from == "OMP_NUM_THREADS");
  in.threads_flag = 2;
  CHECK(choose_thread_settings(in).threads == 2);
  in.threads_flag = 0;  // 0: OMP_NUM_THREADS, else the cores
  CHECK(choose_thread_settings(in).threads == 3);
  in.omp_num_threads.reset();
  CHECK(choose_thread_settings(in).threads == 8);
}

TEST_CASE("thread defaults: the re-exec is skipped where it would break the run") {
  const unsigned long at_base = 0x7f0000000000UL;
  CHECK(reexec_blocker(env_of({}), true, at_base).empty());
  CHECK(reexec_blocker(env_of({}), false, at_base) == "not libgomp");
  CHECK(reexec_blocker(env_of({}), true, 0) == "started through the dynamic loader");
  CHECK(reexec_blocker(env_of({{"LD_PRELOAD", "/usr/libexec/valgrind/vgpreload_core-amd64-linux.so"}}), true,
                       at_base) == "under valgrind");
  CHECK(reexec_blocker(env_of({{"VALGRIND_LAUNCHER", "/usr/bin/valgrind"}}), true, at_base) == "under valgrind");
  CHECK(reexec_blocker(env_of({{"LD_PRELOAD", "libjemalloc.so"}}), true, at_base).empty());
  CHECK(reexec_blocker(env_of({{"HALFGRAD_NO_REEXEC", "1"}}), true, at_base) == "HALFGRAD_NO_REEXEC");
  CHECK(wait_policy_description(env_of({}), true, "under valgrind") ==
        "libgomp's default spin (GOMP_SPINCOUNT unset; no re-exec: under valgrind)");
  // Another runtime never reads GOMP_SPINCOUNT: no bounded spin is claimed, even with it set.
  CHECK(wait_policy_description(env_of({{"GOMP_SPINCOUNT", "3000"}, {kSpinDefaultMarker, "1"}}), false) ==
        "the OpenMP runtime's own wait policy (not libgomp: GOMP_SPINCOUNT has no effect)");
#if defined(__GNUC__) && !defined(__clang__)
  CHECK(openmp_runtime_is_libgomp());
#endif
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
