// The AVX-512 form of one 8-bit AdamW block (kernels/cpu/adamw8bit_block.h; math in
// kernels/adamw8bit_math.h), 16 elements per vector:
//   dequantise: the codes widened to 32-bit lanes index the map with a gather, times the block's absmax;
//   update:     adamw_update's operations in its order, with fused multiply-adds (the scalar form is
//               fused the same way only where the compiler contracts it, i.e. with HALFGRAD_NATIVE;
//               otherwise the two may differ by an ulp), IEEE sqrt and division; lanes whose new m or v
//               is not finite keep theta and take m = v = 0 (a compare mask and blends);
//   absmax:     a lane-wise running max of |m| (|v|), reduced once per block (max is order-free, and
//               _mm512_max_ps(x, acc) = x > acc ? x : acc is adamw8bit_absmax's choice, NaN included);
//   quantise:   the branchless descent of adamw8bit_quantise over the midpoints' heap, lane-wise: its
//               first four steps read nodes 1..15, held in one register (_mm512_permutexvar_ps), the
//               last four gather. The comparison is the scalar one (midpoint < x, false for NaN), so the
//               codes are the scalar path's, bit for bit.
// The elements past the last multiple of 16 run the scalar code.
#include <immintrin.h>

#include "kernels/adamw8bit_math.h"
#include "kernels/cpu/adamw8bit_block.h"

// GCC 12 reports the deliberately undefined pass-through operand of avx512fintrin.h's unmasked
// intrinsics (_mm512_undefined_*) as "(may be) used uninitialized" once they are inlined here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace hg::kernels::cpu {
namespace {

#define HG_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

// The descent of adamw8bit_quantise over the midpoints' heap, 16 lanes at once: nodes 1..15 (the first
// four steps) come from one register (_mm512_permutexvar_ps by node number), nodes 16..255 by gathers.
HG_AVX512 inline __m512i quantise16(__m512 x, const float* search) {
  const __m512 top = _mm512_loadu_ps(search);
  const __m512i one = _mm512_set1_epi32(1);
  __m512i h = one;
  for (int step = 0; step < 4; ++step) {
    const __mmask16 right = _mm512_cmp_ps_mask(_mm512_permutexvar_ps(h, top), x, _CMP_LT_OQ);
    h = _mm512_mask_add_epi32(_mm512_add_epi32(h, h), right, _mm512_add_epi32(h, h), one);
  }
  for (int step = 4; step < 8; ++step) {
    const __mmask16 right = _mm512_cmp_ps_mask(_mm512_i32gather_ps(h, search, 4), x, _CMP_LT_OQ);
    h = _mm512_mask_add_epi32(_mm512_add_epi32(h, h), right, _mm512_add_epi32(h, h), one);
  }
  return _mm512_sub_epi32(h, _mm512_set1_epi32(kAdamW8BitCodes));
}

HG_AVX512 inline __m512i load_codes16(const uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

HG_AVX512 inline void store_codes16(uint8_t* p, __m512i codes) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(codes));
}

HG_AVX512 inline __m512 abs16(__m512 x) { return _mm512_abs_ps(x); }

// The lanes of x that are finite: |x| <= FLT_MAX, false for inf and NaN (adamw8bit_finite's test; an
// ordered compare, where _mm512_fpclass_ps_mask would need AVX512DQ, which this path does not require).
HG_AVX512 inline __mmask16 finite16(__m512 x) {
  return _mm512_cmp_ps_mask(_mm512_abs_ps(x), _mm512_set1_ps(3.40282347e+38f), _CMP_LE_OQ);
}

}  // namespace

HG_AVX512 void adamw8bit_block_avx512(float* theta, const float* g, uint8_t* code_m, uint8_t* code_v, float* absmax_m,
                                      float* absmax_v, int64_t count, const AdamWCoefficients<float>& c) {
  const AdamW8BitTables& t = kAdamW8BitTables;
  alignas(64) float m[kAdamW8BitBlock];
  alignas(64) float v[kAdamW8BitBlock];
  const float old_m = *absmax_m, old_v = *absmax_v;
  const __m512 old_m16 = _mm512_set1_ps(old_m), old_v16 = _mm512_set1_ps(old_v);
  const __m512 decay = _mm512_set1_ps(c.decay), beta1 = _mm512_set1_ps(c.beta1),
               one_minus_beta1 = _mm512_set1_ps(c.one_minus_beta1), beta2 = _mm512_set1_ps(c.beta2),
               one_minus_beta2 = _mm512_set1_ps(c.one_minus_beta2), step_size = _mm512_set1_ps(c.step_size),
               bias2_sqrt = _mm512_set1_ps(c.bias2_sqrt), eps = _mm512_set1_ps(c.eps);
  __m512 max_m16 = _mm512_setzero_ps(), max_v16 = _mm512_setzero_ps();
  const int64_t vector_end = count / 16 * 16;
  for (int64_t i = 0; i < vector_end; i += 16) {
    __m512 mi = _mm512_mul_ps(_mm512_i32gather_ps(load_codes16(code_m + i), t.signed_map, 4), old_m16);
    __m512 vi = _mm512_mul_ps(_mm512_i32gather_ps(load_codes16(code_v + i), t.unsigned_map, 4), old_v16);
    const __m512 gi = _mm512_loadu_ps(g + i);
    const __m512 th = _mm512_loadu_ps(theta + i);
    mi = _mm512_fmadd_ps(beta1, mi, _mm512_mul_ps(one_minus_beta1, gi));
    vi = _mm512_fmadd_ps(beta2, vi, _mm512_mul_ps(_mm512_mul_ps(one_minus_beta2, gi), gi));
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bias2_sqrt), eps);
    const __m512 updated = _mm512_fnmadd_ps(step_size, _mm512_div_ps(mi, denom), _mm512_mul_ps(th, decay));
    // adamw8bit_update's rule for a non-finite new m or v: theta kept, m = v = 0.
    const __mmask16 finite = finite16(mi) & finite16(vi);
    _mm512_storeu_ps(theta + i, _mm512_mask_blend_ps(finite, th, updated));
    mi = _mm512_maskz_mov_ps(finite, mi);
    vi = _mm512_maskz_mov_ps(finite, vi);
    _mm512_store_ps(m + i, mi);
    _mm512_store_ps(v + i, vi);
    max_m16 = _mm512_max_ps(abs16(mi), max_m16);
    max_v16 = _mm512_max_ps(abs16(vi), max_v16);
  }
  float new_m = _mm512_reduce_max_ps(max_m16), new_v = _mm512_reduce_max_ps(max_v16);
  for (int64_t i = vector_end; i < count; ++i) {
    adamw8bit_update(theta[i], g[i], code_m[i], code_v[i], old_m, old_v, t, c, m[i], v[i]);
    new_m = adamw8bit_absmax(new_m, m[i]);
    new_v = adamw8bit_absmax(new_v, v[i]);
  }
  const float scale_m = adamw8bit_inverse_scale(new_m), scale_v = adamw8bit_inverse_scale(new_v);
  const __m512 scale_m16 = _mm512_set1_ps(scale_m), scale_v16 = _mm512_set1_ps(scale_v);
  for (int64_t i = 0; i < vector_end; i += 16) {
    store_codes16(code_m + i, quantise16(_mm512_mul_ps(_mm512_load_ps(m + i), scale_m16), t.signed_search));
    store_codes16(code_v + i, quantise16(_mm512_mul_ps(_mm512_load_ps(v + i), scale_v16), t.unsigned_search));
  }
  for (int64_t i = vector_end; i < count; ++i) {
    code_m[i] = adamw8bit_quantise(m[i] * scale_m, t.signed_search);
    code_v[i] = adamw8bit_quantise(v[i] * scale_v, t.unsigned_search);
  }
  *absmax_m = adamw8bit_stored_absmax(new_m);
  *absmax_v = adamw8bit_stored_absmax(new_v);
}

HG_AVX512 void adamw8bit_quantise_avx512(const float* x, uint8_t* codes, int64_t n, bool is_signed) {
  const float* search = is_signed ? kAdamW8BitTables.signed_search : kAdamW8BitTables.unsigned_search;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) store_codes16(codes + i, quantise16(_mm512_loadu_ps(x + i), search));
  for (; i < n; ++i) codes[i] = adamw8bit_quantise(x[i], search);
}

AdamWIsa adamw8bit_best_isa() {
  static const AdamWIsa best = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")
               ? AdamWIsa::avx512
               : AdamWIsa::scalar;
  }();
  return best;
}

}  // namespace hg::kernels::cpu
