// Thread defaults for the samples (the rules and the reasons are in thread_defaults.h): a pure
// chooser, the few system reads it needs (affinity, cgroup quota, environment), and the one-time
// re-exec that gives libgomp a bounded spin before its constructor reads the environment.
#include "samples/thread_defaults.h"

#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace hg::samples {

std::optional<int> parse_omp_num_threads(const char* value) {
  if (value == nullptr) return std::nullopt;
  while (*value == ' ' || *value == '\t') ++value;
  if (*value < '0' || *value > '9') return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long n = std::strtol(value, &end, 10);
  while (*end == ' ' || *end == '\t') ++end;
  if (errno != 0 || n <= 0 || n > INT_MAX || (*end != '\0' && *end != ',')) return std::nullopt;
  return int(n);
}

int cores_from(int affinity_count, const std::string& cpu_max) {
  int cores = std::max(affinity_count, 1);
  std::istringstream line(cpu_max);
  std::string quota;
  long long period = 0;
  if (line >> quota >> period && quota != "max" && period > 0) {
    char* end = nullptr;
    const long long q = std::strtoll(quota.c_str(), &end, 10);
    if (end != quota.c_str() && *end == '\0' && q > 0)
      cores = std::min<long long>(cores, std::max<long long>(1, (q + period - 1) / period));
  }
  return cores;
}

ThreadSettings choose_thread_settings(const ThreadInputs& in) {
  ThreadSettings s;
  s.cores = std::max(in.cores, 1);
  s.has_loader = in.has_loader;
  if (in.has_loader) {
    if (in.workers_flag) {
      s.workers = int(std::max<int64_t>(*in.workers_flag, 0));
      s.workers_from = "--workers";
    } else {
      s.workers = in.cuda ? 1 : 0;
      s.workers_from = "default";
    }
  }
  if (in.threads_flag > 0) {
    s.threads = int(std::min<int64_t>(in.threads_flag, INT_MAX));
    s.threads_from = "--threads";
    s.set_threads = true;
  } else if (in.omp_num_threads) {
    s.threads = *in.omp_num_threads;
    s.threads_from = "OMP_NUM_THREADS";
  } else {
    // One runnable thread per core: the loader's workers are counted against the cores.
    s.threads = std::max(1, s.cores - s.workers);
    s.threads_from = "cores";
    s.set_threads = true;
  }
  return s;
}

std::string wait_policy_description(const EnvLookup& env) {
  const char* policy = env("OMP_WAIT_POLICY");
  const char* spin = env("GOMP_SPINCOUNT");
  const char* marker = env(kSpinDefaultMarker);
  if (policy != nullptr && *policy != '\0') {
    std::string s = std::string("OMP_WAIT_POLICY=") + policy + " (yours)";
    if (spin != nullptr) s += std::string(", GOMP_SPINCOUNT=") + spin;
    return s;
  }
  if (spin != nullptr && *spin != '\0') {
    if (marker != nullptr && std::to_string(kBoundedSpinCount) == spin)
      return "bounded spin, GOMP_SPINCOUNT=" + std::string(spin) + " (default)";
    return std::string("GOMP_SPINCOUNT=") + spin + " (yours)";
  }
  return "libgomp's default spin (GOMP_SPINCOUNT unset)";
}

std::string ThreadSettings::describe() const {
  std::string s = std::to_string(threads) + " OpenMP thread" + (threads == 1 ? "" : "s") + " (" + threads_from +
                  ") on " + std::to_string(cores) + " usable core" + (cores == 1 ? "" : "s");
  if (has_loader)
    s += " | " + std::to_string(workers) + " loader worker" + (workers == 1 ? "" : "s") + " (" + workers_from + ")";
  return s + " | " + wait;
}

int usable_cores() {
  int affinity = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) affinity = CPU_COUNT(&set);
  if (affinity <= 0) affinity = int(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  std::ifstream file("/sys/fs/cgroup/cpu.max");
  std::string line;
  std::getline(file, line);
  return cores_from(affinity, line);
}

void bound_openmp_spin(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT") || std::getenv("HALFGRAD_NO_REEXEC") ||
      std::getenv(kSpinDefaultMarker))
    return;
  if (setenv("GOMP_SPINCOUNT", std::to_string(kBoundedSpinCount).c_str(), 1) != 0 ||
      setenv(kSpinDefaultMarker, "1", 1) != 0)
    return;
  // The binary's own path keeps the process name (ps, /proc/PID/comm) the program's; /proc/self/exe
  // itself still works when the file was replaced or deleted since the start.
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n > 0) {
    path[n] = '\0';
    if (access(path, X_OK) == 0) execv(path, argv);
  }
  execv("/proc/self/exe", argv);
  // Both execs failed: libgomp keeps its default, and the start-up line must not claim otherwise
  // (the marker stays set, so the one-time re-exec is not attempted again by this process).
  unsetenv("GOMP_SPINCOUNT");
}

ThreadSettings apply_thread_settings(int64_t threads_flag, std::optional<int64_t> workers_flag, bool cuda,
                                     bool has_loader) {
  ThreadInputs in;
  in.cores = usable_cores();
  in.cuda = cuda;
  in.has_loader = has_loader;
  in.threads_flag = threads_flag;
  in.workers_flag = workers_flag;
  in.omp_num_threads = parse_omp_num_threads(std::getenv("OMP_NUM_THREADS"));
  ThreadSettings s = choose_thread_settings(in);
  s.wait = wait_policy_description([](const char* name) { return std::getenv(name); });
  if (s.set_threads) omp_set_num_threads(s.threads);
  return s;
}

}  // namespace hg::samples
