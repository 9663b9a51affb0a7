#pragma once
// Thread defaults for the samples: how many OpenMP threads, how many data-loader workers, and how
// long idle OpenMP threads spin, chosen together so the threads of one run do not fight each other
// or the other work on the machine (docs/threads.md has the measurements and the reasoning).
//
//   int main(int argc, char** argv) {
//     app::bound_openmp_spin(argv);     // first line: may re-exec once (see below)
//     ... parse flags ...
//     const ThreadSettings t = app::apply_thread_settings(threads_flag, workers_flag, cuda);
//     std::printf("... | %s\n", t.describe().c_str());
//
// The rules (choose_thread_settings, a pure function so tests can check every case):
//   - cores: the CPUs this process may run on -- sched_getaffinity (taskset, mpirun's binding, a
//     container's cpuset), capped by a cgroup CPU quota (v2 cpu.max, v1 cpu.cfs_quota_us) -- not
//     the machine's count; ranks of one run that share one unbound mask split it (cores_per_rank).
//   - loader workers: --workers when given (>= 0; its default -1 means "choose"); otherwise 0 on a CPU device (a batch
//   of token ids is
//     built in microseconds, so building it inline costs far less than a thread that takes a core
//     from the step's OpenMP team) and 1 on a CUDA device (the host is idle while the GPU computes,
//     and the worker's batch is copied during the previous step).
//   - OpenMP threads: --threads when given (> 0); else OMP_NUM_THREADS when set (libgomp has read
//     it; we leave it alone); else the program's own default (train_mlp/train_cnn: 1), or the cores
//     minus the loader workers (at least 1): one thread per core, never more runnable threads than cores.
//   - wait policy: OMP_WAIT_POLICY or GOMP_SPINCOUNT when the user set either; else a bounded spin,
//     GOMP_SPINCOUNT=kBoundedSpinCount: an idle OpenMP thread spins that many pause iterations
//     (about 55 us on our Xeon VMs, 18 ns each) and then sleeps in the kernel. That covers 90% of
//     the serial gaps between a train_gpt step's ~185 parallel regions (bench/omp_region_gaps.cpp),
//     so a quiet machine wakes a sleeping thread ~16 times a step, and caps what a spinning thread
//     wastes when another process holds the core it waits for at ~55 us, not libgomp's default
//     300000 iterations (5 ms here: a whole scheduler slice per region, the 10-20x collapse).
//
// Why a re-exec: libgomp reads its environment once, in its ELF constructor, before main() runs
// (and before any constructor of the executable: shared libraries are initialised first); there
// is no API to change the spin afterwards. A function in the executable's .preinit_array does run
// earlier, but libc's own initialisation, which runs after it, resets `environ` to the original
// array, so a setenv() made there is lost (checked with glibc 2.36: docs/threads.md). So
// bound_openmp_spin sets GOMP_SPINCOUNT and execs the same binary once, with argv and the rest of
// the environment intact, before any thread or MPI_Init exists; the pid stays, so mpirun and
// process managers see the same process. It does nothing when the user set a wait policy, after its
// own re-exec (HALFGRAD_SPIN_DEFAULT marks it), or when reexec_blocker names a reason (another
// OpenMP runtime, a start through ld.so, valgrind, HALFGRAD_NO_REEXEC); if the exec fails or is
// skipped the run goes on with libgomp's default and the start-up line says so (and why).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace hg::app {

// Pause iterations an idle OpenMP thread spins before sleeping, unless the user chose a policy.
inline constexpr int64_t kBoundedSpinCount = 3000;
// Set (to "1") beside GOMP_SPINCOUNT by bound_openmp_spin, so the start-up line can tell our
// default from a value the user exported.
inline constexpr const char* kSpinDefaultMarker = "HALFGRAD_SPIN_DEFAULT";

// The paragraph each sample's --help ends with (a test checks it names kBoundedSpinCount).
#define HG_THREADS_HELP                                                                               \
  "\nThreads: --threads 0 takes the usable cores (affinity, cgroup quota) less any loader workers;\n" \
  "idle OpenMP threads (libgomp) spin GOMP_SPINCOUNT=3000 pause iterations, then sleep. --threads,\n" \
  "--workers, OMP_NUM_THREADS, OMP_WAIT_POLICY and GOMP_SPINCOUNT override (docs/threads.md)."

// Reads an environment variable (nullptr when unset): std::getenv, or a map in the tests.
using EnvLookup = std::function<const char*(const char*)>;

// Whether this build's OpenMP runtime is libgomp (decided at compile time from its omp.h): only
// libgomp reads GOMP_SPINCOUNT, so with another runtime (clang's libomp, e.g. the HALFGRAD_FUZZ
// builds) there is no re-exec and the start-up line claims no bounded spin.
bool openmp_runtime_is_libgomp();

struct ThreadInputs {
  int cores = 1;           // usable_cores()
  int local_ranks = 1;     // ranks of this run sharing those cores (cores_per_rank)
  bool cuda = false;       // the model trains on a CUDA device
  bool has_loader = true;  // the program has data-loader workers at all
  // --threads: > 0 that many; 0: OMP_NUM_THREADS, else the cores; < 0 (the flag's "not chosen"
  // default in train_mlp/train_cnn): OMP_NUM_THREADS, else default_threads (0: the cores).
  int64_t threads_flag = 0;
  int default_threads = 0;              // the program's own default (train_mlp, train_cnn: 1)
  std::optional<int64_t> workers_flag;  // --workers when given (>= 0)
  std::optional<int> omp_num_threads;   // OMP_NUM_THREADS's first value, when set to one > 0
};

struct ThreadSettings {
  int cores = 1;
  int local_ranks = 1;
  int threads = 1;
  std::string threads_from;  // "--threads", "OMP_NUM_THREADS", "default" or "cores"
  bool set_threads = false;  // omp_set_num_threads(threads) needed (not when OMP_NUM_THREADS decides)
  int workers = 0;
  std::string workers_from;  // "--workers" or "default"
  bool has_loader = true;
  std::string wait;  // the wait policy in words, from wait_policy_description
  // "2 OpenMP threads (cores) on 2 usable cores | 0 loader workers (default) | spin: bounded, ..."
  std::string describe() const;
};

ThreadSettings choose_thread_settings(const ThreadInputs& in);

// OMP_NUM_THREADS's first value ("4" or "4,2"), when it is an integer > 0.
std::optional<int> parse_omp_num_threads(const char* value);

// ---- cgroup CPU quota (pure parsers; hostile text gives nullopt, never a wrong number) ----
// ceil(quota / period) without overflow; nullopt unless both are > 0.
std::optional<int64_t> quota_cores(int64_t quota, int64_t period);
// A cgroup v2 cpu.max line: "max 100000" (no quota) or "150000 100000" (2 cores); nullopt when no
// quota or anything else (trailing junk, signs, overflow).
std::optional<int64_t> cpu_max_cores(const std::string& text);
// cgroup v1 cpu.cfs_quota_us and cpu.cfs_period_us ("-1": no quota).
std::optional<int64_t> cfs_cores(const std::string& quota, const std::string& period);
// The cgroup paths in /proc/self/cgroup's text: v2's "0::/path" and v1's cpu controller
// ("4:cpu,cpuacct:/path"); empty when absent or not a clean absolute path (no "." or ".." parts).
struct CgroupPaths {
  std::string v2, v1_cpu;
};
CgroupPaths parse_proc_cgroup(const std::string& text);
// `path` and each of its parents up to "/" ("/a/b" -> "/a/b", "/a", "/"): a quota anywhere above
// a cgroup caps it too, so the smallest one counts.
std::vector<std::string> cgroup_ancestry(const std::string& path);
// The CPUs in `affinity_count` capped by the cgroup quota `quota` (cores) when there is one. At least 1.
int cores_from(int affinity_count, std::optional<int64_t> quota);

// ---- ranks of one run on one node ----
// How many ranks of this run share this node, from the launcher: OMPI_COMM_WORLD_LOCAL_SIZE
// (Open MPI), MPI_LOCALNRANKS (MPICH/Hydra), LOCAL_WORLD_SIZE (torchrun), else WORLD_SIZE when
// MASTER_ADDR is a loopback address (halfgrad's RANK/WORLD_SIZE launch, dist/bootstrap.h: every
// rank is on this machine). 1 when none says more.
int local_rank_count(const EnvLookup& env);
// The cores one rank may take: all of `cores` when the launcher bound each rank to its own CPUs
// (the affinity mask is smaller than the machine's), else cores / local_ranks -- ranks that share
// one mask must not each start a thread per core. At least 1.
int cores_per_rank(int cores, int local_ranks, bool mask_is_all_cpus);

// ---- the wait policy ----
// Why bound_openmp_spin must not re-exec this process, or "" when it may: not libgomp, started
// through the dynamic loader (getauxval(AT_BASE) == 0: /proc/self/exe is ld.so, not the program),
// under valgrind (LD_PRELOAD vgpreload_*, VALGRIND_LAUNCHER: the re-executed image would run
// natively), HALFGRAD_NO_REEXEC set.
std::string reexec_blocker(const EnvLookup& env, bool libgomp, unsigned long at_base);
// The wait policy in force, in words: the user's OMP_WAIT_POLICY / GOMP_SPINCOUNT ("(yours)"), our
// bounded default, or libgomp's default when neither is set (with `skipped`: why no re-exec); with
// another OpenMP runtime, that runtime's own policy (GOMP_SPINCOUNT means nothing to it).
std::string wait_policy_description(const EnvLookup& env, bool libgomp = true, const std::string& skipped = "");

// This process's usable cores: sched_getaffinity, capped by the cgroup quota (v2 cpu.max, v1
// cpu.cfs_quota_us, the smallest along the cgroup's path), shared with the local ranks that share
// the mask (cores_per_rank). `local_ranks` gets the local rank count when not null.
int usable_cores(int* local_ranks = nullptr);
// Sets GOMP_SPINCOUNT=kBoundedSpinCount and re-execs this binary with `argv` when the user set no
// wait policy and nothing blocks it (reexec_blocker; see the header comment). Call first thing in
// main, before threads or MPI exist.
void bound_openmp_spin(char** argv);
// choose_thread_settings on this process (usable_cores, the environment), then applies the thread
// count (omp_set_num_threads) unless OMP_NUM_THREADS decides.
ThreadSettings apply_thread_settings(int64_t threads_flag, std::optional<int64_t> workers_flag, bool cuda,
                                     bool has_loader = true, int default_threads = 0);

}  // namespace hg::app
