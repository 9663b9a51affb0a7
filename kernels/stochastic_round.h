#pragma once
// Stochastic rounding of a float to a half type (f16 or bf16), shared by the CPU and CUDA backends.
//
// A float x lies between two neighbouring values of the half type, lo and hi, with the sign of x and
// |lo| <= |x| <= |hi|. Stochastic rounding picks hi with probability p = (|x| - |lo|) / (|hi| - |lo|)
// and lo otherwise, so E[round(x)] = x: an update smaller than half a unit in the last place of a
// weight, which round-to-nearest would drop every time, still moves the weight on average. The draw
// is u = bits_to_uniform(random_bits) (24 random bits, philox.h): hi when u < p.
//
// Where x has no two neighbours the result is round-to-nearest-even's: x exactly representable,
// +-inf, NaN (-> the canonical NaN), and a finite x that RNE rounds to infinity (stochastic rounding
// never hides an overflow). Between the largest finite value and the overflow threshold p is 0 (hi
// would be infinity), so such values round to the largest finite value, as RNE does.
#include <cstdint>

#include "kernels/half.h"
#include "kernels/host_device.h"
#include "kernels/philox.h"

namespace hg::kernels {

// The RNE conversion of each half type and its exact inverse.
struct HalfBits {
  HG_HOST_DEVICE static uint16_t to_bits(float v) { return float_to_half_bits(v); }
  HG_HOST_DEVICE static float from_bits(uint16_t h) { return half_bits_to_float(h); }
};
struct BFloat16Bits {
  HG_HOST_DEVICE static uint16_t to_bits(float v) { return float_to_bfloat16_bits(v); }
  HG_HOST_DEVICE static float from_bits(uint16_t h) { return bfloat16_bits_to_float(h); }
};

// Both half types encode sign and magnitude, so bits + 1 is the neighbour one step further from
// zero and bits - 1 the neighbour one step closer.
template <class Bits>
HG_HOST_DEVICE inline uint16_t stochastic_round_bits(float x, uint32_t random_bits) {
  const uint16_t nearest = Bits::to_bits(x);
  const float y = Bits::from_bits(nearest);
  const float ay = y < 0.0f ? -y : y;
  if (y == x || !(ay <= 3.40282347e38f)) return nearest;  // exact, NaN, or +-inf
  const float ax = x < 0.0f ? -x : x;
  // nearest is one neighbour; the other lies one step away on the far side of x.
  const uint16_t lo = ay > ax ? uint16_t(nearest - 1u) : nearest;
  const uint16_t hi = ay > ax ? nearest : uint16_t(nearest + 1u);
  const float alo = Bits::from_bits(uint16_t(lo & 0x7fffu));
  const float ahi = Bits::from_bits(uint16_t(hi & 0x7fffu));
  const float p = (ax - alo) / (ahi - alo);
  return bits_to_uniform(random_bits) < p ? hi : lo;
}

}  // namespace hg::kernels
