#pragma once
// Text and byte-level BPE vocabularies made in-process, for the tokenizer's tests, benchmark and fuzz
// seeds (no corpus file, no trained vocabulary needed):
//   synthetic_text(bytes, seed): varied text -- English-like words from syllables, capitals,
//     contractions, numbers, punctuation, whitespace runs (spaces, tabs, newlines), and words in
//     Greek, Cyrillic, Japanese, accented Latin and emoji -- deterministic for a seed;
//   synthetic_tokenizer(corpus, merges): merges of frequent pairs, learned in rounds: each round
//     encodes every distinct piece of the corpus with the merges so far and adds the `per_round` most
//     frequent adjacent pairs (ties: by bytes) as new merges. Not Hugging Face's trainer (that is
//     train_bpe), but a consistent vocabulary of realistic shape for any size.
#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "text/pretokenize.h"
#include "text/tokenizer.h"

namespace hg::test {

inline std::string synthetic_text(size_t bytes, uint64_t seed) {
  static const char* syllables[] = {"the", "an", "ing", "er", "on", "re", "at", "en", "is", "or", "ti", "es", "ed",
                                    "al", "ar", "st", "to", "nt", "ng", "se", "ha", "ou", "of", "le", "it", "co",
                                    "de", "ra", "ri", "ro", "ma", "ne", "li", "ve", "pro", "con", "ex", "qu", "y"};
  static const char* foreign[] = {"λόγος", "αλήθεια", "слово", "правда", "日本語", "テキスト", "東京", "café", "naïve",
                                  "Zürich", "señor", "😀", "👋🏽", "🚀✨", "مرحبا", "שלום", "हिन्दी", "한국어"};
  static const char* contractions[] = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T"};
  static const char* punct[] = {".", ",", "!", "?", ";", ":", "...", " -", " (", ")", "\"", "'", " --", "/", "#", "{}"};
  std::mt19937_64 rng(seed);
  auto pick = [&](size_t n) { return size_t(rng() % n); };
  std::string out;
  out.reserve(bytes + 64);
  bool sentence_start = true;
  while (out.size() < bytes) {
    const size_t kind = pick(100);
    if (kind < 70) {
      std::string word;
      const size_t n = 1 + pick(4);
      for (size_t i = 0; i < n; ++i) word += syllables[pick(std::size(syllables))];
      if (sentence_start || pick(12) == 0) word[0] = char(word[0] - 'a' + 'A');
      sentence_start = false;
      out += (out.empty() || out.back() == '\n') ? "" : " ";
      out += word;
      if (pick(15) == 0) out += contractions[pick(std::size(contractions))];
    } else if (kind < 78) {
      out += " " + std::to_string(rng() % (pick(3) == 0 ? 1000000 : 100));
    } else if (kind < 90) {
      out += punct[pick(std::size(punct))];
      if (pick(3) == 0) sentence_start = true;
    } else if (kind < 95) {
      out += " ";
      out += foreign[pick(std::size(foreign))];
    } else {
      static const char* spaces[] = {"\n", "\n\n", "  ", "\t", "   \n", " \t ", "\n    ", "\r\n"};
      out += spaces[pick(std::size(spaces))];
    }
  }
  return out;
}

inline text::Tokenizer synthetic_tokenizer(std::string_view corpus, size_t merges, size_t per_round = 0,
                                           bool end_of_text = true) {
  if (per_round == 0) per_round = std::max<size_t>(1, merges / 20);
  std::unordered_map<std::string, uint64_t> words;
  for (std::string_view piece : text::pretokenize(corpus)) ++words[std::string(piece)];
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, char(b));
  std::vector<text::SpecialToken> specials;
  if (end_of_text) {
    specials.push_back({"<|endoftext|>", uint32_t(tokens.size())});
    tokens.emplace_back("<|endoftext|>");
  }
  std::vector<std::pair<std::string, std::string>> rules;
  std::map<std::string, uint32_t> known;
  for (uint32_t i = 0; i < tokens.size(); ++i) known.emplace(tokens[i], i);
  while (rules.size() < merges) {
    const text::Tokenizer tok = text::Tokenizer::from_parts(tokens, rules, specials);
    std::map<std::pair<uint32_t, uint32_t>, uint64_t> pairs;
    for (const auto& [word, count] : words) {
      const std::vector<uint32_t> ids = tok.encode(word);
      for (size_t i = 0; i + 1 < ids.size(); ++i) pairs[{ids[i], ids[i + 1]}] += count;
    }
    std::vector<std::pair<uint64_t, std::pair<std::string, std::string>>> ranked;
    for (const auto& [pair, count] : pairs) {
      if (count >= 2) ranked.push_back({count, {tok.token_bytes(pair.first), tok.token_bytes(pair.second)}});
    }
    if (ranked.empty()) break;
    std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    for (size_t i = 0; i < ranked.size() && i < per_round && rules.size() < merges; ++i) {
      const auto& [left, right] = ranked[i].second;
      rules.emplace_back(left, right);
      if (known.emplace(left + right, uint32_t(tokens.size())).second) tokens.push_back(left + right);
    }
  }
  return text::Tokenizer::from_parts(std::move(tokens), std::move(rules), std::move(specials));
}

}  // namespace hg::test
