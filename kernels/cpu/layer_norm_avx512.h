#pragma once
// The LayerNorm rows of layer_norm.cpp as explicit AVX-512 loops (16 lanes, masked tails), for
// T = float, bfloat16, half: rows are read as T and converted in registers (convert_avx512.h's
// load16 / store16), so no float copy of x, dy or dh is ever made; only weight and bias are float
// rows (converted once per call by the caller) and the dw/db partials are float rows of the row block.
//
// Math (kernels/kernels.h, layer_norm_forward / layer_norm_backward / add_layer_norm_*), per row of
// length n, in float:
//   forward:  v = x, or for the fused op v = h = T(x + residual) (rounded as the composed add
//             rounds it, written to h; store16_rounded hands the stored values back);
//             mean = sum v / n;  var = sum (v - mean)^2 / n (two passes, never E[v^2] - mean^2);
//             rstd = 1 / sqrt(var + eps);  y = T(xhat * w + b), xhat = (v - mean) * rstd.
//   backward: g = dy * w, xhat = (x - mean) * rstd; mean_g = sum g / n, mean_gx = sum g xhat / n;
//             dx = T(rstd * (g - mean_g - xhat * mean_gx)); fused: dx = T(float(dx) + float(dh)),
//             the LayerNorm dx rounded to T first (add_layer_norm's rule, bit-identical to the
//             composed add); dw_partial += dy * xhat, db_partial += dy (the caller's row block).
//
// Loop strategy: the first pass over a row streams it from memory (forward: the sum, with the fused
// add and the store of h folded in; backward: both sums and the dw/db partials, one pass); the later
// passes (forward: the squares, then y; backward: dx) read the row again as T, from L1 (a 4096-wide
// bf16 row is 8 KiB). A forward row of 16 k columns, k <= 16 (up to 256: the GPT's narrow
// activations), instead stays in k registers after the first pass, so a half row is widened once
// rather than three times (measured 13-20% more bf16/f16 rows per second at 2048x256), with the same
// operations in the same order, i.e. the same bits.
// Every sum keeps four 16-lane accumulators over 64-column steps, the 16-column remainder goes to
// the first, the masked tail to the second, and they are combined in one fixed order, so a row's
// result depends on nothing but the row (not the thread count, not the row's position). Every
// multiply-add is an explicit fma (g = dy * w is rounded only where it multiplies xhat; sum g and
// g - mean_g take dy * w exact), so the rounding does not depend on what the compiler contracts.
// The fused and plain forms run the same code: the fused form differs only in where the first
// pass's vector comes from, so its arithmetic on h is the plain form's arithmetic on h.
// Callers check vector_math_active() == avx512 first (every function is HG_SIMD512).
#include <cmath>
#include <cstdint>

#include "kernels/cpu/convert_avx512.h"
#include "kernels/cpu/simd_math_avx512.h"

namespace hg::kernels::cpu::simd512 {

HG_SIMD512 inline float reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a, b), _mm512_add_ps(c, d)));
}

// First forward pass: the row's values (x, or h = T(x + residual) stored to h) summed.
template <bool kFused, class T>
HG_SIMD512 inline __m512 forward_value(const T* x, const T* residual, T* h, int64_t c) {
  if constexpr (kFused)
    return store16_rounded(h + c, _mm512_add_ps(load16(x + c), load16(residual + c)));
  else
    return load16(x + c);
}

template <bool kFused, class T>
HG_SIMD512 inline __m512 forward_value(const T* x, const T* residual, T* h, int64_t c, __mmask16 k) {
  if constexpr (kFused)
    return store16_rounded(h + c, _mm512_add_ps(load16(x + c, k), load16(residual + c, k)), k);
  else
    return load16(x + c, k);
}

// A row of exactly NV * 16 columns (NV <= kRegisterVectors) kept in registers between the passes, so
// a half row is widened once instead of three times. The same operations in the same order as the
// general row below (vector i into accumulator i % 4 for the whole 64-column steps, the rest into the
// first), so the result is bit for bit the general row's.
constexpr int kRegisterVectors = 16;

template <int NV, bool kFused, class T>
HG_SIMD512 void layer_norm_forward_row_in_registers(const T* x, const T* residual, T* h, const float* w, const float* b,
                                                    T* y, float eps, float& mean_out, float& rstd_out) {
  constexpr int kWhole = NV / 4 * 4;
  __m512 v[NV];
  __m512 s[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
#pragma GCC unroll 16
  for (int i = 0; i < NV; ++i) {
    v[i] = forward_value<kFused>(x, residual, h, int64_t(i) * 16);
    s[i < kWhole ? i % 4 : 0] = _mm512_add_ps(s[i < kWhole ? i % 4 : 0], v[i]);
  }
  const float mean = reduce4(s[0], s[1], s[2], s[3]) / float(NV * 16);
  const __m512 m = splat(mean);
  s[0] = s[1] = s[2] = s[3] = _mm512_setzero_ps();
#pragma GCC unroll 16
  for (int i = 0; i < NV; ++i) {
    const __m512 d = _mm512_sub_ps(v[i], m);
    s[i < kWhole ? i % 4 : 0] = _mm512_fmadd_ps(d, d, s[i < kWhole ? i % 4 : 0]);
  }
  const float rstd = 1.0f / std::sqrt(reduce4(s[0], s[1], s[2], s[3]) / float(NV * 16) + eps);
  const __m512 r = splat(rstd);
#pragma GCC unroll 16
  for (int i = 0; i < NV; ++i) {
    const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(v[i], m), r);
    store16(y + i * 16, _mm512_fmadd_ps(xhat, _mm512_loadu_ps(w + i * 16), _mm512_loadu_ps(b + i * 16)));
  }
  mean_out = mean;
  rstd_out = rstd;
}

// Runs the row in registers when n is NV * 16 for some NV in [NV0, kRegisterVectors]; false otherwise.
template <bool kFused, class T, int NV0 = 1>
HG_SIMD512 inline bool layer_norm_forward_row_short(const T* x, const T* residual, T* h, const float* w, const float* b,
                                                    T* y, int64_t n, float eps, float& mean_out, float& rstd_out) {
  if constexpr (NV0 > kRegisterVectors) {
    return false;
  } else {
    if (n == NV0 * 16) {
      layer_norm_forward_row_in_registers<NV0, kFused>(x, residual, h, w, b, y, eps, mean_out, rstd_out);
      return true;
    }
    return layer_norm_forward_row_short<kFused, T, NV0 + 1>(x, residual, h, w, b, y, n, eps, mean_out, rstd_out);
  }
}

// One row of LayerNorm, or (kFused) of h = x + residual with h written, any n >= 1, the row read
// again from memory (L1) in the second and third passes. w, b: float rows of n.
template <bool kFused, class T>
HG_SIMD512 void layer_norm_forward_row_general(const T* x, const T* residual, T* h, const float* w, const float* b,
                                               T* y, int64_t n, float eps, float& mean_out, float& rstd_out) {
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t c = 0;
  for (; c + 64 <= n; c += 64) {
    s0 = _mm512_add_ps(s0, forward_value<kFused>(x, residual, h, c));
    s1 = _mm512_add_ps(s1, forward_value<kFused>(x, residual, h, c + 16));
    s2 = _mm512_add_ps(s2, forward_value<kFused>(x, residual, h, c + 32));
    s3 = _mm512_add_ps(s3, forward_value<kFused>(x, residual, h, c + 48));
  }
  for (; c + 16 <= n; c += 16) s0 = _mm512_add_ps(s0, forward_value<kFused>(x, residual, h, c));
  if (c < n) s1 = _mm512_add_ps(s1, forward_value<kFused>(x, residual, h, c, tail_mask(n - c)));
  const float mean = reduce4(s0, s1, s2, s3) / float(n);

  // The row again (h for the fused form: just written, in L1), now as squares about the mean.
  const T* v = kFused ? h : x;
  const __m512 m = splat(mean);
  s0 = s1 = s2 = s3 = _mm512_setzero_ps();
  c = 0;
  for (; c + 64 <= n; c += 64) {
    const __m512 d0 = _mm512_sub_ps(load16(v + c), m), d1 = _mm512_sub_ps(load16(v + c + 16), m);
    const __m512 d2 = _mm512_sub_ps(load16(v + c + 32), m), d3 = _mm512_sub_ps(load16(v + c + 48), m);
    s0 = _mm512_fmadd_ps(d0, d0, s0);
    s1 = _mm512_fmadd_ps(d1, d1, s1);
    s2 = _mm512_fmadd_ps(d2, d2, s2);
    s3 = _mm512_fmadd_ps(d3, d3, s3);
  }
  for (; c + 16 <= n; c += 16) {
    const __m512 d0 = _mm512_sub_ps(load16(v + c), m);
    s0 = _mm512_fmadd_ps(d0, d0, s0);
  }
  if (c < n) {
    const __mmask16 k = tail_mask(n - c);
    const __m512 d1 = _mm512_maskz_sub_ps(k, load16(v + c, k), m);  // lanes past n stay 0
    s1 = _mm512_fmadd_ps(d1, d1, s1);
  }
  const float rstd = 1.0f / std::sqrt(reduce4(s0, s1, s2, s3) / float(n) + eps);

  const __m512 r = splat(rstd);
  c = 0;
  for (; c + 16 <= n; c += 16) {
    const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(load16(v + c), m), r);
    store16(y + c, _mm512_fmadd_ps(xhat, _mm512_loadu_ps(w + c), _mm512_loadu_ps(b + c)));
  }
  if (c < n) {
    const __mmask16 k = tail_mask(n - c);
    const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(load16(v + c, k), m), r);
    store16(y + c, _mm512_fmadd_ps(xhat, _mm512_maskz_loadu_ps(k, w + c), _mm512_maskz_loadu_ps(k, b + c)), k);
  }
  mean_out = mean;
  rstd_out = rstd;
}

// One row of LayerNorm, or (kFused) of h = x + residual with h written: in registers when it fits.
template <bool kFused, class T>
HG_SIMD512 void layer_norm_forward_row(const T* x, const T* residual, T* h, const float* w, const float* b, T* y,
                                       int64_t n, float eps, float& mean_out, float& rstd_out) {
  if (n % 16 == 0 && n <= kRegisterVectors * 16 &&
      layer_norm_forward_row_short<kFused>(x, residual, h, w, b, y, n, eps, mean_out, rstd_out))
    return;
  layer_norm_forward_row_general<kFused>(x, residual, h, w, b, y, n, eps, mean_out, rstd_out);
}

// 16 elements at p (kTail: the lanes of k, the others 0), as floats.
template <bool kTail, class T>
HG_SIMD512 inline __m512 load_lanes(const T* p, __mmask16 k) {
  if constexpr (kTail)
    return load16(p, k);
  else
    return load16(p);
}

template <bool kTail, class T>
HG_SIMD512 inline void store_lanes(T* p, __m512 v, __mmask16 k) {
  if constexpr (kTail)
    store16(p, v, k);
  else
    store16(p, v);
}

// The backward first pass on 16 columns at c (kTail: the lanes of k): xhat and g, the two sums, and
// the dw/db partials (kPartials).
template <bool kTail, bool kPartials, class T>
HG_SIMD512 inline void backward_sums(const T* x, const T* dy, const float* w, __m512 m, __m512 r, float* dw, float* db,
                                     int64_t c, __mmask16 k, __m512& sum_g, __m512& sum_gx) {
  const __m512 dyv = load_lanes<kTail>(dy + c, k);
  const __m512 centred = kTail ? _mm512_maskz_sub_ps(k, load16(x + c, k), m) : _mm512_sub_ps(load16(x + c), m);
  const __m512 xhat = _mm512_mul_ps(centred, r);  // 0 past n, as are dy and g
  const __m512 wv = load_lanes<kTail>(w + c, k);
  sum_g = _mm512_fmadd_ps(dyv, wv, sum_g);
  sum_gx = _mm512_fmadd_ps(_mm512_mul_ps(dyv, wv), xhat, sum_gx);
  if constexpr (kPartials) {
    const __m512 dwv = _mm512_fmadd_ps(dyv, xhat, load_lanes<kTail>(dw + c, k));
    const __m512 dbv = _mm512_add_ps(dyv, load_lanes<kTail>(db + c, k));
    store_lanes<kTail>(dw + c, dwv, k);
    store_lanes<kTail>(db + c, dbv, k);
  }
}

// dx of 16 columns at c (kTail: the lanes of k), plus dh (kFused) as the composed add computes it.
template <bool kTail, bool kFused, class T>
HG_SIMD512 inline void backward_dx(const T* x, const T* dy, const T* dh, T* dx, const float* w, __m512 m, __m512 r,
                                   __m512 mean_g, __m512 mean_gx, int64_t c, __mmask16 k) {
  const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(load_lanes<kTail>(x + c, k), m), r);
  const __m512 g_centred = _mm512_fmsub_ps(load_lanes<kTail>(dy + c, k), load_lanes<kTail>(w + c, k), mean_g);
  const __m512 d = _mm512_mul_ps(r, _mm512_fnmadd_ps(xhat, mean_gx, g_centred));
  if constexpr (kFused) {
    const __m512 rounded = store16_rounded(dx + c, d, k);  // the LayerNorm dx as T, then + dh
    store_lanes<kTail>(dx + c, _mm512_add_ps(rounded, load_lanes<kTail>(dh + c, k)), k);
  } else {
    store_lanes<kTail>(dx + c, d, k);
  }
}

// One row of the backward pass: dx (plus dh when kFused), and dw/db partials when kPartials.
template <bool kFused, bool kPartials, class T>
HG_SIMD512 void layer_norm_backward_row(const T* x, const T* dy, const T* dh, T* dx, const float* w, float mean,
                                        float rstd, int64_t n, float* dw_partial, float* db_partial) {
  const __m512 m = splat(mean), r = splat(rstd);
  __m512 g0 = _mm512_setzero_ps(), g1 = g0, g2 = g0, g3 = g0;
  __m512 q0 = g0, q1 = g0, q2 = g0, q3 = g0;
  constexpr __mmask16 all = 0xffff;
  int64_t c = 0;
  for (; c + 64 <= n; c += 64) {
    backward_sums<false, kPartials>(x, dy, w, m, r, dw_partial, db_partial, c, all, g0, q0);
    backward_sums<false, kPartials>(x, dy, w, m, r, dw_partial, db_partial, c + 16, all, g1, q1);
    backward_sums<false, kPartials>(x, dy, w, m, r, dw_partial, db_partial, c + 32, all, g2, q2);
    backward_sums<false, kPartials>(x, dy, w, m, r, dw_partial, db_partial, c + 48, all, g3, q3);
  }
  for (; c + 16 <= n; c += 16) backward_sums<false, kPartials>(x, dy, w, m, r, dw_partial, db_partial, c, all, g0, q0);
  if (c < n) backward_sums<true, kPartials>(x, dy, w, m, r, dw_partial, db_partial, c, tail_mask(n - c), g1, q1);
  const __m512 mean_g = splat(reduce4(g0, g1, g2, g3) / float(n));
  const __m512 mean_gx = splat(reduce4(q0, q1, q2, q3) / float(n));
  c = 0;
  for (; c + 16 <= n; c += 16) backward_dx<false, kFused>(x, dy, dh, dx, w, m, r, mean_g, mean_gx, c, all);
  if (c < n) backward_dx<true, kFused>(x, dy, dh, dx, w, m, r, mean_g, mean_gx, c, tail_mask(n - c));
}

}  // namespace hg::kernels::cpu::simd512
