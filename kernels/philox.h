#pragma once
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based generator. Output = bijection_key(counter); no state is carried between draws, so
// element i of any random op is a pure function of (seed, offset, i) and the CPU and CUDA backends
// draw the very same bits in any order or parallel split.
//
// Convention used by every random op in halfgrad: for a call with generator state (seed, offset),
// element i takes word i % 4 of philox(counter = offset + i / 4 (64-bit, words c0 = low, c1 = high,
// c2 = c3 = 0), key = seed (k0 = low, k1 = high)). A call of n elements advances offset by
// ceil(n / 4).
#include <cstdint>

#include "kernels/host_device.h"

namespace hg {

struct Philox4 {
  uint32_t v[4];
};

HG_HOST_DEVICE inline Philox4 philox4x32_10(Philox4 counter, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = counter.v[0], c1 = counter.v[1], c2 = counter.v[2], c3 = counter.v[3];
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(kMul0) * c0;
    const uint64_t p1 = uint64_t(kMul1) * c2;
    const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
    const uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// The 32 random bits of element `index` of a random op run at generator state (seed, offset).
HG_HOST_DEVICE inline uint32_t philox_bits(uint64_t seed, uint64_t offset, uint64_t index) {
  const uint64_t block = offset + index / 4;
  const Philox4 out = philox4x32_10(Philox4{{uint32_t(block), uint32_t(block >> 32), 0u, 0u}},
                                    uint32_t(seed), uint32_t(seed >> 32));
  return out.v[index % 4];
}

// Uniform float in [0, 1) from the top 24 bits (every value exactly representable).
HG_HOST_DEVICE inline float bits_to_uniform(uint32_t bits) { return float(bits >> 8) * (1.0f / 16777216.0f); }

// Dropout keeps element i when its uniform draw is >= p.
HG_HOST_DEVICE inline bool dropout_keep(uint64_t seed, uint64_t offset, uint64_t index, float p) {
  return bits_to_uniform(philox_bits(seed, offset, index)) >= p;
}

// Number of Philox blocks (offset advance) used by a random op over n elements.
HG_HOST_DEVICE inline uint64_t philox_blocks(uint64_t n) { return (n + 3) / 4; }

}  // namespace hg
