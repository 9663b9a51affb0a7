// The tokenizer's tables and encode/decode (text/tokenizer.h).
//   encode: the special tokens are cut out first (leftmost match, the longest one where several start
//   at the same byte, as Hugging Face's added-token matcher does); each stretch between them is split
//   into pieces (text/pretokenize.h) and every piece goes through byte-level BPE: one token per byte,
//   then the adjacent pair of lowest merge rank is merged (the leftmost among equal ranks) until no
//   pair has a merge. Pieces of up to 32 bytes (nearly all): a scan of the pair ranks in small arrays,
//   no allocation. Longer pieces: a min-heap of (rank, position) candidates over a linked list of
//   symbols, stale candidates skipped when popped, O(n log n) for n bytes.
//   Cache: per encode() call, piece bytes -> ids for pieces of 4 bytes or more (keys are views into the
//   caller's text, so nothing is copied), cleared when it holds 65,536 pieces. Nothing is shared between calls, so encode() is
//   const and safe to call from several threads at once.
#include <algorithm>
#include <functional>
#include <sstream>
#include <unordered_set>

#include "kernels/error.h"
#include "text/pretokenize.h"
#include "text/tokenizer_impl.h"

namespace hg::text {

std::string quote_bytes(std::string_view bytes) {
  std::string out = "\"";
  static const char* hex = "0123456789abcdef";
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (i == 60) {
      out += "...";
      break;
    }
    const unsigned char c = static_cast<unsigned char>(bytes[i]);
    if (c >= 0x20 && c < 0x7F && c != '"' && c != '\\') {
      out += char(c);
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out + "\"";
}

std::unique_ptr<Tokenizer::Impl> build_tokenizer(std::vector<std::optional<std::string>> tokens,
                                                 const std::vector<std::pair<std::string, std::string>>& merges,
                                                 std::vector<SpecialToken> specials) {
  auto t = std::make_unique<Tokenizer::Impl>();
  HG_CHECK(!tokens.empty(), "tokenizer: the vocabulary is empty (expected at least the 256 single-byte tokens)");
  HG_CHECK(tokens.size() < 0xFFFFFFFFull, "tokenizer: ", tokens.size(), " ids do not fit in 32 bits");
  t->tokens.resize(tokens.size());
  t->present.assign(tokens.size(), 0);
  t->id_of.reserve(tokens.size());
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (!tokens[id]) continue;
    HG_CHECK(!tokens[id]->empty(), "tokenizer: token id ", id, " is empty (expected at least one byte)");
    const auto [it, inserted] = t->id_of.emplace(*tokens[id], uint32_t(id));
    HG_CHECK(inserted, "tokenizer: token id ", id, " ", quote_bytes(*tokens[id]), " duplicates token id ", it->second,
             " (expected every token's bytes to be distinct)");
    t->tokens[id] = std::move(*tokens[id]);
    t->present[id] = 1;
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = t->id_of.find(std::string(1, char(b)));
    HG_CHECK(it != t->id_of.end(), "tokenizer: no token for the byte ", quote_bytes(std::string(1, char(b))),
             " (a byte-level vocabulary has a token for each of the 256 bytes)");
    t->byte_id[b] = it->second;
  }
  t->merge_table.reserve(merges.size());
  t->merge_pairs.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const auto l = t->id_of.find(left), r = t->id_of.find(right), m = t->id_of.find(left + right);
    HG_CHECK(l != t->id_of.end(), "tokenizer: merge ", rank, " (", quote_bytes(left), " + ", quote_bytes(right),
             "): its left part is not a token");
    HG_CHECK(r != t->id_of.end(), "tokenizer: merge ", rank, " (", quote_bytes(left), " + ", quote_bytes(right),
             "): its right part is not a token");
    HG_CHECK(m != t->id_of.end(), "tokenizer: merge ", rank, " (", quote_bytes(left), " + ", quote_bytes(right),
             "): the merged token is not in the vocabulary");
    const bool fresh = t->merge_table.insert(l->second, r->second, {uint32_t(rank), m->second});
    HG_CHECK(fresh, "tokenizer: merge ", rank, " (", quote_bytes(left), " + ", quote_bytes(right),
             ") repeats an earlier merge");
    t->merge_pairs.emplace_back(l->second, r->second);
  }
  std::unordered_set<std::string> seen;
  for (const SpecialToken& s : specials) {
    HG_CHECK(!s.content.empty(), "tokenizer: special token id ", s.id, " has empty content");
    HG_CHECK(s.id < t->tokens.size() && t->present[s.id], "tokenizer: special token ", quote_bytes(s.content), " has id ",
             s.id, ", which is not in the vocabulary (", t->tokens.size(), " ids)");
    HG_CHECK(t->tokens[s.id] == s.content, "tokenizer: special token ", quote_bytes(s.content), " has id ", s.id,
             ", whose token is ", quote_bytes(t->tokens[s.id]), " (expected the same bytes)");
    HG_CHECK(seen.insert(s.content).second, "tokenizer: special token ", quote_bytes(s.content), " is listed twice");
    if (s.content == "<|endoftext|>") t->end_of_text = s.id;
  }
  t->specials = std::move(specials);
  t->specials_longest_first.resize(t->specials.size());
  for (uint32_t i = 0; i < t->specials_longest_first.size(); ++i) t->specials_longest_first[i] = i;
  std::stable_sort(t->specials_longest_first.begin(), t->specials_longest_first.end(), [&](uint32_t a, uint32_t b) {
    return t->specials[a].content.size() > t->specials[b].content.size();
  });
  return t;
}

namespace {

constexpr uint32_t kDead = 0xFFFFFFFFu;

// What one encode() call reuses from piece to piece.
struct EncodeState {
  std::vector<uint32_t> ids;
  std::vector<int32_t> prev, next;
  std::vector<std::pair<uint32_t, uint32_t>> heap;  // (rank, position): a min-heap
  std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> cache;  // piece -> (offset, count) in pool
  std::vector<uint32_t> pool;
};
constexpr size_t kCachePieces = 65536;
constexpr size_t kUncachedPiece = 3;  // pieces this short skip the cache

// Byte-level BPE of a short piece (at most kSmallPiece bytes), appended to `out`: the symbols and
// the rank of each adjacent pair in small arrays; each step scans for the lowest rank (leftmost on
// ties), merges, closes the gap and looks up the two pairs that changed. O(n^2) for n <= 32, but
// without a heap or any allocation, which is what most pieces need.
constexpr size_t kSmallPiece = 32;
void bpe_small(const Tokenizer::Impl& t, std::string_view piece, std::vector<uint32_t>& out) {
  const size_t n0 = piece.size();
  uint32_t ids[kSmallPiece], rank[kSmallPiece], merged[kSmallPiece];
  const MergeTable& table = t.merge_table;
  auto set_pair = [&](size_t i) {  // the pair (ids[i], ids[i + 1])
    const MergeTable::Merge* m = table.find(ids[i], ids[i + 1]);
    rank[i] = m ? m->rank : kDead;
    merged[i] = m ? m->result : kDead;
  };
  for (size_t i = 0; i < n0; ++i) ids[i] = t.byte_id[static_cast<unsigned char>(piece[i])];
  size_t n = n0;
  for (size_t i = 0; i + 1 < n; ++i) set_pair(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i) {
      if (rank[i] < rank[best]) best = i;
    }
    if (rank[best] == kDead) break;
    ids[best] = merged[best];
    for (size_t i = best + 1; i + 1 < n; ++i) {
      ids[i] = ids[i + 1];
      rank[i] = rank[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    if (best > 0) set_pair(best - 1);
    if (best + 1 < n) set_pair(best);
  }
  out.insert(out.end(), ids, ids + n);
}

// Byte-level BPE of one piece, appended to `out` (short pieces: bpe_small).
void bpe(const Tokenizer::Impl& t, std::string_view piece, EncodeState& s, std::vector<uint32_t>& out) {
  if (piece.size() <= kSmallPiece) {
    bpe_small(t, piece, out);
    return;
  }
  const size_t n = piece.size();
  s.ids.resize(n);
  s.prev.resize(n);
  s.next.resize(n);
  s.heap.clear();
  for (size_t i = 0; i < n; ++i) {
    s.ids[i] = t.byte_id[static_cast<unsigned char>(piece[i])];
    s.prev[i] = int32_t(i) - 1;
    s.next[i] = i + 1 < n ? int32_t(i + 1) : -1;
  }
  const MergeTable& table = t.merge_table;
  for (size_t i = 0; i + 1 < n; ++i) {
    if (const MergeTable::Merge* m = table.find(s.ids[i], s.ids[i + 1])) s.heap.emplace_back(m->rank, uint32_t(i));
  }
  const auto later = std::greater<std::pair<uint32_t, uint32_t>>();
  std::make_heap(s.heap.begin(), s.heap.end(), later);
  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), later);
    const auto [rank, pos] = s.heap.back();
    s.heap.pop_back();
    if (s.ids[pos] == kDead) continue;
    const int32_t right = s.next[pos];
    if (right < 0) continue;
    const MergeTable::Merge* m = table.find(s.ids[pos], s.ids[right]);
    if (m == nullptr || m->rank != rank) continue;  // a stale candidate: a neighbour has changed
    s.ids[pos] = m->result;
    s.ids[right] = kDead;
    s.next[pos] = s.next[right];
    if (s.next[pos] >= 0) s.prev[s.next[pos]] = int32_t(pos);
    if (const int32_t left = s.prev[pos]; left >= 0) {
      if (const MergeTable::Merge* lm = table.find(s.ids[left], s.ids[pos])) {
        s.heap.emplace_back(lm->rank, uint32_t(left));
        std::push_heap(s.heap.begin(), s.heap.end(), later);
      }
    }
    if (const int32_t after = s.next[pos]; after >= 0) {
      if (const MergeTable::Merge* rm = table.find(s.ids[pos], s.ids[after])) {
        s.heap.emplace_back(rm->rank, uint32_t(pos));
        std::push_heap(s.heap.begin(), s.heap.end(), later);
      }
    }
  }
  for (int32_t i = 0; i >= 0; i = s.next[i]) out.push_back(s.ids[i]);
}

// The pieces of a stretch of text without special tokens, through the cache and BPE.
void encode_ordinary(const Tokenizer::Impl& t, std::string_view text, EncodeState& s, std::vector<uint32_t>& out) {
  PieceSplitter splitter(text);
  std::string_view piece;
  while (splitter.next(piece)) {
    if (piece.size() == 1) {
      out.push_back(t.byte_id[static_cast<unsigned char>(piece[0])]);
      continue;
    }
    if (piece.size() <= kUncachedPiece) {  // cheaper to merge than to look up
      bpe_small(t, piece, out);
      continue;
    }
    if (const auto it = s.cache.find(piece); it != s.cache.end()) {
      out.insert(out.end(), s.pool.begin() + it->second.first, s.pool.begin() + it->second.first + it->second.second);
      continue;
    }
    const size_t before = out.size();
    bpe(t, piece, s, out);
    if (s.cache.size() >= kCachePieces) {
      s.cache.clear();
      s.pool.clear();
    }
    s.cache.emplace(piece, std::make_pair(uint32_t(s.pool.size()), uint32_t(out.size() - before)));
    s.pool.insert(s.pool.end(), out.begin() + before, out.end());
  }
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::Tokenizer(const Tokenizer& other) : impl_(other.impl_ ? std::make_unique<Impl>(*other.impl_) : nullptr) {}
Tokenizer& Tokenizer::operator=(const Tokenizer& other) {
  if (this != &other) impl_ = other.impl_ ? std::make_unique<Impl>(*other.impl_) : nullptr;
  return *this;
}

Tokenizer Tokenizer::from_parts(std::vector<std::string> tokens, std::vector<std::pair<std::string, std::string>> merges,
                                std::vector<SpecialToken> specials) {
  std::vector<std::optional<std::string>> present;
  present.reserve(tokens.size());
  for (std::string& t : tokens) present.emplace_back(std::move(t));
  Tokenizer tok;
  tok.impl_ = build_tokenizer(std::move(present), merges, std::move(specials));
  return tok;
}

namespace {
const Tokenizer::Impl& checked(const std::unique_ptr<Tokenizer::Impl>& impl) {
  HG_CHECK(impl != nullptr, "tokenizer: this Tokenizer is empty (default-constructed or moved from); "
                            "expected one from load(), from_parts() or train_bpe()");
  return *impl;
}
}  // namespace

std::vector<uint32_t> Tokenizer::encode(std::string_view text) const {
  const Impl& t = checked(impl_);
  std::vector<uint32_t> out;
  out.reserve(text.size() / 3 + 16);
  EncodeState state;
  // next_at[k]: where special k next occurs at or after `pos` (npos: nowhere), found lazily.
  std::vector<size_t> next_at(t.specials.size(), 0);
  std::vector<uint8_t> known(t.specials.size(), 0);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t best = std::string_view::npos;
    int best_k = -1;
    for (const uint32_t k : t.specials_longest_first) {
      if (!known[k] || (next_at[k] != std::string_view::npos && next_at[k] < pos)) {
        next_at[k] = text.find(t.specials[k].content, pos);
        known[k] = 1;
      }
      if (next_at[k] < best) {  // strictly earlier: among equal starts the longest (listed first) wins
        best = next_at[k];
        best_k = int(k);
      }
    }
    if (best_k < 0) {
      encode_ordinary(t, text.substr(pos), state, out);
      break;
    }
    encode_ordinary(t, text.substr(pos, best - pos), state, out);
    out.push_back(t.specials[best_k].id);
    pos = best + t.specials[best_k].content.size();
  }
  return out;
}

std::string Tokenizer::decode(std::span<const uint32_t> ids) const {
  const Impl& t = checked(impl_);
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t id = ids[i];
    HG_CHECK(id < t.tokens.size() && t.present[id], "tokenizer: decode: id ", id, " at position ", i,
             " is not in the vocabulary (", t.tokens.size(), " ids", id < t.tokens.size() ? ", this one unused" : "",
             ")");
    out += t.tokens[id];
  }
  return out;
}

const std::string& Tokenizer::token_bytes(uint32_t id) const {
  const Impl& t = checked(impl_);
  HG_CHECK(id < t.tokens.size() && t.present[id], "tokenizer: token_bytes: id ", id, " is not in the vocabulary (",
           t.tokens.size(), " ids)");
  return t.tokens[id];
}

std::optional<uint32_t> Tokenizer::token_id(std::string_view bytes) const {
  const Impl& t = checked(impl_);
  const auto it = t.id_of.find(std::string(bytes));
  if (it == t.id_of.end()) return std::nullopt;
  return it->second;
}

uint32_t Tokenizer::vocab_size() const { return uint32_t(checked(impl_).tokens.size()); }
const std::vector<SpecialToken>& Tokenizer::special_tokens() const { return checked(impl_).specials; }
std::optional<uint32_t> Tokenizer::end_of_text() const { return checked(impl_).end_of_text; }
size_t Tokenizer::merges() const { return checked(impl_).merge_pairs.size(); }

}  // namespace hg::text
