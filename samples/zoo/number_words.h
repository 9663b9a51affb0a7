#pragma once
// seq2seq's task: a number from 0 to 999,999 written in digits, to its English words.
//
//   source  "40213"                                -> digit ids (digit d: d + 1), then 0 padding to 6
//   target  "forty thousand two hundred thirteen"  -> word ids of target_vocabulary(), then <eos>
//
// Lengths vary (1 to 6 digits, 1 to 9 words), so the model needs the source's padding mask, the
// decoder's causal and padding masks, and cross-attention to read the digits in the right places.
// A hash of the number puts 5% of all numbers in the test split and 5% in the validation split; the
// training split never sees them, so exact match on them measures generalisation, not memory.
#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace hg::samples::zoo {

inline constexpr int64_t kNumberDigits = 6;  // the source length: 999,999 has 6 digits
inline constexpr int64_t kNumberWords = 10;  // the target length: 9 words at most (777,777), then <eos>
inline constexpr int64_t kSourcePad = 0;     // source id of padding; digit d is d + 1
inline constexpr int64_t kSourceVocabulary = 11;
inline constexpr int64_t kTargetPad = 0, kBos = 1, kEos = 2;  // target ids; the words follow
inline constexpr int64_t kIgnoredTarget = -100;               // cross_entropy's ignore_index

// "<pad>", "<bos>", "<eos>", then "zero" ... "nineteen", "twenty" ... "ninety", "hundred", "thousand".
const std::vector<std::string>& target_vocabulary();

// The words of n in [0, 999999]: 40213 -> {"forty", "thousand", "two", "hundred", "thirteen"}.
std::vector<std::string> number_words(int64_t n);
// The words as one string, joined by spaces.
std::string number_text(int64_t n);

enum class NumberSplit { train, validation, test };
inline constexpr int64_t kMaxHeldOut = 40000;  // of the ~50,000 numbers in each held-out split
// Which split n belongs to (a hash of n: 5% test, 5% validation, the rest training).
NumberSplit split_of(int64_t n);

// Examples of one split. Numbers are drawn from a splitmix64 stream of (seed, split, i): a digit count
// uniform in 1..6, then a number uniform among those with that many digits, drawn again until it is in the
// split. Training example i is the i-th draw (small numbers recur); the held-out splits keep the first
// `size` distinct draws (at most kMaxHeldOut), so each of their numbers is judged once. Fields:
//   "source"        i64 [6]  digit ids, 0-padded
//   "decoder_input" i64 [10]  <bos>, the words, 0-padded (teacher forcing)
//   "target"        i64 [10]  the words, <eos>, -100-padded (ignored by the loss)
class NumberWordsDataset : public data::Dataset {
 public:
  NumberWordsDataset(NumberSplit split, int64_t size, uint64_t seed);
  int64_t size() const override { return size_; }
  std::vector<data::Field> fields() const override;
  void get(int64_t index, const std::vector<void*>& out) const override;
  // The number of example `index`.
  int64_t number(int64_t index) const;

 private:
  int64_t draw(int64_t index) const;  // the index-th number of the split's stream

  NumberSplit split_;
  int64_t size_;
  uint64_t seed_;
  std::vector<int64_t> held_out_;  // the held-out splits' distinct numbers
};

}  // namespace hg::samples::zoo
