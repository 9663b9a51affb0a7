#include "samples/zoo/number_words.h"

#include <algorithm>
#include <unordered_set>

#include "data/sampler.h"
#include "kernels/error.h"

namespace hg::samples::zoo {

namespace {

const char* const kOnes[] = {"zero",     "one",     "two",     "three",     "four",     "five",    "six",
                             "seven",    "eight",   "nine",    "ten",       "eleven",   "twelve",  "thirteen",
                             "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"};
const char* const kTens[] = {"", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"};

// The words of 1 <= n <= 999.
void below_thousand(int64_t n, std::vector<std::string>& words) {
  if (n >= 100) {
    words.emplace_back(kOnes[n / 100]);
    words.emplace_back("hundred");
    n %= 100;
  }
  if (n >= 20) {
    words.emplace_back(kTens[n / 10]);
    n %= 10;
    if (n > 0) words.emplace_back(kOnes[n]);
  } else if (n > 0) {
    words.emplace_back(kOnes[n]);
  }
}

int64_t word_id(const std::string& word) {
  const std::vector<std::string>& vocabulary = target_vocabulary();
  return std::find(vocabulary.begin(), vocabulary.end(), word) - vocabulary.begin();
}

}  // namespace

const std::vector<std::string>& target_vocabulary() {
  static const std::vector<std::string> vocabulary = [] {
    std::vector<std::string> v{"<pad>", "<bos>", "<eos>"};
    for (const char* word : kOnes) v.emplace_back(word);
    for (int t = 2; t < 10; ++t) v.emplace_back(kTens[t]);
    v.emplace_back("hundred");
    v.emplace_back("thousand");
    return v;
  }();
  return vocabulary;
}

std::vector<std::string> number_words(int64_t n) {
  HG_CHECK(n >= 0 && n <= 999999, "[number_words] ", n, " is outside [0, 999999]");
  if (n == 0) return {"zero"};
  std::vector<std::string> words;
  if (n >= 1000) {
    below_thousand(n / 1000, words);
    words.emplace_back("thousand");
  }
  below_thousand(n % 1000, words);
  return words;
}

std::string number_text(int64_t n) {
  std::string text;
  for (const std::string& word : number_words(n)) text += (text.empty() ? "" : " ") + word;
  return text;
}

NumberSplit split_of(int64_t n) {
  const uint64_t bucket = data::mix64(uint64_t(n) ^ 0x6e756d626572ULL) % 20;
  return bucket == 0 ? NumberSplit::test : bucket == 1 ? NumberSplit::validation : NumberSplit::train;
}

NumberWordsDataset::NumberWordsDataset(NumberSplit split, int64_t size, uint64_t seed)
    : split_(split), size_(size), seed_(seed) {
  HG_CHECK(size >= 0, "[NumberWordsDataset] size ", size, " < 0");
  if (split == NumberSplit::train) return;
  HG_INPUT_CHECK(size <= kMaxHeldOut, "[zoo seq2seq] ", size, " held-out numbers asked for; expected at most ",
                 kMaxHeldOut, " (a split holds about 50,000)");
  std::unordered_set<int64_t> seen;
  for (int64_t i = 0; int64_t(held_out_.size()) < size; ++i)
    if (const int64_t n = draw(i); seen.insert(n).second) held_out_.push_back(n);
}

std::vector<data::Field> NumberWordsDataset::fields() const {
  return {{"source", DType::i64, {kNumberDigits}},
          {"decoder_input", DType::i64, {kNumberWords}},
          {"target", DType::i64, {kNumberWords}}};
}

int64_t NumberWordsDataset::number(int64_t index) const {
  HG_CHECK(index >= 0 && index < size_, "[NumberWordsDataset] index ", index, " outside [0, ", size_, ")");
  return held_out_.empty() ? draw(index) : held_out_[size_t(index)];
}

int64_t NumberWordsDataset::draw(int64_t index) const {
  uint64_t state = data::mix64(seed_ * 0x9e3779b97f4a7c15ULL + uint64_t(split_) * 0x51ed27 + uint64_t(index));
  for (;;) {  // 90% of numbers are training ones, 5% each held out: a few draws at most
    state = data::mix64(state);
    const int64_t digits = 1 + int64_t(state % kNumberDigits);
    int64_t low = 1, high = 10;
    for (int64_t d = 1; d < digits; ++d) low *= 10, high *= 10;
    if (digits == 1) low = 0;
    state = data::mix64(state);
    const int64_t n = low + int64_t(state % uint64_t(high - low));
    if (split_of(n) == split_) return n;
  }
}

void NumberWordsDataset::get(int64_t index, const std::vector<void*>& out) const {
  const int64_t n = number(index);
  auto* source = static_cast<int64_t*>(out[0]);
  auto* decoder_input = static_cast<int64_t*>(out[1]);
  auto* target = static_cast<int64_t*>(out[2]);
  const std::string digits = std::to_string(n);
  for (int64_t i = 0; i < kNumberDigits; ++i)
    source[i] = i < int64_t(digits.size()) ? int64_t(digits[size_t(i)] - '0') + 1 : kSourcePad;
  const std::vector<std::string> words = number_words(n);
  for (int64_t i = 0; i < kNumberWords; ++i) {
    const int64_t word = i < int64_t(words.size()) ? word_id(words[size_t(i)]) : -1;
    decoder_input[i] = i == 0 ? kBos : (i - 1 < int64_t(words.size()) ? word_id(words[size_t(i - 1)]) : kTargetPad);
    target[i] = word >= 0 ? word : (i == int64_t(words.size()) ? kEos : kIgnoredTarget);
  }
}

}  // namespace hg::samples::zoo
