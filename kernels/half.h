#pragma once
// Host (and device) half-precision storage types: IEEE binary16 (`hg::half`) and bfloat16
// (`hg::bfloat16`). Conversions from float round to nearest, ties to even, and are bit-identical to
// CUDA's __float2half_rn / __float2bfloat16_rn, including subnormals, overflow to infinity and the
// canonical NaN 0x7fff that CUDA returns for every NaN input. Arithmetic is done by converting to
// float: these types store, float computes (the fp32-accumulation rule).
#include <cstdint>
#include <cstring>

#include "kernels/host_device.h"

namespace hg {

HG_HOST_DEVICE inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
HG_HOST_DEVICE inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Rounds `value >> shift` to nearest even, given the bits shifted out.
HG_HOST_DEVICE inline uint32_t round_shifted_rne(uint32_t value, uint32_t shift) {
  uint32_t kept = value >> shift;
  uint32_t rest = value & ((1u << shift) - 1u);
  uint32_t halfway = 1u << (shift - 1u);
  if (rest > halfway || (rest == halfway && (kept & 1u))) ++kept;
  return kept;
}

// float -> binary16 bits. Float biased exponent e: e >= 143 overflows (>= 2^16), e in [113, 142]
// is a normal half, e in [102, 112] a subnormal half (unit 2^-24), below that the value is under
// half the smallest subnormal and rounds to zero. A rounding carry walks into the exponent field
// naturally (largest subnormal -> smallest normal, 65520 -> inf).
HG_HOST_DEVICE inline uint16_t float_to_half_bits(float f) {
  const uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return abs == 0x7f800000u ? uint16_t(sign | 0x7c00u) : uint16_t(0x7fffu);
  const uint32_t e = abs >> 23;
  if (e >= 143) return uint16_t(sign | 0x7c00u);
  if (e >= 113) {
    // Re-bias the exponent (127 -> 15) and drop 13 mantissa bits with rounding.
    const uint32_t rebased = abs - (112u << 23);
    return uint16_t(sign | round_shifted_rne(rebased, 13));
  }
  if (e < 102) return uint16_t(sign);
  const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;  // value = mantissa * 2^(e - 150)
  return uint16_t(sign | round_shifted_rne(mantissa, 126u - e));
}

// binary16 bits -> float (exact). Every NaN becomes the canonical 0x7fffffff (sign and payload
// dropped), as CUDA's __half2float does; infinities keep their sign.
HG_HOST_DEVICE inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu;
  if (e == 0x1f) return bits_float(m != 0 ? 0x7fffffffu : (sign | 0x7f800000u));
  if (e != 0) return bits_float(sign | ((e + 112u) << 23) | (m << 13));
  if (m == 0) return bits_float(sign);
  // Subnormal: m * 2^-24, exact in float (m < 2^10); no loop, so loads of f16 vectorise.
  const float magnitude = float(m) * 5.9604644775390625e-8f;
  return bits_float(sign | float_bits(magnitude));
}

// float -> bfloat16 bits: keep the top 16 bits, rounding the low 16 to nearest even. Every NaN
// becomes 0x7fff, as CUDA does; infinities stay infinities; large finite values may round to inf.
HG_HOST_DEVICE inline uint16_t float_to_bfloat16_bits(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
  return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

HG_HOST_DEVICE inline float bfloat16_bits_to_float(uint16_t b) { return bits_float(uint32_t(b) << 16); }

struct half {
  uint16_t bits = 0;
  half() = default;
  HG_HOST_DEVICE half(float f) : bits(float_to_half_bits(f)) {}
  HG_HOST_DEVICE operator float() const { return half_bits_to_float(bits); }
  HG_HOST_DEVICE static half from_bits(uint16_t b) {
    half h;
    h.bits = b;
    return h;
  }
};

struct bfloat16 {
  uint16_t bits = 0;
  bfloat16() = default;
  HG_HOST_DEVICE bfloat16(float f) : bits(float_to_bfloat16_bits(f)) {}
  HG_HOST_DEVICE operator float() const { return bfloat16_bits_to_float(bits); }
  HG_HOST_DEVICE static bfloat16 from_bits(uint16_t b) {
    bfloat16 h;
    h.bits = b;
    return h;
  }
};

static_assert(sizeof(half) == 2 && sizeof(bfloat16) == 2);

}  // namespace hg
