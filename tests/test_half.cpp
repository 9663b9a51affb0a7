// kernels/half.h, proved bit-exact.
//
// Three oracles, each independent of the code under test:
//  1. A reference written here with exact double arithmetic: for a float x it computes the two
//     neighbouring representable values (lo <= |x| < lo + q, q the spacing at |x|'s binade) and picks
//     the nearer one, ties to the one with an even significand. Encoding the chosen multiple of q
//     walks naturally into the next binade and into infinity, so overflow needs no special case.
//  2. Expectations derived from structure: for every 16-bit pattern p, the float equal to p must give
//     back p, the exact midpoint to the next pattern must go to the even one of the two, and one float
//     ulp either side of it must go to the nearer one.
//  3. With HALFGRAD_TEST_AGAINST_CUDA_HEADERS (set by CMake when the CUDA toolkit is present), the host
//     implementations in cuda_fp16.h / cuda_bf16.h, compiled by the host compiler. In CUDA 13 all four
//     (__float2half_rn, __half2float, __float2bfloat16_rn, __bfloat162float) are host-callable.
//
// NaN conventions (those of CUDA's host code): float -> half and float -> bf16 give 0x7fff for every
// NaN; half -> float gives the canonical 0x7fffffff for every NaN half (sign and payload dropped);
// bf16 -> float is a pure widening (bits << 16), so a NaN bf16 keeps its sign and payload.
#include <doctest/doctest.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>

#include "kernels/half.h"

#ifdef HALFGRAD_TEST_AGAINST_CUDA_HEADERS
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace {

using u16 = uint16_t;
using u32 = uint32_t;
using u64 = uint64_t;

float f_of(u32 bits) { return std::bit_cast<float>(bits); }
u32 bits_of(float f) { return std::bit_cast<u32>(f); }

// ---- The two 16-bit formats, described by their parameters ---------------------------------
// A format has `mant` stored significand bits and a minimum normal exponent `emin`; its values are
// n * 2^(e - mant) for e >= emin, with n < 2^(mant+1), plus subnormals n * 2^(emin - mant).
struct Format {
  const char* name;
  int mant;      // stored significand bits: 10 (half), 7 (bf16)
  int emin;      // exponent of the smallest normal: -14 (half), -126 (bf16)
  int emax;      // exponent of the largest finite binade: 15 (half), 127 (bf16)
};
constexpr Format kHalf{"half", 10, -14, 15};
constexpr Format kBf16{"bf16", 7, -126, 127};

// Value of a 16-bit pattern as a double, from the format's definition (not from half.h's bit tricks).
// Returns NaN for NaN patterns and +-inf for infinities.
double ref_decode(const Format& fmt, u16 p) {
  const int ebits = 15 - fmt.mant;
  const int bias = (1 << (ebits - 1)) - 1;
  const bool neg = (p >> 15) != 0;
  const int e = (p >> fmt.mant) & ((1 << ebits) - 1);
  const int m = p & ((1 << fmt.mant) - 1);
  double v;
  if (e == (1 << ebits) - 1) {
    v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(double(m), fmt.emin - fmt.mant);
  } else {
    v = std::ldexp(double((1 << fmt.mant) + m), e - bias - fmt.mant);
  }
  return neg ? -v : v;
}

// float -> 16-bit, round to nearest, ties to even, by exact arithmetic on doubles.
u16 ref_encode(const Format& fmt, float f) {
  if (std::isnan(f)) return 0x7fffu;  // CUDA's canonical NaN for both formats
  const u16 sign = std::signbit(f) ? 0x8000u : 0u;
  const double x = std::fabs(double(f));
  const u16 inf = u16(((1u << (15 - fmt.mant)) - 1u) << fmt.mant);
  if (std::isinf(x)) return sign | inf;
  if (x == 0.0) return sign;
  int e2;
  std::frexp(x, &e2);                              // x = m * 2^e2, m in [0.5, 1)
  const int binade = std::max(e2 - 1, fmt.emin);   // floor(log2 x), clamped to the subnormal range
  if (binade > fmt.emax) return sign | inf;        // x >= 2^(emax+1): beyond even the overflow midpoint
  const double q = std::ldexp(1.0, binade - fmt.mant);  // spacing of representable values here
  const double n_lo = std::floor(x / q);           // exact: x / q is a scaling by a power of two
  const double lo = n_lo * q, hi = (n_lo + 1.0) * q;  // the two neighbours (hi may be 2^(emax+1))
  const double d_lo = x - lo, d_hi = hi - x;       // exact: both are small multiples of x's ulp
  double n;
  if (d_lo < d_hi) n = n_lo;
  else if (d_hi < d_lo) n = n_lo + 1.0;
  else n = std::fmod(n_lo, 2.0) == 0.0 ? n_lo : n_lo + 1.0;  // tie: the even significand
  // Bits = ((binade - emin) << mant) + n. For binade == emin this is n itself (subnormal when
  // n < 2^mant, the smallest normal binade otherwise); n == 2^(mant+1) carries into the next binade,
  // and from the top binade into the infinity pattern.
  const u32 bits = (u32(binade - fmt.emin) << fmt.mant) + u32(n);
  return u16(sign | bits);
}

// 16-bit -> float reference: the exact value, NaN per the conventions above.
u32 ref_half_to_float_bits(u16 h) {
  if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0) return 0x7fffffffu;
  return bits_of(float(ref_decode(kHalf, h)));  // exact: every half is a float
}
u32 ref_bf16_to_float_bits(u16 b) {
  if ((b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0) return u32(b) << 16;
  return bits_of(float(ref_decode(kBf16, b)));
}

// ---- The code under test and CUDA, behind one signature ---------------------------------------
u16 hg_enc(const Format& fmt, float f) {
  return &fmt == &kHalf ? hg::float_to_half_bits(f) : hg::float_to_bfloat16_bits(f);
}
u32 hg_dec(const Format& fmt, u16 p) {
  return bits_of(&fmt == &kHalf ? hg::half_bits_to_float(p) : hg::bfloat16_bits_to_float(p));
}

#ifdef HALFGRAD_TEST_AGAINST_CUDA_HEADERS
constexpr bool kHaveCuda = true;
u16 cuda_enc(const Format& fmt, float f) {
  if (&fmt == &kHalf) {
    const __half_raw r = __float2half_rn(f);
    return r.x;
  }
  const __nv_bfloat16_raw r = __float2bfloat16_rn(f);
  return r.x;
}
u32 cuda_dec(const Format& fmt, u16 p) {
  if (&fmt == &kHalf) {
    __half_raw r;
    r.x = p;
    return bits_of(__half2float(__half(r)));
  }
  __nv_bfloat16_raw r;
  r.x = p;
  return bits_of(__bfloat162float(__nv_bfloat16(r)));
}
#else
constexpr bool kHaveCuda = false;
#endif

// Counts mismatches in a hot loop without paying for a doctest assertion per element; reports the
// first few in full.
struct Mismatches {
  explicit Mismatches(const char* w) : what(w) {}
  const char* what;
  u64 count = 0;
  std::string first;
  void add(const std::string& line) {
    if (count++ < 8) first += line + "\n";
  }
  void check() const {
    INFO(std::string(what) << ": " << count << " mismatches; first:\n" << first);
    CHECK(count == 0);
  }
};

std::string hex(u64 v, int width) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%0*llx", width, (unsigned long long)v);
  return buf;
}

// Compares one float -> 16-bit conversion against the reference, CUDA, and (if given) an expected
// pattern derived from structure.
void check_encode(const Format& fmt, float f, Mismatches& mm, int expected = -1) {
  const u16 got = hg_enc(fmt, f);
  const u16 ref = ref_encode(fmt, f);
  bool bad = got != ref || (expected >= 0 && got != u16(expected));
  u16 cu = 0;
#ifdef HALFGRAD_TEST_AGAINST_CUDA_HEADERS
  cu = cuda_enc(fmt, f);
  bad = bad || got != cu;
#endif
  if (bad) {
    mm.add(std::string(fmt.name) + "(" + hex(bits_of(f), 8) + " = " + std::to_string(f) +
           "): halfgrad " + hex(got, 4) + " reference " + hex(ref, 4) +
           (kHaveCuda ? " cuda " + hex(cu, 4) : std::string()) +
           (expected >= 0 ? " expected " + hex(u16(expected), 4) : std::string()));
  }
}

float next_up(float f) { return std::nextafter(f, std::numeric_limits<float>::infinity()); }
float next_down(float f) { return std::nextafter(f, -std::numeric_limits<float>::infinity()); }

bool is_nan_pattern(const Format& fmt, u16 p) {
  const u16 inf = u16(((1u << (15 - fmt.mant)) - 1u) << fmt.mant);
  return (p & 0x7fffu) > inf;
}

// ---- 16-bit -> float, all 65,536 patterns ------------------------------------------------------
void exhaustive_decode(const Format& fmt) {
  Mismatches dec{"16-bit -> float"}, round{"float -> 16-bit -> float round trip"};
  u64 nans = 0;
  for (u32 i = 0; i < 0x10000u; ++i) {
    const u16 p = u16(i);
    const u32 got = hg_dec(fmt, p);
    const u32 ref = fmt.mant == kHalf.mant ? ref_half_to_float_bits(p) : ref_bf16_to_float_bits(p);
    bool bad = got != ref;
    u32 cu = 0;
#ifdef HALFGRAD_TEST_AGAINST_CUDA_HEADERS
    cu = cuda_dec(fmt, p);
    bad = bad || got != cu;
#endif
    if (bad)
      dec.add(std::string(fmt.name) + " " + hex(p, 4) + ": halfgrad " + hex(got, 8) + " reference " +
              hex(ref, 8) + (kHaveCuda ? " cuda " + hex(cu, 8) : std::string()));

    const float f = f_of(got);
    const u16 back = hg_enc(fmt, f);
    if (is_nan_pattern(fmt, p)) {
      ++nans;
      // NaN stays NaN, and comes back as the canonical 0x7fff.
      if (!std::isnan(f) || back != 0x7fffu)
        round.add(std::string(fmt.name) + " NaN " + hex(p, 4) + " -> " + hex(got, 8) + " -> " + hex(back, 4));
    } else if (back != p) {
      round.add(std::string(fmt.name) + " " + hex(p, 4) + " -> " + hex(got, 8) + " -> " + hex(back, 4));
    }
  }
  dec.check();
  round.check();
  CHECK(nans == (fmt.mant == 10 ? 2u * 1023u : 2u * 127u));
}

// ---- float -> 16-bit at and around every rounding boundary ------------------------------------
// For every non-NaN pattern p with a larger-magnitude neighbour p + 1 (the successor of the largest
// finite value is the infinity pattern, which rounding reaches at the overflow midpoint), checks:
//   the exact float of p -> p; one float ulp either side -> p (toward zero from +-0 excepted);
//   the exact midpoint to p + 1 -> whichever of p, p + 1 is even; one float ulp below -> p;
//   one float ulp above -> p + 1.
void exhaustive_boundaries(const Format& fmt) {
  Mismatches mm{"float -> 16-bit around boundaries"};
  const u16 inf = u16(((1u << (15 - fmt.mant)) - 1u) << fmt.mant);
  u64 midpoints = 0;
  for (u32 i = 0; i < 0x10000u; ++i) {
    const u16 p = u16(i);
    const u16 mag = p & 0x7fffu;
    if (mag > inf) continue;  // NaN patterns: covered below
    const double v = ref_decode(fmt, p);
    if (mag == inf) {
      check_encode(fmt, float(v), mm, p);
      continue;
    }
    const float fv = float(v);
    REQUIRE(double(fv) == v);  // every 16-bit value is a float
    check_encode(fmt, fv, mm, p);
    check_encode(fmt, std::signbit(fv) ? next_down(fv) : next_up(fv), mm, p);  // away from zero
    if (mag != 0) check_encode(fmt, std::signbit(fv) ? next_up(fv) : next_down(fv), mm, p);

    // The neighbour above in magnitude. For the largest finite value it is the infinity pattern,
    // whose value for rounding purposes is 2^(emax+1).
    const u16 succ = u16(p + 1);
    const double vs = mag + 1 == inf ? std::copysign(std::ldexp(1.0, fmt.emax + 1), v) : ref_decode(fmt, succ);
    const double mid = (v + vs) / 2;  // exact in double
    const float fm = float(mid);
    REQUIRE(double(fm) == mid);  // one more significand bit still fits in a float
    ++midpoints;
    check_encode(fmt, fm, mm, (p & 1u) == 0 ? p : succ);
    const float toward0 = std::signbit(fm) ? next_up(fm) : next_down(fm);
    const float away = std::signbit(fm) ? next_down(fm) : next_up(fm);
    check_encode(fmt, toward0, mm, p);
    check_encode(fmt, away, mm, succ);
  }
  mm.check();
  CHECK(midpoints == 2u * inf);
}

}  // namespace

TEST_CASE("half: reference oracle sanity") {
  // The reference itself, pinned down by a few values worked out by hand.
  CHECK(ref_encode(kHalf, 1.0f) == 0x3c00);
  CHECK(ref_encode(kHalf, -2.0f) == 0xc000);
  CHECK(ref_encode(kHalf, 65504.0f) == 0x7bff);
  CHECK(ref_encode(kHalf, 65520.0f) == 0x7c00);
  CHECK(ref_encode(kHalf, 0x1p-24f) == 0x0001);
  CHECK(ref_encode(kHalf, 0x1p-25f) == 0x0000);
  CHECK(ref_encode(kBf16, 1.0f) == 0x3f80);
  CHECK(ref_encode(kBf16, std::numeric_limits<float>::max()) == 0x7f80);
  CHECK(ref_encode(kBf16, std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(ref_decode(kHalf, 0x7bff) == 65504.0);
  CHECK(ref_decode(kHalf, 0x0001) == 0x1p-24);
  CHECK(ref_decode(kBf16, 0x0001) == 0x1p-133);
  CHECK(ref_decode(kBf16, 0x7f7f) == 0x1.fep127);
}

TEST_CASE("half: half -> float exhaustive over all 65536 patterns and round trip") { exhaustive_decode(kHalf); }

TEST_CASE("half: bf16 -> float exhaustive over all 65536 patterns and round trip") { exhaustive_decode(kBf16); }

TEST_CASE("half: float -> half at and around every rounding boundary of both signs") { exhaustive_boundaries(kHalf); }

TEST_CASE("half: float -> bf16 at and around every rounding boundary of both signs") { exhaustive_boundaries(kBf16); }

TEST_CASE("half: float -> half named edge cases") {
  Mismatches mm{"float -> half edge cases"};
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    float f;
    u16 expected;
  };
  const Case cases[] = {
      {0.0f, 0x0000}, {-0.0f, 0x8000}, {1.0f, 0x3c00}, {-1.0f, 0xbc00},
      // Ties in the normal range go to even; just past the tie goes up.
      {1.0f + 0x1p-11f, 0x3c00}, {1.0f + 3 * 0x1p-11f, 0x3c02}, {next_up(1.0f + 0x1p-11f), 0x3c01},
      // Subnormals: the smallest, half of it (ties to 0), just above half, ties at 1.5 and 2.5 units.
      {0x1p-24f, 0x0001}, {-0x1p-24f, 0x8001}, {0x1p-25f, 0x0000}, {-0x1p-25f, 0x8000},
      {next_up(0x1p-25f), 0x0001}, {-next_up(0x1p-25f), 0x8001}, {next_down(0x1p-25f), 0x0000},
      {1.5f * 0x1p-24f, 0x0002}, {2.5f * 0x1p-24f, 0x0002}, {3.5f * 0x1p-24f, 0x0004},
      {0x1p-26f, 0x0000}, {std::numeric_limits<float>::denorm_min(), 0x0000},
      {-std::numeric_limits<float>::denorm_min(), 0x8000}, {std::numeric_limits<float>::min(), 0x0000},
      // Largest subnormal, the tie above it carrying into the smallest normal, the smallest normal.
      {1023 * 0x1p-24f, 0x03ff}, {1023.5f * 0x1p-24f, 0x0400}, {next_down(1023.5f * 0x1p-24f), 0x03ff},
      {0x1p-14f, 0x0400}, {next_down(0x1p-14f), 0x0400},
      // Largest finite, the overflow threshold, beyond.
      {65504.0f, 0x7bff}, {-65504.0f, 0xfbff}, {65519.0f, 0x7bff}, {next_down(65520.0f), 0x7bff},
      {-next_down(65520.0f), 0xfbff}, {65520.0f, 0x7c00}, {-65520.0f, 0xfc00}, {65536.0f, 0x7c00},
      {1e5f, 0x7c00}, {std::numeric_limits<float>::max(), 0x7c00}, {-std::numeric_limits<float>::max(), 0xfc00},
      {inf, 0x7c00}, {-inf, 0xfc00},
      // NaNs of both signs, quiet and signalling, various payloads: all become 0x7fff.
      {f_of(0x7fc00000u), 0x7fff}, {f_of(0xffc00000u), 0x7fff}, {f_of(0x7f800001u), 0x7fff},
      {f_of(0xff800001u), 0x7fff}, {f_of(0x7fffffffu), 0x7fff}, {f_of(0xffffffffu), 0x7fff},
      {f_of(0x7f802000u), 0x7fff}, {f_of(0x7fa00000u), 0x7fff}, {f_of(0x7f801fffu), 0x7fff},
  };
  CHECK(0x1p-25f == f_of(0x33000000u));
  CHECK(next_down(65520.0f) == 65519.99609375f);
  for (const Case& c : cases) check_encode(kHalf, c.f, mm, c.expected);
  mm.check();
  // The storage type goes through the same functions.
  CHECK(hg::half(65520.0f).bits == 0x7c00);
  CHECK(float(hg::half::from_bits(0x3555)) == 0x1.554p-2f);
  CHECK(std::isnan(float(hg::half(std::nanf("")))));
}

TEST_CASE("half: float -> bf16 named edge cases") {
  Mismatches mm{"float -> bf16 edge cases"};
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    u32 f;
    u16 expected;
  };
  const Case cases[] = {
      {0x00000000u, 0x0000}, {0x80000000u, 0x8000}, {0x3f800000u, 0x3f80},
      {0x3f808000u, 0x3f80},  // 1 + 2^-8: tie, to even
      {0x3f818000u, 0x3f82},  // 1 + 3 * 2^-8: tie, to even (up)
      {0x3f808001u, 0x3f81}, {0x3f807fffu, 0x3f80},
      // Float subnormals: bf16 keeps the top 7 bits of their fraction.
      {0x00000001u, 0x0000}, {0x80000001u, 0x8000}, {0x00008000u, 0x0000}, {0x00008001u, 0x0001},
      {0x00018000u, 0x0002}, {0x00010000u, 0x0001}, {0x007fffffu, 0x0080}, {0x007f7fffu, 0x007f},
      // The largest finite bf16, the overflow tie, FLT_MAX.
      {0x7f7f0000u, 0x7f7f}, {0x7f7f7fffu, 0x7f7f}, {0x7f7f8000u, 0x7f80}, {0xff7f8000u, 0xff80},
      {0x7f7fffffu, 0x7f80}, {0xff7fffffu, 0xff80},
      {bits_of(inf), 0x7f80}, {bits_of(-inf), 0xff80},
      // NaNs: all 0x7fff, including payloads a truncating conversion would turn into infinity.
      {0x7fc00000u, 0x7fff}, {0xffc00000u, 0x7fff}, {0x7f800001u, 0x7fff}, {0xff800001u, 0x7fff},
      {0x7f808000u, 0x7fff}, {0x7fffffffu, 0x7fff}, {0xffffffffu, 0x7fff}, {0x7fbfffffu, 0x7fff},
  };
  for (const Case& c : cases) check_encode(kBf16, f_of(c.f), mm, c.expected);
  mm.check();
  CHECK(hg::bfloat16(1.0f).bits == 0x3f80);
  CHECK(float(hg::bfloat16::from_bits(0xc049)) == -3.140625f);
}

TEST_CASE("half: half -> float named NaN and infinity cases") {
  CHECK(bits_of(hg::half_bits_to_float(0x7c00)) == 0x7f800000u);
  CHECK(bits_of(hg::half_bits_to_float(0xfc00)) == 0xff800000u);
  for (u16 nan : {u16(0x7c01), u16(0x7e00), u16(0x7fff), u16(0xfc01), u16(0xfe00), u16(0xffff), u16(0x7d55)})
    CHECK(bits_of(hg::half_bits_to_float(nan)) == 0x7fffffffu);  // canonical, as CUDA
  CHECK(bits_of(hg::half_bits_to_float(0x0001)) == bits_of(0x1p-24f));
  CHECK(bits_of(hg::half_bits_to_float(0x8001)) == bits_of(-0x1p-24f));
  CHECK(bits_of(hg::half_bits_to_float(0x03ff)) == bits_of(1023 * 0x1p-24f));
  CHECK(bits_of(hg::half_bits_to_float(0x8000)) == 0x80000000u);
  CHECK(bits_of(hg::bfloat16_bits_to_float(0xffc1)) == 0xffc10000u);  // bf16 widening keeps NaN bits
}

namespace {

// Runs `body(bits)` over float bit patterns lo, lo + stride, ... below 2^32.
template <class F>
void sweep(u64 stride, F&& body) {
  for (u64 i = 0; i < (u64(1) << 32); i += stride) body(u32(i));
}

}  // namespace

// Every 97th pattern by default: 44.3 million floats (about 1 s), an odd stride, so every residue of
// the low bits (the rounded-away bits) and every exponent and sign are visited many times over.
// Build with -DHALFGRAD_HALF_SWEEP_STRIDE=1 for the full 2^32 sweep (about 2 minutes with the
// reference and CUDA; the conversions alone against CUDA take about 11 s on one core).
#ifndef HALFGRAD_HALF_SWEEP_STRIDE
#define HALFGRAD_HALF_SWEEP_STRIDE 97
#endif

TEST_CASE("half: strided sweep over all 2^32 floats vs reference (and CUDA)") {
  constexpr u64 stride = HALFGRAD_HALF_SWEEP_STRIDE;
  const auto t0 = std::chrono::steady_clock::now();
  Mismatches h{"float -> half sweep"}, b{"float -> bf16 sweep"};
  u64 n = 0;
  sweep(stride, [&](u32 x) {
    const float f = f_of(x);
    check_encode(kHalf, f, h);
    check_encode(kBf16, f, b);
    ++n;
  });
  h.check();
  b.check();
  CHECK(n == ((u64(1) << 32) + stride - 1) / stride);
  MESSAGE("strided sweep: " << n << " floats x 2 formats in "
                            << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
                            << " s" << std::string(kHaveCuda ? " (with CUDA headers)" : " (no CUDA headers)"));
}

TEST_CASE("half: every rounding-bit combination in every float binade") {
  // A structured complement to the strided sweep: for each sign and each of the 256 float exponents,
  // all 2^14 combinations of the lowest 14 significand bits (half's 13 rounded-away bits plus its kept
  // LSB), under two upper-significand patterns; and for bf16 all 2^17 combinations of the lowest
  // 17 bits (its 16 rounded-away bits plus the kept LSB) under one.
  Mismatches h{"float -> half per binade"}, b{"float -> bf16 per binade"};
  for (u32 sign = 0; sign < 2; ++sign) {
    for (u32 e = 0; e < 256; ++e) {
      const u32 head = (sign << 31) | (e << 23);
      for (u32 upper : {0u, 0x7fc000u}) {
        for (u32 low = 0; low < (1u << 14); ++low) check_encode(kHalf, f_of(head | upper | low), h);
      }
      for (u32 low = 0; low < (1u << 17); ++low) check_encode(kBf16, f_of(head | 0x540000u | low), b);
    }
  }
  h.check();
  b.check();
}
