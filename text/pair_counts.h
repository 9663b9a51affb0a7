#pragma once
// The BPE trainer's count of every adjacent pair of token ids (text/bpe_trainer.cpp), with the pairs
// that gained occurrences during the current merge and the words where they did.
// Storage: open addressing, linear probing over a power-of-two array kept at most half full (doubled
// when it would pass that); a pair is one 64-bit key (left << 32 | right). The pairs touched this
// step are a list in first-touch order, each slot holding its position in the list, so adding a word
// to a pair costs one probe and no second map.
#include <cstdint>
#include <utility>
#include <vector>

namespace hg::text {

class PairCounts {
 public:
  using Pair = uint64_t;
  struct Gained {
    Pair pair;
    std::vector<uint32_t> words;  // in the order noted, each once
  };

  PairCounts() { rehash(1 << 12); }

  // The pair's count (0 for one never seen).
  int64_t count(Pair pair) const {
    for (size_t i = slot_of(pair);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == pair) return s.count;
      if (s.key == kEmpty) return 0;
    }
  }

  // Moves the pair's count by `delta`; when `gained_in` is given, notes that word there (once).
  void add(Pair pair, int64_t delta, const uint32_t* gained_in = nullptr) {
    Slot& s = find_or_insert(pair);
    s.count += delta;
    if (gained_in == nullptr) return;
    if (s.gained == 0) {
      gained_.push_back(Gained{pair, {}});
      s.gained = uint32_t(gained_.size());
    }
    std::vector<uint32_t>& words = gained_[s.gained - 1].words;
    if (words.empty() || words.back() != *gained_in) words.push_back(*gained_in);
  }

  // The pairs that gained occurrences since the last call, in first-gain order; the list is
  // handed over and starts again empty.
  std::vector<Gained> take_gained() {
    for (const Gained& g : gained_) find_or_insert(g.pair).gained = 0;
    std::vector<Gained> out;
    out.swap(gained_);
    return out;
  }

 private:
  static constexpr Pair kEmpty = ~Pair(0);  // (2^32 - 1, 2^32 - 1): no token has that id
  struct Slot {
    Pair key = kEmpty;
    int64_t count = 0;
    uint32_t gained = 0;  // 1 + its index in gained_, 0 when not gained this step
  };

  size_t slot_of(Pair pair) const { return size_t((pair * 0x9E3779B97F4A7C15ull) >> 17) & mask_; }

  Slot& find_or_insert(Pair pair) {
    for (size_t i = slot_of(pair);; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.key == pair) return s;
      if (s.key == kEmpty) {
        if (2 * (size_ + 1) > slots_.size()) {
          rehash(slots_.size() * 2);
          return find_or_insert(pair);
        }
        ++size_;
        s.key = pair;
        return s;
      }
    }
  }

  void rehash(size_t capacity) {
    std::vector<Slot> old(capacity);
    old.swap(slots_);
    mask_ = capacity - 1;
    for (const Slot& s : old) {
      if (s.key == kEmpty) continue;
      size_t i = slot_of(s.key);
      while (slots_[i].key != kEmpty) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0, size_ = 0;
  std::vector<Gained> gained_;
};

}  // namespace hg::text
