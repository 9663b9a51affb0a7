#pragma once
// What train_gpt trains on, as hg::data Datasets for the DataLoader:
//   - AdditionDataset: a pool of `size` training problems drawn up front from std::mt19937_64(seed)
//     (uniform operands, held-out pairs redrawn), example i being the i-th draw, as ids [L - 1] /
//     targets [L - 1] with -100 on the prompt (see AdditionTask). The pool is already in random
//     order, so train_gpt reads it unshuffled: batch k is draws 64k..64k+63, exactly the stream the
//     trainer drew before it had a DataLoader. The difficulty score, for the easy-to-hard
//     curriculum, is the number of digits of the larger operand (1 for 7+3, 3 for 482+39).
//   - TokenData: the tokens of --data: a token shard written by prepare_data (u16/u32 ids < 256
//     for this byte-level model) or any other file read as bytes; the first 90% of each file trains,
//     the last 10% validates.
#include <cstdint>
#include <random>
#include <string>
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
  std::string description;  // "text.txt: 12345 bytes" or "a.bin: 1000 u16 tokens"
  // The first `n` training tokens (a prompt for the sample at the end).
  std::vector<int64_t> prompt(int64_t n) const;
};
// `paths`: one text file, or comma-separated token shards. Throws hg::Error naming the file when it
// cannot be read, is malformed, holds ids >= 256, or is too short for `context`.
TokenData load_token_data(const std::string& paths, int64_t context);

// `batches` validation batches of `batch` windows, the same ones every time (a fixed seed).
std::vector<std::pair<Tensor, Tensor>> validation_batches(const TokenData& tokens, int64_t context, int64_t batch,
                                                          int batches);

}  // namespace hg::samples
