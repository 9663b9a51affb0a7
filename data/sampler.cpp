#include "data/sampler.h"

#include "kernels/error.h"

namespace hg::data {

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> order(size_t(n > 0 ? n : 0));
  for (int64_t i = 0; i < n; ++i) order[size_t(i)] = i;
  uint64_t state = mix64(seed);
  for (int64_t i = n - 1; i > 0; --i) {
    state = mix64(state);
    // Lemire's multiply-shift maps 64 random bits to [0, i] with negligible bias for these sizes.
    const int64_t j = int64_t((unsigned __int128)state * uint64_t(i + 1) >> 64);
    std::swap(order[size_t(i)], order[size_t(j)]);
  }
  return order;
}

DistributedBatchSampler::DistributedBatchSampler(int64_t dataset_size, SamplerOptions options)
    : size_(dataset_size), options_(options) {
  const SamplerOptions& o = options_;
  HG_CHECK(dataset_size > 0, "[DistributedBatchSampler] the dataset is empty; expected at least one example");
  HG_CHECK(o.batch_size() >= 1, "[DistributedBatchSampler] batch_size must be >= 1, got ", o.batch_size());
  HG_CHECK(o.world_size() >= 1, "[DistributedBatchSampler] world_size must be >= 1, got ", o.world_size());
  HG_CHECK(o.rank() >= 0 && o.rank() < o.world_size(), "[DistributedBatchSampler] rank ", o.rank(),
           " is outside [0, world_size = ", o.world_size(), ")");
  per_rank_ = o.drop_last() ? size_ / o.world_size() : (size_ + o.world_size() - 1) / o.world_size();
  HG_CHECK(per_rank_ > 0, "[DistributedBatchSampler] ", size_, " examples over ", o.world_size(),
           " ranks with drop_last leave none per rank; expected at least world_size examples");
  batches_ = o.drop_last() ? per_rank_ / o.batch_size() : (per_rank_ + o.batch_size() - 1) / o.batch_size();
  HG_CHECK(batches_ > 0, "[DistributedBatchSampler] ", per_rank_, " examples per rank make no full batch of ",
           o.batch_size(), " with drop_last; expected batch_size <= examples per rank");
}

std::shared_ptr<const std::vector<int64_t>> DistributedBatchSampler::epoch_order(int64_t epoch) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [e, order] : cache_)
    if (e == epoch) return order;
  std::vector<int64_t> order;
  if (options_.shuffle()) {
    order = seeded_permutation(size_, options_.seed() ^ mix64(uint64_t(epoch) + 0x5eed));
  } else {
    order.resize(size_t(size_));
    for (int64_t i = 0; i < size_; ++i) order[size_t(i)] = i;
  }
  auto shared = std::make_shared<const std::vector<int64_t>>(std::move(order));
  if (cache_.size() >= 2) cache_.erase(cache_.begin());
  cache_.emplace_back(epoch, shared);
  return shared;
}

std::vector<int64_t> DistributedBatchSampler::rank_indices(int64_t epoch) const {
  const auto order = epoch_order(epoch);
  std::vector<int64_t> mine(static_cast<size_t>(per_rank_));
  // Position p of the padded (or truncated) order is order[p % N]: wrap-around padding.
  for (int64_t k = 0; k < per_rank_; ++k)
    mine[size_t(k)] = (*order)[size_t((options_.rank() + k * options_.world_size()) % size_)];
  return mine;
}

std::vector<int64_t> DistributedBatchSampler::batch(int64_t epoch, int64_t batch) const {
  HG_CHECK(epoch >= 0, "[DistributedBatchSampler] epoch must be >= 0, got ", epoch);
  HG_CHECK(batch >= 0 && batch < batches_, "[DistributedBatchSampler] batch ", batch, " is outside [0, ", batches_,
           ") of an epoch");
  const auto order = epoch_order(epoch);
  const int64_t first = batch * options_.batch_size();
  const int64_t count = std::min(options_.batch_size(), per_rank_ - first);
  std::vector<int64_t> indices(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k)
    indices[size_t(k)] = (*order)[size_t((options_.rank() + (first + k) * options_.world_size()) % size_)];
  return indices;
}

}  // namespace hg::data
