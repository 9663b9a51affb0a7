#pragma once
// Word lists for character-level models (the zoo's makemore): one word per line, as Debian's wamerican
// installs /usr/share/dict/words.
//
//   read_words       the words made only of 'a'..'z' (others -- capitals, apostrophes, accents -- are
//                    skipped and counted), at most max_length long, in file order
//   split_words      a seeded shuffle, then `validation` words, `test` words and the rest for training
//   CharContextDataset  every (context, next character) of a word list: for a word w the targets are
//                    w's characters then '.', the end; each context is the `block` characters before
//                    the target, '.' where they fall before the word's start (Bengio et al. 2003; the
//                    makemore series). Fields "context" i64 [block] and "target" i64 [].
// Character ids: '.' (start and end of a word) 0, 'a'..'z' 1..26.
#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace hg::data {

// Where Debian's wamerican puts its word list.
inline constexpr const char* kDictWords = "/usr/share/dict/words";
inline constexpr int64_t kCharVocab = 27;

struct WordList {
  std::vector<std::string> words;
  int64_t skipped = 0;  // lines that were not a word of 'a'..'z' of at most max_length
};
// Errors name the file (and the package for the default path): missing, unreadable, no usable word.
WordList read_words(const std::string& path, int64_t max_length = 32);

struct WordSplits {
  std::vector<std::string> train, validation, test;
};
// An error unless validation + test leave at least one training word.
WordSplits split_words(std::vector<std::string> words, int64_t validation, int64_t test, uint64_t seed);

// The id of 'a'..'z' or '.'; the character of an id.
int64_t char_id(char c);
char id_char(int64_t id);

class CharContextDataset final : public Dataset {
 public:
  CharContextDataset(const std::vector<std::string>& words, int64_t block);
  int64_t size() const override { return int64_t(targets_.size()); }
  std::vector<Field> fields() const override;
  void get(int64_t index, const std::vector<void*>& out) const override;
  int64_t block() const { return block_; }

 private:
  int64_t block_;
  std::vector<uint8_t> contexts_;  // size() x block
  std::vector<uint8_t> targets_;
};

}  // namespace hg::data
