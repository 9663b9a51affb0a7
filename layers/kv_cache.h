#pragma once
// KVCache: the keys and values a GPT has computed for the tokens it has seen, so that generating one
// more token runs the model on that token alone (GPT::forward(ids, cache), layers/gpt_cached_forward.cpp).
//
// LAYOUT
//   Per layer l, two tensors keys(l) and values(l) of shape [B, H, capacity, D] (D = n_embd / n_head),
//   allocated once on the model's device in the model's dtype. Positions 0 .. length() - 1 of the third
//   dimension hold the keys / values of the tokens seen so far; the rest is unused. A forward of T_new
//   tokens writes rows length() .. length() + T_new - 1 of every layer (a copy_ into a narrowed view)
//   and then attends over rows 0 .. length() + T_new - 1 of the same tensors (a narrowed view, read in
//   place by the attention kernels); length() grows by T_new once every layer has run.
//   Memory: 2 L B capacity n_embd elements (GPT-2 124M, fp32, capacity 1024: 72 MiB per sequence).
//
// COST
//   A token decoded against a cache of length T costs the projections and MLP of one token plus an
//   attention over T keys: O(T) per token, O(T^2) for a whole sequence, where recomputing the window
//   every step costs O(T^2) per token (the projections of all T tokens, attention T x T).
#include <cstdint>
#include <vector>

#include "engine/tensor.h"

namespace hg::nn {

struct GPTConfig;
class GPT;

class KVCache {
 public:
  // For sequences of `batch` rows and at most `capacity` positions (1 <= capacity <= config.context();
  // an hg::Error names both otherwise), in `dtype` on `device`.
  KVCache(const GPTConfig& config, int64_t batch, int64_t capacity, DType dtype, const Device& device);
  // The model's shape, dtype and device (those of its token embedding); capacity 0 means the context.
  KVCache(const GPT& model, int64_t batch, int64_t capacity = 0);

  // Number of positions filled (the next token's position).
  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }
  int64_t batch() const { return batch_; }
  int64_t layers() const { return int64_t(keys_.size()); }
  DType dtype() const { return keys_.front().dtype(); }
  Device device() const { return keys_.front().device(); }

  // Forgets every position (the memory stays allocated).
  void clear() { rewind(0); }
  // Keeps positions 0 .. n - 1 and forgets the rest (0 <= n <= length()): generation can resume from
  // position n, e.g. to try another continuation of a shared prompt.
  void rewind(int64_t n);

  // The whole [B, H, capacity, D] tensors of layer `layer` (rows past length() are stale).
  const Tensor& keys(int64_t layer) const;
  const Tensor& values(int64_t layer) const;

  // Called by GPT::forward(ids, cache) once every layer has written rows length() .. length() + n - 1.
  void advance(int64_t n);

 private:
  int64_t batch_ = 0, capacity_ = 0, length_ = 0;
  std::vector<Tensor> keys_, values_;
};

}  // namespace hg::nn
