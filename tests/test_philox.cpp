// kernels/philox.h: Philox4x32-10 against the Random123 known answers, halfgrad's counter convention
// (seed, offset, index), the uniform mapping, dropout's keep rate and a uniformity check.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/philox.h"

namespace {

using u32 = uint32_t;
using u64 = uint64_t;

hg::Philox4 philox(u32 c0, u32 c1, u32 c2, u32 c3, u32 k0, u32 k1) {
  return hg::philox4x32_10(hg::Philox4{{c0, c1, c2, c3}}, k0, k1);
}

// An independent, straight-from-the-paper Philox4x32-10 (Random123's philox4x32round / bumpkey):
// the key is bumped between rounds, i.e. 9 times; round r uses key + r * Weyl.
hg::Philox4 philox_reference(hg::Philox4 c, u32 k0, u32 k1) {
  for (int r = 0; r < 10; ++r) {
    const u32 rk0 = k0 + u32(r) * 0x9E3779B9u, rk1 = k1 + u32(r) * 0xBB67AE85u;
    const u64 p0 = u64(0xD2511F53u) * c.v[0], p1 = u64(0xCD9E8D57u) * c.v[2];
    c = hg::Philox4{{u32(p1 >> 32) ^ c.v[1] ^ rk0, u32(p1), u32(p0 >> 32) ^ c.v[3] ^ rk1, u32(p0)}};
  }
  return c;
}

// What a random op of n elements run at generator state (seed, offset) draws.
std::vector<u32> draw(u64 seed, u64 offset, u64 n) {
  std::vector<u32> out(n);
  for (u64 i = 0; i < n; ++i) out[i] = hg::philox_bits(seed, offset, i);
  return out;
}

}  // namespace

TEST_CASE("philox: Random123 known-answer vectors from kat_vectors for philox4x32 10") {
  struct Kat {
    u32 ctr[4], key[2], out[4];
  };
  const Kat kats[] = {
      {{0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u},
       {0x00000000u, 0x00000000u},
       {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
      {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
       {0xffffffffu, 0xffffffffu},
       {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
      {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
       {0xa4093822u, 0x299f31d0u},
       {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
  };
  for (const Kat& k : kats) {
    const hg::Philox4 got = philox(k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3], k.key[0], k.key[1]);
    const hg::Philox4 ref = philox_reference(hg::Philox4{{k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]}}, k.key[0], k.key[1]);
    for (int w = 0; w < 4; ++w) {
      CAPTURE(w);
      CHECK(got.v[w] == k.out[w]);
      CHECK(ref.v[w] == k.out[w]);
    }
  }
}

TEST_CASE("philox: matches the from-the-paper reference on arbitrary counters and keys") {
  // A cheap LCG walks counters and keys through all four words and both key words.
  u64 s = 0x0123456789abcdefull;
  auto next = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return u32(s >> 32);
  };
  int bad = 0;
  for (int i = 0; i < 20000; ++i) {
    const hg::Philox4 c{{next(), next(), next(), next()}};
    const u32 k0 = next(), k1 = next();
    const hg::Philox4 a = hg::philox4x32_10(c, k0, k1), b = philox_reference(c, k0, k1);
    for (int w = 0; w < 4; ++w) bad += a.v[w] != b.v[w];
  }
  CHECK(bad == 0);
}

TEST_CASE("philox: philox_bits is word i mod 4 of counter offset + i / 4 with key seed") {
  const u64 seeds[] = {0, 1, 0xdeadbeefull, 0x123456789abcdef0ull, ~0ull};
  const u64 offsets[] = {0, 1, 7, 0xfffffffeull, 0xffffffffull, 0x100000000ull, 0xfffffffffffffff0ull};
  for (u64 seed : seeds) {
    for (u64 offset : offsets) {
      for (u64 i = 0; i < 64; ++i) {
        const u64 block = offset + i / 4;  // 64-bit, wraps like the counter it is
        const hg::Philox4 r = philox(u32(block), u32(block >> 32), 0, 0, u32(seed), u32(seed >> 32));
        CAPTURE(seed);
        CAPTURE(offset);
        CAPTURE(i);
        REQUIRE(hg::philox_bits(seed, offset, i) == r.v[i % 4]);
      }
    }
  }
  // Pinned values, so a change of convention (word order, key order) cannot pass silently.
  CHECK(hg::philox_bits(0, 0, 0) == 0x6627e8d5u);
  CHECK(hg::philox_bits(0, 0, 3) == 0x9b00dbd8u);
}

TEST_CASE("philox: element i at offset o equals element i - 4 at offset o + 1") {
  const u64 seed = 0x5eed5eed12345678ull;
  for (u64 offset : {u64(0), u64(41), u64(0xfffffff0ull), u64(0xffffffffull), u64(0x7fffffffffffffffull)}) {
    int bad = 0;
    for (u64 i = 4; i < 4096; ++i) bad += hg::philox_bits(seed, offset, i) != hg::philox_bits(seed, offset + 1, i - 4);
    CAPTURE(offset);
    CHECK(bad == 0);
    // More generally, i at o equals i - 4k at o + k.
    for (u64 k : {u64(2), u64(17), u64(250)}) CHECK(hg::philox_bits(seed, offset, 4 * k + 3) == hg::philox_bits(seed, offset + k, 3));
  }
}

TEST_CASE("philox: the counter crosses the 32-bit boundary into its high word") {
  const u64 seed = 42;
  // offset 2^32 - 1: elements 0..3 use counter (0xffffffff, 0), elements 4..7 use (0, 1).
  for (u64 i = 0; i < 8; ++i) {
    const hg::Philox4 expect = i < 4 ? philox(0xffffffffu, 0, 0, 0, 42, 0) : philox(0, 1, 0, 0, 42, 0);
    CHECK(hg::philox_bits(seed, 0xffffffffull, i) == expect.v[i % 4]);
  }
  // Blocks 2^32 apart must not alias (a 32-bit counter would make them equal).
  int same = 0;
  for (u64 i = 0; i < 256; ++i) same += hg::philox_bits(seed, 0, i) == hg::philox_bits(seed, u64(1) << 32, i);
  CHECK(same == 0);
  // The index contributes all 64 bits too: index 4 * 2^32 at offset 0 is block 2^32.
  CHECK(hg::philox_bits(seed, 0, u64(4) << 32) == philox(0, 1, 0, 0, 42, 0).v[0]);
  CHECK(hg::philox_bits(seed, 0, u64(4) << 32) != hg::philox_bits(seed, 0, 0));
  // Both halves of the seed are the key.
  CHECK(hg::philox_bits(u64(1) << 32, 0, 0) == philox(0, 0, 0, 0, 0, 1).v[0]);
  CHECK(hg::philox_bits(u64(1) << 32, 0, 0) != hg::philox_bits(0, 0, 0));
  CHECK(hg::philox_bits(1, 0, 0) != hg::philox_bits(u64(1) << 32, 0, 0));
}

TEST_CASE("philox: draws do not depend on the call length and offsets advance by ceil(n / 4)") {
  const u64 seed = 7, offset = 1000;
  const std::vector<u32> longest = draw(seed, offset, 1027);
  for (u64 n : {u64(1), u64(2), u64(3), u64(4), u64(5), u64(63), u64(64), u64(65), u64(1000)}) {
    const std::vector<u32> shorter = draw(seed, offset, n);
    CAPTURE(n);
    CHECK(std::equal(shorter.begin(), shorter.end(), longest.begin()));
  }
  CHECK(hg::philox_blocks(0) == 0);
  CHECK(hg::philox_blocks(1) == 1);
  CHECK(hg::philox_blocks(4) == 1);
  CHECK(hg::philox_blocks(5) == 2);
  CHECK(hg::philox_blocks(1027) == 257);
  CHECK(hg::philox_blocks(u64(1) << 40) == u64(1) << 38);
  // Two consecutive ops (n1 then n2 elements): the second, at offset + ceil(n1 / 4), draws elements
  // 4 * ceil(n1 / 4) onward of the stream the first one started, so it never reuses a draw of the first.
  for (u64 n1 : {u64(1), u64(4), u64(5), u64(6), u64(7), u64(8), u64(9), u64(1000)}) {
    const u64 skip = 4 * hg::philox_blocks(n1);
    CHECK(skip >= n1);
    CHECK(skip < n1 + 4);
    const std::vector<u32> second = draw(seed, offset + hg::philox_blocks(n1), 20);
    CAPTURE(n1);
    CHECK(std::equal(second.begin(), second.end(), longest.begin() + skip));
  }
}

TEST_CASE("philox: bits_to_uniform is k times 2^-24 for the top 24 bits k and lies in 0 to 1 exclusive") {
  CHECK(hg::bits_to_uniform(0) == 0.0f);
  CHECK(hg::bits_to_uniform(0xffu) == 0.0f);   // the low 8 bits are dropped
  CHECK(hg::bits_to_uniform(0x100u) == 0x1p-24f);
  CHECK(hg::bits_to_uniform(0x80000000u) == 0.5f);
  CHECK(hg::bits_to_uniform(0xffffffffu) == 1.0f - 0x1p-24f);  // the exact maximum, 0.99999994f
  CHECK(hg::bits_to_uniform(0xffffffffu) == 0.99999994f);
  CHECK(hg::bits_to_uniform(0xffffffffu) < 1.0f);
  // All 2^24 values: exactly k * 2^-24 (so all distinct, evenly spaced, strictly below 1).
  int bad = 0;
  for (u32 k = 0; k < (1u << 24); ++k) {
    const u32 bits = (k << 8) | (k & 0xffu);  // arbitrary low bits
    const float u = hg::bits_to_uniform(bits);
    bad += !(u == float(k) * 0x1p-24f && u >= 0.0f && u < 1.0f);
  }
  CHECK(bad == 0);
}

TEST_CASE("philox: dropout keeps a fraction 1 - p within 5 sigma over 1e6 elements") {
  constexpr u64 n = 1000000;
  for (float p : {0.1f, 0.25f, 0.5f, 0.9f}) {
    u64 kept = 0;
    for (u64 i = 0; i < n; ++i) kept += hg::dropout_keep(1234, 5678, i, p);
    const double q = 1.0 - p, sigma = std::sqrt(n * q * (1.0 - q));
    CAPTURE(p);
    CAPTURE(kept);
    CHECK(std::fabs(double(kept) - n * q) < 5 * sigma);
  }
  // The ends: p = 0 keeps everything (u >= 0 always); p = 1 keeps nothing (u < 1 always).
  u64 kept0 = 0, kept1 = 0;
  for (u64 i = 0; i < 100000; ++i) {
    kept0 += hg::dropout_keep(99, 0, i, 0.0f);
    kept1 += hg::dropout_keep(99, 0, i, 1.0f);
  }
  CHECK(kept0 == 100000);
  CHECK(kept1 == 0);
  // The boundary is inclusive: p equal to an element's own draw keeps it; the next float up drops it.
  for (u64 i = 0; i < 100; ++i) {
    const float u = hg::bits_to_uniform(hg::philox_bits(3, 4, i));
    CHECK(hg::dropout_keep(3, 4, i, u));
    CHECK_FALSE(hg::dropout_keep(3, 4, i, std::nextafter(u, 2.0f)));
  }
  // keep(i) is exactly "uniform(i) >= p".
  for (u64 i = 0; i < 1000; ++i) CHECK(hg::dropout_keep(3, 4, i, 0.3f) == (hg::bits_to_uniform(hg::philox_bits(3, 4, i)) >= 0.3f));
}

TEST_CASE("philox: uniformity over 16 bins (chi-square) and per-bit balance") {
  constexpr u64 n = 1 << 20;
  for (u64 seed : {u64(0), u64(1), u64(0xabcdef0123456789ull)}) {
    u64 bins[16] = {};
    u64 ones[32] = {};
    for (u64 i = 0; i < n; ++i) {
      const u32 b = hg::philox_bits(seed, 0, i);
      ++bins[int(hg::bits_to_uniform(b) * 16.0f)];
      for (int k = 0; k < 32; ++k) ones[k] += (b >> k) & 1u;
    }
    const double expect = double(n) / 16;
    double chi2 = 0;
    for (u64 c : bins) chi2 += (c - expect) * (c - expect) / expect;
    CAPTURE(seed);
    CAPTURE(chi2);
    // 15 degrees of freedom: mean 15, P(chi2 > 50) ~ 1e-5. Deterministic seeds, so no flakiness;
    // a broken mapping (e.g. always < 0.5, or a stuck bit) gives chi2 in the hundreds of thousands.
    CHECK(chi2 < 50.0);
    const double bit_sigma = std::sqrt(n * 0.25);
    for (int k = 0; k < 32; ++k) {
      CAPTURE(k);
      CHECK(std::fabs(double(ones[k]) - n / 2.0) < 5 * bit_sigma);
    }
  }
}
