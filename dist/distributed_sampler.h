#pragma once
// DistributedSampler: which samples of a dataset rank r trains on in an epoch, with the semantics of
// torch.utils.data.DistributedSampler. The epoch's order is a permutation of 0..size-1 drawn from
// (seed + epoch) — the same on every rank — or 0..size-1 without shuffle; it is padded by repeating
// its first indices to a multiple of the world size (or cut down to one, with drop_last), and rank r
// takes positions r, r + world, r + 2 world, ... Every rank gets the same number of samples, and
// together the ranks see each sample of the epoch once (up to the padding).
#include <cstdint>
#include <vector>

namespace hg::dist {

class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, int world_size, int rank, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false);
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t num_samples() const { return num_samples_; }
  std::vector<int64_t> indices() const;

 private:
  int64_t size_;
  int world_;
  int rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t epoch_ = 0;
  int64_t num_samples_;
};

}  // namespace hg::dist
