#pragma once
// The softmax / log-softmax rows of softmax.cpp as explicit AVX-512 loops (16 lanes, masked tails),
// for T = float, bfloat16, half: half rows are converted in registers (convert_avx512.h), so a row is
// read from memory as T and written as T with no float copy of x; only softmax's exp(x - m) goes
// through `scratch` (a float row per thread, in L1/L2) so the final pass only scales and rounds.
// Same math as softmax.cpp's header: m = max, s = sum exp(x - m), y = exp(x - m) / s or
// x - m - log s; backward dx = y (dy - sum dy y) or dy - exp(y) sum dy. The max and the backward
// sums keep four 16-lane accumulators, the exp sum two, combined in a fixed order, so a row's result
// is the same on every run and thread count. Callers check vector_math_active() == avx512 first.
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/convert_avx512.h"
#include "kernels/cpu/simd_math_avx512.h"

namespace hg::kernels::cpu::simd512 {

template <class T>
HG_SIMD512 float row_max(const T* x, int64_t n) {
  const __m512 ninf = splat(-std::numeric_limits<float>::infinity());
  __m512 m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf;
  int64_t c = 0;
  for (; c + 64 <= n; c += 64) {
    m0 = _mm512_max_ps(m0, load16(x + c));
    m1 = _mm512_max_ps(m1, load16(x + c + 16));
    m2 = _mm512_max_ps(m2, load16(x + c + 32));
    m3 = _mm512_max_ps(m3, load16(x + c + 48));
  }
  for (; c + 16 <= n; c += 16) m0 = _mm512_max_ps(m0, load16(x + c));
  if (c < n) {
    const __mmask16 k = tail_mask(n - c);
    m1 = _mm512_mask_max_ps(m1, k, m1, load16(x + c, k));
  }
  return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
}

// sum exp(x - m) over [0, n); with kStore, exp(x - m) also goes to e[0, n).
template <bool kStore, class T>
HG_SIMD512 float sum_exp(const T* x, float m, float* e, int64_t n) {
  const __m512 mv = splat(m);
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 32 <= n; c += 32) {
    const __m512 e0 = exp_nonpositive(_mm512_sub_ps(load16(x + c), mv));
    const __m512 e1 = exp_nonpositive(_mm512_sub_ps(load16(x + c + 16), mv));
    if constexpr (kStore) {
      _mm512_storeu_ps(e + c, e0);
      _mm512_storeu_ps(e + c + 16, e1);
    }
    s0 = _mm512_add_ps(s0, e0);
    s1 = _mm512_add_ps(s1, e1);
  }
  for (; c + 16 <= n; c += 16) {
    const __m512 e0 = exp_nonpositive(_mm512_sub_ps(load16(x + c), mv));
    if constexpr (kStore) _mm512_storeu_ps(e + c, e0);
    s0 = _mm512_add_ps(s0, e0);
  }
  if (c < n) {
    const __mmask16 k = tail_mask(n - c);
    const __m512 e0 = exp_nonpositive(_mm512_sub_ps(load16(x + c, k), mv));
    if constexpr (kStore) _mm512_mask_storeu_ps(e + c, k, e0);
    s1 = _mm512_mask_add_ps(s1, k, s1, e0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

// One row: visible columns [0, visible) computed, [visible, cols) set to 0 (softmax) or -inf (log).
// scratch: `visible` floats (unused for log); for T = float it may be y itself.
template <class T>
HG_SIMD512 void softmax_row(const T* x, T* y, float* scratch, int64_t cols, int64_t visible, bool log) {
  const float m = row_max(x, visible);
  int64_t c = 0;
  if (log) {
    const float s = sum_exp<false>(x, m, nullptr, visible);
    const __m512 mv = splat(m), ls = splat(std::log(s));
    for (; c + 16 <= visible; c += 16) store16(y + c, _mm512_sub_ps(_mm512_sub_ps(load16(x + c), mv), ls));
    if (c < visible) {
      const __mmask16 k = tail_mask(visible - c);
      store16(y + c, _mm512_sub_ps(_mm512_sub_ps(load16(x + c, k), mv), ls), k);
    }
  } else {
    const float s = sum_exp<true>(x, m, scratch, visible);
    const __m512 inv = splat(1.0f / s);
    for (; c + 16 <= visible; c += 16) store16(y + c, _mm512_mul_ps(_mm512_loadu_ps(scratch + c), inv));
    if (c < visible) {
      const __mmask16 k = tail_mask(visible - c);
      store16(y + c, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, scratch + c), inv), k);
    }
  }
  if (visible < cols) {
    const T fill = T(log ? -std::numeric_limits<float>::infinity() : 0.0f);
    for (int64_t j = visible; j < cols; ++j) y[j] = fill;
  }
}

template <class T>
HG_SIMD512 void softmax_backward_row(const T* y, const T* dy, T* dx, int64_t cols, bool log) {
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps(), s2 = _mm512_setzero_ps(), s3 = _mm512_setzero_ps();
  int64_t c = 0;
  if (log) {  // s = sum dy
    for (; c + 64 <= cols; c += 64) {
      s0 = _mm512_add_ps(s0, load16(dy + c));
      s1 = _mm512_add_ps(s1, load16(dy + c + 16));
      s2 = _mm512_add_ps(s2, load16(dy + c + 32));
      s3 = _mm512_add_ps(s3, load16(dy + c + 48));
    }
    for (; c + 16 <= cols; c += 16) s0 = _mm512_add_ps(s0, load16(dy + c));
    if (c < cols) s1 = _mm512_add_ps(s1, load16(dy + c, tail_mask(cols - c)));
  } else {  // s = sum dy y
    for (; c + 64 <= cols; c += 64) {
      s0 = _mm512_fmadd_ps(load16(dy + c), load16(y + c), s0);
      s1 = _mm512_fmadd_ps(load16(dy + c + 16), load16(y + c + 16), s1);
      s2 = _mm512_fmadd_ps(load16(dy + c + 32), load16(y + c + 32), s2);
      s3 = _mm512_fmadd_ps(load16(dy + c + 48), load16(y + c + 48), s3);
    }
    for (; c + 16 <= cols; c += 16) s0 = _mm512_fmadd_ps(load16(dy + c), load16(y + c), s0);
    if (c < cols) {
      const __mmask16 k = tail_mask(cols - c);
      s1 = _mm512_fmadd_ps(load16(dy + c, k), load16(y + c, k), s1);
    }
  }
  const __m512 s = splat(_mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3))));
  c = 0;
  if (log) {  // dx = dy - exp(y) s
    for (; c + 16 <= cols; c += 16) store16(dx + c, _mm512_fnmadd_ps(exp(load16(y + c)), s, load16(dy + c)));
    if (c < cols) {
      const __mmask16 k = tail_mask(cols - c);
      store16(dx + c, _mm512_fnmadd_ps(exp(load16(y + c, k)), s, load16(dy + c, k)), k);
    }
  } else {  // dx = y (dy - s)
    for (; c + 16 <= cols; c += 16) store16(dx + c, _mm512_mul_ps(load16(y + c), _mm512_sub_ps(load16(dy + c), s)));
    if (c < cols) {
      const __mmask16 k = tail_mask(cols - c);
      store16(dx + c, _mm512_mul_ps(load16(y + c, k), _mm512_sub_ps(load16(dy + c, k), s)), k);
    }
  }
}

}  // namespace hg::kernels::cpu::simd512
