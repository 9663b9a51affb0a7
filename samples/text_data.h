#pragma once
// Byte-level text data for train_gpt --data FILE: the file's bytes, split 90% train / 10%
// validation, sampled as random windows of context + 1 bytes (input and next-byte target).
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace hg::samples {

class TextData {
 public:
  // Throws hg::Error naming the file when it cannot be read or is too short for `context`.
  TextData(const std::string& path, int64_t context);
  // ids [B, T], targets [B, T] from the train (or validation) split.
  std::pair<Tensor, Tensor> batch(int64_t batch, bool validation, std::mt19937_64& rng) const;
  const std::string& train() const { return train_; }

 private:
  std::string train_, validation_;
  int64_t context_;
};

}  // namespace hg::samples
