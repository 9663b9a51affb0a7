// omp_region_gaps: an LD_PRELOAD library that measures what an OpenMP wait policy must cover -- the
// serial stretches of the calling thread between one parallel region and the next.
//
//   LD_PRELOAD=build/bench/libomp_region_gaps.so build/bin/train_gpt --steps 30 --eval-every 0 --sample 0
//
// It wraps libgomp's GOMP_parallel (what GCC emits for `#pragma omp parallel [for]`), and reads the
// thread's CPU time (CLOCK_THREAD_CPUTIME_ID) when a region ends and when the next begins: CPU
// time, so the figures hold on a loaded machine, where wall-clock gaps stretch with preemption. At
// exit it prints to stderr the number of regions, the gaps' quantiles, and for a range of spin
// lengths S the two costs of choosing S: wake-ups (gaps longer than S, after which an idle team
// thread has gone to sleep and must be woken: futex + scheduling, tens of microseconds on a VM) and
// spin burn (the sum of min(gap, S): CPU time the team's idle threads spin away, which other work on
// shared cores loses). Run it for N and 2N steps and subtract to get per-step figures
// (docs/threads.md). Regions opened by threads other than the first to open one are not counted.
#include <dlfcn.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

namespace {

using ParallelFn = void (*)(void (*)(void*), void*, unsigned, unsigned);

double thread_cpu_us() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) * 1e6 + double(t.tv_nsec) / 1e3;
}

// Leaked on purpose: the report runs from a destructor, after other statics may be gone.
std::vector<double>& gaps = *new std::vector<double>;
std::atomic<bool> owner_set{false};
std::thread::id owner;
double last_end = -1;
long regions = 0;

}  // namespace

extern "C" void GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags) {
  static const ParallelFn real = reinterpret_cast<ParallelFn>(dlsym(RTLD_NEXT, "GOMP_parallel"));
  bool expected = false;
  if (owner_set.compare_exchange_strong(expected, true)) owner = std::this_thread::get_id();
  const bool counted = std::this_thread::get_id() == owner;
  if (counted) {
    const double start = thread_cpu_us();
    if (last_end >= 0) gaps.push_back(start - last_end);
    ++regions;
  }
  real(fn, data, num_threads, flags);
  if (counted) last_end = thread_cpu_us();
}

__attribute__((destructor)) static void report() {
  std::vector<double> g = gaps;
  std::sort(g.begin(), g.end());
  const auto quantile = [&](double q) {
    return g.empty() ? 0.0 : g[std::min(g.size() - 1, size_t(q * double(g.size())))];
  };
  double total = 0;
  for (double x : g) total += x;
  std::fprintf(stderr,
               "omp_region_gaps: %ld regions | serial gaps (us of thread CPU time): p50 %.1f p90 %.1f p99 %.1f max "
               "%.1f, total %.0f\n",
               regions, quantile(0.5), quantile(0.9), quantile(0.99), quantile(1.0), total);
  for (double spin : {0.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 5000.0}) {
    double burn = 0;
    long wakeups = 0;
    for (double x : g) {
      burn += std::min(x, spin);
      wakeups += x > spin;
    }
    std::fprintf(stderr, "omp_region_gaps: spin %5.0f us: %7ld wake-ups, spin burn %9.0f us\n", spin, wakeups, burn);
  }
}
