// Fuzz target: data/text_corpus.h load_text_corpus on arbitrary bytes, at the word and the character level.
// An accepted corpus has "<unk>" as id 0, no two ids for one token, every id of every split inside the
// vocabulary, unknown counts equal to the splits' zeros, words without whitespace, and characters of at most
// 4 bytes (so a tokenizer rule broken by some byte is a finding).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <set>

#include "data/text_corpus.h"
#include "fuzz/fuzz_input.h"
#include "kernels/error.h"

namespace {

void check(const hg::data::TextCorpus& c, hg::data::TextLevel level) {
  const hg::data::Vocabulary& v = *c.vocabulary;
  if (v.size() < 1 || v.size() > 64 || v.token(0) != hg::data::kUnknownToken) std::abort();
  std::set<std::string> seen;
  for (int64_t id = 0; id < v.size(); ++id) {
    const std::string& token = v.token(uint32_t(id));
    if (!seen.insert(token).second || v.id(token) != uint32_t(id) || token.empty()) std::abort();
    const bool special = token == hg::data::kUnknownToken || token == hg::data::kEndOfLineToken;
    if (level == hg::data::TextLevel::words && !special && token.find_first_of(" \t\r\n") != std::string::npos)
      std::abort();
    if (level == hg::data::TextLevel::chars && !special && token.size() > 4) std::abort();
  }
  const auto split = [&](const std::vector<uint32_t>& ids, int64_t unknown) {
    for (uint32_t id : ids)
      if (int64_t(id) >= v.size()) std::abort();
    if (std::count(ids.begin(), ids.end(), 0u) != unknown) std::abort();
  };
  split(*c.train, c.train_unknown);
  split(*c.validation, c.validation_unknown);
  split(*c.test, c.test_unknown);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = hg::fuzz::write_input(data, size);
  for (const hg::data::TextLevel level : {hg::data::TextLevel::words, hg::data::TextLevel::chars}) {
    try {
      check(hg::data::load_text_corpus(path, {level, 0.2, 0.2, 64, 1}), level);
    } catch (const hg::Error& e) {
      if (std::strlen(e.what()) == 0) std::abort();
    }
  }
  return 0;
}
