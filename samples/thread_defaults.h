#pragma once
// Thread defaults for the samples: how many OpenMP threads, how many data-loader workers, and how
// long idle OpenMP threads spin, chosen together so the threads of one run do not fight each other
// or the other work on the machine (docs/threads.md has the measurements and the reasoning).
//
//   int main(int argc, char** argv) {
//     samples::bound_openmp_spin(argv);     // first line: may re-exec once (see below)
//     ... parse flags ...
//     const ThreadSettings t = samples::apply_thread_settings(threads_flag, workers_flag, cuda);
//     std::printf("... | %s\n", t.describe().c_str());
//
// The rules (choose_thread_settings, a pure function so tests can check every case):
//   - cores: the CPUs this process may run on -- sched_getaffinity (taskset, mpirun's binding, a
//     container's cpuset), capped by a cgroup v2 CPU quota (cpu.max) -- not the machine's count.
//   - loader workers: --workers when given; otherwise 0 on a CPU device (a batch of token ids is
//     built in microseconds, so building it inline costs far less than a thread that takes a core
//     from the step's OpenMP team) and 1 on a CUDA device (the host is idle while the GPU computes,
//     and the worker's batch is copied during the previous step).
//   - OpenMP threads: --threads when given (> 0); else OMP_NUM_THREADS when set (libgomp has read
//     it; we leave it alone); else the cores minus the loader workers (at least 1): one thread per
//     core, never more runnable threads than cores.
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
// process managers see the same process. It does nothing when the user set a wait policy, when
// HALFGRAD_NO_REEXEC is set, or after its own re-exec (HALFGRAD_SPIN_DEFAULT marks it); if the
// exec fails the run goes on with libgomp's default and the start-up line says so.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace hg::samples {

// Pause iterations an idle OpenMP thread spins before sleeping, unless the user chose a policy.
inline constexpr int64_t kBoundedSpinCount = 3000;
// Set (to "1") beside GOMP_SPINCOUNT by bound_openmp_spin, so the start-up line can tell our
// default from a value the user exported.
inline constexpr const char* kSpinDefaultMarker = "HALFGRAD_SPIN_DEFAULT";

// The paragraph each sample's --help ends with (a test checks it names kBoundedSpinCount).
#define HG_THREADS_HELP                                                                                \
  "\nThreads: --threads 0 takes the usable cores (affinity, cgroup quota) less any loader workers;\n"  \
  "idle OpenMP threads spin GOMP_SPINCOUNT=3000 pause iterations, then sleep. --threads, --workers,\n" \
  "OMP_NUM_THREADS, OMP_WAIT_POLICY and GOMP_SPINCOUNT override (docs/threads.md)."

// Reads an environment variable (nullptr when unset): std::getenv, or a map in the tests.
using EnvLookup = std::function<const char*(const char*)>;

struct ThreadInputs {
  int cores = 1;                        // usable_cores()
  bool cuda = false;                    // the model trains on a CUDA device
  bool has_loader = true;               // the program has data-loader workers at all
  int64_t threads_flag = 0;             // --threads (0: choose)
  std::optional<int64_t> workers_flag;  // --workers when given
  std::optional<int> omp_num_threads;   // OMP_NUM_THREADS's first value, when set to one > 0
};

struct ThreadSettings {
  int cores = 1;
  int threads = 1;
  std::string threads_from;  // "--threads", "OMP_NUM_THREADS" or "cores" (the default)
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
// The CPUs in `affinity_count` capped by a cgroup v2 cpu.max line ("max 100000" or "150000 100000":
// ceil(quota / period)); `cpu_max` empty when there is no such file. At least 1.
int cores_from(int affinity_count, const std::string& cpu_max);
// The wait policy in force, in words: the user's OMP_WAIT_POLICY / GOMP_SPINCOUNT ("(yours)"), our
// bounded default, or libgomp's default when neither is set (the re-exec was skipped or failed).
std::string wait_policy_description(const EnvLookup& env);

// This process's usable cores: sched_getaffinity, capped by /sys/fs/cgroup/cpu.max.
int usable_cores();
// Sets GOMP_SPINCOUNT=kBoundedSpinCount and re-execs this binary with `argv` when the user set no
// wait policy (see the header comment). Call first thing in main, before threads or MPI exist.
void bound_openmp_spin(char** argv);
// choose_thread_settings on this process (usable_cores, the environment), then applies the thread
// count (omp_set_num_threads) unless OMP_NUM_THREADS decides.
ThreadSettings apply_thread_settings(int64_t threads_flag, std::optional<int64_t> workers_flag, bool cuda,
                                     bool has_loader = true);

}  // namespace hg::samples
