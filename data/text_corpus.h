#pragma once
// Word- and character-level text for language models: a text file cut into tokens, a vocabulary built
// from the training split, and the three splits as ids (PyTorch's examples/word_language_model and
// Karpathy's char-rnn prepare their data this way).
//
//   word_tokens    the tokens of a text, line by line: a word is a maximal run of letters, digits, '_' and
//                  '\'' (ASCII) and of bytes >= 0x80 (so UTF-8 words stay whole); every other visible
//                  character is a token of its own; whitespace separates; each line with a token ends
//                  with "<eos>" (blank lines give nothing). Case is kept.
//   char_tokens    the characters of a text, one UTF-8 sequence each ("\n" included): a character model
//                  with a vocabulary of the characters seen rather than of 256 bytes.
//   Vocabulary     "<unk>" is id 0 (every token outside the vocabulary), then "<eos>" when `specials`
//                  says so, then the tokens by falling count (ties in byte order), at most `max_size`
//                  ids and only tokens seen at least `min_count` times.
//   load_text_corpus  a file's lines split in order: the first for training, then `validation_fraction`
//                  of them for validation and `test_fraction` for test (contiguous blocks, so no window
//                  spans two splits); the vocabulary from the training split alone.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace hg::data {

inline constexpr const char* kUnknownToken = "<unk>";
inline constexpr const char* kEndOfLineToken = "<eos>";

std::vector<std::string> word_tokens(std::string_view text);
std::vector<std::string> char_tokens(std::string_view text);

class Vocabulary {
 public:
  // From `tokens` (the training split's). An hg::Error when max_size < 2 or min_count < 1.
  Vocabulary(const std::vector<std::string>& tokens, int64_t max_size, int64_t min_count, bool end_of_line);
  int64_t size() const { return int64_t(tokens_.size()); }
  // The id of `token`: 0 ("<unk>") when it is not in the vocabulary.
  uint32_t id(const std::string& token) const;
  // The token of `id`; an hg::Error for an id >= size().
  const std::string& token(uint32_t id) const;
  std::vector<uint32_t> encode(const std::vector<std::string>& tokens) const;

 private:
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, uint32_t> ids_;
};

enum class TextLevel { words, chars };
const char* text_level_name(TextLevel level);  // "words", "chars"

struct TextCorpusOptions {
  TextLevel level = TextLevel::words;
  double validation_fraction = 0.05, test_fraction = 0.05;  // of the lines
  int64_t max_vocab = 10000, min_count = 1;
};

struct TextCorpus {
  std::shared_ptr<const Vocabulary> vocabulary;
  std::shared_ptr<const std::vector<uint32_t>> train, validation, test;  // ids
  int64_t lines = 0, bytes = 0;
  // Tokens of each split that fell outside the vocabulary (ids 0).
  int64_t train_unknown = 0, validation_unknown = 0, test_unknown = 0;
};

// An hg::Error names the file when it cannot be read, holds a NUL byte (a binary file), holds no token, or
// leaves a split empty, and names the option when a fraction is outside [0, 1) or the two leave no
// training line.
TextCorpus load_text_corpus(const std::string& path, const TextCorpusOptions& options);

}  // namespace hg::data
