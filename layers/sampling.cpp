// Next-token sampling (layers/sampling.h): greedy, temperature, top-k and top-p over one row of logits.
// Strategy: the candidates are ordered once (a partial sort for top-k, a full sort only when top-p needs
// the order), softmax and the cumulative sums run in double, and the draw walks the row in index order.
#include "layers/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/error.h"

namespace hg::nn {

void SamplingOptions::validate() const {
  HG_CHECK(std::isfinite(temperature_) && temperature_ >= 0, "[sampling] temperature ", temperature_,
           " is invalid; expected 0 (greedy) or a finite value > 0");
  HG_CHECK(top_k_ >= 0, "[sampling] top_k ", top_k_, " is invalid; expected 0 (off) or a count > 0");
  HG_CHECK(top_p_ > 0 && top_p_ <= 1, "[sampling] top_p ", top_p_, " is outside (0, 1] (1: off)");
}

namespace {

void check_logits(std::span<const float> logits) {
  HG_CHECK(!logits.empty(), "[sampling] expected a row of logits, got an empty one");
  bool any_finite = false;
  for (size_t i = 0; i < logits.size(); ++i) {
    HG_CHECK(!std::isnan(logits[i]) && logits[i] != INFINITY, "[sampling] logit ", i, " is ", logits[i],
             "; expected a finite value or -inf");
    any_finite = any_finite || std::isfinite(logits[i]);
  }
  HG_CHECK(any_finite, "[sampling] every one of the ", logits.size(), " logits is -inf; nothing can be drawn");
}

}  // namespace

int64_t greedy_token(std::span<const float> logits) {
  check_logits(logits);
  return int64_t(std::max_element(logits.begin(), logits.end()) - logits.begin());  // the first maximum
}

std::vector<double> sampling_distribution(std::span<const float> logits, const SamplingOptions& options) {
  options.validate();
  HG_CHECK(options.temperature() > 0, "[sampling] the distribution needs temperature > 0 (0 is greedy)");
  check_logits(logits);
  const int64_t n = int64_t(logits.size());
  // Candidates by logit descending, ties by index: the order top-k and top-p cut.
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t(0));
  auto before = [&](int64_t a, int64_t b) {
    const float la = logits[size_t(a)], lb = logits[size_t(b)];
    return la > lb || (la == lb && a < b);
  };
  const int64_t kept = options.top_k() > 0 ? std::min(options.top_k(), n) : n;
  if (options.top_p() < 1 || kept < n) {
    std::partial_sort(order.begin(), order.begin() + kept, order.end(), before);
  }
  order.resize(size_t(kept));

  // Softmax of z = logit / t over the kept candidates, computed as exp((logit - max) / t) so that a tiny
  // temperature underflows to 0 instead of overflowing (the maximum itself gives exp(0) = 1).
  const double inv_t = 1.0 / options.temperature();
  double logit_max = -INFINITY;
  for (int64_t i : order) logit_max = std::max(logit_max, double(logits[size_t(i)]));
  std::vector<double> p(size_t(n), 0.0);
  double total = 0;
  for (int64_t i : order) {
    const double d = double(logits[size_t(i)]) - logit_max;
    p[size_t(i)] = d == 0 ? 1.0 : std::exp(d * inv_t);
    total += p[size_t(i)];
  }
  for (int64_t i : order) p[size_t(i)] /= total;

  if (options.top_p() < 1) {
    // The shortest prefix reaching top_p; the rest of the candidates drop out.
    double cumulative = 0;
    size_t keep = 0;
    while (keep < order.size() && (keep == 0 || cumulative < options.top_p())) cumulative += p[size_t(order[keep++])];
    for (size_t r = keep; r < order.size(); ++r) p[size_t(order[r])] = 0.0;
    for (size_t r = 0; r < keep; ++r) p[size_t(order[r])] /= cumulative;
  }
  return p;
}

double TokenSampler::uniform() { return double(engine_() >> 11) * 0x1.0p-53; }

int64_t TokenSampler::next(std::span<const float> logits, const SamplingOptions& options) {
  options.validate();
  if (options.temperature() == 0) return greedy_token(logits);
  const std::vector<double> p = sampling_distribution(logits, options);
  const double total = std::accumulate(p.begin(), p.end(), 0.0);
  const double u = uniform() * total;
  double cumulative = 0;
  int64_t last_nonzero = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) continue;
    cumulative += p[i];
    last_nonzero = int64_t(i);
    if (u < cumulative) return int64_t(i);
  }
  return last_nonzero;  // u within rounding of the total
}

}  // namespace hg::nn
