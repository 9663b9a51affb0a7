#pragma once
// Batch samplers: which example indices form batch b of epoch e.
//
// A sampler is a pure function of (epoch, batch): DataLoader workers ask for any batch in any order
// and get the same answer, so the data order depends only on the seed, never on the number of
// workers or on where a run was resumed.
//
// DistributedBatchSampler has torch.utils.data.DistributedSampler's semantics followed by a
// BatchSampler:
//   1. indices 0..N-1, shuffled by a permutation seeded with (seed, epoch) when shuffle is on;
//   2. drop_last off: padded by wrap-around (indices[0], indices[1], ...) to the next multiple of
//      world_size, so every rank gets ceil(N / world) examples; drop_last on: truncated to
//      floor(N / world) * world_size;
//   3. rank r takes positions r, r + world, r + 2 world, ...;
//   4. its examples are cut into batches of batch_size; the last, shorter batch is kept unless
//      drop_last (one flag for both steps, as a training loop wants).
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels/options.h"

namespace hg::data {

class BatchSampler {
 public:
  virtual ~BatchSampler() = default;
  // Batches in every epoch (the same for all epochs and all ranks).
  virtual int64_t batches_per_epoch() const = 0;
  // The example indices of batch `batch` (0 <= batch < batches_per_epoch()) of `epoch`. Thread-safe.
  virtual std::vector<int64_t> batch(int64_t epoch, int64_t batch) const = 0;
};

// Validated by DistributedBatchSampler's constructor.
//   SamplerOptions().batch_size(32).seed(7).rank(1).world_size(4)
struct SamplerOptions {
  HG_OPTION(SamplerOptions, int64_t, batch_size, 1);
  HG_OPTION(SamplerOptions, bool, shuffle, true);
  HG_OPTION(SamplerOptions, bool, drop_last, false);
  HG_OPTION(SamplerOptions, uint64_t, seed, 0);
  HG_OPTION(SamplerOptions, int64_t, rank, 0);
  HG_OPTION(SamplerOptions, int64_t, world_size, 1);
};

class DistributedBatchSampler final : public BatchSampler {
 public:
  DistributedBatchSampler(int64_t dataset_size, SamplerOptions options);
  int64_t batches_per_epoch() const override { return batches_; }
  std::vector<int64_t> batch(int64_t epoch, int64_t batch) const override;
  // This rank's examples of `epoch`, in order (what the batches cut up).
  std::vector<int64_t> rank_indices(int64_t epoch) const;
  int64_t samples_per_rank() const { return per_rank_; }
  const SamplerOptions& options() const { return options_; }

 private:
  std::shared_ptr<const std::vector<int64_t>> epoch_order(int64_t epoch) const;
  int64_t size_, per_rank_, batches_;
  SamplerOptions options_;
  mutable std::mutex mutex_;
  // The two most recent epochs' orders (workers straddle an epoch boundary), shared with readers.
  mutable std::vector<std::pair<int64_t, std::shared_ptr<const std::vector<int64_t>>>> cache_;
};

// A permutation of 0..n-1 by Fisher-Yates over a splitmix64 stream seeded with `seed`: the same on
// every platform and standard library (std::shuffle's algorithm is implementation-defined).
std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed);

// splitmix64: the integer hash the data pipeline derives its seeds from.
uint64_t mix64(uint64_t x);

}  // namespace hg::data
