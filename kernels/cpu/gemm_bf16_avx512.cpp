// bf16 GEMM on AVX512_BF16 in the GotoBLAS/BLIS style of gemm_avx512.cpp: C = alpha * op(A) op(B)
// + beta * C with A and B bf16, C f32 or bf16, row-major with row strides. The multiply is
// vdpbf16ps (_mm512_dpbf16_ps): in each of 16 fp32 lanes it adds the two products of a pair of
// bf16 values, acc += a[2l] * b[2l] + a[2l+1] * b[2l+1], so one instruction covers two steps of k
// for 16 columns. Sums stay fp32 over all of k; a bf16 C is rounded once, to nearest even
// bit-identically to hg::bfloat16 (gemm_avx512_tiles.h), never with vcvtneps2bf16.
//
// Numerics: the instruction treats bf16 subnormal inputs as zero and flushes subnormal results of
// its steps (DAZ/FTZ whatever MXCSR says), so magnitudes below 2^-126 count as 0 on this path; the
// fp32-via-packing path (gemm_avx512.cpp) keeps them. Within each pair the two products are added
// before the accumulator, so results differ from a strict left-to-right fp32 sum by normal
// rounding, not by more.
//
// Micro-kernel (MR x NR = 14 x 32, as the f32 kernel). A 14 x 32 tile of C lives in 28 zmm fp32
// accumulators. Each step q of the loop over k-pairs loads 2 vectors of packed B (pair q of 32
// columns: [NR][2] bf16 = 128 bytes), broadcasts 14 32-bit words of packed A (the pair q of each
// row) and issues 28 independent vdpbf16ps: 28 chains hide its latency, 28 + 2 + 1 registers fit
// in 32, and 16 loads per 28 dot products keep the dot-product unit, not the load ports, the
// limit. It never sees strides or transposes; it always computes a full tile (packing zero-pads,
// an odd k gets a zero partner in its last pair) and stores through store_tile with masks.
//
// Packing: op(A) into MR-row panels [k/2][MR][2] (each row's k-pair one 32-bit word, broadcast as
// such) and op(B) into NR-column panels [k/2][NR][2]. Where a pair is adjacent in memory (A not
// transposed, B transposed) the panel is a 32-bit transpose of 16 x 16 words in registers (the
// f32 kernel's transpose); where it straddles two rows (A transposed, B not) two rows of 16
// values are zero-extended to 32 bits and merged (lo | hi << 16). A transposed A (the weight
// gradient dW = dY^T X) is packed two rows of A at a time for the whole MC block, each row read
// once and contiguously, rather than panel by panel (a strided walk of kc rows per panel).
//
// Blocking, outermost first (loop order jc -> pc -> ic -> jr -> ir), chosen per CPU at run time
// (bf16_blocking_for, gemm_avx512_blocking.h). A bf16 pair is 4 bytes, as one float is, so KC =
// 1024 values of k is the f32 kernel's KC = 512 in bytes.
//   NC = 2048 columns: the packed B block (KC x NC bf16 = 4-8 MiB) lives in L3.
//   KC = 2048 where L2 >= 1 MiB (Zen 4, Sapphire Rapids): k up to 2048 is one slice, so a bf16 C
//     needs no fp32 partials and every C tile is stored once. On a 2 MiB L2 the A block (896 KiB)
//     fits beside a 128 KiB B panel (Sapphire Rapids, one thread, CPU time, paired rounds: +8..10%
//     at 2048^3, the GPT shapes within +-3%). On Zen 4's 1 MiB L2 it does not quite, yet KC = 2048
//     measured faster than 1024 wherever k > 1024 (quiet, one thread: 2048^3 170 -> 204 GFLOP/s,
//     the GPT C = 256 weight gradients (k = 2048) +8..32%, k = 4096 equal; MC = 112 or 168 with
//     KC = 2048 within the noise of MC = 224): the fp32 partial pass it saves costs more than the
//     A block's L2 misses. KC = 1024 where L2 is unknown (the B micro-panel, KC x NR bf16 = 64 KiB,
//     and the A panels then stream from L2).
//   MC = 224 rows (16 x MR): the packed A block (MC x KC bf16 = 448-896 KiB) stays in L2 while the
//     jr loop sweeps the B panels past it.
// A bf16 C over more than one slice keeps fp32 partial sums of the thread's rows x NC columns in a
// per-thread buffer (gemm_avx512_tiles.h), so it is rounded once.
//
// Threads: as the f32 kernel, one rectangle of C per OpenMP thread (rectangle_of), each running the
// whole loop nest with its own thread_local grow-only pack buffers; no barrier until the join, and
// each element of C is computed by the same sequence of instructions whatever the thread count,
// so results are bit-identical for 1 and N threads.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/gemm_avx512.h"
#include "kernels/cpu/gemm_avx512_blocking.h"
#include "kernels/cpu/gemm_avx512_tiles.h"

// GCC 12 warns that AVX-512 intrinsics read an uninitialised variable wherever the transposes and
// masked loads are inlined: their headers pass undefined vectors as unused merge sources (GCC bug
// 105593, fixed in GCC 13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace hg::kernels::cpu::detail {
namespace {

constexpr int64_t kMR = 14;        // rows of a micro-tile (accumulator registers / 2)
constexpr int64_t kNR = 32;        // columns of a micro-tile: two zmm of 16 fp32 lanes

// op(X)[row][col] for a row-major bf16 X (as raw bits) with row stride ld.
struct OperandView {
  const uint16_t* data;
  int64_t ld;
  bool transposed;
};

// ---- packing -----------------------------------------------------------------------------------

// Source: `rows` (<= 16) rows, row r at src + r * ld, each holding k values of which the pairs are
// adjacent (kc of them from the start). Destination: for each pair q, the rows' 32-bit pair words
// at dst[q * dst_ld_words : + dst_width], lanes >= rows zero; an odd kc gets a zero high half in
// its last word.
void pack_adjacent_pairs(const uint16_t* src, int64_t ld, int64_t rows, int64_t kc, uint32_t* dst,
                         int64_t dst_ld_words, int64_t dst_width) {
  const __mmask16 store = first_lanes(dst_width);
  for (int64_t p = 0; p < kc; p += 32) {
    const __mmask32 load = first_lanes32(kc - p);
    __m512 v[16];
    for (int r = 0; r < 16; ++r)
      v[r] = r < rows ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(load, src + r * ld + p)) : _mm512_setzero_ps();
    transpose_16x16(v);
    const int64_t words = std::min<int64_t>(16, (kc - p + 1) / 2);
    for (int64_t q = 0; q < words; ++q)
      _mm512_mask_storeu_ps(dst + (p / 2 + q) * dst_ld_words, store, v[q]);
  }
}

// Source: k runs down the rows (row p at src + p * ld), `cols` (<= 16) contiguous values per row.
// Destination: for each pair q, the 32-bit words (row 2q value | row 2q+1 value << 16) of the cols
// at dst[q * dst_ld_words : + dst_width], lanes >= cols zero; a missing row 2q+1 reads as zero.
void pack_straddling_pairs(const uint16_t* src, int64_t ld, int64_t cols, int64_t kc, uint32_t* dst,
                           int64_t dst_ld_words, int64_t dst_width) {
  const __mmask16 load = first_lanes(cols), store = first_lanes(dst_width);
  for (int64_t p = 0; p < kc; p += 2) {
    const __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(load, src + p * ld));
    const __m512i hi = p + 1 < kc ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(load, src + (p + 1) * ld))
                                  : _mm512_setzero_si512();
    _mm512_mask_storeu_epi32(dst + (p / 2) * dst_ld_words, store, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
  }
}

// One MR-row panel of op(A)[i0 : i0 + rows, p0 : p0 + kc] = A (not transposed) as [kc/2][kMR] pair
// words, zero-padded.
void pack_a_panel(const OperandView& a, int64_t i0, int64_t rows, int64_t p0, int64_t kc, uint32_t* dst) {
  pack_adjacent_pairs(a.data + i0 * a.ld + p0, a.ld, rows, kc, dst, kMR, kMR);
}

// All MR-row panels of a packed A block (mc rows) for op(A) = A^T (A stored [k][m]): a pair
// straddles rows p, p + 1 of A, which hold that pair for every panel, contiguous; so the block is
// packed two rows of A at a time, each panel's 14 words from one pair of masked loads. Going panel
// by panel would walk kc rows of A once per panel, a strided pattern the prefetchers do not follow.
void pack_a_block_transposed(const OperandView& a, int64_t i0, int64_t mc, int64_t p0, int64_t kc, uint32_t* dst) {
  const int64_t pairs = (kc + 1) / 2;
  const __mmask16 store = first_lanes(kMR);
  for (int64_t q = 0; q < pairs; ++q) {
    const uint16_t* row = a.data + (p0 + 2 * q) * a.ld + i0;
    const bool has_second = 2 * q + 1 < kc;
    for (int64_t ir = 0; ir < mc; ir += kMR) {
      const __mmask16 load = first_lanes(mc - ir);
      const __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(load, row + ir));
      const __m512i hi = has_second ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(load, row + a.ld + ir))
                                    : _mm512_setzero_si512();
      _mm512_mask_storeu_epi32(dst + ir * pairs + q * kMR, store, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
  }
}

// One NR-column panel of op(B)[p0 : p0 + kc, j0 : j0 + cols] as [kc/2][kNR] pair words, zero-padded.
void pack_b_panel(const OperandView& b, int64_t p0, int64_t kc, int64_t j0, int64_t cols, uint32_t* dst) {
  for (int64_t half_begin = 0; half_begin < kNR; half_begin += 16) {
    const int64_t half_cols = std::clamp<int64_t>(cols - half_begin, 0, 16);
    if (b.transposed)  // op(B)[p][j] = B[j][p]: pairs adjacent along row j of B
      pack_adjacent_pairs(b.data + (j0 + half_begin) * b.ld + p0, b.ld, half_cols, kc, dst + half_begin, kNR, 16);
    else
      pack_straddling_pairs(b.data + p0 * b.ld + j0 + half_begin, b.ld, half_cols, kc, dst + half_begin, kNR, 16);
  }
}

// ---- micro-kernel ------------------------------------------------------------------------------

// The product of one packed A panel and one packed B panel over `pairs` k-pairs, stored by
// store_tile.
void micro_kernel(int64_t pairs, const uint32_t* __restrict a, const uint32_t* __restrict b, float alpha, float beta,
                  const TileOut& t, SlicePhase phase) {
  prefetch_tile(t, phase);  // C is touched only after the loop: its misses overlap the dot products
  __m512 lo[kMR], hi[kMR];
#pragma GCC unroll 14
  for (int i = 0; i < kMR; ++i) lo[i] = hi[i] = _mm512_setzero_ps();
  for (int64_t q = 0; q < pairs; ++q) {
    const __m512bh b_lo = (__m512bh)_mm512_load_si512(b), b_hi = (__m512bh)_mm512_load_si512(b + 16);
#pragma GCC unroll 14
    for (int i = 0; i < kMR; ++i) {
      const __m512bh a_i = (__m512bh)_mm512_set1_epi32(int(a[i]));
      lo[i] = _mm512_dpbf16_ps(lo[i], a_i, b_lo);
      hi[i] = _mm512_dpbf16_ps(hi[i], a_i, b_hi);
    }
    a += kMR;
    b += kNR;
  }
  store_tile<kMR>(lo, hi, t, alpha, beta, phase);
}

// ---- blocking and threads ----------------------------------------------------------------------

PackBuffer& thread_a_buffer() {
  thread_local PackBuffer buffer;
  return buffer;
}
PackBuffer& thread_b_buffer() {
  thread_local PackBuffer buffer;
  return buffer;
}
PackBuffer& thread_partial_buffer() {
  thread_local PackBuffer buffer;
  return buffer;
}

// The serial loop nest over one rectangle of C (see the file comment).
void gemm_rectangle(const GemmBlocking& blk, const OperandView& a, const OperandView& b, const Rectangle& r, int64_t k,
                    float alpha, float beta, void* c, int64_t ldc, OutType out_type, const void* bias) {
  const int64_t kKC = round_up(blk.kc, 2), kMC = blk.mc, kNC = round_up(blk.nc, kNR);
  uint32_t* a_packed = thread_a_buffer().get<uint32_t>(kMC * kKC / 2);
  uint32_t* b_packed = thread_b_buffer().get<uint32_t>(kKC / 2 * kNC);
  const int64_t esize = out_bytes(out_type);
  const bool partials = out_type != OutType::f32 && k > kKC;
  const int64_t ldp = round_up(std::min(kNC, r.col_end - r.col_begin), kNR);
  float* partial = partials ? thread_partial_buffer().get<float>((r.row_end - r.row_begin) * ldp) : nullptr;
  for (int64_t jc = r.col_begin; jc < r.col_end; jc += kNC) {
    const int64_t nc = std::min(kNC, r.col_end - jc);
    for (int64_t pc = 0; pc < k; pc += kKC) {
      const int64_t kc = std::min(kKC, k - pc), pairs = (kc + 1) / 2;
      for (int64_t jr = 0; jr < nc; jr += kNR)
        pack_b_panel(b, pc, kc, jc + jr, std::min(kNR, nc - jr), b_packed + jr * pairs);
      const float beta_here = out_type == OutType::f32 && pc > 0 ? 1.0f : beta;
      const SlicePhase phase = slice_phase(pc, kc, k);
      for (int64_t ic = r.row_begin; ic < r.row_end; ic += kMC) {
        const int64_t mc = std::min(kMC, r.row_end - ic);
        if (a.transposed)
          pack_a_block_transposed(a, ic, mc, pc, kc, a_packed);
        else
          for (int64_t ir = 0; ir < mc; ir += kMR)
            pack_a_panel(a, ic + ir, std::min(kMR, mc - ir), pc, kc, a_packed + ir * pairs);
        for (int64_t jr = 0; jr < nc; jr += kNR) {
          const int64_t cols = std::min(kNR, nc - jr);
          for (int64_t ir = 0; ir < mc; ir += kMR) {
            const int64_t row = ic + ir, col = jc + jr;
            const TileOut target{static_cast<char*>(c) + (row * ldc + col) * esize,
                                 ldc,
                                 out_type,
                                 partial ? partial + (row - r.row_begin) * ldp + (col - jc) : nullptr,
                                 ldp,
                                 std::min(kMR, mc - ir),
                                 first_lanes(cols),
                                 first_lanes(cols - 16),
                                 bias ? static_cast<const char*>(bias) + col * esize : nullptr};
            micro_kernel(pairs, a_packed + ir * pairs, b_packed + jr * pairs, alpha, beta_here, target, phase);
          }
        }
      }
    }
  }
}

// The entry points' common body; bias (C's type, n values) or null.
void gemm_bf16_packed(const GemmBlocking& blk, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const bfloat16* a,
                      int64_t lda, const bfloat16* b, int64_t ldb, float beta, void* c, int64_t ldc, OutType out_type,
                      const void* bias) {
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == 0.0f) return scale_out(m, n, beta, c, ldc, out_type);

  static_assert(sizeof(bfloat16) == sizeof(uint16_t));
  const OperandView op_a{reinterpret_cast<const uint16_t*>(a), lda, trans_a};
  const OperandView op_b{reinterpret_cast<const uint16_t*>(b), ldb, trans_b};
  // Below ~1 MFLOP the fork/join costs more than the second thread saves.
  const bool small = double(m) * double(n) * double(k) < 1.0e6;
  const int threads = small ? 1 : omp_get_max_threads();
  // Half C with k > KC keeps fp32 partials per thread: bound them by running kPartialRows at a time.
  const int64_t chunk_rows = out_type != OutType::f32 && k > round_up(blk.kc, 2) ? 2 * blk.mc : 0;
  for_each_thread_rectangle(threads, m, n, kMR, kNR, chunk_rows, [&](const Rectangle& part) {
    gemm_rectangle(blk, op_a, op_b, part, k, alpha, beta, c, ldc, out_type, bias);
  });
}

}  // namespace

GemmBlocking bf16_blocking_for(const CpuCaches& caches) {
  // The 14 x 32 tile and A^T packed by rows always (blk.tile and blk.pack_a_by_rows are not read).
  // KC = 2048, MC = 224 where L2 >= 1 MiB: k up to 2048 is one slice, so a bf16 C skips the fp32
  // partials and C is stored once (measured on Sapphire Rapids' 2 MiB L2: +10% at 2048^3; on Zen 4's
  // 1 MiB L2, where the 896 KiB A block barely fits: +20% at 2048^3 and up to +32% on the k = 2048
  // weight gradients). KC = 1024 (A block 448 KiB) where the caches are unknown.
  if (caches.l2 >= 1024 * 1024) return {GemmTile::mr14_nr32, 2048, kMR * 16, 2048, true};
  return {GemmTile::mr14_nr32, 1024, kMR * 16, 2048, true};
}

const GemmBlocking& bf16_blocking() {
  static const GemmBlocking blocking = bf16_blocking_for(detect_cpu_caches());
  return blocking;
}

void gemm_bf16_avx512_blocked(const GemmBlocking& blocking, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                              float alpha, const bfloat16* a, int64_t lda, const bfloat16* b, int64_t ldb, float beta,
                              void* c, int64_t ldc, bool c_is_bf16) {
  gemm_bf16_packed(blocking, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                   c_is_bf16 ? OutType::bf16 : OutType::f32, nullptr);
}

void gemm_bf16_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const bfloat16* a,
                      int64_t lda, const bfloat16* b, int64_t ldb, float beta, void* c, int64_t ldc, bool c_is_bf16) {
  gemm_bf16_packed(bf16_blocking(), trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                   c_is_bf16 ? OutType::bf16 : OutType::f32, nullptr);
}

void gemm_bias_bf16_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const bfloat16* a,
                           int64_t lda, const bfloat16* b, int64_t ldb, const bfloat16* bias, bfloat16* c,
                           int64_t ldc) {
  gemm_bf16_packed(bf16_blocking(), trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, 0.0f, c, ldc, OutType::bf16,
                   bias);
}

}  // namespace hg::kernels::cpu::detail
