#pragma once
// Drawing the next token from a row of logits (on the host, from the copied last row, so a seed gives
// the same draws whichever device computed the logits).
//
//   temperature 0:  greedy, argmax (the first index among equal maxima); nothing is drawn.
//   temperature t > 0:
//     z_i = logit_i / t, candidates sorted by z descending (ties: lower index first);
//     top-k (k > 0): keep the first k candidates;
//     p_i = softmax(z) over the kept candidates (in double);
//     top-p (p < 1, nucleus): keep the shortest prefix of the sorted candidates whose probability sums
//       to >= p (at least one), renormalised;
//     draw u uniform in [0, 1) and return the first index i whose cumulative probability, summed in
//     index order, exceeds u times the total.
// The uniform numbers come from std::mt19937_64 seeded with the seed, turned into doubles by taking
// the top 53 bits (u = (x >> 11) 2^-53), which the C++ standard fixes bit for bit: a seed gives the same
// draws on every platform (std::uniform_real_distribution would not).
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "kernels/options.h"

namespace hg::nn {

// SamplingOptions().temperature(0.8).top_k(40).top_p(0.95)
struct SamplingOptions {
  HG_OPTION(SamplingOptions, double, temperature, 1.0);  // 0: greedy; else > 0
  HG_OPTION(SamplingOptions, int64_t, top_k, 0);          // 0: every token
  HG_OPTION(SamplingOptions, double, top_p, 1.0);         // in (0, 1]; 1: every token

 public:
  // Throws naming the option out of range (temperature < 0 or not finite, top_k < 0, top_p outside (0, 1]).
  void validate() const;
};

// The index of the largest logit (the first among equal ones). NaN logits are an hg::Error.
int64_t greedy_token(std::span<const float> logits);

// The probabilities the sampler draws from (zero outside top-k / top-p), for temperature > 0. Logits
// may be -inf (never drawn); NaN or +inf is an hg::Error naming the index, as is an empty row or one
// without a finite logit.
std::vector<double> sampling_distribution(std::span<const float> logits, const SamplingOptions& options);

class TokenSampler {
 public:
  explicit TokenSampler(uint64_t seed) : engine_(seed) {}
  // The next token for `logits` (one row over the vocabulary) under `options` (validated).
  int64_t next(std::span<const float> logits, const SamplingOptions& options);
  // One uniform double in [0, 1) from the generator (53 random bits).
  double uniform();

 private:
  std::mt19937_64 engine_;
};

}  // namespace hg::nn
