#include "data/curriculum.h"

#include <algorithm>
#include <numeric>

#include "kernels/error.h"

namespace hg::data {

SequenceLengthWarmup::SequenceLengthWarmup(int64_t start, int64_t full, int64_t steps, int64_t multiple)
    : start_(start), full_(full), steps_(steps), multiple_(multiple) {
  HG_CHECK(start >= 1 && start <= full, "[SequenceLengthWarmup] start length ", start, " must be in [1, full length ",
           full, "]");
  HG_CHECK(steps >= 0, "[SequenceLengthWarmup] steps must be >= 0, got ", steps);
  HG_CHECK(multiple >= 1, "[SequenceLengthWarmup] multiple must be >= 1, got ", multiple);
}

int64_t SequenceLengthWarmup::length(int64_t step) const {
  if (step >= steps_) return full_;
  const int64_t linear = start_ + (full_ - start_) * step / steps_;
  return std::max(start_, linear / multiple_ * multiple_);
}

DifficultyCurriculumSampler::DifficultyCurriculumSampler(std::shared_ptr<const BatchSampler> base,
                                                         const std::vector<int32_t>& difficulty, int64_t steps,
                                                         int64_t batch_size, uint64_t seed, int64_t rank,
                                                         int64_t world_size)
    : base_(std::move(base)), steps_(steps), batch_size_(batch_size), rank_(rank), world_(world_size), seed_(seed) {
  HG_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "[DifficultyCurriculumSampler] rank ", rank,
           " of world size ", world_size, "; expected 0 <= rank < world_size");
  HG_CHECK(base_ != nullptr, "[DifficultyCurriculumSampler] no base sampler given");
  HG_CHECK(!difficulty.empty(), "[DifficultyCurriculumSampler] no difficulty scores given; expected one per example");
  HG_CHECK(steps >= 0, "[DifficultyCurriculumSampler] steps must be >= 0, got ", steps);
  HG_CHECK(batch_size >= 1, "[DifficultyCurriculumSampler] batch_size must be >= 1, got ", batch_size);
  by_difficulty_.resize(difficulty.size());
  std::iota(by_difficulty_.begin(), by_difficulty_.end(), int64_t(0));
  std::stable_sort(by_difficulty_.begin(), by_difficulty_.end(),
                   [&](int64_t a, int64_t b) { return difficulty[size_t(a)] < difficulty[size_t(b)]; });
  for (size_t k = 0; k < by_difficulty_.size(); ++k) {
    const int32_t level = difficulty[size_t(by_difficulty_[k])];
    if (levels_.empty() || levels_.back() != level) {
      levels_.push_back(level);
      level_end_.push_back(0);
    }
    level_end_.back() = int64_t(k) + 1;
  }
}

int32_t DifficultyCurriculumSampler::threshold(int64_t g) const {
  if (g >= steps_) return levels_.back();
  const int32_t lo = levels_.front(), hi = levels_.back();
  const int64_t level = lo + (int64_t(hi - lo) + 1) * g / steps_;
  return int32_t(std::min<int64_t>(level, hi));
}

std::vector<int64_t> DifficultyCurriculumSampler::batch(int64_t epoch, int64_t batch) const {
  const int64_t g = epoch * batches_per_epoch() + batch;
  if (g >= steps_) return base_->batch(epoch, batch);
  const int32_t limit = threshold(g);
  // Examples with difficulty <= limit are by_difficulty_[0, pool).
  const size_t k = size_t(std::upper_bound(levels_.begin(), levels_.end(), limit) - levels_.begin());
  const int64_t pool = k == 0 ? level_end_.front() : level_end_[k - 1];
  // The global batch (world x batch_size draws, the same stream on every rank); this rank takes
  // positions rank, rank + world, ... -- the rows the DistributedBatchSampler gives it.
  std::vector<int64_t> indices;
  indices.reserve(size_t(batch_size_));
  uint64_t state = mix64(seed_ ^ mix64(uint64_t(g) * 0x100000001b3ull));
  for (int64_t position = 0; position < batch_size_ * world_; ++position) {
    state = mix64(state);
    if (position % world_ == rank_)
      indices.push_back(by_difficulty_[size_t((unsigned __int128)state * uint64_t(pool) >> 64)]);
  }
  return indices;
}

}  // namespace hg::data
