// DistributedSampler (dist/distributed_sampler.h).
#include "dist/distributed_sampler.h"

#include <numeric>
#include <random>

#include "kernels/error.h"

namespace hg::dist {

DistributedSampler::DistributedSampler(int64_t dataset_size, int world_size, int rank, bool shuffle, uint64_t seed,
                                       bool drop_last)
    : size_(dataset_size), world_(world_size), rank_(rank), shuffle_(shuffle), seed_(seed), drop_last_(drop_last) {
  HG_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "[DistributedSampler] rank ", rank,
           " is not in a world of ", world_size);
  HG_CHECK(dataset_size >= 0 && (!drop_last || dataset_size >= world_size), "[DistributedSampler] a dataset of ",
           dataset_size, " samples cannot give every one of ", world_size, " ranks a sample",
           drop_last ? " with drop_last" : "");
  num_samples_ = drop_last ? dataset_size / world_size : (dataset_size + world_size - 1) / world_size;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order(size_t(size_), 0);
  std::iota(order.begin(), order.end(), int64_t(0));
  if (shuffle_) {
    // Fisher-Yates with a 64-bit Mersenne Twister: the same permutation on every rank and platform.
    std::mt19937_64 rng(seed_ + uint64_t(epoch_));
    for (int64_t i = size_ - 1; i > 0; --i) std::swap(order[size_t(i)], order[size_t(rng() % uint64_t(i + 1))]);
  }
  const int64_t total = num_samples_ * world_;
  for (int64_t i = size_; i < total; ++i) order.push_back(order[size_t((i - size_) % std::max<int64_t>(size_, 1))]);
  order.resize(size_t(total));
  std::vector<int64_t> mine;
  mine.reserve(size_t(num_samples_));
  for (int64_t i = rank_; i < total; i += world_) mine.push_back(order[size_t(i)]);
  return mine;
}

}  // namespace hg::dist
