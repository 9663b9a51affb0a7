#include "data/words.h"

#include <algorithm>
#include <fstream>

#include "data/sampler.h"
#include "kernels/error.h"

namespace hg::data {

namespace {

bool is_word(const std::string& line, int64_t max_length) {
  if (line.empty() || int64_t(line.size()) > max_length) return false;
  for (char c : line)
    if (c < 'a' || c > 'z') return false;
  return true;
}

}  // namespace

WordList read_words(const std::string& path, int64_t max_length) {
  std::ifstream in(path, std::ios::binary);
  HG_INPUT_CHECK(in.good(), "[read_words] cannot open '", path, "'",
                 path == kDictWords ? "; install Debian's wamerican (apt-get install wamerican)" : "",
                 "; expected a text file of one word per line");
  WordList list;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (is_word(line, max_length))
      list.words.push_back(line);
    else
      ++list.skipped;
  }
  HG_INPUT_CHECK(!in.bad(), "[read_words] reading '", path, "' failed");
  HG_INPUT_CHECK(!list.words.empty(), "[read_words] '", path, "' has no word of only 'a'..'z' (at most ", max_length,
                 " letters) among its ", list.skipped, " lines; expected one word per line");
  return list;
}

WordSplits split_words(std::vector<std::string> words, int64_t validation, int64_t test, uint64_t seed) {
  const int64_t n = int64_t(words.size());
  HG_INPUT_CHECK(validation >= 0 && test >= 0 && validation + test < n, "[split_words] ", validation,
                 " validation and ", test, " test words of ", n, "; expected them to leave at least one for training");
  const std::vector<int64_t> order = seeded_permutation(n, seed);
  WordSplits s;
  for (int64_t k = 0; k < n; ++k) {
    std::string& word = words[size_t(order[size_t(k)])];
    (k < validation ? s.validation : k < validation + test ? s.test : s.train).push_back(std::move(word));
  }
  return s;
}

int64_t char_id(char c) {
  HG_CHECK(c == '.' || (c >= 'a' && c <= 'z'), "[char_id] '", c, "' is not '.' or 'a'..'z'");
  return c == '.' ? 0 : c - 'a' + 1;
}

char id_char(int64_t id) {
  HG_CHECK(id >= 0 && id < kCharVocab, "[id_char] id ", id, " outside [0, ", kCharVocab, ")");
  return id == 0 ? '.' : char('a' + id - 1);
}

CharContextDataset::CharContextDataset(const std::vector<std::string>& words, int64_t block) : block_(block) {
  HG_CHECK(block >= 1, "[CharContextDataset] block = ", block, "; expected >= 1");
  std::vector<uint8_t> context(size_t(block), 0);
  for (const std::string& word : words) {
    std::fill(context.begin(), context.end(), uint8_t(0));
    for (size_t k = 0; k <= word.size(); ++k) {
      const uint8_t target = k < word.size() ? uint8_t(char_id(word[k])) : 0;
      contexts_.insert(contexts_.end(), context.begin(), context.end());
      targets_.push_back(target);
      context.erase(context.begin());
      context.push_back(target);
    }
  }
}

std::vector<Field> CharContextDataset::fields() const {
  return {{"context", DType::i64, {block_}}, {"target", DType::i64, {}}};
}

void CharContextDataset::get(int64_t index, const std::vector<void*>& out) const {
  HG_CHECK(index >= 0 && index < size(), "[CharContextDataset] index ", index, " outside [0, ", size(), ")");
  int64_t* context = static_cast<int64_t*>(out[0]);
  for (int64_t k = 0; k < block_; ++k) context[k] = contexts_[size_t(index * block_ + k)];
  *static_cast<int64_t*>(out[1]) = targets_[size_t(index)];
}

}  // namespace hg::data
