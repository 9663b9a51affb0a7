// train_bpe: byte-level BPE training that reproduces Hugging Face `tokenizers`' BpeTrainer (ByteLevel
// pre-tokenizer, the 256 byte characters as initial alphabet) token for token and merge for merge.
//
// What `tokenizers` does, and so what this does:
//   - ids: the special tokens first, in the order given (a repeated one counted once), then the 256
//     bytes in the order of the characters that spell them (text/byte_alphabet.h: '!'..'~', U+00A1..,
//     then U+0100.. for the 68 others), then each merge's new token as it is learned;
//   - words: the corpus is cut at the special tokens (leftmost match, longest at a position; they are
//     never counted as text), each piece of text is pre-tokenised (text/pretokenize.h) and identical
//     pieces are counted once with their multiplicity;
//   - merges: a max-heap of candidate pairs ordered by count, ties broken by the smaller pair of ids
//     (left id, then right id). Each candidate carries the words it was seen in. The heap is lazy: a
//     popped candidate whose count is stale is pushed back with the current count. The winner's new
//     token is the concatenation of its parts (an existing token's id when that string already is
//     one); every word the candidate lists is rewritten left to right, non-overlapping, and each
//     rewrite reports the neighbouring pairs it removes (-1) and creates (+1) -- the only counts that
//     change, so nothing is recounted. Pairs that gained occurrences are pushed as new candidates
//     listing just the words where they appeared. The merged pair's own count is left as it was,
//     as `tokenizers` leaves it (it matters only if the pair is queued twice).
//   - stop: when the vocabulary (special tokens included) has `vocab_size` tokens, the heap is empty,
//     or the best pair occurs fewer than `min_frequency` times (and at least once);
//   - the merge list: if one pair was merged twice, its later rank is the one kept (tokenizers keeps
//     its merges in a map from pair to rank, and writes them in rank order).
// Cost: pre-tokenising and counting the corpus once, then per merge only the words holding the pair.
//
// Not reproduced, refused instead: a special token spelled like a byte or learned token (`tokenizers`
// would give both the one id, so the byte or merge would lose its own); an empty special token.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/error.h"
#include "text/byte_alphabet.h"
#include "text/pair_counts.h"
#include "text/pretokenize.h"
#include "text/tokenizer.h"

namespace hg::text {
namespace {

// A pair of token ids as one integer whose numeric order is the pair's (left, right) order.
using Pair = PairCounts::Pair;
Pair make_pair_key(uint32_t left, uint32_t right) { return (uint64_t(left) << 32) | right; }
uint32_t left_of(Pair p) { return uint32_t(p >> 32); }
uint32_t right_of(Pair p) { return uint32_t(p); }

struct PairHash {
  size_t operator()(Pair p) const { return size_t((p ^ (p >> 29)) * 0x9E3779B97F4A7C15ull); }
};

// A queued pair: its count when queued and the words (indices) it was seen in then.
struct Candidate {
  uint64_t count;
  Pair pair;
  std::vector<uint32_t> words;
};
// Heap order (std::push_heap keeps the greatest first): more occurrences first, then the smaller pair.
bool queued_after(const Candidate& a, const Candidate& b) {
  return a.count != b.count ? a.count < b.count : a.pair > b.pair;
}

// Calls on_text(piece of text) for the text between special tokens, in order. At each position the
// leftmost occurrence of any special token is cut out; of several starting there, the longest.
template <class OnText>
void for_each_document(std::string_view corpus, const std::vector<std::string>& specials, OnText&& on_text) {
  std::vector<size_t> next(specials.size());
  for (size_t s = 0; s < specials.size(); ++s) next[s] = corpus.find(specials[s]);
  size_t start = 0;
  for (;;) {
    size_t best = std::string_view::npos, best_len = 0;
    for (size_t s = 0; s < specials.size(); ++s) {
      if (next[s] < start) next[s] = corpus.find(specials[s], start);
      if (next[s] < best || (next[s] == best && next[s] != std::string_view::npos && specials[s].size() > best_len)) {
        best = next[s];
        best_len = specials[s].size();
      }
    }
    if (best == std::string_view::npos) {
      if (start < corpus.size()) on_text(corpus.substr(start));
      return;
    }
    if (best > start) on_text(corpus.substr(start, best - start));
    start = best + best_len;
  }
}

std::string printable(std::string_view bytes) { return "\"" + bytes_to_spelling(bytes) + "\""; }

class Trainer {
 public:
  Trainer(std::string_view corpus, const BpeTrainerOptions& options) : options_(options) {
    add_special_tokens();
    add_byte_tokens();
    count_words(corpus);
  }

  Tokenizer run() {
    count_pairs();
    learn_merges();
    return build();
  }

 private:
  void add_special_tokens() {
    for (const std::string& content : options_.special_tokens) {
      if (content.empty()) throw Error("train_bpe: a special token is empty; expected its text, e.g. <|endoftext|>");
      if (std::find(specials_.begin(), specials_.end(), content) != specials_.end()) continue;
      special_ids_.push_back(uint32_t(tokens_.size()));
      specials_.push_back(content);
      tokens_.push_back(content);
      special_raw_.emplace(content, content);
      if (auto bytes = spelling_to_bytes(content)) special_spelled_.emplace(*bytes, content);
    }
  }

  // The 256 byte tokens, in the order of the code points that spell them.
  void add_byte_tokens() {
    std::vector<unsigned char> bytes(256);
    for (int b = 0; b < 256; ++b) bytes[b] = static_cast<unsigned char>(b);
    std::sort(bytes.begin(), bytes.end(), [](unsigned char a, unsigned char b) { return byte_to_char(a) < byte_to_char(b); });
    for (unsigned char b : bytes) {
      const std::string token(1, static_cast<char>(b));
      check_not_special(token, "the byte token of byte " + std::to_string(int(b)));
      byte_ids_[b] = uint32_t(tokens_.size());
      ids_.emplace(token, uint32_t(tokens_.size()));
      tokens_.push_back(token);
    }
  }

  // A token (raw bytes) that a special token also spells -- as its text, or in the byte alphabet the
  // way `tokenizers` keys its vocabulary -- would share that special token's id there.
  void check_not_special(const std::string& token, const std::string& what) const {
    for (const auto* specials : {&special_raw_, &special_spelled_}) {
      auto it = specials->find(token);
      if (it != specials->end())
        throw Error(detail::concat("train_bpe: special token \"", it->second, "\" is spelled like ", what, " ",
                                   printable(token),
                                   " (Hugging Face tokenizers would give both one id); choose another special token"));
    }
  }

  void count_words(std::string_view corpus) {
    std::unordered_map<std::string_view, uint64_t> counts;
    counts.reserve(corpus.size() / 64 + 16);
    for_each_document(corpus, specials_, [&](std::string_view text) {
      PieceSplitter splitter(text);
      std::string_view piece;
      while (splitter.next(piece)) ++counts[piece];
    });
    words_.reserve(counts.size());
    word_counts_.reserve(counts.size());
    for (const auto& [piece, count] : counts) {
      std::vector<uint32_t> symbols(piece.size());
      for (size_t i = 0; i < piece.size(); ++i) symbols[i] = byte_ids_[static_cast<unsigned char>(piece[i])];
      words_.push_back(std::move(symbols));
      word_counts_.push_back(count);
    }
  }

  // Every adjacent pair of every word, counted with the word's multiplicity, queued with its words.
  void count_pairs() {
    for (uint32_t w = 0; w < words_.size(); ++w) {
      const std::vector<uint32_t>& s = words_[w];
      for (size_t i = 0; i + 1 < s.size(); ++i) note_change(make_pair_key(s[i], s[i + 1]), 1, w);
    }
    queue_updated_pairs();
  }

  // A pair's count moves by `change` occurrences of word `w`; one that appears is remembered there.
  void note_change(Pair pair, int change, uint32_t w) {
    pair_counts_.add(pair, int64_t(change) * int64_t(word_counts_[w]), change > 0 ? &w : nullptr);
  }

  void queue_updated_pairs() {
    for (PairCounts::Gained& g : pair_counts_.take_gained()) {
      const int64_t count = pair_counts_.count(g.pair);
      if (count > 0) push(Candidate{uint64_t(count), g.pair, std::move(g.words)});
    }
  }

  void push(Candidate c) {
    queue_.push_back(std::move(c));
    std::push_heap(queue_.begin(), queue_.end(), queued_after);
  }
  Candidate pop() {
    std::pop_heap(queue_.begin(), queue_.end(), queued_after);
    Candidate c = std::move(queue_.back());
    queue_.pop_back();
    return c;
  }

  void learn_merges() {
    while (tokens_.size() < options_.vocab_size && !queue_.empty()) {
      Candidate top = pop();
      const uint64_t current = uint64_t(pair_counts_.count(top.pair));
      if (top.count != current) {  // stale: requeue with today's count
        top.count = current;
        push(std::move(top));
        continue;
      }
      if (top.count < 1 || options_.min_frequency > top.count) break;
      const uint32_t left = left_of(top.pair), right = right_of(top.pair);
      const uint32_t merged = token_for(tokens_[left] + tokens_[right]);
      merges_.emplace_back(top.pair, merged);
      for (uint32_t w : top.words) merge_in_word(w, left, right, merged);
      queue_updated_pairs();
    }
  }

  uint32_t token_for(std::string bytes) {
    auto it = ids_.find(bytes);
    if (it != ids_.end()) return it->second;
    check_not_special(bytes, "a learned token");
    const auto id = uint32_t(tokens_.size());
    ids_.emplace(bytes, id);
    tokens_.push_back(std::move(bytes));
    return id;
  }

  // Rewrites every (left, right) of word w as `merged`, left to right without overlaps, reporting
  // the pairs around each rewrite: (previous, left) and (right, next) go, (previous, merged) and
  // (merged, next) come. "previous" is the symbol already written (possibly a rewrite itself).
  void merge_in_word(uint32_t w, uint32_t left, uint32_t right, uint32_t merged) {
    std::vector<uint32_t>& s = words_[w];
    const size_t n = s.size();
    size_t out = 0;
    for (size_t i = 0; i < n;) {
      if (s[i] == left && i + 1 < n && s[i + 1] == right) {
        if (out > 0) {
          note_change(make_pair_key(s[out - 1], left), -1, w);
          note_change(make_pair_key(s[out - 1], merged), 1, w);
        }
        if (i + 2 < n) {
          note_change(make_pair_key(right, s[i + 2]), -1, w);
          note_change(make_pair_key(merged, s[i + 2]), 1, w);
        }
        s[out++] = merged;
        i += 2;
      } else {
        s[out++] = s[i++];
      }
    }
    s.resize(out);
  }

  Tokenizer build() {
    // A pair merged twice keeps its later rank.
    std::unordered_map<Pair, size_t, PairHash> last_rank;
    for (size_t r = 0; r < merges_.size(); ++r) last_rank[merges_[r].first] = r;
    std::vector<std::pair<std::string, std::string>> merges;
    merges.reserve(merges_.size());
    for (size_t r = 0; r < merges_.size(); ++r) {
      const Pair p = merges_[r].first;
      if (last_rank[p] == r) merges.emplace_back(tokens_[left_of(p)], tokens_[right_of(p)]);
    }
    std::vector<SpecialToken> specials;
    for (size_t i = 0; i < specials_.size(); ++i) specials.push_back(SpecialToken{specials_[i], special_ids_[i]});
    return Tokenizer::from_parts(std::move(tokens_), std::move(merges), std::move(specials));
  }

  const BpeTrainerOptions& options_;
  std::vector<std::string> specials_;
  std::vector<uint32_t> special_ids_;
  // Special tokens by their text, and by the bytes their text spells in the byte alphabet.
  std::unordered_map<std::string, std::string> special_raw_, special_spelled_;
  std::vector<std::string> tokens_;                // raw bytes by id
  std::unordered_map<std::string, uint32_t> ids_;  // raw bytes -> id, special tokens excepted
  uint32_t byte_ids_[256] = {};
  std::vector<std::vector<uint32_t>> words_;       // each distinct piece as token ids
  std::vector<uint64_t> word_counts_;              // how often each piece occurs
  PairCounts pair_counts_;                         // every pair's count, the pairs gained this merge
  std::vector<Candidate> queue_;                   // a heap under queued_after
  std::vector<std::pair<Pair, uint32_t>> merges_;  // (pair, new token id) in the order learned
};

}  // namespace

Tokenizer train_bpe(std::string_view corpus, const BpeTrainerOptions& options) {
  return Trainer(corpus, options).run();
}

}  // namespace hg::text
