// The AVX-512 form of one 8-bit AdamW block (kernels/cpu/adamw8bit_block.h; math in
// kernels/adamw8bit_math.h), 16 elements per vector:
//   dequantise: the codes widened to 32-bit lanes index the map with a gather, times the block's absmax;
//   update:     adamw_update's operations in its order, multiply-adds fused as the compiler fuses the
//               scalar loop (kernels/cpu/adamw_offload.cpp does the same), IEEE sqrt and division;
//   absmax:     a lane-wise running max of |m| (|v|), reduced once per block (max is order-free, and
//               _mm512_max_ps(x, acc) = x > acc ? x : acc is adamw8bit_absmax's choice, NaN included);
//   quantise:   the branchless binary search of adamw8bit_quantise, lane-wise: its first four steps
//               walk a heap-ordered copy of the 15 bounds they can probe (one 16-float register, indexed
//               by _mm512_permutexvar_ps), the last four gather from the bounds array. The comparison is
//               the scalar one (bound < x, false for NaN), so the codes are the scalar path's, bit for bit.
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

// The bounds the first four search steps probe, in heap order: node h (1..15) holds the bound probed at
// node h; its children are 2h (bound < x false) and 2h + 1 (true). Level l (0..3) nodes h = 2^l .. 2^(l+1)-1
// probe index pos + step - 1 with step = 128 >> l and pos = (h - 2^l) * 2 * step.
struct alignas(64) SearchHeap {
  float node[16];
};

constexpr SearchHeap make_heap(const float* bounds) {
  SearchHeap heap{};
  for (int level = 0; level < 4; ++level) {
    const int step = 128 >> level;
    for (int h = 1 << level; h < (2 << level); ++h) heap.node[h] = bounds[(h - (1 << level)) * 2 * step + step - 1];
  }
  return heap;
}

constexpr SearchHeap kSignedHeap = make_heap(kAdamW8BitTables.signed_bounds);
constexpr SearchHeap kUnsignedHeap = make_heap(kAdamW8BitTables.unsigned_bounds);

HG_AVX512 inline __m512i quantise16(__m512 x, const SearchHeap& heap, const float* bounds) {
  const __m512 nodes = _mm512_load_ps(heap.node);
  const __m512i one = _mm512_set1_epi32(1);
  __m512i h = one;
  for (int level = 0; level < 4; ++level) {
    const __mmask16 right = _mm512_cmp_ps_mask(_mm512_permutexvar_ps(h, nodes), x, _CMP_LT_OQ);
    h = _mm512_mask_add_epi32(_mm512_add_epi32(h, h), right, _mm512_add_epi32(h, h), one);
  }
  __m512i pos = _mm512_slli_epi32(_mm512_sub_epi32(h, _mm512_set1_epi32(16)), 4);
  for (int step = 8; step > 0; step >>= 1) {
    const __m512i probe = _mm512_add_epi32(pos, _mm512_set1_epi32(step - 1));
    const __mmask16 right = _mm512_cmp_ps_mask(_mm512_i32gather_ps(probe, bounds, 4), x, _CMP_LT_OQ);
    pos = _mm512_mask_add_epi32(pos, right, pos, _mm512_set1_epi32(step));
  }
  return pos;
}

HG_AVX512 inline __m512i load_codes16(const uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

HG_AVX512 inline void store_codes16(uint8_t* p, __m512i codes) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(codes));
}

HG_AVX512 inline __m512 abs16(__m512 x) { return _mm512_abs_ps(x); }

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
    __m512 th = _mm512_loadu_ps(theta + i);
    mi = _mm512_fmadd_ps(beta1, mi, _mm512_mul_ps(one_minus_beta1, gi));
    vi = _mm512_fmadd_ps(beta2, vi, _mm512_mul_ps(_mm512_mul_ps(one_minus_beta2, gi), gi));
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bias2_sqrt), eps);
    th = _mm512_fnmadd_ps(step_size, _mm512_div_ps(mi, denom), _mm512_mul_ps(th, decay));
    _mm512_storeu_ps(theta + i, th);
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
    store_codes16(code_m + i, quantise16(_mm512_mul_ps(_mm512_load_ps(m + i), scale_m16), kSignedHeap, t.signed_bounds));
    store_codes16(code_v + i,
                  quantise16(_mm512_mul_ps(_mm512_load_ps(v + i), scale_v16), kUnsignedHeap, t.unsigned_bounds));
  }
  for (int64_t i = vector_end; i < count; ++i) {
    code_m[i] = adamw8bit_quantise(m[i] * scale_m, t.signed_bounds);
    code_v[i] = adamw8bit_quantise(v[i] * scale_v, t.unsigned_bounds);
  }
  *absmax_m = new_m;
  *absmax_v = new_v;
}

HG_AVX512 void adamw8bit_quantise_avx512(const float* x, uint8_t* codes, int64_t n, bool is_signed) {
  const float* bounds = is_signed ? kAdamW8BitTables.signed_bounds : kAdamW8BitTables.unsigned_bounds;
  const SearchHeap& heap = is_signed ? kSignedHeap : kUnsignedHeap;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) store_codes16(codes + i, quantise16(_mm512_loadu_ps(x + i), heap, bounds));
  for (; i < n; ++i) codes[i] = adamw8bit_quantise(x[i], bounds);
}

AdamWIsa adamw8bit_best_isa() {
  static const AdamWIsa best = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl")
               ? AdamWIsa::avx512
               : AdamWIsa::scalar;
  }();
  return best;
}

}  // namespace hg::kernels::cpu
