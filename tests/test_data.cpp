// The data pipeline (data/): DistributedSampler semantics against a transcription of PyTorch's
// algorithm, batches independent of the number of workers, resumption mid-epoch, the bounded
// prefetch queue, worker errors and shutdown, token shards (round trip and every malformed file),
// and the curriculum samplers.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "data/curriculum.h"
#include "data/data_loader.h"
#include "data/token_shard.h"
#include "engine/safetensors.h"
#include "support/check_error.h"

using namespace hg;
using namespace hg::data;

namespace {

// Example i: "x" [3] i64 = {i, 7 i + 1, hash(i)}, "y" [] f32 = i / 2. Optionally slow, counting,
// or throwing for one index.
class NumberDataset final : public Dataset {
 public:
  explicit NumberDataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  std::vector<Field> fields() const override { return {{"x", i64, {3}}, {"y", f32, {}}}; }
  void get(int64_t index, const std::vector<void*>& out) const override {
    calls.fetch_add(1);
    if (delay_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    HG_CHECK(index != throw_at, "NumberDataset: example ", index, " is corrupt");
    int64_t* x = static_cast<int64_t*>(out[0]);
    x[0] = index;
    x[1] = 7 * index + 1;
    x[2] = int64_t(mix64(uint64_t(index)) >> 1);
    *static_cast<float*>(out[1]) = float(index) / 2;
  }
  int64_t delay_us = 0, throw_at = -1;
  mutable std::atomic<int64_t> calls{0};

 private:
  int64_t n_;
};

// PyTorch's DistributedSampler.__iter__ + BatchSampler, transcribed, over a given epoch order.
std::vector<std::vector<int64_t>> torch_batches(std::vector<int64_t> indices, int64_t world, int64_t rank,
                                                int64_t batch, bool drop_last) {
  const int64_t n = int64_t(indices.size());
  const int64_t num_samples = drop_last && n % world != 0 ? (n - world + world - 1) / world  // ceil((n - w) / w)
                                                          : (n + world - 1) / world;
  const int64_t total = num_samples * world;
  if (!drop_last) {
    const int64_t padding = total - n;
    if (padding <= n) {
      indices.insert(indices.end(), indices.begin(), indices.begin() + padding);
    } else {
      std::vector<int64_t> base = indices;
      while (int64_t(indices.size()) < total) indices.insert(indices.end(), base.begin(), base.end());
      indices.resize(size_t(total));
    }
  } else {
    indices.resize(size_t(total));
  }
  std::vector<int64_t> mine;
  for (int64_t p = rank; p < total; p += world) mine.push_back(indices[size_t(p)]);
  std::vector<std::vector<int64_t>> batches;
  for (size_t s = 0; s < mine.size(); s += size_t(batch)) {
    std::vector<int64_t> b(mine.begin() + long(s), mine.begin() + long(std::min(mine.size(), s + size_t(batch))));
    if (drop_last && int64_t(b.size()) < batch) break;
    batches.push_back(b);
  }
  return batches;
}

std::vector<std::vector<int64_t>> all_batches(const BatchSampler& sampler, int64_t epoch) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t b = 0; b < sampler.batches_per_epoch(); ++b) out.push_back(sampler.batch(epoch, b));
  return out;
}

// Every byte of a batch, for exact comparisons.
std::vector<int64_t> flatten(const Batch& batch) {
  std::vector<int64_t> out = batch.tensors[0].to(kCPU).to_vector<int64_t>();
  for (float y : batch.tensors[1].to(kCPU).to_vector<float>()) out.push_back(int64_t(y * 2));
  out.push_back(batch.epoch);
  out.push_back(batch.index_in_epoch);
  return out;
}

struct TempDir {
  std::string path;
  TempDir() {
    char pattern[] = "/tmp/hg_data_XXXXXX";
    REQUIRE(::mkdtemp(pattern) != nullptr);
    path = pattern;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name) const { return path + "/" + name; }
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_bytes(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

}  // namespace

TEST_CASE("read_examples gives a range as tensors, and DatasetPrefix the first examples") {
  const auto set = std::make_shared<NumberDataset>(50);
  const std::vector<Tensor> range = read_examples(*set, 17, 5);
  REQUIRE(range.size() == 2);
  CHECK(range[0].shape() == Shape{5, 3});
  CHECK(range[1].shape() == Shape{5});
  const std::vector<int64_t> x = range[0].to_vector<int64_t>();
  const std::vector<float> y = range[1].to_vector<float>();
  for (int64_t i = 0; i < 5; ++i) {
    CHECK(x[size_t(3 * i)] == 17 + i);
    CHECK(x[size_t(3 * i + 1)] == 7 * (17 + i) + 1);
    CHECK(y[size_t(i)] == float(17 + i) / 2);
  }
  CHECK(read_examples(*set, 50, 0)[0].shape() == Shape{0, 3});
  CHECK_ERROR(read_examples(*set, 48, 3), "[read_examples] examples [48, 51) of a dataset of 50");
  const DatasetPrefix prefix(set, 10);
  CHECK(prefix.size() == 10);
  CHECK(read_examples(prefix, 0, 10)[0].to_vector<int64_t>() == read_examples(*set, 0, 10)[0].to_vector<int64_t>());
  CHECK_ERROR(read_examples(prefix, 5, 6), "examples [5, 11) of a dataset of 10");
  CHECK_ERROR(DatasetPrefix(set, 51), "the first 51 of 50 examples");
}

TEST_CASE("the distributed sampler equals PyTorch's DistributedSampler and BatchSampler") {
  for (int64_t n : {1, 7, 10, 11, 12, 23}) {
    for (int64_t world : {1, 2, 3, 4, 5}) {
      for (int64_t batch : {1, 2, 3, 5}) {
        for (bool drop_last : {false, true}) {
          if (drop_last && n < world) continue;
          for (int64_t rank = 0; rank < world; ++rank) {
            const auto o =
                SamplerOptions().batch_size(batch).drop_last(drop_last).seed(42).rank(rank).world_size(world);
            const int64_t per_rank = drop_last ? n / world : (n + world - 1) / world;
            if (drop_last && per_rank < batch) {
              CHECK_ERROR(DistributedBatchSampler(n, o), "no full batch");
              continue;
            }
            DistributedBatchSampler sampler(n, o);
            for (int64_t epoch : {0, 3}) {
              const std::vector<int64_t> order = seeded_permutation(n, 42 ^ mix64(uint64_t(epoch) + 0x5eed));
              INFO("n ", n, " world ", world, " batch ", batch, " drop_last ", drop_last, " rank ", rank);
              CHECK(all_batches(sampler, epoch) == torch_batches(order, world, rank, batch, drop_last));
            }
          }
        }
      }
    }
  }
}

TEST_CASE("every index appears exactly once per epoch over all ranks and padding wraps around") {
  const int64_t n = 23;
  for (int64_t world : {1, 2, 4, 5}) {
    std::vector<int64_t> seen(size_t(n), 0);
    std::vector<int64_t> per_rank;
    for (int64_t rank = 0; rank < world; ++rank) {
      const auto o = SamplerOptions().batch_size(4).seed(9).rank(rank).world_size(world);
      DistributedBatchSampler sampler(n, o);
      int64_t count = 0;
      for (const auto& b : all_batches(sampler, 1))
        for (int64_t i : b) ++seen[size_t(i)], ++count;
      per_rank.push_back(count);
    }
    // Same count on every rank; the padding repeats the first (world * ceil(n / world) - n) indices.
    CHECK(std::all_of(per_rank.begin(), per_rank.end(), [&](int64_t c) { return c == (n + world - 1) / world; }));
    const int64_t padding = world * ((n + world - 1) / world) - n;
    const std::vector<int64_t> order = seeded_permutation(n, 9 ^ mix64(1 + 0x5eed));
    for (int64_t k = 0; k < n; ++k) CHECK(seen[size_t(order[size_t(k)])] == (k < padding ? 2 : 1));
  }
  // drop_last: no index twice, the remainder n % world dropped.
  std::set<int64_t> unique;
  int64_t total = 0;
  for (int64_t rank = 0; rank < 4; ++rank) {
    const auto o = SamplerOptions().batch_size(1).drop_last(true).seed(9).rank(rank).world_size(4);
    for (const auto& b : all_batches(DistributedBatchSampler(n, o), 0)) {
      unique.insert(b.begin(), b.end());
      total += int64_t(b.size());
    }
  }
  CHECK(total == 20);
  CHECK(unique.size() == 20);
}

TEST_CASE("shuffling reshuffles every epoch and follows the seed") {
  auto o = SamplerOptions().batch_size(100).seed(5);
  DistributedBatchSampler a(100, o), b(100, o);
  CHECK(a.batch(0, 0) == b.batch(0, 0));
  CHECK(a.batch(0, 0) != a.batch(1, 0));
  std::vector<int64_t> sorted = a.batch(1, 0);
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 100; ++i) CHECK(sorted[size_t(i)] == i);
  o.seed(6);
  CHECK(DistributedBatchSampler(100, o).batch(0, 0) != a.batch(0, 0));
  o.shuffle(false);
  const std::vector<int64_t> in_order = DistributedBatchSampler(100, o).batch(4, 0);
  for (int64_t i = 0; i < 100; ++i) CHECK(in_order[size_t(i)] == i);
}

TEST_CASE("sampler and loader options are validated") {
  CHECK_ERROR(DistributedBatchSampler(10, SamplerOptions().batch_size(0)), "batch_size must be >= 1, got 0");
  CHECK_ERROR(DistributedBatchSampler(10, SamplerOptions().batch_size(2).rank(3).world_size(2)),
              "rank 3 is outside [0, world_size = 2)");
  CHECK_ERROR(DistributedBatchSampler(0, SamplerOptions()), "the dataset is empty");
  auto dataset = std::make_shared<NumberDataset>(10);
  CHECK_ERROR(DataLoader(dataset, DataLoaderOptions().workers(-1)), "workers must be >= 0, got -1");
  CHECK_ERROR(DataLoader(dataset, DataLoaderOptions().prefetch_factor(0)), "prefetch_factor must be >= 1");
  CHECK_ERROR(DistributedBatchSampler(10, SamplerOptions()).batch(0, 10), "batch 10 is outside [0, 10)");
}

TEST_CASE("the same seed gives the same batches whatever the number of workers") {
  auto dataset = std::make_shared<NumberDataset>(37);
  const auto options = DataLoaderOptions().batch_size(4).seed(11).rank(1, 2);
  std::vector<std::vector<int64_t>> reference;
  {
    DataLoader loader(dataset, options);
    CHECK(loader.batches_per_epoch() == 5);  // ceil(ceil(37 / 2) / 4)
    for (int i = 0; i < 13; ++i) reference.push_back(flatten(loader.next()));
  }
  // Content: field x of row r is {i, 7 i + 1, hash(i)} for the sampler's index i, y = i / 2.
  {
    DataLoader loader(dataset, options);
    const Batch b = loader.next();
    const std::vector<int64_t> x = b[0].to_vector<int64_t>();
    const std::vector<float> y = b[1].to_vector<float>();
    CHECK(b[0].shape() == Shape{4, 3});
    CHECK(b[1].shape() == Shape{4});
    for (int64_t r = 0; r < 4; ++r) {
      const int64_t i = b.indices[size_t(r)];
      CHECK(x[size_t(3 * r)] == i);
      CHECK(x[size_t(3 * r + 1)] == 7 * i + 1);
      CHECK(y[size_t(r)] == float(i) / 2);
    }
  }
  for (int workers : {1, 2, 3, 8}) {
    for (int prefetch : {1, 3}) {
      auto slow = std::make_shared<NumberDataset>(37);
      slow->delay_us = workers == 3 ? 200 : 0;  // workers finish out of order
      DataLoader loader(slow, DataLoaderOptions(options).workers(workers).prefetch_factor(prefetch));
      for (int i = 0; i < 13; ++i) {
        INFO("workers ", workers, " prefetch ", prefetch, " batch ", i);
        CHECK(flatten(loader.next()) == reference[size_t(i)]);
      }
    }
  }
}

TEST_CASE("resuming mid-epoch gives the remaining batches") {
  auto dataset = std::make_shared<NumberDataset>(50);
  const auto options = DataLoaderOptions().batch_size(6).seed(3).drop_last(true);
  DataLoader original(dataset, DataLoaderOptions(options).workers(2));
  for (int i = 0; i < 11; ++i) original.next();  // 8 batches per epoch: epoch 1, batch 3
  CHECK(original.epoch() == 1);
  CHECK(original.batch_in_epoch() == 3);
  // Through a safetensors checkpoint, as the trainer saves it.
  TempDir dir;
  safetensors::save(dir.file("state.safetensors"), {{"data_loader", original.state()}});
  const Tensor saved = *safetensors::load(dir.file("state.safetensors")).find("data_loader");
  std::vector<std::vector<int64_t>> expected;
  for (int i = 0; i < 12; ++i) expected.push_back(flatten(original.next()));
  for (int workers : {0, 3}) {
    DataLoader resumed(dataset, DataLoaderOptions(options).workers(workers));
    resumed.next();  // consumed something first: load_state discards the prefetched batches
    resumed.load_state(saved);
    CHECK(resumed.epoch() == 1);
    for (int i = 0; i < 12; ++i) CHECK(flatten(resumed.next()) == expected[size_t(i)]);
  }
  DataLoader other_seed(dataset, DataLoaderOptions(options).seed(4));
  CHECK_ERROR(other_seed.load_state(saved), "saved with seed 3, this loader has seed 4");
  DataLoader other_batch(dataset, DataLoaderOptions(options).batch_size(5));
  CHECK_ERROR(other_batch.load_state(saved), "saved with 8 batches per epoch, this loader has 10");
  CHECK_ERROR(other_batch.load_state(zeros({5})), "expected the i64 tensor [5]");
  CHECK_ERROR(other_batch.load_state(from_vector(std::vector<int64_t>{2, 0, 0, 10, 3}, {5})), "format version 2");
}

TEST_CASE("a worker's exception surfaces on the consumer with its message") {
  auto dataset = std::make_shared<NumberDataset>(20);
  dataset->throw_at = 13;
  for (int workers : {0, 2}) {
    DataLoader loader(dataset, DataLoaderOptions().batch_size(5).shuffle(false).workers(workers));
    loader.next();
    loader.next();
    CHECK_ERROR(loader.next(), "building batch 2 of epoch 0 failed", "NumberDataset: example 13 is corrupt");
    const Batch after = loader.next();  // the stream goes on
    CHECK(after.indices.front() == 15);
  }
}

TEST_CASE("the prefetch queue is bounded by workers times prefetch_factor") {
  auto dataset = std::make_shared<NumberDataset>(1000);
  DataLoader loader(dataset, DataLoaderOptions().batch_size(5).workers(2).prefetch_factor(3));
  // Nobody consumes: the workers build 2 * 3 batches and stop.
  for (int i = 0; i < 500 && dataset->calls.load() < 30; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(dataset->calls.load() == 30);
  loader.next();  // one slot frees: exactly one more batch is built
  for (int i = 0; i < 500 && dataset->calls.load() < 35; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(dataset->calls.load() == 35);
}

TEST_CASE("destroying a loader mid-epoch stops its workers") {
  auto dataset = std::make_shared<NumberDataset>(10000);
  dataset->delay_us = 100;
  for (int taken : {0, 1, 3}) {
    auto loader =
        std::make_unique<DataLoader>(dataset, DataLoaderOptions().batch_size(8).workers(4).prefetch_factor(4));
    for (int i = 0; i < taken; ++i) loader->next();
    loader.reset();  // joins: a hang here fails the test by ctest's timeout
  }
  // A loader whose queue is full and whose consumer is gone.
  auto full = std::make_unique<DataLoader>(std::make_shared<NumberDataset>(100), DataLoaderOptions().workers(2));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  full.reset();
  CHECK(dataset->calls.load() < 10000);  // nobody built the whole epoch
}

TEST_CASE("token shards round-trip in u16 and u32 and window datasets read them") {
  TempDir dir;
  std::vector<uint32_t> tokens;
  for (uint32_t i = 0; i < 1000; ++i) tokens.push_back(uint32_t(mix64(i) % 50000));
  for (TokenDType dtype : {TokenDType::u16, TokenDType::u32}) {
    const std::string path = dir.file(std::string("shard_") + token_dtype_name(dtype) + ".bin");
    write_token_shard(path, tokens, dtype, 50000);
    CHECK(is_token_shard(path));
    CHECK(read_bytes(path).size() == 32 + 1000 * size_t(dtype));
    auto shard = std::make_shared<TokenShard>(path, &dtype);
    CHECK(shard->size() == 1000);
    CHECK(shard->vocab_size() == 50000);
    CHECK(shard->dtype() == dtype);
    for (int64_t i = 0; i < 1000; ++i) CHECK((*shard)[i] == tokens[size_t(i)]);
    // Windows of 8 + 1 tokens every 4 tokens; a second span of the first 20 tokens.
    TokenSpan head = whole(shard);
    head.end = 20;
    TokenWindowDataset windows({whole(shard), head}, 8, 4);
    CHECK(windows.size() == (1000 - 9) / 4 + 1 + (20 - 9) / 4 + 1);
    DataLoader loader(std::make_shared<TokenWindowDataset>(windows), DataLoaderOptions().batch_size(16).workers(1));
    const Batch b = loader.next();
    const std::vector<int64_t> ids = b[0].to_vector<int64_t>(), targets = b[1].to_vector<int64_t>();
    for (int64_t r = 0; r < 16; ++r) {
      const int64_t i = b.indices[size_t(r)];
      const int64_t start = i < 248 ? 4 * i : 4 * (i - 248);
      for (int64_t t = 0; t < 8; ++t) {
        CHECK(ids[size_t(r * 8 + t)] == tokens[size_t(start + t)]);
        CHECK(targets[size_t(r * 8 + t)] == tokens[size_t(start + t + 1)]);
      }
    }
  }
  std::vector<uint32_t> too_big{1, 2, 70000};
  CHECK_ERROR(write_token_shard(dir.file("x.bin"), too_big, TokenDType::u16, 65536), "token 2 is 70000");
  CHECK_ERROR(write_token_shard(dir.file("x.bin"), too_big, TokenDType::u16, 100000), "does not fit u16");
  CHECK_FALSE(std::filesystem::exists(dir.file("x.bin")));
  CHECK_ERROR(TokenWindowDataset({whole(std::make_shared<const std::vector<uint32_t>>(5, 1u))}, 8, 1),
              "no span holds 9 tokens");
}

TEST_CASE("malformed token shards are rejected with what was wrong") {
  TempDir dir;
  const std::string good = dir.file("good.bin");
  write_token_shard(good, {1, 2, 3, 4, 5, 6}, TokenDType::u16, 10);
  const std::string bytes = read_bytes(good);
  auto variant = [&](const std::string& name, std::string content) {
    write_bytes(dir.file(name), content);
    return dir.file(name);
  };
  auto patch32 = [&](size_t offset, uint32_t value) {
    std::string b = bytes;
    std::memcpy(&b[offset], &value, 4);
    return b;
  };
  CHECK_ERROR(TokenShard(dir.file("missing.bin")), "cannot open");
  CHECK_ERROR(TokenShard(variant("empty.bin", "")), "truncated: 0 bytes, shorter than the 32-byte header");
  CHECK_ERROR(TokenShard(variant("header.bin", bytes.substr(0, 20))), "truncated: 20 bytes");
  CHECK_ERROR(TokenShard(variant("body.bin", bytes.substr(0, bytes.size() - 3))),
              "truncated: the header promises 6 u16 tokens (44 bytes), the file has 41 bytes");
  CHECK_ERROR(TokenShard(variant("trailing.bin", bytes + "xx")), "has 2 trailing bytes");
  CHECK_ERROR(TokenShard(variant("foreign.bin", std::string(64, 'a'))), "not a halfgrad token shard",
              "6161616161616161");
  CHECK_ERROR(TokenShard(variant("version.bin", patch32(8, 2))), "format version 2; this build reads version 1");
  CHECK_ERROR(TokenShard(variant("dtype.bin", patch32(12, 3))), "unknown token dtype code 3");
  const TokenDType want = TokenDType::u32;
  CHECK_ERROR(TokenShard(good, &want), "holds u16 tokens, expected u32");
  CHECK_FALSE(is_token_shard(dir.file("foreign.bin")));
  CHECK(TokenShard(good).size() == 6);
  // A user's bad file: the message names the file and ends with what was wrong, never a source location
  // in the library. API misuse keeps HG_CHECK's location, relative to the repository root.
  std::string file_message, misuse_message;
  try {
    TokenShard shard(variant("located.bin", std::string(64, 'a')));
  } catch (const Error& e) {
    file_message = e.what();
  }
  CHECK(file_message.find("located.bin") != std::string::npos);
  CHECK(file_message.find(".cpp:") == std::string::npos);
  try {
    TokenWindowDataset dataset({whole(std::make_shared<const TokenShard>(good))}, 0, 1);
  } catch (const Error& e) {
    misuse_message = e.what();
  }
  CHECK(misuse_message.find("context must be >= 1") != std::string::npos);
  CHECK(misuse_message.find(" [data/token_shard.cpp:") != std::string::npos);
}

TEST_CASE("sequence-length warmup grows linearly to the full length") {
  SequenceLengthWarmup warmup(8, 64, 100, 8);
  CHECK(warmup.length(0) == 8);
  CHECK(warmup.length(50) == 32);  // 8 + 56 * 0.5 = 36, down to a multiple of 8
  CHECK(warmup.length(99) == 56);
  CHECK(warmup.length(100) == 64);
  CHECK(warmup.length(5000) == 64);
  CHECK(SequenceLengthWarmup(8, 12, 4).length(2) == 10);
  CHECK(SequenceLengthWarmup(8, 12, 0).length(0) == 12);
  CHECK_ERROR(SequenceLengthWarmup(0, 12, 4), "start length 0 must be in [1, full length 12]");
}

TEST_CASE("the difficulty curriculum goes from easy to hard then hands over to the base sampler") {
  const int64_t n = 300;
  std::vector<int32_t> difficulty(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) difficulty[size_t(i)] = int32_t(1 + mix64(uint64_t(i)) % 3);
  const auto o = SamplerOptions().batch_size(10).seed(1);
  auto base = std::make_shared<DistributedBatchSampler>(n, o);
  DifficultyCurriculumSampler curriculum(base, difficulty, 45, 10, 1);
  CHECK(curriculum.batches_per_epoch() == 30);
  std::set<int32_t> seen_levels;
  for (int64_t g = 0; g < 60; ++g) {
    const int64_t epoch = g / 30, b = g % 30;
    const std::vector<int64_t> indices = curriculum.batch(epoch, b);
    const int32_t limit = curriculum.threshold(g);
    CHECK(limit == (g < 15 ? 1 : g < 30 ? 2 : 3));
    if (g >= 45) {
      CHECK(indices == base->batch(epoch, b));
      continue;
    }
    CHECK(indices.size() == 10);
    for (int64_t i : indices) {
      CHECK(difficulty[size_t(i)] <= limit);
      seen_levels.insert(difficulty[size_t(i)]);
    }
    CHECK(indices == DifficultyCurriculumSampler(base, difficulty, 45, 10, 1).batch(epoch, b));
  }
  CHECK(seen_levels == std::set<int32_t>{1, 2, 3});
}
