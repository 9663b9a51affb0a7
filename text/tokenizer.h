#pragma once
// A byte-level BPE tokenizer, GPT-2's scheme:
//   1. special tokens ("<|endoftext|>") are cut out of the text first and map to their own ids;
//   2. the rest is split by GPT-2's pre-tokenisation pattern (text/pretokenize.h:
//      's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+);
//   3. each piece's UTF-8 bytes start as one token per byte (every byte has a token: byte fallback, so
//      any input encodes, valid UTF-8 or not) and the merges are applied lowest rank first until none
//      applies; the resulting tokens' ids are the output.
// decode() concatenates the tokens' bytes (a special token's content for its id), so
// decode(encode(s)) == s for every byte string s.
//
// Files (load() tells them apart; every error is an hg::Error naming the file and the line or key):
//   - Hugging Face's tokenizer.json with a BPE model and a ByteLevel pre-tokenizer ("model": {"type":
//     "BPE", "vocab": {...}, "merges": [...]}, "added_tokens": [...]): merges as "a b" strings or
//     ["a", "b"] pairs;
//   - GPT-2's vocab.json (token -> id, tokens spelled in the bytes_to_unicode alphabet) with the
//     merges.txt beside it ("#version" line, then one "a b" merge per line, rank = line order); load()
//     takes the path of vocab.json, of merges.txt, or of the directory holding both.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hg::text {

struct SpecialToken {
  std::string content;  // e.g. "<|endoftext|>"
  uint32_t id = 0;
  // tokenizer.json's "special" flag of an added token, kept as read and written back: every added
  // token is cut out of the text alike (special or not), the flag only tells decoders that skip
  // special tokens which ones they are.
  bool special = true;
};

class Tokenizer {
 public:
  // tokenizer.json, vocab.json (+ merges.txt beside it), merges.txt (+ vocab.json beside it) or a
  // directory holding tokenizer.json or vocab.json + merges.txt.
  static Tokenizer load(const std::string& path);
  static Tokenizer load_vocab_merges(const std::string& vocab_json, const std::string& merges_txt);
  // From parts (what train_bpe builds): `tokens[id]` the bytes of every token, special ones included
  // (their content); `merges` in rank order as (left bytes, right bytes) pairs whose parts and
  // concatenation are tokens; `specials` the special tokens among them (content and id). Throws
  // naming the first inconsistency (a duplicate token, a merge of unknown parts, a special id out of
  // range or whose token differs).
  static Tokenizer from_parts(std::vector<std::string> tokens, std::vector<std::pair<std::string, std::string>> merges,
                              std::vector<SpecialToken> specials);

  // Writes Hugging Face's tokenizer.json (the `tokenizers` package loads it), atomically.
  void save_json(const std::string& path) const;
  // Writes GPT-2's vocab.json and merges.txt, atomically.
  void save_vocab_merges(const std::string& vocab_json, const std::string& merges_txt) const;

  // Token ids of `text` (any bytes). Special tokens in the text become their ids.
  std::vector<uint32_t> encode(std::string_view text) const;
  // The bytes of the tokens, concatenated. Throws naming the first id >= vocab_size().
  std::string decode(std::span<const uint32_t> ids) const;
  // The raw bytes of one token (a special token's content); throws for id >= vocab_size().
  const std::string& token_bytes(uint32_t id) const;
  // The id of the token whose bytes are exactly `bytes`, if there is one.
  std::optional<uint32_t> token_id(std::string_view bytes) const;

  // 1 + the largest id (ids are dense in every file this class writes; loaded files may have holes,
  // which decode to an error).
  uint32_t vocab_size() const;
  const std::vector<SpecialToken>& special_tokens() const;
  // The id of "<|endoftext|>", when the vocabulary has it.
  std::optional<uint32_t> end_of_text() const;
  // Number of merges (ranks 0 .. merges() - 1).
  size_t merges() const;

  Tokenizer();
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  Tokenizer(const Tokenizer&);
  Tokenizer& operator=(const Tokenizer&);

  struct Impl;  // text/tokenizer.cpp: the vocabulary, the merge ranks, the encode cache

 private:
  std::unique_ptr<Impl> impl_;
};

// Training: the merges learned from a corpus, as Hugging Face's BpeTrainer does for GPT-2 (ByteLevel
// pre-tokenizer, the 256-byte initial alphabet): count the pre-tokenised words, then repeatedly merge
// the most frequent adjacent pair (ties: the smaller pair of ids, left id first, as `tokenizers` does)
// until the vocabulary has `vocab_size` tokens (special tokens included) or no pair occurs
// `min_frequency` times.
struct BpeTrainerOptions {
  uint32_t vocab_size = 4096;
  uint64_t min_frequency = 2;
  std::vector<std::string> special_tokens{"<|endoftext|>"};
};
Tokenizer train_bpe(std::string_view corpus, const BpeTrainerOptions& options);

}  // namespace hg::text
