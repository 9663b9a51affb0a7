#pragma once
// What train_gpt trains on, as hg::data Datasets for the DataLoader:
//   - AdditionDataset: a pool of `size` training problems drawn up front from std::mt19937_64(seed)
//     (uniform operands, held-out pairs redrawn), example i being the i-th draw, as ids [L - 1] /
//     targets [L - 1] with -100 on the prompt (see AdditionTask). The pool is already in random
//     order, so train_gpt reads it unshuffled: batch k is draws 64k..64k+63, exactly the stream the
//     trainer drew before it had a DataLoader. The difficulty score, for the easy-to-hard
//     curriculum, is the number of digits of the larger operand (1 for 7+3, 3 for 482+39).
//   - TokenData: the tokens of --data: token shards written by prepare_data (byte-level or BPE; the
//     vocabulary is the shards' header's, the same in every shard) or any other file read as bytes
//     (vocabulary 256); the first 90% of each file trains, the last 10% validates.
//   - ValidationSet and TokenBytes: the fixed validation batches, and what their loss per token is
//     in bits per byte: bits/byte = (mean loss in nats x scored tokens) / (ln 2 x bytes of those
//     tokens), the bytes being the sum of each target token's length in bytes (the tokenizer's
//     token_bytes; exact for a byte-level BPE, whose tokens concatenate to the text).
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/dataset.h"
#include "data/token_shard.h"
#include "samples/addition_task.h"

namespace hg::samples {

class AdditionDataset final : public data::Dataset {
 public:
  AdditionDataset(const AdditionTask& task, int64_t size, uint64_t seed);
  int64_t size() const override { return size_; }
  std::vector<data::Field> fields() const override;
  void get(int64_t index, const std::vector<void*>& out) const override;
  std::pair<int64_t, int64_t> pair(int64_t index) const;
  // Digits of the larger operand of example `index`.
  int32_t difficulty(int64_t index) const;
  std::vector<int32_t> difficulties() const;

 private:
  AdditionTask task_;
  int64_t size_;
  std::vector<std::pair<int32_t, int32_t>> pairs_;
};

struct TokenData {
  std::vector<data::TokenSpan> train, validation;
  std::string description;    // "text.txt: 12345 bytes" or "a.bin: 1000 u16 tokens"
  uint64_t vocab_size = 256;  // the shards' header vocabulary; 256 for a text file read as bytes
  // The first `n` training tokens (a prompt for the sample at the end).
  std::vector<int64_t> prompt(int64_t n) const;
};
// `paths`: one text file, or comma-separated token shards. Throws hg::Error naming the file when it
// cannot be read, is malformed, holds an id >= its header's vocabulary, has another vocabulary than
// the first shard, or is too short for `context`.
TokenData load_token_data(const std::string& paths, int64_t context);

// The vocabulary of `paths` from the shards' headers alone (no token is read): every shard must
// give the same one (an hg::Error names both files and both sizes otherwise); 256 for a text file.
uint64_t token_data_vocab(const std::string& paths);
// The vocabulary of a fresh model for data of `data_vocab` ids: `data_vocab`, or `requested`
// (--vocab) when given, which must equal it (an hg::Error names both otherwise).
int64_t fresh_model_vocab(uint64_t data_vocab, std::optional<int64_t> requested, const std::string& data);
// Throws unless a loaded model of `model_vocab` ids can embed every id of data of `data_vocab`.
void check_model_vocab(int64_t model_vocab, uint64_t data_vocab, const std::string& model, const std::string& data);

// Throws unless the tokenizer `path` (of `tokenizer_vocab` ids) has the vocabulary of --data `data`
// (the one prepare_data wrote its shards with): the message names both files and both sizes.
void check_tokenizer_vocab(uint64_t tokenizer_vocab, uint64_t data_vocab, const std::string& path,
                           const std::string& data);

// Throws unless the tokenizer `path` encodes --data's text to --data's ids (the same vocabulary size is
// not enough: another tokenizer of that size would give wrong bits per byte and a garbled sample).
// The first `probe` ids of the first training span are decoded (`decode`); the text from the first
// safe cut after its start (the span may start mid-text) to the last safe cut before its end
// (samples/text_cuts.h, under `special_tokens`) is encoded again (`encode`) and must give the same
// ids. The message names both files and the first token that differs. Data too short to hold two
// safe cuts is not checked beyond its vocabulary.
void check_tokenizer_ids(const TokenData& data, const std::function<std::string(std::span<const uint32_t>)>& decode,
                         const std::function<std::vector<uint32_t>(std::string_view)>& encode,
                         const std::vector<std::string>& special_tokens, const std::string& path,
                         const std::string& data_paths, int64_t probe = 4096);

// Bytes of text per token id, to count the bytes a run of tokens stands for.
class TokenBytes {
 public:
  // Every id one byte (byte-level data: vocabulary 256, token = byte).
  static TokenBytes byte_level();
  // lengths[id] = the byte length of token id (Tokenizer::token_bytes(id).size()).
  explicit TokenBytes(std::vector<uint32_t> lengths) : lengths_(std::move(lengths)) {}
  uint64_t vocab_size() const { return lengths_.size(); }
  // The bytes of the tokens `ids` (targets < 0, ignored by the loss, count nothing); throws naming
  // an id outside the vocabulary.
  int64_t bytes(std::span<const int64_t> ids) const;

 private:
  std::vector<uint32_t> lengths_;
};

// Bits per byte of `tokens` scored tokens whose mean loss is `mean_loss` nats and whose text is
// `bytes` bytes long: mean_loss * tokens / (ln 2 * bytes).
double bits_per_byte(double mean_loss, int64_t tokens, int64_t bytes);

// The baseline a model must beat: a unigram model -- each token's frequency among the training tokens,
// add-one smoothed over the vocabulary -- scored on every validation token: its mean loss (nats per
// token), the tokens scored and, given `bytes`, their bytes.
struct UnigramBaseline {
  double loss = 0;
  int64_t tokens = 0;
  std::optional<int64_t> bytes;
};
UnigramBaseline unigram_baseline(const TokenData& data, const TokenBytes* bytes);

// `batches` validation batches of `batch` windows, the same ones every time (a fixed seed), with the
// number of scored target tokens and, given `bytes`, the bytes of text they stand for.
struct ValidationSet {
  std::vector<std::pair<Tensor, Tensor>> batches;  // (ids, targets), each [batch, context] i64
  int64_t tokens = 0;
  std::optional<int64_t> bytes;  // absent without a TokenBytes (BPE data without its tokenizer)
};
ValidationSet validation_set(const TokenData& tokens, int64_t context, int64_t batch, int batches,
                             const TokenBytes* bytes);

}  // namespace hg::samples
