#pragma once
// exp, tanh, erf and the GELU pieces on 16 float lanes (AVX-512 F), for the softmax and GELU kernels'
// explicit AVX-512 loops. Every function carries HG_SIMD512 (a target attribute), so the library
// may be built for baseline x86-64 and still run them where the CPU has AVX-512; callers check
// vector_math_active() (vector_math.h) before entering a HG_SIMD512 function. The same formulas'
// portable versions are std:: / libmvec in the kernels' other paths.
//
// Math (coefficients: weighted least-squares fits iterated toward minimax, made in double with
// mpmath references by scripts/fit_vector_math.py; max ulp errors against float64 std:: are measured
// by test_vector_math on a dense sweep and stated in docs/cpu_kernels.md):
//   exp(x)  = 2^n e^r, n = round(x log2 e), r = x - n ln2 (ln2 in two parts, |r| <= ln2 / 2),
//             e^r = 1 + r + r^2 P5(r); 2^n applied by vscalefps, which rounds once, so overflow
//             gives +inf and underflow gives subnormals or 0. x is clamped to [-104, 89] first
//             (exp is 0 or +inf beyond), with the clamp written so a NaN passes through.
//   tanh(x) = sign(x) * (a + a z P4(z)) for a = |x| < 0.625 (z = a^2; no cancellation near 0),
//             else sign(x) * (1 - 2 / (exp(2a) + 1)), 2a clamped to 40 (tanh is 1 there).
//   erf(x)  = sign(x) * (a + a (P6(a^2) - 1)) for a < 1, else sign(x) * (1 - erfc(a)),
//             erfc(a) = exp(-a^2) R8(1/a), R8 fitted on a in [1, 4] and on [4, 10.5] (a clamped to
//             10.5, where erfc underflows); a^2 is split exactly with an FMA so exp(-a^2) does not
//             inherit its rounding.
// GELU (unary_math.h's formulas, rewritten so nothing cancels; the same function mathematically):
//   gelu_tanh(x) = 0.5 x (1 + tanh u) = x s,   s = sigmoid(2u) = 1 / (1 + exp(-2u)),
//   gelu_tanh'(x) = s + 2 x u' s (1 - s),     u = sqrt(2/pi)(x + 0.044715 x^3), u' its slope;
//     s and s (1 - s) come from q = exp(-2|u|) <= 1 and r = 1 / (1 + q): s = r or q r by the sign of
//     u, s (1 - s) = q r^2 either way, so nothing overflows or cancels.
//   gelu_erf(x) = x Phi(x),  gelu_erf'(x) = Phi(x) + x exp(-x^2 / 2) / sqrt(2 pi),
//     Phi(x) = 0.5 (1 + erf(x / sqrt 2)), for x / sqrt 2 <= -1 taken as 0.5 erfc(|x| / sqrt 2) directly.
// Reciprocals are vrcp14ps plus one Newton step (relative error ~2^-28, far below float's 2^-24)
// and only ever see denominators in [1, 2] or [1, 4]. NaN in gives NaN out everywhere; the
// infinities give the limits std:: gives (NaN where the GELU formulas give inf * 0, as they do).
#include <immintrin.h>

#define HG_SIMD512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c")))

namespace hg::kernels::cpu::simd512 {

HG_SIMD512 inline __m512 splat(float v) { return _mm512_set1_ps(v); }

// Horner's rule over a coefficient list, lowest degree first.
template <int N>
HG_SIMD512 inline __m512 horner(__m512 x, const float (&c)[N]) {
  __m512 p = splat(c[N - 1]);
  for (int i = N - 2; i >= 0; --i) p = _mm512_fmadd_ps(p, x, splat(c[i]));
  return p;
}

HG_SIMD512 inline __m512 sign_bits(__m512 x) {
  return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(int(0x80000000u))));
}
HG_SIMD512 inline __m512 or_bits(__m512 a, __m512 b) {
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}

// max(lo, min(hi, x)) that returns x unchanged when it is NaN (vmaxps/vminps return their second
// operand when either is NaN).
HG_SIMD512 inline __m512 clamp(__m512 x, float lo, float hi) {
  return _mm512_max_ps(splat(lo), _mm512_min_ps(splat(hi), x));
}

// 1 / d for d in [1, 4]: vrcp14ps and one Newton step.
HG_SIMD512 inline __m512 reciprocal(__m512 d) {
  const __m512 r = _mm512_rcp14_ps(d);
  return _mm512_fmadd_ps(r, _mm512_fnmadd_ps(d, r, splat(1.0f)), r);
}

// exp of x already clamped to [-104, 89] (or NaN). Every exp in the kernels is one of the two below.
HG_SIMD512 inline __m512 exp_clamped(__m512 x) {
  static constexpr float kP[] = {0.500000007f, 0.166666659f, 0.0416662951f, 0.008333497f, 0.00139446493f,
                                 0.000197903572f};
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, splat(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, splat(0.693145752f), x);  // ln2 = 0.693145752 + 1.42860677e-6
  r = _mm512_fnmadd_ps(n, splat(1.42860677e-6f), r);
  const __m512 r2 = _mm512_mul_ps(r, r);
  const __m512 e = _mm512_add_ps(_mm512_fmadd_ps(horner(r, kP), r2, r), splat(1.0f));
  return _mm512_scalef_ps(e, n);
}

HG_SIMD512 inline __m512 exp(__m512 x) { return exp_clamped(clamp(x, -104.0f, 89.0f)); }

// exp(x) for x <= 0 or NaN (softmax's x - max, -a^2, -|w|): only the lower clamp is needed.
HG_SIMD512 inline __m512 exp_nonpositive(__m512 x) { return exp_clamped(_mm512_max_ps(splat(-104.0f), x)); }

HG_SIMD512 inline __m512 tanh(__m512 x) {
  static constexpr float kP[] = {-0.333332839f, 0.133314912f, -0.0537434953f, 0.020650579f, -0.00571703656f};
  const __m512 a = _mm512_abs_ps(x);
  const __m512 z = _mm512_mul_ps(a, a);
  const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(a, z), horner(z, kP), a);
  const __m512 e = exp(_mm512_min_ps(splat(40.0f), _mm512_add_ps(a, a)));  // NaN stays NaN
  const __m512 large = _mm512_fnmadd_ps(splat(2.0f), reciprocal(_mm512_add_ps(e, splat(1.0f))), splat(1.0f));
  const __mmask16 is_small = _mm512_cmp_ps_mask(a, splat(0.625f), _CMP_LT_OQ);
  return or_bits(_mm512_mask_mov_ps(large, is_small, small), sign_bits(x));
}

// The two halves of erf for a = |x| >= 0 (NaN allowed): erf(a) for the lanes a < 1 (`small`
// set) and erfc(a) for the others, plus exp(-a^2) for every lane (0 beyond a = 10.5).
struct ErfParts {
  __mmask16 small;
  __m512 erf_small;     // erf(a), valid where small
  __m512 erfc_large;    // erfc(a), valid where !small
  __m512 exp_minus_a2;  // exp(-a^2)
};

HG_SIMD512 inline ErfParts erf_parts(__m512 a) {
  static constexpr float kSmall[] = {0.12837917f,  // 2 / sqrt(pi) - 1: erf(a) = a + a (P6 - 1)
                                         -0.376126271f,  0.112836002f, -0.0268544446f,
                                     0.00518953534f, -0.000802084128f, 7.88911952e-05f};
  static constexpr float kMid[] = {0.000253102849f, 0.559315666f,  0.0401606664f, -0.46467085f,   0.480948064f,
                                   -0.219081614f,   0.00403750474f, 0.0379947655f, -0.0113737575f};
  static constexpr float kFar[] = {-1.22340413e-07f, 0.564196783f, -0.00018474011f, -0.279391972f, -0.0246635358f,
                                   0.566217059f,     -0.502691598f, -0.212939466f,    0.429245728f};
  ErfParts p;
  const __m512 z = _mm512_mul_ps(a, a);
  p.small = _mm512_cmp_ps_mask(a, splat(1.0f), _CMP_LT_OQ);
  p.erf_small = _mm512_fmadd_ps(a, horner(z, kSmall), a);
  const __m512 ac = _mm512_min_ps(splat(10.5f), a);
  const __m512 hi = _mm512_mul_ps(ac, ac), lo = _mm512_fmsub_ps(ac, ac, hi);  // ac^2 = hi + lo exactly
  const __m512 g = exp_nonpositive(_mm512_sub_ps(_mm512_setzero_ps(), hi));
  p.exp_minus_a2 = _mm512_fnmadd_ps(g, lo, g);  // exp(-hi - lo) = exp(-hi) (1 - lo)
  const __m512 t = reciprocal(_mm512_max_ps(splat(1.0f), ac));
  const __mmask16 far = _mm512_cmp_ps_mask(ac, splat(4.0f), _CMP_GT_OQ);
  __m512 r = _mm512_mask_mov_ps(splat(kMid[8]), far, splat(kFar[8]));
  for (int i = 7; i >= 0; --i) r = _mm512_fmadd_ps(r, t, _mm512_mask_mov_ps(splat(kMid[i]), far, splat(kFar[i])));
  p.erfc_large = _mm512_mul_ps(p.exp_minus_a2, r);
  return p;
}

HG_SIMD512 inline __m512 erf(__m512 x) {
  const ErfParts p = erf_parts(_mm512_abs_ps(x));
  const __m512 large = _mm512_sub_ps(splat(1.0f), p.erfc_large);
  return or_bits(_mm512_mask_mov_ps(large, p.small, p.erf_small), sign_bits(x));
}

// ---- GELU ---------------------------------------------------------------------------------------

// w = 2u = 2 sqrt(2/pi) (x + 0.044715 x^3) = x (c0 + c1 x^2), and x^2.
HG_SIMD512 inline __m512 gelu_tanh_w(__m512 x, __m512 x2) {
  return _mm512_mul_ps(x, _mm512_fmadd_ps(splat(1.59576912f * 0.044715f), x2, splat(1.59576912f)));
}

// s = sigmoid(w) = 1 / (1 + exp(-w)) and q r^2 = s (1 - s), from q = exp(-|w|) and r = 1 / (1 + q):
// s = r for w >= 0, q r below (no overflow, no cancellation).
HG_SIMD512 inline __m512 sigmoid_of(__m512 w, __m512& q, __m512& r) {
  q = exp_nonpositive(or_bits(w, splat(-0.0f)));  // -|w|
  r = reciprocal(_mm512_add_ps(splat(1.0f), q));
  return _mm512_mask_mul_ps(r, _mm512_cmp_ps_mask(w, _mm512_setzero_ps(), _CMP_LT_OQ), q, r);
}

HG_SIMD512 inline __m512 gelu_tanh(__m512 x) {
  __m512 q, r;
  return _mm512_mul_ps(x, sigmoid_of(gelu_tanh_w(x, _mm512_mul_ps(x, x)), q, r));
}

HG_SIMD512 inline __m512 gelu_tanh_slope(__m512 x) {
  const __m512 x2 = _mm512_mul_ps(x, x);
  __m512 q, r;
  const __m512 s = sigmoid_of(gelu_tanh_w(x, x2), q, r);
  // slope = s + x w' s (1 - s), w' = 2 u' = 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2)
  const __m512 dw = _mm512_fmadd_ps(splat(1.59576912f * 0.134145f), x2, splat(1.59576912f));
  return _mm512_fmadd_ps(_mm512_mul_ps(x, dw), _mm512_mul_ps(_mm512_mul_ps(q, r), r), s);
}

// Phi(x) = 0.5 (1 + erf(x / sqrt 2)) and exp(-x^2 / 2).
HG_SIMD512 inline __m512 normal_cdf(__m512 x, __m512* density_exp) {
  const __m512 z = _mm512_mul_ps(x, splat(0.707106781f));
  const ErfParts p = erf_parts(_mm512_abs_ps(z));
  const __mmask16 negative = _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_LT_OQ);
  // small: 0.5 +- 0.5 erf(a); large: 1 - 0.5 erfc(a) or, for negative z, 0.5 erfc(a).
  const __m512 half_signed = _mm512_mask_mov_ps(splat(0.5f), negative, splat(-0.5f));
  const __m512 small = _mm512_fmadd_ps(half_signed, p.erf_small, splat(0.5f));
  const __m512 half_erfc = _mm512_mul_ps(splat(0.5f), p.erfc_large);
  const __m512 large = _mm512_mask_mov_ps(_mm512_sub_ps(splat(1.0f), half_erfc), negative, half_erfc);
  if (density_exp != nullptr) *density_exp = p.exp_minus_a2;
  return _mm512_mask_mov_ps(large, p.small, small);
}

HG_SIMD512 inline __m512 gelu_erf(__m512 x) { return _mm512_mul_ps(x, normal_cdf(x, nullptr)); }

HG_SIMD512 inline __m512 gelu_erf_slope(__m512 x) {
  __m512 g;
  const __m512 phi = normal_cdf(x, &g);
  return _mm512_fmadd_ps(_mm512_mul_ps(x, splat(0.398942280f)), g, phi);
}

template <bool kErf>
HG_SIMD512 inline __m512 gelu(__m512 x) {
  if constexpr (kErf) return gelu_erf(x);
  else return gelu_tanh(x);
}

template <bool kErf>
HG_SIMD512 inline __m512 gelu_slope(__m512 x) {
  if constexpr (kErf) return gelu_erf_slope(x);
  else return gelu_tanh_slope(x);
}

}  // namespace hg::kernels::cpu::simd512
