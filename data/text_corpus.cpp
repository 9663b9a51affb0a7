#include "data/text_corpus.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "kernels/error.h"

namespace hg::data {

namespace {

bool is_word_byte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '\'' ||
         c >= 0x80;
}

bool is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v' || c < 0x20; }

// The length of the UTF-8 sequence starting with lead byte `c` (1 for a stray continuation byte).
size_t utf8_length(unsigned char c) { return c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1; }

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    const size_t stop = end == std::string_view::npos ? text.size() : end;
    lines.push_back(text.substr(start, stop - start));
    start = stop + 1;
  }
  return lines;
}

std::string joined(const std::vector<std::string_view>& lines, size_t first, size_t last) {
  std::string text;
  for (size_t i = first; i < last; ++i) {
    text.append(lines[i]);
    text.push_back('\n');
  }
  return text;
}

}  // namespace

std::vector<std::string> word_tokens(std::string_view text) {
  std::vector<std::string> tokens;
  for (const std::string_view line : lines_of(text)) {
    bool any = false;
    for (size_t i = 0; i < line.size();) {
      const auto c = static_cast<unsigned char>(line[i]);
      if (is_space(c)) {
        ++i;
        continue;
      }
      size_t j = i + 1;
      if (is_word_byte(c))
        while (j < line.size() && is_word_byte(static_cast<unsigned char>(line[j]))) ++j;
      tokens.emplace_back(line.substr(i, j - i));
      any = true;
      i = j;
    }
    if (any) tokens.emplace_back(kEndOfLineToken);
  }
  return tokens;
}

std::vector<std::string> char_tokens(std::string_view text) {
  std::vector<std::string> tokens;
  for (size_t i = 0; i < text.size();) {
    const size_t n = std::min(utf8_length(static_cast<unsigned char>(text[i])), text.size() - i);
    tokens.emplace_back(text.substr(i, n));
    i += n;
  }
  return tokens;
}

Vocabulary::Vocabulary(const std::vector<std::string>& tokens, int64_t max_size, int64_t min_count, bool end_of_line) {
  HG_INPUT_CHECK(max_size >= 2, "[Vocabulary] max_size ", max_size, "; expected at least 2 (\"<unk>\" and a token)");
  HG_INPUT_CHECK(min_count >= 1, "[Vocabulary] min_count ", min_count, "; expected at least 1");
  std::unordered_map<std::string, int64_t> counts;
  for (const std::string& t : tokens) ++counts[t];
  std::vector<std::pair<std::string, int64_t>> ranked;
  for (auto& [token, count] : counts)
    if (count >= min_count && token != kUnknownToken && token != kEndOfLineToken) ranked.emplace_back(token, count);
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  tokens_.push_back(kUnknownToken);
  if (end_of_line) tokens_.push_back(kEndOfLineToken);
  for (const auto& [token, count] : ranked) {
    if (int64_t(tokens_.size()) >= max_size) break;
    tokens_.push_back(token);
  }
  for (size_t i = 0; i < tokens_.size(); ++i) ids_.emplace(tokens_[i], uint32_t(i));
}

uint32_t Vocabulary::id(const std::string& token) const {
  const auto it = ids_.find(token);
  return it == ids_.end() ? 0 : it->second;
}

const std::string& Vocabulary::token(uint32_t id) const {
  HG_INPUT_CHECK(id < tokens_.size(), "[Vocabulary] id ", id, " is outside the vocabulary of ", tokens_.size());
  return tokens_[id];
}

std::vector<uint32_t> Vocabulary::encode(const std::vector<std::string>& tokens) const {
  std::vector<uint32_t> ids;
  ids.reserve(tokens.size());
  for (const std::string& t : tokens) ids.push_back(id(t));
  return ids;
}

const char* text_level_name(TextLevel level) { return level == TextLevel::words ? "words" : "chars"; }

TextCorpus load_text_corpus(const std::string& path, const TextCorpusOptions& o) {
  HG_INPUT_CHECK(o.validation_fraction >= 0.0 && o.validation_fraction < 1.0 && o.test_fraction >= 0.0 &&
                     o.test_fraction < 1.0 && o.validation_fraction + o.test_fraction < 1.0,
                 "[text corpus] validation fraction ", o.validation_fraction, " and test fraction ", o.test_fraction,
                 "; expected each in [0, 1) and their sum below 1, leaving lines for training");
  std::ifstream file(path, std::ios::binary);
  HG_INPUT_CHECK(file.good(), "[text corpus] cannot read '", path, "': ", std::strerror(errno),
                 "; expected a text file");
  const std::string text{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  HG_INPUT_CHECK(!file.bad(), "[text corpus] reading '", path, "' failed");
  const size_t nul = text.find('\0');
  HG_INPUT_CHECK(nul == std::string::npos, "[text corpus] '", path, "' has a NUL byte at offset ", nul,
                 "; expected a text file, not a binary one");
  const std::vector<std::string_view> lines = lines_of(text);
  const size_t n = lines.size();
  const auto validation_lines = size_t(double(n) * o.validation_fraction);
  const auto test_lines = size_t(double(n) * o.test_fraction);
  const size_t train_end = n - validation_lines - test_lines, validation_end = n - test_lines;
  const auto tokens_of = [&](size_t first, size_t last) {
    const std::string part = joined(lines, first, last);
    return o.level == TextLevel::words ? word_tokens(part) : char_tokens(part);
  };
  const std::vector<std::string> train = tokens_of(0, train_end);
  HG_INPUT_CHECK(!train.empty(), "[text corpus] '", path, "' has no ", text_level_name(o.level), " in its first ",
                 train_end, " of ", n, " lines (the training split); expected text");
  TextCorpus corpus;
  corpus.lines = int64_t(n);
  corpus.bytes = int64_t(text.size());
  corpus.vocabulary = std::make_shared<Vocabulary>(train, o.max_vocab, o.min_count, o.level == TextLevel::words);
  const auto encoded = [&](const std::vector<std::string>& tokens, int64_t& unknown, const char* split,
                           double fraction) {
    HG_INPUT_CHECK(fraction == 0.0 || !tokens.empty(), "[text corpus] '", path, "': the ", split, " split (", fraction,
                   " of ", n, " lines) holds no ", text_level_name(o.level), "; expected more text");
    auto ids = std::make_shared<std::vector<uint32_t>>(corpus.vocabulary->encode(tokens));
    unknown = std::count(ids->begin(), ids->end(), 0u);
    return std::shared_ptr<const std::vector<uint32_t>>(std::move(ids));
  };
  corpus.train = encoded(train, corpus.train_unknown, "training", 1.0);
  corpus.validation =
      encoded(tokens_of(train_end, validation_end), corpus.validation_unknown, "validation", o.validation_fraction);
  corpus.test = encoded(tokens_of(validation_end, n), corpus.test_unknown, "test", o.test_fraction);
  return corpus;
}

}  // namespace hg::data
