// The AVX-512 f32 tile operations of the fused CPU attention (attention.cpp; the contract of each
// in attention_tiles.h). Compiled with -mavx512f/vl/dq and -mfma whatever the build target, and
// only called after detail::cpu_has_avx512_gemm().
//
// product: C (=|+=) A B for the small tiles of FlashAttention (m, n <= 64 or d, k = d or a tile
// size), all of which live in L1/L2, so nothing is packed. The micro-kernel holds an MR x 32 block
// of C (MR = 8 rows x 2 zmm = 16 accumulators: enough independent FMA chains for two FMA pipes of
// latency 4) and, per step p, loads one row of B (2 vectors; masked at the column edge, so a
// head dimension like 80 needs no padding) and broadcasts MR scalars of A from any strides (the
// transposed tiles P^T, dS^T cost nothing to read transposed). Blocks of at most 16 columns use a
// one-vector variant, so a 16-wide head or a short query tile does not pay for an empty half.
// Each C element is the sum over p in increasing order, one FMA per term, started from C when
// accumulating: deterministic, whatever the thread count.
//
// exp_shifted: exp(x - shift[column]) down the rows of a tile, 16 columns per vector, with the
// column sums kept in a register. exp512 below is Cephes' expf on AVX-512: n = round(x log2 e),
// r = x - n ln 2 (ln 2 split in two, so r is exact to ~2^-32), exp(r) = 1 + r + r^2 P5(r) on
// |r| <= ln2 / 2 (the polynomial's own error ~1e-7 relative), then scalef(.., n) = * 2^n exactly.
// Measured against double exp over 2.4 million points of [-87.3, 88.7]: at most 0.99 ulp (1.4 x 2^-24
// relative); the stated bound, which tests/test_attention_cpu.cpp asserts, is 4 ulp (2^-22 relative).
// Below -87.3 (where the true value is subnormal, < 2^-126) it returns exactly 0, so a masked score
// (-inf) gives probability 0.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/attention_tiles.h"

namespace hg::kernels::cpu::detail {
namespace {

__mmask16 first_lanes(int64_t count) {
  return count >= 16 ? __mmask16(0xffff) : __mmask16((1u << std::max<int64_t>(count, 0)) - 1u);
}

// GCC 12 warns that min/max/roundscale read an uninitialised variable: their headers pass
// _mm512_undefined_ps() as the unused merge source (GCC bug 105593, fixed in GCC 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__m512 exp512(__m512 x) {
  const __mmask16 underflow = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_LT_OQ);
  // max(lo, x) and min(hi, x) return x when it is NaN, so NaN stays NaN; +inf clamps to 89, whose
  // 2^128 scaling overflows to +inf as it should.
  x = _mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(-87.3f), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 poly = _mm512_set1_ps(1.9875691500e-4f);
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(1.3981999507e-3f));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(8.3334519073e-3f));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(4.1665795894e-2f));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(1.6666665459e-1f));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 r2 = _mm512_mul_ps(r, r);
  const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(poly, r2, r), _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(__mmask16(~underflow), y, n);
}
#pragma GCC diagnostic pop

// C rows [0, MR) x columns [0, n) (=|+=) A B, NV vectors (16 columns each) per block of columns.
template <int MR, int NV>
void product_block(int64_t j0, int64_t n, int64_t k, const float* a, int64_t a_row, int64_t a_col, const float* b,
                   int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  __mmask16 mask[NV];
  for (int v = 0; v < NV; ++v) mask[v] = first_lanes(n - j0 - 16 * v);
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v)
      acc[i][v] = accumulate ? _mm512_maskz_loadu_ps(mask[v], c + i * ldc + j0 + 16 * v) : _mm512_setzero_ps();
  const float* bp = b + j0;
  for (int64_t p = 0; p < k; ++p) {
    __m512 row[NV];
    for (int v = 0; v < NV; ++v) row[v] = _mm512_maskz_loadu_ps(mask[v], bp + 16 * v);
    const float* ap = a + p * a_col;
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512 ai = _mm512_set1_ps(ap[i * a_row]);
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(ai, row[v], acc[i][v]);
    }
    bp += ldb;
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) _mm512_mask_storeu_ps(c + i * ldc + j0 + 16 * v, mask[v], acc[i][v]);
}

constexpr int kMR = 8;

template <int MR>
void product_rows(int64_t n, int64_t k, const float* a, int64_t a_row, int64_t a_col, const float* b, int64_t ldb,
                  float* c, int64_t ldc, bool accumulate) {
  for (int64_t j0 = 0; j0 < n; j0 += 32) {
    if (n - j0 > 16)
      product_block<MR, 2>(j0, n, k, a, a_row, a_col, b, ldb, c, ldc, accumulate);
    else
      product_block<MR, 1>(j0, n, k, a, a_row, a_col, b, ldb, c, ldc, accumulate);
  }
}

void product(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_row, int64_t a_col, const float* b, int64_t ldb,
             float* c, int64_t ldc, bool accumulate) {
  for (int64_t i0 = 0; i0 < m; i0 += kMR) {
    const float* a_rows = a + i0 * a_row;
    float* c_rows = c + i0 * ldc;
    // clang-format off
    switch (std::min<int64_t>(kMR, m - i0)) {
      case 8: product_rows<8>(n, k, a_rows, a_row, a_col, b, ldb, c_rows, ldc, accumulate); break;
      case 7: product_rows<7>(n, k, a_rows, a_row, a_col, b, ldb, c_rows, ldc, accumulate); break;
      case 6: product_rows<6>(n, k, a_rows, a_row, a_col, b, ldb, c_rows, ldc, accumulate); break;
      case 5: product_rows<5>(n, k, a_rows, a_row, a_col, b, ldb, c_rows, ldc, accumulate); break;
      case 4: product_rows<4>(n, k, a_rows, a_row, a_col, b, ldb, c_rows, ldc, accumulate); break;
      case 3: product_rows<3>(n, k, a_rows, a_row, a_col, b, ldb, c_rows, ldc, accumulate); break;
      case 2: product_rows<2>(n, k, a_rows, a_row, a_col, b, ldb, c_rows, ldc, accumulate); break;
      default: product_rows<1>(n, k, a_rows, a_row, a_col, b, ldb, c_rows, ldc, accumulate); break;
    }
    // clang-format on
  }
}

void exp_shifted(float* x, int64_t rows, int64_t cols, int64_t ld, const float* shift, float* sums) {
  for (int64_t c0 = 0; c0 < cols; c0 += 16) {
    const __mmask16 mask = first_lanes(cols - c0);
    const __m512 s = _mm512_maskz_loadu_ps(mask, shift + c0);
    __m512 sum = _mm512_setzero_ps();
    for (int64_t r = 0; r < rows; ++r) {
      float* at = x + r * ld + c0;
      const __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, at), s));
      _mm512_mask_storeu_ps(at, mask, e);
      sum = _mm512_add_ps(sum, e);
    }
    if (sums) _mm512_mask_storeu_ps(sums + c0, mask, sum);
  }
}

}  // namespace

AttentionTileOps<float> attention_tile_ops_avx512() { return {&product, &exp_shifted}; }

void exp_f32_avx512(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = first_lanes(n - i);
    _mm512_mask_storeu_ps(y + i, mask, exp512(_mm512_maskz_loadu_ps(mask, x + i)));
  }
}

}  // namespace hg::kernels::cpu::detail
