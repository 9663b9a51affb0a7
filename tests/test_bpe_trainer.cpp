// train_bpe (text/bpe_trainer.cpp) on its own: against a deliberately naive reference trainer (every
// pair recounted from scratch before each merge) on fresh random corpora -- the incremental pair
// index must pick the same merges; the id layout (special tokens, then the bytes in spelling order);
// special tokens cut out of the corpus; the stopping rules; any bytes (invalid UTF-8 included) train
// and round-trip; and the special tokens it refuses, each with a clear hg::Error.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "support/check_error.h"
#include "support/test_seed.h"
#include "text/byte_alphabet.h"
#include "text/pretokenize.h"
#include "text/tokenizer.h"

using hg::text::BpeTrainerOptions;
using hg::text::Tokenizer;
using hg::text::train_bpe;

namespace {

struct Model {
  std::vector<std::string> tokens;  // raw bytes by id
  std::vector<std::pair<std::string, std::string>> merges;
};

// The textbook algorithm, slowly: cut the corpus at the special tokens, count the pre-tokenised
// pieces, then until the vocabulary is full: count every adjacent pair of every piece, take the most
// frequent (ties: the smaller (left id, right id)), stop if it occurs fewer than min_frequency times,
// rewrite it left to right in every piece.
Model naive_train(const std::string& corpus, const BpeTrainerOptions& options) {
  Model m;
  for (const auto& s : options.special_tokens)
    if (std::find(m.tokens.begin(), m.tokens.end(), s) == m.tokens.end()) m.tokens.push_back(s);
  const size_t specials = m.tokens.size();
  std::vector<int> bytes(256);
  for (int b = 0; b < 256; ++b) bytes[b] = b;
  std::sort(bytes.begin(), bytes.end(),
            [](int a, int b) { return hg::text::byte_to_char(uint8_t(a)) < hg::text::byte_to_char(uint8_t(b)); });
  uint32_t byte_id[256];
  for (int b : bytes) {
    byte_id[b] = uint32_t(m.tokens.size());
    m.tokens.push_back(std::string(1, char(b)));
  }
  // Documents between special tokens (leftmost, longest first), then their pieces.
  std::map<std::string, uint64_t> counts;
  size_t start = 0, pos = 0;
  auto add_document = [&](const std::string& doc) {
    for (std::string_view piece : hg::text::pretokenize(doc)) ++counts[std::string(piece)];
  };
  while (pos < corpus.size()) {
    size_t len = 0;
    for (size_t s = 0; s < specials; ++s)
      if (corpus.compare(pos, m.tokens[s].size(), m.tokens[s]) == 0) len = std::max(len, m.tokens[s].size());
    if (len > 0) {
      add_document(corpus.substr(start, pos - start));
      pos += len;
      start = pos;
    } else {
      ++pos;
    }
  }
  add_document(corpus.substr(start));
  std::vector<std::pair<std::vector<uint32_t>, uint64_t>> words;
  for (const auto& [piece, count] : counts) {
    std::vector<uint32_t> ids;
    for (unsigned char c : piece) ids.push_back(byte_id[c]);
    words.emplace_back(ids, count);
  }
  while (m.tokens.size() < options.vocab_size) {
    std::map<std::pair<uint32_t, uint32_t>, uint64_t> pairs;
    for (const auto& [w, count] : words)
      for (size_t i = 0; i + 1 < w.size(); ++i) pairs[{w[i], w[i + 1]}] += count;
    if (pairs.empty()) break;
    auto best = pairs.begin();
    for (auto it = pairs.begin(); it != pairs.end(); ++it)
      if (it->second > best->second) best = it;  // std::map order: the first of equal counts is the smallest pair
    if (best->second < options.min_frequency) break;
    const auto [left, right] = best->first;
    const std::string merged = m.tokens[left] + m.tokens[right];
    auto existing = std::find(m.tokens.begin() + long(specials), m.tokens.end(), merged);
    const auto id = uint32_t(existing - m.tokens.begin());
    if (existing == m.tokens.end()) m.tokens.push_back(merged);
    m.merges.emplace_back(m.tokens[left], m.tokens[right]);
    for (auto& [w, count] : words) {
      std::vector<uint32_t> out;
      for (size_t i = 0; i < w.size(); ++i) {
        if (i + 1 < w.size() && w[i] == left && w[i + 1] == right) {
          out.push_back(id);
          ++i;
        } else {
          out.push_back(w[i]);
        }
      }
      w = std::move(out);
    }
  }
  return m;
}

std::vector<std::string> tokens_of(const Tokenizer& tok) {
  std::vector<std::string> out;
  for (uint32_t id = 0; id < tok.vocab_size(); ++id) out.push_back(tok.token_bytes(id));
  return out;
}

std::string random_corpus(std::mt19937& rng) {
  static const std::vector<std::string> pieces = {"a", "b", "c", "ab", "é", "中", " ", " ", "  ", "\n", "\t", "'s",
                                                  "'t", "1", "23", "!", "?", "<|endoftext|>", "x", "😀"};
  std::string s;
  const int n = std::uniform_int_distribution<int>(50, 400)(rng);
  for (int i = 0; i < n; ++i) s += pieces[std::uniform_int_distribution<size_t>(0, pieces.size() - 1)(rng)];
  return s;
}

}  // namespace

TEST_CASE("train_bpe equals a naive recount-everything trainer on random corpora") {
  auto rng = hg::testing::seeded_rng();
  for (int trial = 0; trial < 60; ++trial) {
    const std::string corpus = random_corpus(rng);
    BpeTrainerOptions options;
    options.vocab_size = std::uniform_int_distribution<uint32_t>(250, 330)(rng);
    options.min_frequency = std::uniform_int_distribution<uint64_t>(0, 3)(rng);
    options.special_tokens = trial % 3 == 0 ? std::vector<std::string>{} : std::vector<std::string>{"<|endoftext|>"};
    INFO("trial ", trial, " vocab ", options.vocab_size, " min_frequency ", options.min_frequency);
    const Model expected = naive_train(corpus, options);
    const Tokenizer ours = train_bpe(corpus, options);
    CHECK(tokens_of(ours) == expected.tokens);
    CHECK(ours.merges() == expected.merges.size());
    CHECK(ours.decode(ours.encode(corpus)) == corpus);
  }
}

TEST_CASE("train_bpe: ids are the special tokens, then the 256 bytes in spelling order, then the merges") {
  BpeTrainerOptions options;
  options.vocab_size = 300;
  options.min_frequency = 1;
  options.special_tokens = {"<pad>", "<|endoftext|>", "<pad>"};  // a repeated one counts once
  const Tokenizer tok = train_bpe("hello hello hello world", options);
  REQUIRE(tok.special_tokens().size() == 2);
  CHECK(tok.token_bytes(0) == "<pad>");
  CHECK(tok.token_bytes(1) == "<|endoftext|>");
  CHECK(tok.end_of_text() == 1u);
  CHECK(tok.token_bytes(2) == "!");          // U+0021, the first character of the byte alphabet
  CHECK(tok.token_bytes(2 + 93) == "~");     // '!'..'~' are 94 characters
  CHECK(tok.token_bytes(2 + 94) == "\xA1");  // then U+00A1..U+00AC, U+00AE..U+00FF
  CHECK(tok.token_bytes(2 + 188) == std::string(1, '\0'));  // 188 printable bytes, then U+0100 = byte 0
  CHECK(tok.token_bytes(2 + 188 + 32) == " ");              // U+0120 'Ġ'
  CHECK(tok.vocab_size() == 2 + 256 + tok.merges());
  // "h" "e", "e" "l", "l" "l" and "l" "o" occur 3 times each: the tie goes to the smallest pair of
  // ids, and 'e' < 'h' < 'l' in the alphabet's order.
  CHECK(tok.token_bytes(258) == "el");
}

TEST_CASE("train_bpe: special tokens are cut out of the corpus, never learned from") {
  std::string corpus;
  for (int i = 0; i < 50; ++i) corpus += "abc<|endoftext|>";
  BpeTrainerOptions options;
  options.vocab_size = 400;
  options.min_frequency = 2;
  const Tokenizer with = train_bpe(corpus, options);
  REQUIRE(with.vocab_size() > 257);
  for (uint32_t id = 257; id < with.vocab_size(); ++id) CHECK(with.token_bytes(id).find('<') == std::string::npos);
  CHECK(with.token_id("abc").has_value());
  options.special_tokens = {};
  const Tokenizer without = train_bpe(corpus, options);
  CHECK(without.token_id("<|").has_value());  // as plain text it is learned like any other
}

TEST_CASE("train_bpe: stops at the vocabulary size and at min_frequency") {
  const std::string corpus = "the cat sat on the mat; the cat sat. then the theme";
  BpeTrainerOptions options;
  options.vocab_size = 100;  // below 257: the alphabet stays whole, nothing is merged
  options.min_frequency = 1;
  Tokenizer tok = train_bpe(corpus, options);
  CHECK(tok.vocab_size() == 257);
  CHECK(tok.merges() == 0);
  options.vocab_size = 260;
  tok = train_bpe(corpus, options);
  CHECK(tok.vocab_size() == 260);
  CHECK(tok.merges() == 3);
  options.vocab_size = 5000;
  options.min_frequency = 1000;
  tok = train_bpe(corpus, options);
  CHECK(tok.merges() == 0);
  options.min_frequency = 5;  // "h" "e" and "t" "h" occur 6 times (4 "the", "then", "theme"); h < t
  tok = train_bpe(corpus, options);
  CHECK(tok.merges() >= 1);
  CHECK(tok.token_bytes(257) == "he");
  CHECK(train_bpe("", options).vocab_size() == 257);
}

TEST_CASE("train_bpe: any bytes train and round-trip, invalid UTF-8 included") {
  auto rng = hg::testing::seeded_rng();
  std::string corpus;
  for (int i = 0; i < 20000; ++i) {
    const int r = std::uniform_int_distribution<int>(0, 9)(rng);
    corpus += r < 5 ? char('a' + r) : r < 7 ? ' ' : char(std::uniform_int_distribution<int>(0, 255)(rng));
  }
  BpeTrainerOptions options;
  options.vocab_size = 600;
  const Tokenizer tok = train_bpe(corpus, options);
  CHECK(tok.vocab_size() == 600);
  CHECK(tok.decode(tok.encode(corpus)) == corpus);
  std::string noise(3000, '\0');
  for (char& c : noise) c = char(std::uniform_int_distribution<int>(0, 255)(rng));
  CHECK(tok.decode(tok.encode(noise)) == noise);
  // Deterministic: the same corpus and options give the same vocabulary and merges.
  const Tokenizer again = train_bpe(corpus, options);
  CHECK(tokens_of(again) == tokens_of(tok));
  CHECK(again.encode(noise) == tok.encode(noise));
}

TEST_CASE("train_bpe: refuses special tokens it cannot give their own id") {
  BpeTrainerOptions options;
  options.vocab_size = 300;
  options.min_frequency = 1;
  options.special_tokens = {""};
  CHECK_ERROR(train_bpe("abc", options), "train_bpe", "special token is empty");
  options.special_tokens = {"!"};
  CHECK_ERROR(train_bpe("abc", options), "special token \"!\"", "byte token of byte 33");
  options.special_tokens = {"\xC4\xA0"};  // "Ġ": how tokenizers spells the byte ' '
  CHECK_ERROR(train_bpe("abc", options), "special token \"\xC4\xA0\"", "byte token of byte 32");
  options.special_tokens = {"\x01"};
  CHECK_ERROR(train_bpe("abc", options), "byte token of byte 1");
  options.special_tokens = {"\xC4\xA0t"};  // "Ġt", the spelling of the token " t" learned below
  CHECK_ERROR(train_bpe("a t a t a t", options), "special token \"\xC4\xA0t\"", "learned token");
}
