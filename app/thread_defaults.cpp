// Thread defaults for the samples (the rules and the reasons are in thread_defaults.h): a pure
// chooser, the few system reads it needs (affinity, cgroup quota, environment), and the one-time
// re-exec that gives libgomp a bounded spin before its constructor reads the environment.
#include "app/thread_defaults.h"

#include <omp.h>
#include <sched.h>
#include <sys/auxv.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace hg::app {

bool openmp_runtime_is_libgomp() {
#if defined(_LIBGOMP_OMP_LOCK_DEFINED)  // libgomp's omp.h (GCC's runtime, or clang -fopenmp=libgomp)
  return true;
#else  // clang's libomp (KMP_* variables) or any other runtime: GOMP_SPINCOUNT is not read
  return false;
#endif
}

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

namespace {

// A decimal integer >= 0 and nothing else but trailing blanks / newline (as the kernel writes its
// files); nullopt on a sign, a leading blank, junk or overflow.
std::optional<int64_t> strict_count(const std::string& text) {
  size_t i = 0, end = text.size();
  while (end > i && (text[end - 1] == ' ' || text[end - 1] == '\t' || text[end - 1] == '\n')) --end;
  if (i == end) return std::nullopt;
  int64_t value = 0;
  for (; i < end; ++i) {
    if (text[i] < '0' || text[i] > '9') return std::nullopt;
    const int digit = text[i] - '0';
    if (value > (INT64_MAX - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  return value;
}

std::string trimmed(const std::string& text) {
  size_t i = 0, end = text.size();
  while (i < end && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  while (end > i && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  return text.substr(i, end - i);
}

bool clean_absolute_path(const std::string& path) {
  if (path.empty() || path[0] != '/' || path.find('\0') != std::string::npos) return false;
  for (size_t start = 1; start <= path.size();) {
    const size_t slash = std::min(path.find('/', start), path.size());
    const std::string part = path.substr(start, slash - start);
    if (part == "." || part == "..") return false;
    start = slash + 1;
  }
  return true;
}

std::string read_text(const std::string& path) {
  std::ifstream file(path);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

bool loopback(const char* address) {
  const std::string a = address;
  return a == "localhost" || a == "::1" || a.rfind("127.", 0) == 0;
}

}  // namespace

std::optional<int64_t> quota_cores(int64_t quota, int64_t period) {
  if (quota <= 0 || period <= 0) return std::nullopt;
  return quota / period + (quota % period != 0 ? 1 : 0);
}

std::optional<int64_t> cpu_max_cores(const std::string& text) {
  const std::string line = trimmed(text);
  const size_t space = line.find(' ');
  if (space == std::string::npos) return std::nullopt;
  const std::string quota = line.substr(0, space), period_text = line.substr(space + 1);
  const std::optional<int64_t> period = strict_count(period_text);
  if (!period || quota == "max") return std::nullopt;
  const std::optional<int64_t> q = strict_count(quota);
  return q ? quota_cores(*q, *period) : std::nullopt;
}

std::optional<int64_t> cfs_cores(const std::string& quota, const std::string& period) {
  const std::optional<int64_t> q = strict_count(quota), p = strict_count(period);  // "-1" is no quota
  return q && p ? quota_cores(*q, *p) : std::nullopt;
}

CgroupPaths parse_proc_cgroup(const std::string& text) {
  CgroupPaths paths;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const size_t first = line.find(':'), second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string id = line.substr(0, first), controllers = line.substr(first + 1, second - first - 1),
                      path = line.substr(second + 1);
    if (!clean_absolute_path(path)) continue;
    if (id == "0" && controllers.empty()) {
      paths.v2 = path;
      continue;
    }
    std::istringstream names(controllers);
    for (std::string name; std::getline(names, name, ',');)
      if (name == "cpu") paths.v1_cpu = path;
  }
  return paths;
}

std::vector<std::string> cgroup_ancestry(const std::string& path) {
  std::vector<std::string> chain;
  if (!clean_absolute_path(path)) return chain;
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  for (;;) {
    chain.push_back(p);
    if (p == "/") break;
    const size_t slash = p.rfind('/');
    p = slash == 0 ? "/" : p.substr(0, slash);
  }
  return chain;
}

int cores_from(int affinity_count, std::optional<int64_t> quota) {
  int64_t cores = std::max(affinity_count, 1);
  if (quota) cores = std::min(cores, std::max<int64_t>(*quota, 1));
  return int(cores);
}

int local_rank_count(const EnvLookup& env) {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "LOCAL_WORLD_SIZE"})
    if (const std::optional<int> n = parse_omp_num_threads(env(name));
        n && std::string(env(name)).find(',') == std::string::npos)
      return *n;
  const char* world = env("WORLD_SIZE");
  const char* master = env("MASTER_ADDR");
  if (world != nullptr && master != nullptr && loopback(master))
    if (const std::optional<int64_t> n = strict_count(world); n && *n >= 1 && *n <= INT_MAX) return int(*n);
  return 1;
}

int cores_per_rank(int cores, int local_ranks, bool mask_is_all_cpus) {
  cores = std::max(cores, 1);
  if (!mask_is_all_cpus || local_ranks <= 1) return cores;
  return std::max(1, cores / local_ranks);
}

ThreadSettings choose_thread_settings(const ThreadInputs& in) {
  ThreadSettings s;
  s.cores = std::max(in.cores, 1);
  s.local_ranks = std::max(in.local_ranks, 1);
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
  } else if (in.threads_flag < 0 && in.default_threads > 0) {
    s.threads = in.default_threads;
    s.threads_from = "default";
    s.set_threads = true;
  } else {
    // One runnable thread per core: the loader's workers are counted against the cores.
    s.threads = std::max(1, s.cores - s.workers);
    s.threads_from = "cores";
    s.set_threads = true;
  }
  return s;
}

std::string reexec_blocker(const EnvLookup& env, bool libgomp, unsigned long at_base) {
  if (!libgomp) return "not libgomp";
  if (at_base == 0) return "started through the dynamic loader";
  const char* preload = env("LD_PRELOAD");
  if ((preload != nullptr && std::strstr(preload, "vgpreload") != nullptr) || env("VALGRIND_LAUNCHER") != nullptr)
    return "under valgrind";
  if (env("HALFGRAD_NO_REEXEC") != nullptr) return "HALFGRAD_NO_REEXEC";
  return "";
}

std::string wait_policy_description(const EnvLookup& env, bool libgomp, const std::string& skipped) {
  const char* policy = env("OMP_WAIT_POLICY");
  const char* spin = env("GOMP_SPINCOUNT");
  const char* marker = env(kSpinDefaultMarker);
  if (!libgomp)
    return policy != nullptr && *policy != '\0'
               ? std::string("OMP_WAIT_POLICY=") + policy + " (yours; not libgomp)"
               : "the OpenMP runtime's own wait policy (not libgomp: GOMP_SPINCOUNT has no effect)";
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
  return "libgomp's default spin (GOMP_SPINCOUNT unset" + (skipped.empty() ? "" : "; no re-exec: " + skipped) + ")";
}

std::string ThreadSettings::describe() const {
  std::string s = std::to_string(threads) + " OpenMP thread" + (threads == 1 ? "" : "s") + " (" + threads_from +
                  ") on " + std::to_string(cores) + " usable core" + (cores == 1 ? "" : "s");
  if (local_ranks > 1) s += " (of the mask shared by " + std::to_string(local_ranks) + " local ranks)";
  if (has_loader)
    s += " | " + std::to_string(workers) + " loader worker" + (workers == 1 ? "" : "s") + " (" + workers_from + ")";
  return s + " | " + wait;
}

namespace {

// Why the re-exec did not happen (reexec_blocker, or "exec failed"); "" when it was not needed.
std::string g_reexec_skipped;  // NOLINT: written once in main's first line, before any thread

const char* getenv_lookup(const char* name) { return std::getenv(name); }

// The smallest quota on `path` and its parents under the hierarchy `root`; nullopt when none.
template <typename Read>
std::optional<int64_t> smallest_quota(const std::string& root, const std::string& path, Read read) {
  std::optional<int64_t> smallest;
  for (const std::string& dir : cgroup_ancestry(path))
    if (const std::optional<int64_t> q = read(root + (dir == "/" ? "" : dir)); q && (!smallest || *q < *smallest))
      smallest = q;
  return smallest;
}

std::optional<int64_t> cgroup_quota() {
  const CgroupPaths paths = parse_proc_cgroup(read_text("/proc/self/cgroup"));
  std::optional<int64_t> quota;
  auto keep = [&](std::optional<int64_t> q) {
    if (q && (!quota || *q < *quota)) quota = q;
  };
  if (!paths.v2.empty())
    for (const char* root : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"})
      keep(smallest_quota(root, paths.v2, [](const std::string& dir) -> std::optional<int64_t> {
        const std::string text = read_text(dir + "/cpu.max");
        return text.empty() ? std::nullopt : cpu_max_cores(text);
      }));
  if (!paths.v1_cpu.empty())
    for (const char* root : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"})
      keep(smallest_quota(root, paths.v1_cpu, [](const std::string& dir) -> std::optional<int64_t> {
        return cfs_cores(read_text(dir + "/cpu.cfs_quota_us"), read_text(dir + "/cpu.cfs_period_us"));
      }));
  return quota;
}

}  // namespace

int usable_cores(int* local_ranks) {
  int affinity = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) affinity = CPU_COUNT(&set);
  const int online = int(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  if (affinity <= 0) affinity = online;
  const int ranks = local_rank_count(getenv_lookup);
  if (local_ranks != nullptr) *local_ranks = ranks;
  return cores_from(cores_per_rank(affinity, ranks, affinity >= online), cgroup_quota());
}

void bound_openmp_spin(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT") || std::getenv(kSpinDefaultMarker)) return;
  g_reexec_skipped = reexec_blocker(getenv_lookup, openmp_runtime_is_libgomp(), getauxval(AT_BASE));
  if (!g_reexec_skipped.empty()) return;
  if (setenv("GOMP_SPINCOUNT", std::to_string(kBoundedSpinCount).c_str(), 1) != 0 ||
      setenv(kSpinDefaultMarker, "1", 1) != 0) {
    g_reexec_skipped = "setenv failed";
    return;
  }
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
  g_reexec_skipped = "exec failed";
}

ThreadSettings apply_thread_settings(int64_t threads_flag, std::optional<int64_t> workers_flag, bool cuda,
                                     bool has_loader, int default_threads) {
  ThreadInputs in;
  in.cores = usable_cores(&in.local_ranks);
  in.default_threads = default_threads;
  in.cuda = cuda;
  in.has_loader = has_loader;
  in.threads_flag = threads_flag;
  in.workers_flag = workers_flag;
  in.omp_num_threads = parse_omp_num_threads(std::getenv("OMP_NUM_THREADS"));
  ThreadSettings s = choose_thread_settings(in);
  s.wait = wait_policy_description(getenv_lookup, openmp_runtime_is_libgomp(), g_reexec_skipped);
  if (s.set_threads) omp_set_num_threads(s.threads);
  return s;
}

}  // namespace hg::app
