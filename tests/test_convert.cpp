// The CPU array conversions (kernels/cpu/convert.h) against the scalar reference, bit for bit, on
// every tier this CPU can run, each tier called directly: all 2^16 f16 and bf16 patterns widened,
// all 2^32 float patterns narrowed to both types (chunked through the array API: the point of the
// test), the same again with MXCSR's DAZ and FTZ set, and every small length, pointer offset and
// tail with guard elements around the output. Outputs are poisoned before each conversion runs.
//
// The 2^32 sweep runs in full in an optimised, uninstrumented build (a few seconds a tier); under a
// sanitizer or without NDEBUG it takes every 61st pattern instead, so instrumented runs stay short.
#include <doctest/doctest.h>
#include <immintrin.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/error.h"

namespace cpu = hg::kernels::cpu;
using cpu::ConvertIsa;
using hg::bfloat16;
using hg::half;

namespace {

#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__)
constexpr uint64_t kSweepStride = 1;
#else
constexpr uint64_t kSweepStride = 61;
#endif

// The SIMD tiers this CPU runs (the scalar tier is the reference they are held to).
std::vector<ConvertIsa> simd_tiers() {
  std::vector<ConvertIsa> tiers;
  for (ConvertIsa isa : {ConvertIsa::avx2, ConvertIsa::avx512})
    if (int(isa) <= int(cpu::convert_best_isa())) tiers.push_back(isa);
  return tiers;
}

// "0x..." for diagnostics.
std::string hex(uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%x", v);
  return text;
}

template <class T>
uint16_t bits_of(T v) {
  return v.bits;
}

// Sets MXCSR's DAZ (bit 6) and FTZ (bit 15) for the scope, as fast-math code might leave them.
struct DazFtz {
  unsigned saved = _mm_getcsr();
  DazFtz() { _mm_setcsr(saved | 0x8040u); }
  ~DazFtz() { _mm_setcsr(saved); }
};

// All 2^16 patterns of H widened by `isa`, compared bit for bit with the scalar tier.
template <class H>
void check_widen_all(ConvertIsa isa) {
  std::vector<H> in(65536);
  for (uint32_t i = 0; i < 65536; ++i) in[i] = H::from_bits(uint16_t(i));
  std::vector<float> ref(65536), got(65536);
  cpu::to_float(in.data(), ref.data(), 65536, ConvertIsa::scalar);
  std::memset(got.data(), 0xa5, got.size() * sizeof(float));
  cpu::to_float(in.data(), got.data(), 65536, isa);
  int mismatches = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    if (std::memcmp(&ref[i], &got[i], 4) != 0 && ++mismatches <= 5) {
      uint32_t r, g;
      std::memcpy(&r, &ref[i], 4);
      std::memcpy(&g, &got[i], 4);
      FAIL_CHECK(std::string(cpu::convert_isa_name(isa)) << ": widen " << hex(i) << " -> " << hex(g) << ", scalar " << hex(r));
    }
  }
  CHECK(mismatches == 0);
}

// Narrows the float patterns in[0, count) to H by every tier in `tiers` and compares each, bit for
// bit, with the scalar tier's `ref` (already computed). Counts and reports mismatches.
template <class H>
void compare_narrow(const std::vector<ConvertIsa>& tiers, const float* in, const H* ref, H* got, int64_t count,
                    int& mismatches) {
  for (ConvertIsa isa : tiers) {
    std::memset(static_cast<void*>(got), 0xa5, size_t(count) * sizeof(H));
    cpu::from_float(in, got, count, isa);
    if (std::memcmp(ref, got, size_t(count) * sizeof(H)) == 0) continue;
    for (int64_t i = 0; i < count; ++i) {
      if (bits_of(ref[i]) != bits_of(got[i]) && ++mismatches <= 5) {
        uint32_t x;
        std::memcpy(&x, &in[i], 4);
        FAIL_CHECK(std::string(cpu::convert_isa_name(isa)) << ": narrow " << hex(x) << " -> " << hex(bits_of(got[i]))
                                              << ", scalar " << hex(bits_of(ref[i])));
      }
    }
  }
}

// Float patterns 0, stride, 2 * stride, ... < 2^32 narrowed to f16 and bf16 by every tier, in
// chunks through the array API; the scalar reference is computed once per chunk and every SIMD
// tier is compared with it bit for bit. Returns how many patterns were checked.
uint64_t check_narrow_sweep(const std::vector<ConvertIsa>& tiers, uint64_t stride) {
  constexpr int64_t kChunk = int64_t(1) << 16;
  std::vector<float> in(kChunk);
  std::vector<half> href(kChunk), hgot(kChunk);
  std::vector<bfloat16> bref(kChunk), bgot(kChunk);
  uint64_t checked = 0;
  int mismatches = 0;
  for (uint64_t base = 0; base < (uint64_t(1) << 32);) {
    int64_t count = 0;
    for (; count < kChunk && base < (uint64_t(1) << 32); ++count, base += stride) {
      const uint32_t x = uint32_t(base);
      std::memcpy(&in[count], &x, 4);
    }
    cpu::from_float(in.data(), href.data(), count, ConvertIsa::scalar);
    cpu::from_float(in.data(), bref.data(), count, ConvertIsa::scalar);
    compare_narrow(tiers, in.data(), href.data(), hgot.data(), count, mismatches);
    compare_narrow(tiers, in.data(), bref.data(), bgot.data(), count, mismatches);
    checked += uint64_t(count);
  }
  CHECK(mismatches == 0);
  return checked;
}

// Every length 0..80 at source and destination offsets 0..3 elements (so most calls are unaligned):
// the converted elements match the scalar tier and the guard elements before and after are intact.
template <class H>
void check_lengths_and_tails(ConvertIsa isa) {
  std::mt19937 rng(20);
  constexpr int kGuard = 24, kMax = 80;
  std::vector<float> src(kMax + 8), wide(kMax + 8 + 2 * kGuard);
  std::vector<H> narrow_src(kMax + 8), narrow(kMax + 8 + 2 * kGuard);
  std::uniform_real_distribution<float> value(-70000.0f, 70000.0f);
  for (auto& v : src) v = value(rng);
  for (auto& h : narrow_src) h = H::from_bits(uint16_t(rng()));
  src[5] = std::numeric_limits<float>::quiet_NaN();
  src[17] = 1e-6f;  // an f16 subnormal
  for (int n = 0; n <= kMax; ++n) {
    for (int off_in = 0; off_in < 4; ++off_in) {
      for (int off_out = 0; off_out < 4; ++off_out) {
        // Narrowing.
        std::vector<H> ref(size_t(n) + 1);
        cpu::from_float(src.data() + off_in, ref.data(), n, ConvertIsa::scalar);
        for (auto& h : narrow) h = H::from_bits(0xdead);
        H* out = narrow.data() + kGuard + off_out;
        cpu::from_float(src.data() + off_in, out, n, isa);
        for (int i = 0; i < n; ++i) REQUIRE(bits_of(out[i]) == bits_of(ref[i]));
        for (H* g = narrow.data(); g < out; ++g) REQUIRE(bits_of(*g) == 0xdead);
        for (H* g = out + n; g < narrow.data() + narrow.size(); ++g) REQUIRE(bits_of(*g) == 0xdead);
        // Widening.
        std::vector<float> wref(size_t(n) + 1);
        cpu::to_float(narrow_src.data() + off_in, wref.data(), n, ConvertIsa::scalar);
        std::fill(wide.begin(), wide.end(), -12345.0f);
        float* wout = wide.data() + kGuard + off_out;
        cpu::to_float(narrow_src.data() + off_in, wout, n, isa);
        REQUIRE(std::memcmp(wout, wref.data(), size_t(n) * 4) == 0);
        for (float* g = wide.data(); g < wout; ++g) REQUIRE(*g == -12345.0f);
        for (float* g = wout + n; g < wide.data() + wide.size(); ++g) REQUIRE(*g == -12345.0f);
      }
    }
  }
}

}  // namespace

TEST_CASE("convert: the tiers this CPU runs") {
  const ConvertIsa best = cpu::convert_best_isa();
  MESSAGE("best tier: " << std::string(cpu::convert_isa_name(best)));
  CHECK(int(best) >= int(ConvertIsa::scalar));
  if (best != ConvertIsa::avx512) {
    std::vector<half> h(4);
    std::vector<float> f(4);
    CHECK_THROWS_AS(cpu::to_float(h.data(), f.data(), 4, ConvertIsa::avx512), hg::Error);
  }
  // The scalar tier is half.h's conversion.
  const float x = 1.0f + 0x1p-11f;  // a tie in f16: rounds to even (1.0)
  half h;
  cpu::from_float(&x, &h, 1, ConvertIsa::scalar);
  CHECK(h.bits == 0x3c00);
}

TEST_CASE("convert: all 2^16 f16 and bf16 patterns widened, every SIMD tier vs scalar") {
  for (ConvertIsa isa : simd_tiers()) {
    CAPTURE(cpu::convert_isa_name(isa));
    check_widen_all<half>(isa);
    check_widen_all<bfloat16>(isa);
  }
}

TEST_CASE("convert: all 2^32 float patterns narrowed to f16 and bf16, every SIMD tier vs scalar") {
  const uint64_t expected = ((uint64_t(1) << 32) + kSweepStride - 1) / kSweepStride;
  CHECK(check_narrow_sweep(simd_tiers(), kSweepStride) == expected);
  MESSAGE("swept every " << kSweepStride << " float pattern(s) on " << simd_tiers().size() << " SIMD tier(s)");
}

TEST_CASE("convert: DAZ and FTZ set do not change any tier's results") {
  // The reference is taken with MXCSR as the program left it; the SIMD tiers then run under DAZ+FTZ
  // (the scalar tier is integer code). Float subnormals, half subnormals and their neighbours.
  std::vector<float> in;
  for (uint32_t x = 0; x < (1u << 24); x += 7) {  // float subnormals and the lowest normals
    for (uint32_t sign : {0u, 0x80000000u}) {
      float f;
      const uint32_t b = x | sign;
      std::memcpy(&f, &b, 4);
      in.push_back(f);
    }
  }
  for (uint32_t x = 0x32000000u; x < 0x39000000u; x += 13) {  // around f16's subnormal range
    float f;
    std::memcpy(&f, &x, 4);
    in.push_back(f);
  }
  const int64_t n = int64_t(in.size());
  std::vector<half> href(n), hgot(n);
  std::vector<bfloat16> bref(n), bgot(n);
  std::vector<half> all_half(65536);
  for (uint32_t i = 0; i < 65536; ++i) all_half[i] = half::from_bits(uint16_t(i));
  std::vector<float> wref(65536), wgot(65536);
  cpu::from_float(in.data(), href.data(), n, ConvertIsa::scalar);
  cpu::from_float(in.data(), bref.data(), n, ConvertIsa::scalar);
  cpu::to_float(all_half.data(), wref.data(), 65536, ConvertIsa::scalar);
  for (ConvertIsa isa : simd_tiers()) {
    CAPTURE(cpu::convert_isa_name(isa));
    std::memset(static_cast<void*>(hgot.data()), 0xa5, size_t(n) * 2);
    std::memset(static_cast<void*>(bgot.data()), 0xa5, size_t(n) * 2);
    std::memset(wgot.data(), 0xa5, wgot.size() * 4);
    {
      DazFtz mode;
      cpu::from_float(in.data(), hgot.data(), n, isa);
      cpu::from_float(in.data(), bgot.data(), n, isa);
      cpu::to_float(all_half.data(), wgot.data(), 65536, isa);
    }
    CHECK(std::memcmp(href.data(), hgot.data(), size_t(n) * 2) == 0);
    CHECK(std::memcmp(bref.data(), bgot.data(), size_t(n) * 2) == 0);
    CHECK(std::memcmp(wref.data(), wgot.data(), wgot.size() * 4) == 0);
  }
}

TEST_CASE("convert: every length 0..80, unaligned pointers, tails and guards, every tier") {
  std::vector<ConvertIsa> tiers = simd_tiers();
  tiers.push_back(ConvertIsa::scalar);
  for (ConvertIsa isa : tiers) {
    CAPTURE(cpu::convert_isa_name(isa));
    check_lengths_and_tails<half>(isa);
    check_lengths_and_tails<bfloat16>(isa);
  }
}

TEST_CASE("convert: the default entry points use the best tier and float overloads copy") {
  std::mt19937 rng(7);
  std::vector<float> in(1000);
  for (auto& v : in) {
    const uint32_t b = rng();
    std::memcpy(&v, &b, 4);
  }
  std::vector<half> a(1000), b(1000);
  cpu::from_float(in.data(), a.data(), 1000);
  cpu::from_float(in.data(), b.data(), 1000, ConvertIsa::scalar);
  CHECK(std::memcmp(a.data(), b.data(), 2000) == 0);
  std::vector<float> copy(1000, 0.0f);
  cpu::from_float(in.data(), copy.data(), 1000);
  CHECK(std::memcmp(copy.data(), in.data(), 4000) == 0);
  std::fill(copy.begin(), copy.end(), 0.0f);
  cpu::to_float(in.data(), copy.data(), 1000);
  CHECK(std::memcmp(copy.data(), in.data(), 4000) == 0);
}
