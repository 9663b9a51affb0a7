#pragma once
// Token shards: a flat array of token ids in a binary file, memory-mapped for reading, and the
// Dataset of fixed-length windows over one or more of them.
//
// File layout (little-endian), 32-byte header then the tokens:
//   offset  0  8 bytes  magic "HGTOKENS"
//   offset  8  u32      format version (1)
//   offset 12  u32      token dtype: 2 = u16, 4 = u32 (the byte width of one token)
//   offset 16  u64      token count n
//   offset 24  u64      vocabulary size (every token id is < it)
//   offset 32  n tokens
// The reader checks each field and the file size (exactly 32 + n * width bytes) and throws
// hg::Error naming the file, what was found and what was expected: a truncated file, a foreign file,
// another version, an unknown or unexpected dtype, trailing bytes. The writer is atomic (temporary
// file, fsync, rename), so a shard on disk is complete or absent.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace hg::data {

enum class TokenDType : uint32_t { u16 = 2, u32 = 4 };
const char* token_dtype_name(TokenDType dtype);

inline constexpr char kTokenShardMagic[8] = {'H', 'G', 'T', 'O', 'K', 'E', 'N', 'S'};
inline constexpr uint32_t kTokenShardVersion = 1;
inline constexpr size_t kTokenShardHeaderBytes = 32;

// Writes `tokens` as a shard of `dtype` (each token must fit it and be < vocab_size).
void write_token_shard(const std::string& path, const std::vector<uint32_t>& tokens, TokenDType dtype,
                       uint64_t vocab_size);

// True when the file starts with the shard magic (to tell shards from text files).
bool is_token_shard(const std::string& path);

// A shard mapped read-only; tokens are read in place.
class TokenShard {
 public:
  // `expected`: throw when the file holds another dtype (nullptr: accept u16 and u32).
  explicit TokenShard(const std::string& path, const TokenDType* expected = nullptr);
  ~TokenShard();
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;

  const std::string& path() const { return path_; }
  TokenDType dtype() const { return dtype_; }
  int64_t size() const { return count_; }
  uint64_t vocab_size() const { return vocab_size_; }
  // Throws hg::Error naming the first token >= vocab_size() (the header's promise; reads the whole
  // shard once -- prepare_data's shards always pass, foreign or damaged ones may not).
  void check_tokens() const;
  uint32_t operator[](int64_t i) const {
    return dtype_ == TokenDType::u16 ? static_cast<const uint16_t*>(tokens_)[i]
                                     : static_cast<const uint32_t*>(tokens_)[i];
  }

 private:
  std::string path_;
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  const void* tokens_ = nullptr;
  TokenDType dtype_ = TokenDType::u16;
  int64_t count_ = 0;
  uint64_t vocab_size_ = 0;
};

// Tokens in memory (e.g. the bytes of a text file), for the same window dataset.
struct TokenSpan {
  std::shared_ptr<const TokenShard> shard;              // either a shard ...
  std::shared_ptr<const std::vector<uint32_t>> memory;  // ... or tokens in memory
  int64_t begin = 0, end = 0;                           // the range of tokens used
  uint32_t at(int64_t i) const { return shard ? (*shard)[begin + i] : (*memory)[size_t(begin + i)]; }
  int64_t size() const { return end - begin; }
};
TokenSpan whole(std::shared_ptr<const TokenShard> shard);
TokenSpan whole(std::shared_ptr<const std::vector<uint32_t>> tokens);

// Windows of context + 1 consecutive tokens starting every `stride` tokens within each span (never
// across two spans). Example i has fields "ids" [context] (tokens s..s+context-1) and "targets"
// [context] (tokens s+1..s+context), both i64.
class TokenWindowDataset final : public Dataset {
 public:
  TokenWindowDataset(std::vector<TokenSpan> spans, int64_t context, int64_t stride);
  int64_t size() const override { return total_; }
  std::vector<Field> fields() const override;
  void get(int64_t index, const std::vector<void*>& out) const override;
  int64_t context() const { return context_; }

 private:
  std::vector<TokenSpan> spans_;
  std::vector<int64_t> first_window_;  // prefix sums of windows per span
  int64_t context_, stride_, total_ = 0;
};

}  // namespace hg::data
