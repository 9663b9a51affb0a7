#pragma once
// Wall-clock timing shared by the benchmarks: seconds since a start, the median of a set of samples,
// and the best or median time of repeated runs of a callable after warm-up runs. A benchmark that
// times device work syncs the device inside the callable.
#include <algorithm>
#include <chrono>
#include <vector>

namespace hg::bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The upper median of a non-empty set of samples.
inline double median(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

// The fastest of `repeats` timed calls of fn, in seconds, after `warmups` untimed calls.
template <class F>
double best_seconds(int repeats, F&& fn, int warmups = 1) {
  for (int w = 0; w < warmups; ++w) fn();
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    fn();
    best = std::min(best, seconds_since(start));
  }
  return best;
}

// The seconds of each of `repeats` timed calls of fn, after `warmups` untimed calls.
template <class F>
std::vector<double> timed_calls(int repeats, F&& fn, int warmups = 1) {
  for (int w = 0; w < warmups; ++w) fn();
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    fn();
    times.push_back(seconds_since(start));
  }
  return times;
}

// The median of `repeats` timed calls of fn, in seconds, after `warmups` untimed calls.
template <class F>
double median_seconds(int repeats, F&& fn, int warmups = 1) {
  return median(timed_calls(repeats, fn, warmups));
}

}  // namespace hg::bench
