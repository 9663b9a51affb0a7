// f32 GEMM for AVX-512 CPUs in the GotoBLAS/BLIS style: C = alpha * op(A) op(B) + beta * C, all
// row-major with row strides. Tuned on a 2-core AMD EPYC Zen 4 VM: one 512-bit FMA per cycle per
// core (two 256-bit pipes, 4-cycle latency), 32 zmm registers, L1d 32 KiB and L2 1 MiB per core,
// L3 32 MiB shared. Measured there: 87-93% of the measured FMA peak at 1024..4096 squares and the
// GPT-2 projection shapes (bench/gemm_bench.cpp prints the numbers).
//
// Micro-kernel (MR x NR = 14 x 32). A 14 x 32 tile of C lives in 28 zmm accumulators (14 rows x 2
// vectors of 16 floats). Each step p of the k loop loads 2 vectors of packed B (row p of the panel),
// broadcasts 14 scalars of packed A (column p) and issues 28 independent FMAs: 28 chains hide the
// 4-cycle latency many times over, 28 + 2 + 1 registers fit in 32, and 16 loads per 28 FMAs keep
// the FMA pipe, not the load ports, the limit. It never sees strides or transposes, only packed
// panels; it always computes a full tile (packing zero-pads) and writes back rows < `rows` with
// masked stores for the column edge, as C = alpha * acc + beta * C (C not read when beta == 0).
// Before the k loop it prefetches its C tile for writing, so the C misses overlap the FMAs (this
// alone was worth +10 points of peak).
//
// Blocking, outermost first (GotoBLAS loop order jc -> pc -> ic -> jr -> ir):
//   NC = 2048 columns: the packed B block B~ (KC x NC = 4 MiB) lives in L3 and is reread once per
//     MC block; that is < 1 GB/s of traffic, so NC barely matters (1024..4096 measured equal).
//   KC = 512 deep: each KC slice reads and writes the C tile once more, so KC is as large as the
//     caches allow. The B micro-panel (KC x NR = 64 KiB) does not fit L1, but the kernel needs only
//     ~6.6 B/cycle (128 B of B + 56 B of A per 28 FMA cycles) and L2 supplies 32 B/cycle, so both
//     operands stream from L2 at full speed (measured: KC = 256, 384, 512 within noise; 512 best).
//   MC = 224 rows (16 x MR): the packed A block A~ (MC x KC = 448 KiB) stays in L2 while the jr
//     loop sweeps all B panels past it; with a B panel and the C tiles that is ~60% of L2
//     (MC = 12..36 x MR measured within noise).
//
// Packing copies op(A) into MR-row panels laid out [k][MR] and op(B) into NR-column panels laid
// out [k][NR], so every micro-kernel read is unit stride. The transposing cases (A not transposed,
// B transposed) go through a 16 x 16 in-register transpose rather than scalar copies; packing is a
// few percent of the time even for the skinny GPT shapes.
//
// Threads: C is cut into one rectangle per OpenMP thread (a tm x tn grid of whole micro-tiles
// chosen to balance them; for 2 threads and a tall C, two row halves). Each thread runs the whole
// loop nest on its rectangle with its own pack buffers, so there is no barrier until the join. The
// price is that threads sharing columns pack the same B~ (2x the B packing for 2 threads, < 1% of
// the time at m = 4096); a shared B~ would need a barrier per KC slice, and on a shared VM the
// faster core would wait for the slower one at each of them. Pack buffers are thread_local and
// grow-only: fresh pages cost ~17 us per 4 KiB to touch on these VMs, so they are touched once.
//
// Half-precision sources (issue 20): the packers are templated on the source type, so f16 (vcvtph2ps)
// and bf16 (a 16-bit shift) are widened to fp32 while packing, with no f32 temporaries: the same
// micro-kernel then runs on fp32 panels. C may be f32 or the half type; a half C is rounded once
// from the fp32 sum over all of k (fp32 partials across KC slices, gemm_avx512_tiles.h). This is
// the path for f16 everywhere and for bf16 on CPUs without AVX512_BF16 (gemm.cpp). f16 NaN inputs
// keep their payload here (hg::half's scalar widening makes them canonical); only the bits of a
// NaN in an f32 C can differ.
#include "kernels/cpu/gemm_avx512.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/gemm_avx512_tiles.h"

// GCC 12 warns that AVX-512 intrinsics read an uninitialised variable wherever the transposes and
// masked loads are inlined: their headers pass undefined vectors as unused merge sources (GCC bug
// 105593, fixed in GCC 13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace hg::kernels::cpu::detail {
namespace {

// The blocking explained in the file comment.
constexpr int64_t kMR = 14;        // rows of a micro-tile (accumulator registers / 2)
constexpr int64_t kNR = 32;        // columns of a micro-tile: two zmm of 16 floats
constexpr int64_t kKC = 512;       // depth of one packed slice
constexpr int64_t kMC = kMR * 16;  // rows of a packed A block (L2)
constexpr int64_t kNC = 2048;      // columns of a packed B block (L3)
constexpr int64_t kPartialRows = 2 * kMC;  // rows per pass when a half C keeps fp32 partials (3.5 MiB)

// op(X)[row][col] for a row-major X of Src (float, half or bfloat16) with row stride ld.
template <class Src>
struct OperandView {
  const Src* data;
  int64_t ld;
  bool transposed;
};

// Up to 16 consecutive Src values (lanes outside `mask` read as 0) widened to fp32.
template <class Src>
__m512 load_widened(const Src* p, __mmask16 mask) {
  if constexpr (std::is_same_v<Src, float>) {
    return _mm512_maskz_loadu_ps(mask, p);
  } else {
    const __m256i bits = _mm256_maskz_loadu_epi16(mask, p);
    if constexpr (std::is_same_v<Src, half>)
      return _mm512_cvtph_ps(bits);
    else
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  }
}

// ---- packing -----------------------------------------------------------------------------------

// Copies a `rows` x `cols` block (rows, cols <= 16) of a row-major matrix transposed (and widened):
// column c of the source becomes dst[c * dst_ld : + dst_width], where lanes >= rows are zeros.
template <class Src>
void transpose_block_to(const Src* src, int64_t ld, int64_t rows, int64_t cols, float* dst, int64_t dst_ld,
                        int64_t dst_width) {
  __m512 v[16];
  const __mmask16 load = first_lanes(cols), store = first_lanes(dst_width);
  for (int r = 0; r < 16; ++r) v[r] = r < rows ? load_widened(src + r * ld, load) : _mm512_setzero_ps();
  transpose_16x16(v);
  for (int c = 0; c < cols; ++c) _mm512_mask_storeu_ps(dst + c * dst_ld, store, v[c]);
}

// One MR-row panel of op(A)[i0 : i0 + rows, p0 : p0 + kc], laid out [kc][kMR], rows >= `rows`
// zero-filled so the micro-kernel always computes a full tile.
template <class Src>
void pack_a_panel(const OperandView<Src>& a, int64_t i0, int64_t rows, int64_t p0, int64_t kc, float* dst) {
  if (a.transposed) {
    // op(A)[i][p] = A[p][i]: for each p the panel's row is contiguous in A.
    const __mmask16 load = first_lanes(rows), store = first_lanes(kMR);
    for (int64_t p = 0; p < kc; ++p)
      _mm512_mask_storeu_ps(dst + p * kMR, store, load_widened(a.data + (p0 + p) * a.ld + i0, load));
    return;
  }
  // op(A) = A: the panel is a transpose of `rows` stored rows, done 16 values of p at a time.
  const Src* src = a.data + i0 * a.ld + p0;
  for (int64_t p = 0; p < kc; p += 16)
    transpose_block_to(src + p, a.ld, rows, std::min<int64_t>(16, kc - p), dst + p * kMR, kMR, kMR);
}

// One NR-column panel of op(B)[p0 : p0 + kc, j0 : j0 + cols], laid out [kc][kNR], zero-filled.
template <class Src>
void pack_b_panel(const OperandView<Src>& b, int64_t p0, int64_t kc, int64_t j0, int64_t cols, float* dst) {
  if (!b.transposed) {
    const __mmask16 lo = first_lanes(cols), hi = first_lanes(cols - 16);
    for (int64_t p = 0; p < kc; ++p) {
      const Src* src = b.data + (p0 + p) * b.ld + j0;
      _mm512_store_ps(dst + p * kNR, load_widened(src, lo));
      _mm512_store_ps(dst + p * kNR + 16, load_widened(src + 16, hi));
    }
    return;
  }
  // op(B)[p][j] = B[j][p]: the panel is a transpose of `cols` stored rows, in two 16-column halves.
  for (int64_t half_begin = 0; half_begin < kNR; half_begin += 16) {
    const Src* src = b.data + (j0 + half_begin) * b.ld + p0;
    const int64_t half_cols = std::clamp<int64_t>(cols - half_begin, 0, 16);
    for (int64_t p = 0; p < kc; p += 16)
      transpose_block_to(src + p, b.ld, half_cols, std::min<int64_t>(16, kc - p), dst + p * kNR + half_begin, kNR,
                         16);
  }
}

// ---- micro-kernel ------------------------------------------------------------------------------

// The kc-slice product of one packed A panel and one packed B panel, stored by store_tile (C =
// alpha * acc + beta * C for f32 C; fp32 partials or the rounded final value for half C).
void micro_kernel(int64_t kc, const float* __restrict a, const float* __restrict b, float alpha, float beta,
                  const TileOut& t, SlicePhase phase) {
  // C is read and written only after the kc loop; asking for it now (for writing) hides its cache
  // misses behind the FMAs.
  prefetch_tile(t, phase);
  __m512 lo[kMR], hi[kMR];
#pragma GCC unroll 14
  for (int i = 0; i < kMR; ++i) lo[i] = hi[i] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kc; ++p) {
    const __m512 b_lo = _mm512_load_ps(b), b_hi = _mm512_load_ps(b + 16);
#pragma GCC unroll 14
    for (int i = 0; i < kMR; ++i) {
      const __m512 a_i = _mm512_set1_ps(a[i]);
      lo[i] = _mm512_fmadd_ps(a_i, b_lo, lo[i]);
      hi[i] = _mm512_fmadd_ps(a_i, b_hi, hi[i]);
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

// C, its element type, and (for half C over several slices) the fp32 partial sums of the
// rectangle's rows by one NC block, row stride ldp.
struct OutBlock {
  void* c;
  int64_t ldc;
  OutType type;
  float* partial;
  int64_t ldp;
  const void* bias;  // gemm_bias's row vector at the block's first column, or null
};

// Runs the micro-kernel over every tile of a packed (mc x kc) A block times a packed (kc x nc)
// B block; `out` points at the block's top-left element of C (and of the partials).
void multiply_packed_blocks(const float* a_packed, int64_t mc, const float* b_packed, int64_t kc, int64_t nc,
                            float alpha, float beta, SlicePhase phase, const OutBlock& out) {
  const int64_t esize = out_bytes(out.type);
  for (int64_t jr = 0; jr < nc; jr += kNR) {
    const int64_t cols = std::min(kNR, nc - jr);
    const float* b_panel = b_packed + jr * kc;
    for (int64_t ir = 0; ir < mc; ir += kMR) {
      const TileOut target{static_cast<char*>(out.c) + (ir * out.ldc + jr) * esize,
                           out.ldc,
                           out.type,
                           out.partial ? out.partial + ir * out.ldp + jr : nullptr,
                           out.ldp,
                           std::min(kMR, mc - ir),
                           first_lanes(cols),
                           first_lanes(cols - 16),
                           out.bias ? static_cast<const char*>(out.bias) + jr * esize : nullptr};
      micro_kernel(kc, a_packed + ir * kc, b_panel, alpha, beta, target, phase);
    }
  }
}

// The serial GotoBLAS loop nest over one rectangle of C: NC columns at a time, then KC-deep slices
// (pack B), then MC rows (pack A), then the micro-tiles.
template <class Src>
void gemm_rectangle(const OperandView<Src>& a, const OperandView<Src>& b, const Rectangle& r, int64_t k, float alpha,
                    float beta, void* c, int64_t ldc, OutType out_type, const void* bias) {
  float* a_packed = thread_a_buffer().get<float>(kMC * kKC);
  float* b_packed = thread_b_buffer().get<float>(kKC * kNC);
  const int64_t esize = out_bytes(out_type);
  const bool partials = out_type != OutType::f32 && k > kKC;
  const int64_t ldp = round_up(std::min(kNC, r.col_end - r.col_begin), kNR);
  float* partial = partials ? thread_partial_buffer().get<float>((r.row_end - r.row_begin) * ldp) : nullptr;
  for (int64_t jc = r.col_begin; jc < r.col_end; jc += kNC) {
    const int64_t nc = std::min(kNC, r.col_end - jc);
    for (int64_t pc = 0; pc < k; pc += kKC) {
      const int64_t kc = std::min(kKC, k - pc);
      for (int64_t jr = 0; jr < nc; jr += kNR)
        pack_b_panel(b, pc, kc, jc + jr, std::min(kNR, nc - jr), b_packed + jr * kc);
      // f32 C: later slices add to what the first one wrote.
      const float beta_here = out_type == OutType::f32 && pc > 0 ? 1.0f : beta;
      const SlicePhase phase = slice_phase(pc, kc, k);
      for (int64_t ic = r.row_begin; ic < r.row_end; ic += kMC) {
        const int64_t mc = std::min(kMC, r.row_end - ic);
        for (int64_t ir = 0; ir < mc; ir += kMR)
          pack_a_panel(a, ic + ir, std::min(kMR, mc - ir), pc, kc, a_packed + ir * kc);
        const OutBlock out{static_cast<char*>(c) + (ic * ldc + jc) * esize,
                           ldc,
                           out_type,
                           partial ? partial + (ic - r.row_begin) * ldp : nullptr,
                           ldp,
                           bias ? static_cast<const char*>(bias) + jc * esize : nullptr};
        multiply_packed_blocks(a_packed, mc, b_packed, kc, nc, alpha, beta_here, phase, out);
      }
    }
  }
}

template <class Src>
void gemm_packed(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const Src* a, int64_t lda,
                 const Src* b, int64_t ldb, float beta, void* c, int64_t ldc, OutType out_type,
                 const void* bias = nullptr) {
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == 0.0f) return scale_out(m, n, beta, c, ldc, out_type);

  const OperandView<Src> op_a{a, lda, trans_a}, op_b{b, ldb, trans_b};
  // Below ~1 MFLOP the fork/join costs more than the second thread saves.
  const bool small = double(m) * double(n) * double(k) < 1.0e6;
  const int threads = small ? 1 : omp_get_max_threads();
  // Half C with k > KC keeps fp32 partials per thread: bound them by running kPartialRows at a time.
  const int64_t chunk_rows = out_type != OutType::f32 && k > kKC ? kPartialRows : 0;
  for_each_thread_rectangle(threads, m, n, kMR, kNR, chunk_rows, [&](const Rectangle& part) {
    gemm_rectangle(op_a, op_b, part, k, alpha, beta, c, ldc, out_type, bias);
  });
}

}  // namespace

void gemm_f32_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                     int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_packed(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, OutType::f32);
}

void gemm_half_via_f32_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                              const half* a, int64_t lda, const half* b, int64_t ldb, float beta, void* c,
                              int64_t ldc, bool c_is_half) {
  gemm_packed(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, c_is_half ? OutType::f16 : OutType::f32);
}

void gemm_half_via_f32_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                              const bfloat16* a, int64_t lda, const bfloat16* b, int64_t ldb, float beta, void* c,
                              int64_t ldc, bool c_is_half) {
  gemm_packed(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
              c_is_half ? OutType::bf16 : OutType::f32);
}

void gemm_bias_f32_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                          int64_t lda, const float* b, int64_t ldb, const float* bias, float* c, int64_t ldc) {
  gemm_packed(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, 0.0f, c, ldc, OutType::f32, bias);
}
void gemm_bias_half_via_f32_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                                   const half* a, int64_t lda, const half* b, int64_t ldb, const half* bias, half* c,
                                   int64_t ldc) {
  gemm_packed(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, 0.0f, c, ldc, OutType::f16, bias);
}
void gemm_bias_half_via_f32_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                                   const bfloat16* a, int64_t lda, const bfloat16* b, int64_t ldb,
                                   const bfloat16* bias, bfloat16* c, int64_t ldc) {
  gemm_packed(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, 0.0f, c, ldc, OutType::bf16, bias);
}

}  // namespace hg::kernels::cpu::detail
