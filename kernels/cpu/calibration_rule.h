#pragma once
// Internal to kernels/cpu: the one rule by which the CPU kernels pick an implementation from timings
// taken on the running CPU (issue 41): the GEMM paths (gemm_plan.h), the row kernels' tier
// (vector_math.h) and the conversions' tier (convert.h). See docs/cpu_gemm.md, "Calibrated dispatch".
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace hg::kernels::cpu::detail {

// A challenger must be at least this much faster than the incumbent (what the feature flags alone
// would take) to replace it, so that near-equal candidates do not flip from run to run.
constexpr double kSwitchMargin = 0.05;

// The fastest choice, unless the incumbent is within kSwitchMargin of it. Times that are not finite
// and positive never win; among equal times the first listed stays; the incumbent when no time is
// usable. Deterministic given the timings.
template <class Choice>
Choice choose_fastest(const std::vector<std::pair<Choice, double>>& timings, Choice incumbent) {
  const auto usable = [](double s) { return std::isfinite(s) && s > 0.0; };
  double incumbent_seconds = 0.0;
  const std::pair<Choice, double>* fastest = nullptr;
  for (const auto& t : timings) {
    if (!usable(t.second)) continue;
    if (t.first == incumbent) incumbent_seconds = t.second;
    if (fastest == nullptr || t.second < fastest->second) fastest = &t;
  }
  if (fastest == nullptr) return incumbent;
  if (incumbent_seconds > 0.0 && fastest->second > incumbent_seconds * (1.0 - kSwitchMargin)) return incumbent;
  return fastest->first;
}

// Each candidate's best wall time over `rounds` timed rounds, after one untimed round; the
// candidates run interleaved within each round, so they see the same machine state.
inline std::vector<double> interleaved_best_seconds(const std::vector<std::function<void()>>& candidates, int rounds) {
  std::vector<double> best(candidates.size(), std::numeric_limits<double>::infinity());
  for (int round = 0; round <= rounds; ++round)
    for (size_t i = 0; i < candidates.size(); ++i) {
      const auto start = std::chrono::steady_clock::now();
      candidates[i]();
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (round > 0 && seconds < best[i]) best[i] = seconds;
    }
  return best;
}

// " (timed: avx512 0.007 ms, portable 0.182 ms)": the timings as the tiers' descriptions print them.
template <class Choice>
std::string timings_text(const std::vector<std::pair<Choice, double>>& timings, const char* (*name_of)(Choice)) {
  std::string out = " (timed:";
  for (size_t i = 0; i < timings.size(); ++i) {
    char entry[64];
    std::snprintf(entry, sizeof entry, "%s %s %.3f ms", i == 0 ? "" : ",", name_of(timings[i].first),
                  timings[i].second * 1e3);
    out += entry;
  }
  return out + ")";
}

}  // namespace hg::kernels::cpu::detail
