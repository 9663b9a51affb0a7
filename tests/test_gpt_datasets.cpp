// train_gpt's text data (samples/gpt_datasets.h, samples/gpt_tasks.h): the vocabulary read from the
// token shards' headers (and refused when shards, --vocab, --load's model or --tokenizer disagree,
// messages checked; a tokenizer of the right size that does not encode the shards' text to their
// ids is refused too), byte counts and bits per byte on hand-computed cases, and the text task's
// evaluation reporting bits per byte in its metrics.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/token_shard.h"
#include "engine/random.h"
#include "layers/nn.h"
#include "samples/gpt_datasets.h"
#include "samples/gpt_tasks.h"
#include "support/check_error.h"
#include "support/temp_dir.h"
#include "support/test_seed.h"

using namespace hg;
using namespace hg::samples;

namespace {

// A shard of `n` random ids below `vocab` (the largest id always present), and the ids written.
std::vector<uint32_t> write_shard(const std::string& path, int64_t n, uint64_t vocab, std::mt19937& rng) {
  std::uniform_int_distribution<uint32_t> id(0, uint32_t(vocab - 1));
  std::vector<uint32_t> tokens(static_cast<size_t>(n));
  for (uint32_t& t : tokens) t = id(rng);
  tokens[size_t(n / 2)] = uint32_t(vocab - 1);
  data::write_token_shard(path, tokens, vocab <= 65535 ? data::TokenDType::u16 : data::TokenDType::u32, vocab);
  return tokens;
}

}  // namespace

TEST_CASE("the vocabulary of --data is its shards' header: BPE ids above 256 train") {
  test::TempDir dir;
  std::mt19937 rng = testing::seeded_rng();
  const std::string a = (dir.path / "a.bin").string(), b = (dir.path / "b.bin").string();
  const std::vector<uint32_t> tokens_a = write_shard(a, 3000, 5000, rng);
  write_shard(b, 2000, 5000, rng);
  CHECK(token_data_vocab(a + "," + b) == 5000);
  const TokenData data = load_token_data(a + "," + b, 16);
  CHECK(data.vocab_size == 5000);
  REQUIRE(data.train.size() == 2);
  CHECK(data.train[0].size() == 2700);  // 90% trains
  CHECK(data.validation[0].size() == 300);
  for (int64_t i = 0; i < data.train[0].size(); ++i) REQUIRE(data.train[0].at(i) == tokens_a[size_t(i)]);
  CHECK(fresh_model_vocab(data.vocab_size, std::nullopt, a) == 5000);
  CHECK(fresh_model_vocab(data.vocab_size, int64_t(5000), a) == 5000);

  // A text file is byte-level: 256, whatever bytes it holds.
  const std::string text = dir.write("text.txt", std::string(400, 'x') + "\xff\x01");
  CHECK(token_data_vocab(text) == 256);
  CHECK(load_token_data(text, 16).vocab_size == 256);

  // A u32 shard of a vocabulary past u16.
  const std::string wide = (dir.path / "wide.bin").string();
  write_shard(wide, 1000, 70000, rng);
  CHECK(token_data_vocab(wide) == 70000);
  CHECK(load_token_data(wide, 16).vocab_size == 70000);
}

TEST_CASE("shards, --vocab, --load's model and --tokenizer that disagree on the vocabulary are refused") {
  test::TempDir dir;
  std::mt19937 rng = testing::seeded_rng();
  const std::string a = (dir.path / "a.bin").string(), b = (dir.path / "b.bin").string();
  write_shard(a, 1000, 4096, rng);
  write_shard(b, 1000, 4000, rng);
  CHECK_ERROR(token_data_vocab(a + "," + b), "token shard \"", "b.bin\" has a vocabulary of 4000 ids",
              "a.bin\" has 4096", "same tokenizer");
  CHECK_ERROR(load_token_data(a + "," + b, 16), "b.bin\" has a vocabulary of 4000 ids", "a.bin\" has 4096");
  CHECK_ERROR(fresh_model_vocab(4096, int64_t(256), a), "--vocab 256 does not match the vocabulary of --data",
              "(4096 ids, from its shards' header)", "expected --vocab 4096 or no --vocab");
  CHECK_ERROR(fresh_model_vocab(uint64_t(1) << 21, std::nullopt, a), "has a vocabulary of 2097152 ids",
              "expected 1 to 1048576");
  CHECK_ERROR(check_model_vocab(256, 4096, "byte.safetensors", a), "the model of --load byte.safetensors has 256",
              "fewer than the 4096 of --data");
  check_model_vocab(4096, 4096, "m.safetensors", a);   // equal: fine
  check_model_vocab(50257, 4096, "m.safetensors", a);  // larger: fine (ids >= 4096 are never targets)
  CHECK_ERROR(check_tokenizer_vocab(5000, 4096, "tok.json", a), "--tokenizer tok.json has a vocabulary of 5000 ids",
              "has 4096 (its shards' header)", "the tokenizer that prepare_data wrote the shards with");
  check_tokenizer_vocab(4096, 4096, "tok.json", a);

  // The text task checks its tokenizer against the data before anything trains.
  ShardTokenizer tokenizer{"tok.json", TokenBytes(std::vector<uint32_t>(300, 2)), {}, {}, {}};
  CHECK_ERROR(text_task(a, 16, 4, tokenizer), "--tokenizer tok.json has a vocabulary of 300 ids", "has 4096");
}

TEST_CASE("bits per byte: the loss in bits over the bytes the scored tokens stand for, by hand") {
  // Tokens "a" (1 byte), "bcd" (3), "ef" (2), "ghijk" (5). Targets a, bcd, (ignored), ghijk, ef:
  // 4 scored tokens standing for 1 + 3 + 5 + 2 = 11 bytes.
  const TokenBytes bytes(std::vector<uint32_t>{1, 3, 2, 5});
  const std::vector<int64_t> targets{0, 1, -100, 3, 2};
  CHECK(bytes.bytes(targets) == 11);
  // A mean loss of 2 nats over 4 tokens is 8 nats = 8 / ln 2 = 11.5416 bits, over 11 bytes.
  CHECK(bits_per_byte(2.0, 4, 11) == doctest::Approx(1.0492327570101552).epsilon(1e-14));
  // Byte-level: a token is a byte, so bits per byte is the loss in bits per token (ln 2 nats = 1 bit).
  const std::vector<int64_t> byte_ids{104, 105, 33, 0, 255};
  CHECK(TokenBytes::byte_level().bytes(byte_ids) == 5);
  CHECK(bits_per_byte(std::log(2.0), 5, 5) == doctest::Approx(1.0).epsilon(1e-15));
  CHECK(bits_per_byte(3.0, 1000, 4000) == doctest::Approx(3.0 * 1000 / (4000 * std::log(2.0))).epsilon(1e-15));
  const std::vector<int64_t> outside{0, 4};
  CHECK_ERROR(bytes.bytes(outside), "token id 4 is outside the tokenizer's 4 ids");
  CHECK_ERROR(bits_per_byte(1.0, 3, 0), "needs a positive byte count, got 0 bytes for 3 tokens");
}

TEST_CASE("the unigram baseline: add-one smoothed training frequencies on the validation tokens, by hand") {
  // 20 tokens of vocabulary 4 (a b c d): training (the first 18) holds a 8 times, b 6, c 4; validation
  // (the last 2) is c d.
  test::TempDir dir;
  const std::string path = (dir.path / "u.bin").string();
  data::write_token_shard(path, {0, 1, 2, 0, 0, 1, 0, 2, 1, 0, 0, 1, 2, 0, 1, 2, 0, 1, 2, 3}, data::TokenDType::u16, 4);
  const TokenData data = load_token_data(path, 0);
  REQUIRE(data.validation[0].size() == 2);
  // Counts + 1: a 9, b 7, c 5, d 1 of 22. Validation: -(ln(5/22) + ln(1/22)) / 2 nats per token; the
  // lengths below make c 3 bytes and d 4.
  const TokenBytes bytes(std::vector<uint32_t>{1, 2, 3, 4});
  const UnigramBaseline unigram = unigram_baseline(data, &bytes);
  CHECK(unigram.tokens == 2);
  CHECK(unigram.loss == doctest::Approx((std::log(22.0 / 5.0) + std::log(22.0)) / 2).epsilon(1e-14));
  REQUIRE(unigram.bytes.has_value());
  CHECK(*unigram.bytes == 7);
  CHECK_FALSE(unigram_baseline(data, nullptr).bytes.has_value());
}

TEST_CASE("the validation set counts its scored tokens and their bytes") {
  test::TempDir dir;
  std::mt19937 rng = testing::seeded_rng();
  const std::string a = (dir.path / "a.bin").string();
  const std::vector<uint32_t> tokens = write_shard(a, 4000, 600, rng);
  const TokenData data = load_token_data(a, 8);
  std::vector<uint32_t> lengths(600);
  for (size_t id = 0; id < lengths.size(); ++id) lengths[id] = uint32_t(1 + id % 7);
  const TokenBytes bytes(lengths);
  const ValidationSet set = validation_set(data, 8, 4, 3, &bytes);
  REQUIRE(set.batches.size() == 3);
  CHECK(set.tokens == 3 * 4 * 8);
  int64_t expected = 0;
  for (const auto& [ids, targets] : set.batches) {
    const std::vector<int64_t> row_ids = ids.to_vector<int64_t>(), row_targets = targets.to_vector<int64_t>();
    for (size_t i = 0; i < row_targets.size(); ++i) {
      // Every target is the validation text's next token after its id, and lies in the last 10%.
      if (i % 8 != 7) CHECK(row_targets[i] == row_ids[i + 1]);
      expected += 1 + row_targets[i] % 7;
    }
  }
  REQUIRE(set.bytes.has_value());
  CHECK(*set.bytes == expected);
  CHECK_FALSE(validation_set(data, 8, 4, 3, nullptr).bytes.has_value());
}

TEST_CASE("the text task reports loss per token and bits per byte, in its text and its metrics") {
  test::TempDir dir;
  std::mt19937 rng = testing::seeded_rng();
  const std::string a = (dir.path / "a.bin").string();
  write_shard(a, 3000, 300, rng);
  // 2 bytes a token, none of them whitespace: no safe cut, so the ids are not encoded again.
  ShardTokenizer tokenizer{"tok.json", TokenBytes(std::vector<uint32_t>(300, 2)),
                           [](std::span<const uint32_t> ids) { return std::string(2 * ids.size(), 'x'); },
                           [](std::string_view) -> std::vector<uint32_t> { FAIL("encode called"); return {}; },
                           {"<|endoftext|>"}};
  const auto task = text_task(a, 8, 4, tokenizer);
  manual_seed(rng());
  nn::GPT model(nn::GPTConfig().vocab_size(300).context(8).n_layer(1).n_head(2).n_embd(16));
  const train::Evaluation evaluation = task->evaluate(model);
  REQUIRE(evaluation.metrics.size() == 1);
  CHECK(evaluation.metrics[0].first == "val_bits_per_byte");
  // An untrained model's loss is near ln 300 nats per token, and every token is 2 bytes.
  CHECK(evaluation.value == doctest::Approx(std::log(300.0)).epsilon(0.05));
  CHECK(evaluation.metrics[0].second == doctest::Approx(evaluation.value / (2 * std::log(2.0))).epsilon(1e-12));
  CHECK(evaluation.text.find("per token") != std::string::npos);
  CHECK(evaluation.text.find("bits per byte") != std::string::npos);

  // BPE shards without their tokenizer: the loss per token only.
  const train::Evaluation plain = text_task(a, 8, 4, std::nullopt)->evaluate(model);
  CHECK(plain.metrics.empty());
  CHECK(plain.value == doctest::Approx(evaluation.value).epsilon(1e-12));
  CHECK(plain.text.find("give --tokenizer") != std::string::npos);
}

namespace {

// A toy tokenizer of 257 ids: the 256 bytes and one merge, `pair` (two bytes) -> id 256.
struct ToyTokenizer {
  std::string pair;
  std::vector<uint32_t> encode(std::string_view text) const {
    std::vector<uint32_t> ids;
    for (size_t i = 0; i < text.size(); ++i) {
      if (text.substr(i, 2) == pair) {
        ids.push_back(256);
        ++i;
      } else {
        ids.push_back(static_cast<unsigned char>(text[i]));
      }
    }
    return ids;
  }
  std::string decode(std::span<const uint32_t> ids) const {
    std::string text;
    for (const uint32_t id : ids) text += id == 256 ? pair : std::string(1, char(id));
    return text;
  }
};

}  // namespace

TEST_CASE("--tokenizer must encode the shards' text to their ids: the same vocabulary size is not enough") {
  test::TempDir dir;
  std::mt19937 rng = testing::seeded_rng();
  // Words of a, b and c between spaces and newlines (safe cuts), encoded by the "ab" tokenizer.
  std::string text;
  while (text.size() < 20000) {
    for (int n = 1 + int(rng() % 7); n > 0; --n) text += char('a' + rng() % 3);
    text += rng() % 8 ? " " : "\n";
  }
  const ToyTokenizer right{"ab"}, wrong{"ba"};
  const std::string shard = (dir.path / "a.bin").string();
  data::write_token_shard(shard, right.encode(text), data::TokenDType::u16, 257);
  const TokenData data = load_token_data(shard, 16);
  auto check = [&](const ToyTokenizer& tok, int64_t probe) {
    check_tokenizer_ids(
        data, [&](std::span<const uint32_t> ids) { return tok.decode(ids); },
        [&](std::string_view t) { return tok.encode(t); }, {"<|endoftext|>"}, "tok.json", shard, probe);
  };
  check(right, 4096);
  check(right, 5);  // too short to hold two safe cuts: nothing to compare
  CHECK_ERROR(check(wrong, 4096), "--tokenizer tok.json does not encode the text of --data", "to its ids (token ",
              "a.bin is ", "the tokenizer encodes it as ", "expected the tokenizer that prepare_data wrote the shards with");
  // The text task makes the check: a tokenizer with the right size but other merges is refused.
  ShardTokenizer tokenizer{"tok.json", TokenBytes(std::vector<uint32_t>(257, 1)),
                           [&](std::span<const uint32_t> ids) { return wrong.decode(ids); },
                           [&](std::string_view t) { return wrong.encode(t); },
                           {"<|endoftext|>"}};
  CHECK_ERROR(text_task(shard, 16, 4, tokenizer), "does not encode the text of --data");
  tokenizer.decode = [&](std::span<const uint32_t> ids) { return right.decode(ids); };
  tokenizer.encode = [&](std::string_view t) { return right.encode(t); };
  CHECK(text_task(shard, 16, 4, tokenizer) != nullptr);
}
