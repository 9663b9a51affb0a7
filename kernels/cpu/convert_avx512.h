#pragma once
// 16-lane float <-> f16 / bf16 conversions in registers, bit-identical to kernels/half.h (how each
// matches half.h is explained in convert.cpp's header comment), and typed 16-lane loads and stores
// built on them (load16<T> / store16<T>, the n % 16 tail with masks so nothing past n is touched).
// convert.cpp's AVX-512 tier runs on these, and the softmax and GELU kernels' AVX-512 loops use
// them to keep f16/bf16 rows in registers (a bf16 load is a 16-bit shift) with no float buffer.
// Every function is HG_CVT512 (a target attribute): callers check the CPU first (convert.h).
#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "kernels/half.h"

#define HG_CVT512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c")))

namespace hg::kernels::cpu::simd512 {

HG_CVT512 inline __m512 widen_half16(__m256i h) {
  const __m512 f = _mm512_cvtph_ps(h);
  const __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
  return _mm512_mask_mov_ps(f, nan, _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff)));
}

HG_CVT512 inline __m256i narrow_half16(__m512 f) {
  const __m256i h = _mm512_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
  return _mm256_mask_mov_epi16(h, nan, _mm256_set1_epi16(0x7fff));
}

HG_CVT512 inline __m512 widen_bf16x16(__m256i b) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
}

HG_CVT512 inline __m256i narrow_bf16x16(__m512 f) {
  const __m512i bits = _mm512_castps_si512(f);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), lsb), 16);
  // Narrowed to 16 bits with the NaN lanes (mask off) taking 0x7fff in the same instruction.
  return _mm512_mask_cvtepi32_epi16(_mm256_set1_epi16(0x7fff), _mm512_cmp_ps_mask(f, f, _CMP_ORD_Q), r);
}

HG_CVT512 inline __mmask16 tail_mask(int64_t rest) { return __mmask16((1u << rest) - 1u); }

// 16 elements of T at p as floats.
template <class T>
HG_CVT512 inline __m512 load16(const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm512_loadu_ps(p);
  } else {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    if constexpr (std::is_same_v<T, bfloat16>) return widen_bf16x16(raw);
    else return widen_half16(raw);
  }
}

// The first lanes of `mask` from p (the others read as 0.0f and never touch memory).
template <class T>
HG_CVT512 inline __m512 load16(const T* p, __mmask16 mask) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm512_maskz_loadu_ps(mask, p);
  } else {
    const __m256i raw = _mm256_maskz_loadu_epi16(mask, p);
    if constexpr (std::is_same_v<T, bfloat16>) return widen_bf16x16(raw);
    else return widen_half16(raw);
  }
}

// 16 floats stored as T at p, rounded to nearest even as T(float) does.
template <class T>
HG_CVT512 inline void store16(T* p, __m512 v) {
  if constexpr (std::is_same_v<T, float>) {
    _mm512_storeu_ps(p, v);
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow_bf16x16(v));
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow_half16(v));
  }
}

template <class T>
HG_CVT512 inline void store16(T* p, __m512 v, __mmask16 mask) {
  if constexpr (std::is_same_v<T, float>) {
    _mm512_mask_storeu_ps(p, mask, v);
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    _mm256_mask_storeu_epi16(p, mask, narrow_bf16x16(v));
  } else {
    _mm256_mask_storeu_epi16(p, mask, narrow_half16(v));
  }
}

// store16 (all 16 lanes, or the first lanes of `mask`) that also returns the stored values widened
// back to float (what a load of them would give), narrowing only once.
template <class T>
HG_CVT512 inline __m512 store16_rounded(T* p, __m512 v, __mmask16 mask = 0xffff) {
  if constexpr (std::is_same_v<T, float>) {
    _mm512_mask_storeu_ps(p, mask, v);
    return v;
  } else {
    const __m256i bits = std::is_same_v<T, bfloat16> ? narrow_bf16x16(v) : narrow_half16(v);
    _mm256_mask_storeu_epi16(p, mask, bits);
    if constexpr (std::is_same_v<T, bfloat16>) return widen_bf16x16(bits);
    else return widen_half16(bits);
  }
}

}  // namespace hg::kernels::cpu::simd512
