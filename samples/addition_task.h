#pragma once
// The default task of train_gpt: D-digit addition written as bytes, e.g. (D = 3)
//   "482+039=0521\n"
// Operands and the sum are zero-padded to fixed widths (D, D, D + 1 digits), so every problem is
// the same length and the answer's digits sit at fixed positions. The model is trained on the
// answer only (prompt positions have target -100) and judged by exact match of greedily generated
// answers on a held-out set: about 5% of all (a, b) pairs, chosen by a hash, never appear in
// training.
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "layers/gpt.h"

namespace hg::samples {

class AdditionTask {
 public:
  explicit AdditionTask(int digits);
  int digits() const { return digits_; }
  // "482+039=": 2 D + 2 bytes.
  int64_t prompt_length() const { return 2 * digits_ + 2; }
  // Prompt + (D + 1) answer digits + '\n'.
  int64_t problem_length() const { return prompt_length() + digits_ + 2; }
  std::string problem(int64_t a, int64_t b) const;
  bool is_held_out(int64_t a, int64_t b) const;

  // ids [B, L - 1] and targets [B, L - 1] (next bytes, -100 on the prompt), training pairs only.
  std::pair<Tensor, Tensor> training_batch(int64_t batch, std::mt19937_64& rng) const;
  // The first n held-out pairs in a fixed pseudo-random order.
  std::vector<std::pair<int64_t, int64_t>> held_out_pairs(int64_t n) const;
  // Exact-match accuracy of greedy answers to `pairs`, evaluated in batches.
  double accuracy(nn::GPT& model, const std::vector<std::pair<int64_t, int64_t>>& pairs,
                  std::vector<std::string>* answers = nullptr) const;

 private:
  int digits_;
  int64_t limit_;  // 10^digits
};

// Greedy continuation of equal-length prompts [N, P] by `steps` tokens; returns [N, P + steps].
Tensor generate_greedy(nn::GPT& model, const Tensor& prompts, int64_t steps);

}  // namespace hg::samples
