// Rank-sharded loading (data/data_loader.h, data/sampler.h, data/curriculum.h), run by ctest as a world
// of 1, under mpirun -np 2 and -np 4, and over TCP: each rank's DataLoader, built with rank(r, N) and
// batch B / N, delivers exactly rows r, r + N, r + 2N, ... of the global batch a single process's
// loader of batch B delivers -- the batch train_gpt used to load whole on every rank and then narrow.
// Checked in order and shuffled, across epoch boundaries, with worker threads, and through the
// easy-to-hard curriculum sampler; the rank's rows also come from the global batch's indices.
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <vector>

#include "data/curriculum.h"
#include "data/data_loader.h"
#include "dist/communicator.h"
#include "support/dist_world.h"

using namespace hg;
using hg::test::comm;

namespace {

// Example i: "x" i64 [3] = {i, 7i + 1, i * i}; 103 examples (no multiple of any batch here).
struct Numbers final : data::Dataset {
  int64_t size() const override { return 103; }
  std::vector<data::Field> fields() const override { return {{"x", DType::i64, {3}}}; }
  void get(int64_t i, const std::vector<void*>& out) const override {
    int64_t* x = static_cast<int64_t*>(out[0]);
    x[0] = i, x[1] = 7 * i + 1, x[2] = i * i;
  }
};

constexpr int64_t kGlobalBatch = 12;  // divides among 1, 2, 3, 4 ranks

// Rows r, r + N, ... of a global batch.
std::vector<int64_t> rows_of(const std::vector<int64_t>& global, int rank, int world) {
  std::vector<int64_t> out;
  for (size_t i = size_t(rank); i < global.size(); i += size_t(world)) out.push_back(global[i]);
  return out;
}

void check_rank_batches(data::DataLoader& global, data::DataLoader& mine, int batches) {
  const int rank = comm().rank(), world = comm().world_size();
  CHECK(mine.batches_per_epoch() == global.batches_per_epoch());
  for (int b = 0; b < batches; ++b) {
    INFO("batch ", b, " of rank ", rank, " of ", world);
    const data::Batch g = global.next(), m = mine.next();
    CHECK(m.epoch == g.epoch);
    CHECK(m.index_in_epoch == g.index_in_epoch);
    const std::vector<int64_t> expected_rows = rows_of(g.indices, rank, world);
    CHECK(m.indices == expected_rows);
    const std::vector<int64_t> gx = g[0].to_vector<int64_t>(), mx = m[0].to_vector<int64_t>();
    std::vector<int64_t> expected_values;
    for (size_t row = size_t(rank); row < g.indices.size(); row += size_t(world))
      expected_values.insert(expected_values.end(), gx.begin() + 3 * row, gx.begin() + 3 * row + 3);
    CHECK(mx == expected_values);
  }
}

}  // namespace

TEST_CASE("each rank's loader delivers its rows of every global batch") {
  const auto dataset = std::make_shared<Numbers>();
  const int rank = comm().rank(), world = comm().world_size();
  for (bool shuffle : {false, true})
    for (int workers : {0, 2}) {
      INFO("shuffle ", shuffle, ", workers ", workers);
      const auto options = data::DataLoaderOptions().seed(5).shuffle(shuffle).drop_last(true).workers(workers);
      data::DataLoader global(dataset, data::DataLoaderOptions(options).batch_size(kGlobalBatch));
      data::DataLoader mine(dataset,
                            data::DataLoaderOptions(options).batch_size(kGlobalBatch / world).rank(rank, world));
      check_rank_batches(global, mine, 20);  // 8 batches per epoch: two epoch boundaries
    }
}

TEST_CASE("each rank's easy-to-hard curriculum draws its rows of the global batch") {
  const auto dataset = std::make_shared<Numbers>();
  const int rank = comm().rank(), world = comm().world_size();
  std::vector<int32_t> difficulty;
  for (int64_t i = 0; i < dataset->size(); ++i) difficulty.push_back(int32_t(i % 3));
  const auto options = data::DataLoaderOptions().seed(9).shuffle(true).drop_last(true);
  const auto global_options = data::DataLoaderOptions(options).batch_size(kGlobalBatch);
  const auto my_options = data::DataLoaderOptions(options).batch_size(kGlobalBatch / world).rank(rank, world);
  auto curriculum = [&](const data::DataLoaderOptions& o, int r, int n) {
    auto base = std::make_shared<data::DistributedBatchSampler>(dataset->size(), o.sampler());
    return std::make_shared<data::DifficultyCurriculumSampler>(base, difficulty, /*steps=*/10, o.sampler().batch_size(),
                                                               77, r, n);
  };
  data::DataLoader global(dataset, curriculum(global_options, 0, 1), global_options);
  data::DataLoader mine(dataset, curriculum(my_options, rank, world), my_options);
  check_rank_batches(global, mine, 14);  // 10 curriculum batches, then the base sampler's
}

TEST_CASE("a curriculum sampler refuses a rank outside its world") {
  const auto base = std::make_shared<data::DistributedBatchSampler>(10, data::SamplerOptions());
  CHECK_THROWS_WITH_AS(data::DifficultyCurriculumSampler(base, std::vector<int32_t>(10, 0), 5, 2, 1, 2, 2),
                       doctest::Contains("expected 0 <= rank < world_size"), hg::Error);
}
