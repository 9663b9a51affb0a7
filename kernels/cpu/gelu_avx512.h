#pragma once
// GELU (tanh or erf form) forward and backward over a span of T = float, bfloat16 or half, as
// explicit AVX-512 loops (16 lanes, masked tail), shared by elementwise.cpp's GeluTanh / GeluErf
// unary ops and bias_gelu.cpp's fused bias + GELU. Half spans are converted in registers
// (convert_avx512.h), so x and dy are read once as T and y / dx written once as T, each the float
// result rounded once. The math is simd_math_avx512.h's gelu / gelu_slope (unary_math.h's formulas
// rewritten so they do not cancel). Callers check vector_math_active() == avx512 first and split
// the work over threads themselves.
#include <cstdint>

#include "kernels/cpu/convert_avx512.h"
#include "kernels/cpu/simd_math_avx512.h"

namespace hg::kernels::cpu::simd512 {

// x + bias (bias: a float row, or nullptr for none).
template <class T, bool kBias>
HG_SIMD512 inline __m512 load_plus_bias(const T* x, const float* bias, int64_t j) {
  if constexpr (kBias) return _mm512_add_ps(load16(x + j), _mm512_loadu_ps(bias + j));
  else return load16(x + j);
}
template <class T, bool kBias>
HG_SIMD512 inline __m512 load_plus_bias(const T* x, const float* bias, int64_t j, __mmask16 k) {
  if constexpr (kBias) return _mm512_add_ps(load16(x + j, k), _mm512_maskz_loadu_ps(k, bias + j));
  else return load16(x + j, k);
}

// y[j] = gelu(x[j] + bias[j]) for j < n.
template <class T, bool kErf, bool kBias>
HG_SIMD512 void gelu_forward_span(const T* x, const float* bias, T* y, int64_t n) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) store16(y + j, gelu<kErf>(load_plus_bias<T, kBias>(x, bias, j)));
  if (j < n) {
    const __mmask16 k = tail_mask(n - j);
    store16(y + j, gelu<kErf>(load_plus_bias<T, kBias>(x, bias, j, k)), k);
  }
}

// dx[j] = dy[j] * gelu'(x[j] + bias[j]) for j < n; with bias_sum, also bias_sum[j] += dx[j] as
// stored (rounded to T), so a bias gradient sums what sum(dx) would.
template <class T, bool kErf, bool kBias>
HG_SIMD512 void gelu_backward_span(const T* x, const float* bias, const T* dy, T* dx, float* bias_sum, int64_t n) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 d = _mm512_mul_ps(load16(dy + j), gelu_slope<kErf>(load_plus_bias<T, kBias>(x, bias, j)));
    if (bias_sum != nullptr)
      _mm512_storeu_ps(bias_sum + j, _mm512_add_ps(_mm512_loadu_ps(bias_sum + j), store16_rounded(dx + j, d)));
    else
      store16(dx + j, d);
  }
  if (j < n) {
    const __mmask16 k = tail_mask(n - j);
    const __m512 d = _mm512_mul_ps(load16(dy + j, k), gelu_slope<kErf>(load_plus_bias<T, kBias>(x, bias, j, k)));
    if (bias_sum != nullptr)
      _mm512_mask_storeu_ps(bias_sum + j, k,
                            _mm512_add_ps(_mm512_maskz_loadu_ps(k, bias_sum + j), store16_rounded(dx + j, d, k)));
    else
      store16(dx + j, d, k);
  }
}

}  // namespace hg::kernels::cpu::simd512
