#pragma once
// The merge ranks: an open-addressing hash table from a pair of token ids (left, right) to the
// merge's rank and the id of the merged token. Linear probing over a power-of-two array at most half
// full; built once, read-only afterwards (so concurrent encodes may read it).
#include <cstdint>
#include <vector>

namespace hg::text {

class MergeTable {
 public:
  struct Merge {
    uint32_t rank;
    uint32_t result;
  };

  void reserve(size_t count) {
    size_t cap = 16;
    while (cap < 2 * count + 2) cap *= 2;
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
  }
  // Adds (left, right) -> merge; false if the pair is there already (the table keeps the first).
  bool insert(uint32_t left, uint32_t right, Merge merge) {
    const uint64_t key = pack(left, right);
    for (size_t i = hash(key);; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.key == kEmpty) {
        s = {key, merge};
        return true;
      }
      if (s.key == key) return false;
    }
  }
  const Merge* find(uint32_t left, uint32_t right) const {
    if (slots_.empty()) return nullptr;
    const uint64_t key = pack(left, right);
    for (size_t i = hash(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s.merge;
      if (s.key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t(0);  // (0xFFFFFFFF, 0xFFFFFFFF): no id is 2^32 - 1
  struct Slot {
    uint64_t key = kEmpty;
    Merge merge{};
  };
  static uint64_t pack(uint32_t left, uint32_t right) { return uint64_t(left) << 32 | right; }
  size_t hash(uint64_t key) const { return size_t((key * 0x9E3779B97F4A7C15ull) >> 20) & mask_; }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

}  // namespace hg::text
