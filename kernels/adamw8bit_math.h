#pragma once
// 8-bit AdamW state (bitsandbytes' block-wise 8-bit Adam, Dettmers et al. 2022, "8-bit Optimizers via
// Block-wise Quantization"): the sizes every backend and the optimizer agree on, the two quantisation
// maps, and the per-block algorithm, written once as HG_HOST_DEVICE pieces that the CPU
// (kernels/cpu/adamw8bit.cpp) and CUDA (kernels/cuda/adamw8bit.cu) kernels both run.
//
// State: each moment is one byte per element, a code into a sorted 256-entry map, and one fp32 absmax
// per block of kAdamW8BitBlock elements: m_i = signed_map[code_i] * absmax_block (likewise v with the
// unsigned map). A block's step, for its elements i:
//   m_i, v_i  = dequantise (codes, absmax)
//   theta_i, m_i, v_i = adamw_update (kernels/adamw_math.h) in fp32, with the unquantised new m_i, v_i
//   absmax_m  = max_i |m_i|,  absmax_v = max_i v_i              (of the updated block)
//   code_i    = quantise (m_i * (1 / absmax_m)) (0 when absmax_m = 0); likewise v
// State before the first step: every code is the map's zero entry (kAdamW8BitSignedZeroCode,
// kAdamW8BitUnsignedZeroCode) and every absmax 0, which dequantises to m = v = 0.
//
// The maps (bitsandbytes' create_dynamic_map(signed, max_exponent_bits = 7, total_bits = 8)): for
// exponent levels k = 0..6, the decade 10^(k-6) carries the midpoints of linspace(0.1, 1, F_k + 1), i.e.
// F_k values 10^(k-6) * (0.1 + 0.9 (j + 1/2) / F_k), j = 0..F_k-1, with F_k = 2^k for the signed map (and
// each value negated as well) and F_k = 2^(k+1) for the unsigned one; then 0 and 1. Signed: 2 * 127 + 2
// = 256 entries in [-0.99297, 1] (1 is present, -1 is not, as in bitsandbytes); unsigned: 254 + 2 = 256
// entries in [0, 1]. The values are computed in double and rounded to float once, by the constexpr
// make_adamw8bit_tables below, so the CPU and CUDA tables are the same bits.
//
// Quantisation is to the nearest map entry, decided by the 255 midpoints between neighbours
// (bounds[i] = float((map[i] + map[i+1]) / 2), in double): code(x) = #{ i : bounds[i] < x }, a
// branchless binary search of 8 steps. A value exactly on a midpoint takes the lower code; NaN gives
// code 0. Scaled values outside the map's range saturate to its ends.
#include <cstdint>

#include "kernels/adamw_math.h"
#include "kernels/host_device.h"

namespace hg::kernels {

// Elements per quantisation block: each block of m (and of v) has its own fp32 absmax.
inline constexpr int64_t kAdamW8BitBlock = 2048;
// Parameters with fewer elements keep 32-bit moments (as bitsandbytes' min_8bit_size).
inline constexpr int64_t kAdamW8BitMinElements = 4096;

inline constexpr int64_t adamw8bit_blocks(int64_t n) { return (n + kAdamW8BitBlock - 1) / kAdamW8BitBlock; }

inline constexpr int kAdamW8BitCodes = 256;
// The codes of 0.0: the initial state (with absmax 0) of m and of v.
inline constexpr uint8_t kAdamW8BitSignedZeroCode = 127;
inline constexpr uint8_t kAdamW8BitUnsignedZeroCode = 0;

struct AdamW8BitTables {
  float signed_map[kAdamW8BitCodes];       // sorted ascending
  float unsigned_map[kAdamW8BitCodes];     // sorted ascending
  float signed_bounds[kAdamW8BitCodes];    // [i] = midpoint of map[i], map[i+1]; [255] = +infinity (unused)
  float unsigned_bounds[kAdamW8BitCodes];
};

namespace detail {

// The 256 map values in double, sorted (insertion sort: constexpr and small).
constexpr void adamw8bit_dynamic_map(bool is_signed, double (&out)[kAdamW8BitCodes]) {
  constexpr double kDecade[7] = {1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0};
  int count = 0;
  for (int k = 0; k < 7; ++k) {
    const int fractions = is_signed ? (1 << k) : (1 << (k + 1));
    for (int j = 0; j < fractions; ++j) {
      // The midpoint of linspace(0.1, 1, fractions + 1)'s j-th interval.
      const double lower = 0.1 + 0.9 * double(j) / double(fractions);
      const double upper = 0.1 + 0.9 * double(j + 1) / double(fractions);
      const double value = kDecade[k] * ((lower + upper) / 2.0);
      out[count++] = value;
      if (is_signed) out[count++] = -value;
    }
  }
  out[count++] = 0.0;
  out[count++] = 1.0;
  for (int i = 1; i < count; ++i) {
    const double x = out[i];
    int j = i - 1;
    while (j >= 0 && out[j] > x) {
      out[j + 1] = out[j];
      --j;
    }
    out[j + 1] = x;
  }
}

constexpr void adamw8bit_fill(bool is_signed, float (&map)[kAdamW8BitCodes], float (&bounds)[kAdamW8BitCodes]) {
  double values[kAdamW8BitCodes] = {};
  adamw8bit_dynamic_map(is_signed, values);
  for (int i = 0; i < kAdamW8BitCodes; ++i) map[i] = float(values[i]);
  for (int i = 0; i + 1 < kAdamW8BitCodes; ++i) bounds[i] = float((double(map[i]) + double(map[i + 1])) / 2.0);
  bounds[kAdamW8BitCodes - 1] = __builtin_huge_valf();
}

}  // namespace detail

constexpr AdamW8BitTables make_adamw8bit_tables() {
  AdamW8BitTables t{};
  detail::adamw8bit_fill(true, t.signed_map, t.signed_bounds);
  detail::adamw8bit_fill(false, t.unsigned_map, t.unsigned_bounds);
  return t;
}

// The host's copy (the CUDA kernels keep a device copy made from the same constexpr value).
inline constexpr AdamW8BitTables kAdamW8BitTables = make_adamw8bit_tables();

// The code of the map entry nearest x: #{ i < 255 : bounds[i] < x } by an 8-step branchless binary search
// (bounds is sorted; the indices probed are at most 254).
HG_HOST_DEVICE inline uint8_t adamw8bit_quantise(float x, const float* bounds) {
  int pos = 0;
  for (int step = kAdamW8BitCodes / 2; step > 0; step >>= 1) pos += bounds[pos + step - 1] < x ? step : 0;
  return uint8_t(pos);
}

HG_HOST_DEVICE inline float adamw8bit_dequantise(uint8_t code, float absmax, const float* map) {
  return map[code] * absmax;
}

// The factor that brings a block into the map's range: 1 / absmax, or 0 for an all-zero block (every
// element then quantises to the zero code).
HG_HOST_DEVICE inline float adamw8bit_inverse_scale(float absmax) { return absmax > 0.0f ? 1.0f / absmax : 0.0f; }

// The running absmax of a block: max(a, |x|) (v >= 0 needs no |.|, and |v| = v).
HG_HOST_DEVICE inline float adamw8bit_absmax(float a, float x) {
  const float magnitude = x < 0.0f ? -x : x;
  return magnitude > a ? magnitude : a;
}

// One element of a block: dequantise m, v, then the AdamW update; m and v receive the unquantised new
// moments (for the block's absmax and the requantisation that follow).
HG_HOST_DEVICE inline void adamw8bit_update(float& theta, float g, uint8_t code_m, uint8_t code_v, float absmax_m,
                                            float absmax_v, const AdamW8BitTables& t,
                                            const AdamWCoefficients<float>& c, float& m, float& v) {
  m = adamw8bit_dequantise(code_m, absmax_m, t.signed_map);
  v = adamw8bit_dequantise(code_v, absmax_v, t.unsigned_map);
  adamw_update(theta, g, m, v, c);
}

}  // namespace hg::kernels
