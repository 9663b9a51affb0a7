#pragma once
// Curriculum learning: easy examples first, the full task later.
//
// SequenceLengthWarmup (Li et al., "The Stability-Efficiency Dilemma", as in DeepSpeed's
// curriculum_seqlen): step s trains on the first L(s) positions of each sequence,
//   L(s) = start + (full - start) * s / steps, rounded down to a multiple of `multiple` (never
//   below start), and full from step `steps` on.
// The training loop narrows ids/targets to L(s); attention is causal, so a prefix is a valid
// shorter sequence.
//
// DifficultyCurriculumSampler (easy-to-hard ordering by a difficulty score per example): for global
// batch g = epoch * batches_per_epoch + batch < steps, the batch is drawn (uniformly, with
// replacement, seeded by (seed, g)) from the examples whose difficulty is at most
//   threshold(g) = min_level + floor((max_level - min_level + 1) * g / steps)   (capped at max_level)
// — the easiest level first, each harder level unlocked after an equal share of the steps. From
// batch `steps` on it hands out the base sampler's batches unchanged. Like every sampler it is a
// pure function of (epoch, batch), so workers, resumption and determinism work as usual. With
// data parallelism (rank r of N, batch_size rows per rank) the N x batch_size draws of the global
// batch are the same on every rank and rank r takes positions r, r + N, ...: the rows a
// DistributedBatchSampler (data/sampler.h) would give it of the same global batch.
#include <cstdint>
#include <memory>
#include <vector>

#include "data/sampler.h"

namespace hg::data {

class SequenceLengthWarmup {
 public:
  SequenceLengthWarmup(int64_t start, int64_t full, int64_t steps, int64_t multiple = 1);
  // Sequence length for 0-based step `step`.
  int64_t length(int64_t step) const;

 private:
  int64_t start_, full_, steps_, multiple_;
};

class DifficultyCurriculumSampler final : public BatchSampler {
 public:
  // difficulty[i] of example i (small = easy); `steps` batches of curriculum, then `base`.
  DifficultyCurriculumSampler(std::shared_ptr<const BatchSampler> base, const std::vector<int32_t>& difficulty,
                              int64_t steps, int64_t batch_size, uint64_t seed, int64_t rank = 0,
                              int64_t world_size = 1);
  int64_t batches_per_epoch() const override { return base_->batches_per_epoch(); }
  std::vector<int64_t> batch(int64_t epoch, int64_t batch) const override;
  // The difficulty threshold of global batch g (max level once the curriculum is over).
  int32_t threshold(int64_t g) const;

 private:
  std::shared_ptr<const BatchSampler> base_;
  std::vector<int64_t> by_difficulty_;  // example indices sorted by difficulty (stable)
  std::vector<int32_t> levels_;         // the distinct difficulty levels, ascending
  std::vector<int64_t> level_end_;      // level_end_[k]: examples with difficulty <= levels_[k]
  int64_t steps_, batch_size_, rank_, world_;
  uint64_t seed_;
};

}  // namespace hg::data
