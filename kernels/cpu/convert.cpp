// Array conversions float <-> half types (convert.h), bit-identical to kernels/half.h's scalar
// conversions for every input, in three tiers chosen once at run time by CPU feature (the library
// may be built for baseline x86-64, so the SIMD tiers are __attribute__((target)) functions):
//
//   avx512 (AVX-512 F/BW/VL + F16C): 16 lanes, the n % 16 tail with masked loads/stores (masked-off
//          lanes are never read or written, so nothing past n is touched).
//   avx2   (AVX2 + F16C): 8 lanes, the n % 8 tail through the scalar loop.
//   scalar: half.h's conversions one element at a time: the reference, and the fallback.
//
// How each SIMD conversion matches half.h:
//   f16 -> f32: vcvtph2ps is exact for every finite half, subnormals included (they become normal
//     floats; DAZ applies to float inputs only, never to this instruction's half inputs). NaNs come
//     out quieted with sign and payload kept, so NaN lanes (unordered compare) are replaced by the
//     canonical 0x7fffffff that half_bits_to_float returns.
//   f32 -> f16: vcvtps2ph with the round-to-nearest-even immediate (not MXCSR's mode) rounds, keeps
//     half subnormals (FTZ does not apply to it), and sends |x| >= 65520 to infinity, as half.h
//     does. Float subnormal inputs (which DAZ would zero) are below half's smallest subnormal and
//     round to a signed zero either way. NaN lanes are replaced by half.h's 0x7fff.
//   bf16 -> f32: a 16-bit left shift (exact; half.h keeps NaN payloads here too).
//   f32 -> bf16: half.h's integer round to nearest even, (bits + 0x7fff + ((bits >> 16) & 1)) >> 16,
//     with NaN lanes replaced by 0x7fff. Not vcvtneps2bf16, which flushes subnormals to zero.
// tests/test_convert.cpp checks every tier against the scalar one on all 2^16 half and bf16
// patterns and all 2^32 float patterns, bit for bit.
#include "kernels/cpu/convert.h"

#include "kernels/cpu/convert_avx512.h"

#include <immintrin.h>

// GCC 12 warns that the undefined vectors inside its own AVX-512 intrinsics may be uninitialised.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/calibration_rule.h"
#include "kernels/cpu/tier_calibration.h"
#include "kernels/error.h"

namespace hg::kernels::cpu {
namespace {

// ---- scalar: the reference ----------------------------------------------------------------------

void half_to_float_scalar(const half* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = float(src[i]);
}
void bf16_to_float_scalar(const bfloat16* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = float(src[i]);
}
void float_to_half_scalar(const float* src, half* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = half(src[i]);
}
void float_to_bf16_scalar(const float* src, bfloat16* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bfloat16(src[i]);
}

// ---- AVX-512 F/BW/VL + F16C: 16 lanes, masked tail (the lane conversions: convert_avx512.h) -------
using simd512::narrow_bf16x16;
using simd512::narrow_half16;
using simd512::tail_mask;
using simd512::widen_bf16x16;
using simd512::widen_half16;

HG_CVT512 void half_to_float_avx512(const half* src, float* dst, int64_t n) {
  const auto* s = reinterpret_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, widen_half16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i))));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(dst + i, m, widen_half16(_mm256_maskz_loadu_epi16(m, s + i)));
  }
}

HG_CVT512 void bf16_to_float_avx512(const bfloat16* src, float* dst, int64_t n) {
  const auto* s = reinterpret_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, widen_bf16x16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i))));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(dst + i, m, widen_bf16x16(_mm256_maskz_loadu_epi16(m, s + i)));
  }
}

HG_CVT512 void float_to_half_avx512(const float* src, half* dst, int64_t n) {
  auto* d = reinterpret_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), narrow_half16(_mm512_loadu_ps(src + i)));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm256_mask_storeu_epi16(d + i, m, narrow_half16(_mm512_maskz_loadu_ps(m, src + i)));
  }
}

HG_CVT512 void float_to_bf16_avx512(const float* src, bfloat16* dst, int64_t n) {
  auto* d = reinterpret_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), narrow_bf16x16(_mm512_loadu_ps(src + i)));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm256_mask_storeu_epi16(d + i, m, narrow_bf16x16(_mm512_maskz_loadu_ps(m, src + i)));
  }
}

// ---- AVX2 + F16C: 8 lanes, scalar tail ----------------------------------------------------------
#define HG_CVT256 __attribute__((target("avx2,f16c")))

// An 8 x 32-bit lane mask narrowed to 8 x 16-bit lanes (-1 and 0 saturate to themselves).
HG_CVT256 inline __m128i narrow_mask(__m256 mask32) {
  const __m256i m = _mm256_castps_si256(mask32);
  return _mm_packs_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
}

HG_CVT256 void half_to_float_avx2(const half* src, float* dst, int64_t n) {
  const auto* s = reinterpret_cast<const uint16_t*>(src);
  const __m256 canonical = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 f = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
    _mm256_storeu_ps(dst + i, _mm256_blendv_ps(f, canonical, _mm256_cmp_ps(f, f, _CMP_UNORD_Q)));
  }
  half_to_float_scalar(src + i, dst + i, n - i);
}

HG_CVT256 void bf16_to_float_avx2(const bfloat16* src, float* dst, int64_t n) {
  const auto* s = reinterpret_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
  }
  bf16_to_float_scalar(src + i, dst + i, n - i);
}

HG_CVT256 void float_to_half_avx2(const float* src, half* dst, int64_t n) {
  auto* d = reinterpret_cast<uint16_t*>(dst);
  const __m128i canonical = _mm_set1_epi16(0x7fff);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 f = _mm256_loadu_ps(src + i);
    const __m128i h = _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m128i nan = narrow_mask(_mm256_cmp_ps(f, f, _CMP_UNORD_Q));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), _mm_blendv_epi8(h, canonical, nan));
  }
  float_to_half_scalar(src + i, dst + i, n - i);
}

HG_CVT256 void float_to_bf16_avx2(const float* src, bfloat16* dst, int64_t n) {
  auto* d = reinterpret_cast<uint16_t*>(dst);
  const __m128i canonical = _mm_set1_epi16(0x7fff);
  const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 f = _mm256_loadu_ps(src + i);
    const __m256i bits = _mm256_castps_si256(f);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), one);
    const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(bits, bias), lsb), 16);
    // r < 2^16 in every lane, so the unsigned saturating pack is a plain narrowing.
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    const __m128i nan = narrow_mask(_mm256_cmp_ps(f, f, _CMP_UNORD_Q));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), _mm_blendv_epi8(packed, canonical, nan));
  }
  float_to_bf16_scalar(src + i, dst + i, n - i);
}

// ---- run-time selection -------------------------------------------------------------------------

struct Table {
  void (*half_to_float)(const half*, float*, int64_t);
  void (*bf16_to_float)(const bfloat16*, float*, int64_t);
  void (*float_to_half)(const float*, half*, int64_t);
  void (*float_to_bf16)(const float*, bfloat16*, int64_t);
};

constexpr Table kTables[] = {
    {half_to_float_scalar, bf16_to_float_scalar, float_to_half_scalar, float_to_bf16_scalar},
    {half_to_float_avx2, bf16_to_float_avx2, float_to_half_avx2, float_to_bf16_avx2},
    {half_to_float_avx512, bf16_to_float_avx512, float_to_half_avx512, float_to_bf16_avx512},
};

const Table& table_for(ConvertIsa isa) {
  HG_CHECK(int(isa) >= 0 && int(isa) <= int(convert_best_isa()), "[convert] tier ", convert_isa_name(isa),
           " was requested but this CPU runs at most ", convert_isa_name(convert_best_isa()));
  return kTables[int(isa)];
}

// The tiers' times on this CPU (widest first): each converts 16K f16 and bf16 values to float and
// back, best of 5 interleaved rounds.
std::vector<std::pair<ConvertIsa, double>> time_convert_tiers() {
  constexpr int64_t kElements = 16 * 1024;
  std::vector<float> wide(kElements);
  for (int64_t i = 0; i < kElements; ++i) wide[size_t(i)] = float(i % 2001 - 1000) * 0.37f;
  std::vector<half> narrow_f16(kElements);
  std::vector<bfloat16> narrow_bf16(kElements);
  std::vector<ConvertIsa> tiers;
  std::vector<std::function<void()>> runs;
  for (int isa = int(convert_best_isa()); isa >= 0; --isa) {
    tiers.push_back(ConvertIsa(isa));
    runs.emplace_back([&, &table = kTables[isa]] {
      table.float_to_half(wide.data(), narrow_f16.data(), kElements);
      table.half_to_float(narrow_f16.data(), wide.data(), kElements);
      table.float_to_bf16(wide.data(), narrow_bf16.data(), kElements);
      table.bf16_to_float(narrow_bf16.data(), wide.data(), kElements);
    });
  }
  const std::vector<double> seconds = detail::interleaved_best_seconds(runs, 5);
  std::vector<std::pair<ConvertIsa, double>> out;
  for (size_t i = 0; i < tiers.size(); ++i) out.emplace_back(tiers[i], seconds[i]);
  return out;
}

// The tier to_float / from_float take, and the timings it was chosen from (none where the CPU has one
// tier). Settled at the first conversion.
struct ConvertChoice {
  std::vector<std::pair<ConvertIsa, double>> timings;
  ConvertIsa isa;
};
const ConvertChoice& convert_choice() {
  static const ConvertChoice choice = [] {
    ConvertChoice c{{}, convert_best_isa()};
    if (c.isa == ConvertIsa::scalar) return c;
    c.timings = time_convert_tiers();
    c.isa = detail::choose_fastest(c.timings, convert_best_isa());
    return c;
  }();
  return choice;
}

const Table& best_table() {
  static const Table& table = kTables[int(convert_choice().isa)];
  return table;
}

}  // namespace

ConvertIsa convert_default_isa() { return convert_choice().isa; }

const std::vector<std::pair<ConvertIsa, double>>& detail::convert_tier_timings() { return convert_choice().timings; }

std::string convert_tier_description() {
  const ConvertChoice& c = convert_choice();
  std::string out = convert_isa_name(c.isa);
  if (c.timings.empty()) return out + " (the only tier)";
  return out + detail::timings_text(c.timings, convert_isa_name);
}

ConvertIsa convert_best_isa() {
  static const ConvertIsa best = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("f16c"))
      return ConvertIsa::avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) return ConvertIsa::avx2;
    return ConvertIsa::scalar;
  }();
  return best;
}

const char* convert_isa_name(ConvertIsa isa) {
  switch (isa) {
    case ConvertIsa::scalar: return "scalar";
    case ConvertIsa::avx2: return "avx2+f16c";
    case ConvertIsa::avx512: return "avx512";
  }
  return "?";
}

void to_float(const half* src, float* dst, int64_t n) { best_table().half_to_float(src, dst, n); }
void to_float(const bfloat16* src, float* dst, int64_t n) { best_table().bf16_to_float(src, dst, n); }
void to_float(const float* src, float* dst, int64_t n) { std::copy(src, src + n, dst); }

void from_float(const float* src, half* dst, int64_t n) { best_table().float_to_half(src, dst, n); }
void from_float(const float* src, bfloat16* dst, int64_t n) { best_table().float_to_bf16(src, dst, n); }
void from_float(const float* src, float* dst, int64_t n) { std::copy(src, src + n, dst); }

void to_float(const half* src, float* dst, int64_t n, ConvertIsa isa) { table_for(isa).half_to_float(src, dst, n); }
void to_float(const bfloat16* src, float* dst, int64_t n, ConvertIsa isa) {
  table_for(isa).bf16_to_float(src, dst, n);
}
void from_float(const float* src, half* dst, int64_t n, ConvertIsa isa) { table_for(isa).float_to_half(src, dst, n); }
void from_float(const float* src, bfloat16* dst, int64_t n, ConvertIsa isa) {
  table_for(isa).float_to_bf16(src, dst, n);
}

}  // namespace hg::kernels::cpu
