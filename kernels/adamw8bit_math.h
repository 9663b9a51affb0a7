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
//   code_i    = quantise (m_i * (1 / absmax_m)); likewise v
// State before the first step: every code is the map's zero entry (kAdamW8BitSignedZeroCode,
// kAdamW8BitUnsignedZeroCode) and every absmax 0, which dequantises to m = v = 0.
//
// Non-finite updates (as bitsandbytes does for a non-finite gradient): an element whose new m or v is
// not finite -- g inf or NaN, or |g| so large (>~ 6e20 at beta2 = 0.999) that (1 - beta2) g^2 overflows
// -- keeps its theta (no decay, no update) and gets m = v = 0. Without this, one such element would
// make the block's absmax inf, its scale 0, every m * scale = inf * 0 = NaN, and the whole block NaN
// for every later step; with it, the block's other elements step exactly as they would without it.
//
// Tiny blocks: a block whose new absmax is below FLT_MIN (0 or subnormal) is stored as the initial
// state, every code the zero code and absmax 0 (1 / absmax would overflow to inf, and 0 * inf = NaN).
//
// Deliberate differences from bitsandbytes' kernels (kOptimizerStatic8bit2StateBlockwise):
//   - weight decay multiplies theta before the update, theta (1 - lr lambda) - step, as PyTorch's
//     AdamW and kernels/adamw_math.h; bitsandbytes multiplies after it, (theta - step)(1 - lr lambda);
//   - no sign fix: bitsandbytes moves a code one step when its entry's sign differs from m's (e.g. a
//     small negative m whose nearest entry is 0); here a value takes the nearest entry, whatever its sign;
//   - the scaled value is m * (1 / absmax) (one division per block), not m / absmax per element, so
//     it may differ by an ulp and, exactly on a midpoint, take the neighbouring code;
//   - non-finite is judged on the new m and v (which covers the overflowing g^2), not on g alone.
//
// The maps (the construction of bitsandbytes' create_dynamic_map(signed, max_exponent_bits = 7,
// total_bits = 8); its values are computed in float32 by torch, these in double and rounded once, so
// entries agree to ~1e-7 relative, not necessarily bit for bit): for
// exponent levels k = 0..6, the decade 10^(k-6) carries the midpoints of linspace(0.1, 1, F_k + 1), i.e.
// F_k values 10^(k-6) * (0.1 + 0.9 (j + 1/2) / F_k), j = 0..F_k-1, with F_k = 2^k for the signed map (and
// each value negated as well) and F_k = 2^(k+1) for the unsigned one; then 0 and 1. Signed: 2 * 127 + 2
// = 256 entries in [-0.99297, 1] (1 is present, -1 is not, as in bitsandbytes); unsigned: 254 + 2 = 256
// entries in [0, 1]. The values are computed in double and rounded to float once, by the constexpr
// make_adamw8bit_tables below, so the CPU and CUDA tables are the same bits.
//
// Quantisation is to the nearest map entry, decided by the 255 midpoints between neighbours
// (mid[i] = float((map[i] + map[i+1]) / 2), in double): code(x) = #{ i : mid[i] < x }, a branchless binary
// search of 8 steps. A value exactly on a midpoint takes the lower code; NaN gives code 0. Scaled values
// outside the map's range saturate to its ends. The midpoints are stored in the search's visiting order
// (Eytzinger / heap order: node h's children are 2h and 2h + 1, the root is node 1), so step k of every
// search reads among nodes 2^k .. 2^(k+1)-1: the first five steps of a warp read within 32 consecutive
// floats (one shared-memory word per bank, broadcasts at most), where a sorted array would have every
// lane of a step read the same bank; and the AVX-512 path takes the first four steps from one register.
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
  float signed_map[kAdamW8BitCodes];     // sorted ascending
  float unsigned_map[kAdamW8BitCodes];   // sorted ascending
  float signed_search[kAdamW8BitCodes];  // the 255 midpoints in heap order at [1..255]; [0] unused (-inf)
  float unsigned_search[kAdamW8BitCodes];
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

// Heap node h at depth d (h in [2^d, 2^(d+1))) is the midpoint the binary search over the sorted midpoints
// probes at its step d: with step = 128 >> d, the sorted index (h - 2^d) * 2 * step + step - 1.
constexpr int adamw8bit_heap_to_sorted(int h) {
  int depth = 0;
  while ((2 << depth) <= h) ++depth;
  const int step = 128 >> depth;
  return (h - (1 << depth)) * 2 * step + step - 1;
}

constexpr void adamw8bit_fill(bool is_signed, float (&map)[kAdamW8BitCodes], float (&search)[kAdamW8BitCodes]) {
  double values[kAdamW8BitCodes] = {};
  adamw8bit_dynamic_map(is_signed, values);
  for (int i = 0; i < kAdamW8BitCodes; ++i) map[i] = float(values[i]);
  search[0] = -__builtin_huge_valf();
  for (int h = 1; h < kAdamW8BitCodes; ++h) {
    const int i = adamw8bit_heap_to_sorted(h);
    search[h] = float((double(map[i]) + double(map[i + 1])) / 2.0);
  }
}

}  // namespace detail

constexpr AdamW8BitTables make_adamw8bit_tables() {
  AdamW8BitTables t{};
  detail::adamw8bit_fill(true, t.signed_map, t.signed_search);
  detail::adamw8bit_fill(false, t.unsigned_map, t.unsigned_search);
  return t;
}

// The host's copy (the CUDA kernels keep a device copy made from the same constexpr value).
inline constexpr AdamW8BitTables kAdamW8BitTables = make_adamw8bit_tables();

// The code of the map entry nearest x: #{ i : mid[i] < x }, by an 8-step branchless descent of the
// midpoints' heap (search = signed_search or unsigned_search): h -> 2h + (search[h] < x), from h = 1.
HG_HOST_DEVICE inline uint8_t adamw8bit_quantise(float x, const float* search) {
  int h = 1;
  for (int step = 0; step < 8; ++step) h = 2 * h + (search[h] < x ? 1 : 0);
  return uint8_t(h - kAdamW8BitCodes);
}

HG_HOST_DEVICE inline float adamw8bit_dequantise(uint8_t code, float absmax, const float* map) {
  return map[code] * absmax;
}

// The smallest absmax a block keeps (FLT_MIN, the smallest normal float): below it 1 / absmax overflows.
inline constexpr float kAdamW8BitMinAbsmax = 1.17549435e-38f;

// The factor that brings a block into the map's range: 1 / absmax, or 0 for an all-zero or subnormal
// block (every element then quantises to the zero code).
HG_HOST_DEVICE inline float adamw8bit_inverse_scale(float absmax) {
  return absmax >= kAdamW8BitMinAbsmax ? 1.0f / absmax : 0.0f;
}

// The absmax a block stores: its own, or 0 where adamw8bit_inverse_scale gave 0 (so that block is the
// initial state, zero codes and absmax 0).
HG_HOST_DEVICE inline float adamw8bit_stored_absmax(float absmax) {
  return absmax >= kAdamW8BitMinAbsmax ? absmax : 0.0f;
}

// x is finite (false for inf and NaN; no <cmath> classification, so the same on host and device).
HG_HOST_DEVICE inline bool adamw8bit_finite(float x) {
  const float magnitude = x < 0.0f ? -x : x;
  return magnitude <= 3.40282347e+38f;
}

// The running absmax of a block: max(a, |x|) (v >= 0 needs no |.|, and |v| = v).
HG_HOST_DEVICE inline float adamw8bit_absmax(float a, float x) {
  const float magnitude = x < 0.0f ? -x : x;
  return magnitude > a ? magnitude : a;
}

// One element of a block: dequantise m, v, then the AdamW update; m and v receive the unquantised new
// moments (for the block's absmax and the requantisation that follow). A non-finite new m or v leaves
// theta as it was and gives m = v = 0 (see the header).
HG_HOST_DEVICE inline void adamw8bit_update(float& theta, float g, uint8_t code_m, uint8_t code_v, float absmax_m,
                                            float absmax_v, const AdamW8BitTables& t, const AdamWCoefficients<float>& c,
                                            float& m, float& v) {
  m = adamw8bit_dequantise(code_m, absmax_m, t.signed_map);
  v = adamw8bit_dequantise(code_v, absmax_v, t.unsigned_map);
  float updated = theta;
  adamw_update(updated, g, m, v, c);
  if (adamw8bit_finite(m) && adamw8bit_finite(v)) {
    theta = updated;
  } else {
    m = 0.0f;
    v = 0.0f;
  }
}

}  // namespace hg::kernels
