// f32 GEMM for AVX-512 CPUs in the GotoBLAS/BLIS style: C = alpha * op(A) op(B) + beta * C, all
// row-major with row strides. The micro-tile and the cache blocking are chosen per CPU at run time
// (f32_blocking_for, gemm_avx512_blocking.h), from the data caches cpuid reports:
//   - L1d < 48 KiB (AMD Zen 4: L1d 32 KiB, L2 1 MiB; and any CPU whose caches are unknown): the
//     14 x 32 tile with KC = 512, MC = 224, NC = 2048, A packed panel by panel: exactly the kernel
//     tuned on a 2-core Zen 4 VM (one 512-bit FMA per cycle per core), where it measured 87-93% of
//     the FMA peak at 1024..4096 squares and the GPT-2 projection shapes.
//   - L1d >= 48 KiB (Intel since Ice Lake, e.g. Sapphire Rapids: two 512-bit FMA ports, L1d 48 KiB,
//     L2 2 MiB): the 6 x 64 tile (KC = 512, MC = 240, NC = 2048) unless k is shallow enough that the
//     14 x 32 tile's whole B panel (k x 128 bytes) fits in 3/4 of L1d (k <= 288 there), where the
//     14 x 32 tile is kept; on both, a transposed A is packed a row of A at a time.
// Measured on a 2-vCPU Sapphire Rapids VM, one thread, thread CPU time, interleaved against the
// Zen 4 rule in one process, median of paired rounds (docs/cpu_gemm.md has the table).
//
// Micro-kernels. 14 x 32: a tile of C in 28 zmm accumulators (14 rows x 2 vectors of 16 floats);
// each step p of the k loop loads 2 vectors of packed B (row p of the panel), broadcasts 14 scalars
// of packed A (column p) and issues 28 independent FMAs: 28 chains hide the 4-cycle latency, 28 + 2
// + 1 registers fit in 32, and 16 loads per 28 FMAs keep one FMA pipe, not the load ports, the
// limit. With two FMA pipes the same 28 FMAs take 14 cycles and the 16 loads crowd them; the 6 x 64
// tile (24 accumulators: 6 rows x 4 vectors) needs 10 loads per 24 FMAs, and unrolls the k loop
// twice. In a loop over L1/L2-resident panels, best of 20 on this VM: 14 x 32 at 0.70-0.88 of the FMA
// peak, 6 x 64 at 0.94-0.98. Its cost is a B panel twice as wide (KC x 256 bytes): for a shallow k
// the 14 x 32 B panel stays in L1 and the 6 x 64 one streams from L2, and the 14 x 32 tile is
// faster there (6-20% at k = 256), hence the depth rule. A kernel never sees strides or
// transposes, only packed panels; it always computes a full tile (packing zero-pads) and writes
// back rows < `rows` with masked stores for the column edge, 32 columns per store_tile call, as
// C = alpha * acc + beta * C (C not read when beta == 0). Before the k loop it prefetches its C
// tile for writing, so the C misses overlap the FMAs (worth +10 points of peak on Zen 4).
//
// Blocking, outermost first (GotoBLAS loop order jc -> pc -> ic -> jr -> ir):
//   NC = 2048 columns: the packed B block B~ (KC x NC = 4 MiB) lives in L3 and is reread once per
//     MC block; that is < 1 GB/s of traffic, so NC barely matters (1024..4096 measured equal on
//     Zen 4; 512..2048 within noise on Sapphire Rapids).
//   KC = 512 deep: each KC slice reads and writes the C tile once more, so KC is as large as the
//     caches allow. On Zen 4 the 14 x 32 B micro-panel (KC x NR = 64 KiB) does not fit L1, but the
//     kernel needs only ~6.6 B/cycle (128 B of B + 56 B of A per 28 FMA cycles) and L2 supplies 32
//     B/cycle, so both operands stream from L2 at full speed (measured: KC = 256, 384, 512 within
//     noise; 512 best). On Sapphire Rapids KC = 256 and 1024 measured within +-5% of 512, mixed.
//   MC = 224 rows (16 x MR) / 240 (40 x 6): the packed A block (MC x KC, 448-480 KiB) stays in L2
//     while the jr loop sweeps all B panels past it (MC = 12..36 x MR measured within noise on
//     Zen 4; 240..480 rows within noise on Sapphire Rapids).
//
// Packing copies op(A) into MR-row panels laid out [k][MR] and op(B) into NR-column panels laid
// out [k][NR], so every micro-kernel read is unit stride. The transposing cases (A not transposed,
// B transposed) go through a 16 x 16 in-register transpose rather than scalar copies. For the
// 6-row tile a non-transposed A is transposed 16 rows at a time across panels (6 rows at a time
// would waste 10 of 16 lanes of every shuffle), and a transposed A (the weight-gradient dW = dY^T
// X) is packed a row of A at a time for the whole block: panel by panel it was a walk of kc rows,
// kc apart, once per panel, which the prefetchers do not follow (row packing alone, same tile:
// +1..12% on the GPT weight gradients on Sapphire Rapids). Packing is a few percent of the time even for the skinny
// GPT shapes, except for m <= 256, where B is packed for few rows (down to ~15% at m = 240).
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

#include <cpuid.h>

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/gemm_avx512_blocking.h"
#include "kernels/cpu/gemm_avx512_tiles.h"

// GCC 12 warns that AVX-512 intrinsics read an uninitialised variable wherever the transposes and
// masked loads are inlined: their headers pass undefined vectors as unused merge sources (GCC bug
// 105593, fixed in GCC 13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace hg::kernels::cpu::detail {
namespace {

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
template <int kMR, class Src>
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

// All panels of a packed A block, op(A) = A (not transposed), for tiles of kMR < 16 rows: a 16 x 16
// transpose covers 16 rows of the block at once, whichever panels they fall in, and each
// column's 16 lanes are stored to those panels with one masked store per panel (a panel that
// starts inside the group is written from an address before it; the mask keeps those lanes
// out). Transposing kMR rows at a time would waste 16 - kMR lanes of every shuffle. Rows past
// `mc` up to the last panel's end are zeros.
template <int kMR, class Src>
void pack_a_block_by_16_rows(const OperandView<Src>& a, int64_t i0, int64_t mc, int64_t p0, int64_t kc, float* dst) {
  static_assert(kMR < 16);
  const int64_t padded = round_up(mc, kMR);
  for (int64_t g = 0; g < padded; g += 16) {
    const int64_t rows = std::clamp<int64_t>(mc - g, 0, 16), lanes = std::min<int64_t>(16, padded - g);
    const Src* src = a.data + (i0 + g) * a.ld + p0;
    for (int64_t p = 0; p < kc; p += 16) {
      const int64_t cols = std::min<int64_t>(16, kc - p);
      const __mmask16 load = first_lanes(cols);
      __m512 v[16];
      for (int r = 0; r < 16; ++r) v[r] = r < rows ? load_widened(src + r * a.ld + p, load) : _mm512_setzero_ps();
      transpose_16x16(v);
      for (int64_t first = g; first < g + lanes;) {
        const int64_t panel = first / kMR, end = std::min((panel + 1) * kMR, g + lanes);
        const __mmask16 mask = __mmask16(first_lanes(end - g) & ~first_lanes(first - g));
        // Lane l (row g + l) belongs at panel's [p + c][g + l - panel * kMR].
        const uintptr_t base = reinterpret_cast<uintptr_t>(dst + panel * kMR * kc + p * kMR) +
                               uintptr_t((g - panel * kMR) * int64_t(sizeof(float)));
        for (int c = 0; c < cols; ++c)
          _mm512_mask_storeu_ps(reinterpret_cast<float*>(base + uintptr_t(c * kMR * int64_t(sizeof(float)))), mask,
                                v[c]);
        first = end;
      }
    }
  }
}

// All panels of a packed A block, op(A) = A^T (A stored [k][m]): row p0 + p of A holds the mc
// values of step p for every panel, contiguous, so the block is packed a row of A at a time (each
// panel's kMR values of it one masked load and store). Going panel by panel instead reads kMR
// values from each of kc rows kc apart: a strided walk that touches every cache line of the block
// once per panel and defeats the hardware prefetchers. Rows past `mc` up to the last panel's end
// are zeros.
template <int kMR, class Src>
void pack_a_block_from_rows(const OperandView<Src>& a, int64_t i0, int64_t mc, int64_t p0, int64_t kc, float* dst) {
  const __mmask16 store = first_lanes(kMR);
  for (int64_t p = 0; p < kc; ++p) {
    const Src* src = a.data + (p0 + p) * a.ld + i0;
    for (int64_t ir = 0; ir < mc; ir += kMR)
      _mm512_mask_storeu_ps(dst + ir * kc + p * kMR, store, load_widened(src + ir, first_lanes(mc - ir)));
  }
}

// One NR-column panel (NR = 16 kNV) of op(B)[p0 : p0 + kc, j0 : j0 + cols], laid out [kc][NR],
// zero-filled.
template <int kNV, class Src>
void pack_b_panel(const OperandView<Src>& b, int64_t p0, int64_t kc, int64_t j0, int64_t cols, float* dst) {
  constexpr int64_t kNR = 16 * kNV;
  if (!b.transposed) {
    __mmask16 masks[kNV];
    for (int v = 0; v < kNV; ++v) masks[v] = first_lanes(cols - 16 * v);
    for (int64_t p = 0; p < kc; ++p) {
      const Src* src = b.data + (p0 + p) * b.ld + j0;
#pragma GCC unroll 4
      for (int v = 0; v < kNV; ++v) _mm512_store_ps(dst + p * kNR + 16 * v, load_widened(src + 16 * v, masks[v]));
    }
    return;
  }
  // op(B)[p][j] = B[j][p]: the panel is a transpose of `cols` stored rows, 16 columns at a time.
  for (int64_t part = 0; part < kNR; part += 16) {
    const Src* src = b.data + (j0 + part) * b.ld + p0;
    const int64_t part_cols = std::clamp<int64_t>(cols - part, 0, 16);
    for (int64_t p = 0; p < kc; p += 16)
      transpose_block_to(src + p, b.ld, part_cols, std::min<int64_t>(16, kc - p), dst + p * kNR + part, kNR, 16);
  }
}

// ---- micro-kernels -----------------------------------------------------------------------------

// The kc-slice product of one packed A panel (kMR rows) and one packed B panel (16 kNV columns),
// stored by store_tile 32 columns at a time through t[0 .. kNV/2) (C = alpha * acc + beta * C for
// f32 C; fp32 partials or the rounded final value for half C). kUnroll: steps of k per loop trip (1 or 2).
template <int kMR, int kNV, int kUnroll>
void micro_kernel(int64_t kc, const float* __restrict a, const float* __restrict b, float alpha, float beta,
                  const TileOut (&t)[kNV / 2], SlicePhase phase) {
  constexpr int64_t kNR = 16 * kNV;
  // C is read and written only after the kc loop; asking for it now (for writing) hides its cache
  // misses behind the FMAs.
  for (int h = 0; h < kNV / 2; ++h) prefetch_tile(t[h], phase);
  __m512 acc[kNV][kMR];
#pragma GCC unroll 16
  for (int i = 0; i < kMR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) acc[v][i] = _mm512_setzero_ps();
  const auto step = [&]() __attribute__((always_inline)) {
    __m512 b_p[kNV];
#pragma GCC unroll 4
    for (int v = 0; v < kNV; ++v) b_p[v] = _mm512_load_ps(b + 16 * v);
#pragma GCC unroll 16
    for (int i = 0; i < kMR; ++i) {
      const __m512 a_i = _mm512_set1_ps(a[i]);
#pragma GCC unroll 4
      for (int v = 0; v < kNV; ++v) acc[v][i] = _mm512_fmadd_ps(a_i, b_p[v], acc[v][i]);
    }
    a += kMR;
    b += kNR;
  };
  int64_t p = 0;
  if constexpr (kUnroll == 2)
    for (; p + 2 <= kc; p += 2) step(), step();
  for (; p < kc; ++p) step();
  for (int h = 0; h < kNV / 2; ++h) store_tile<kMR>(acc[2 * h], acc[2 * h + 1], t[h], alpha, beta, phase);
}

// The two tiles of GemmTile: rows, 16-column vectors, k-loop unroll, A packing.
// kGroupPackA: pack a non-transposed A 16 rows at a time (pack_a_block_by_16_rows); kRowPackA:
// pack a transposed A a row of A at a time (pack_a_block_from_rows); otherwise a panel at a time
// (pack_a_panel).
template <int kRows, int kVectors, int kUnrollK, bool kGroupPackAOn, bool kRowPackAOn>
struct TileShape {
  static constexpr int kMR = kRows, kNV = kVectors, kUnroll = kUnrollK;
  static constexpr bool kGroupPackA = kGroupPackAOn, kRowPackA = kRowPackAOn;
  static constexpr int64_t kNR = 16 * kVectors;
};
using Tile14x32 = TileShape<14, 2, 1, false, false>;  // Zen 4's tuned kernel, unchanged
using Tile14x32RowPackA = TileShape<14, 2, 1, false, true>;
using Tile6x64 = TileShape<6, 4, 2, true, true>;

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
template <class Tile>
void multiply_packed_blocks(const float* a_packed, int64_t mc, const float* b_packed, int64_t kc, int64_t nc,
                            float alpha, float beta, SlicePhase phase, const OutBlock& out) {
  constexpr int64_t kMR = Tile::kMR, kNR = Tile::kNR;
  constexpr int kHalves = Tile::kNV / 2;
  const int64_t esize = out_bytes(out.type);
  for (int64_t jr = 0; jr < nc; jr += kNR) {
    const int64_t cols = std::min(kNR, nc - jr);
    const float* b_panel = b_packed + jr * kc;
    for (int64_t ir = 0; ir < mc; ir += kMR) {
      TileOut targets[kHalves];
      for (int h = 0; h < kHalves; ++h) {
        const int64_t col = jr + 32 * h;
        targets[h] = TileOut{static_cast<char*>(out.c) + (ir * out.ldc + col) * esize,
                             out.ldc,
                             out.type,
                             out.partial ? out.partial + ir * out.ldp + col : nullptr,
                             out.ldp,
                             std::min(kMR, mc - ir),
                             first_lanes(cols - 32 * h),
                             first_lanes(cols - 32 * h - 16),
                             out.bias ? static_cast<const char*>(out.bias) + col * esize : nullptr};
      }
      micro_kernel<Tile::kMR, Tile::kNV, Tile::kUnroll>(kc, a_packed + ir * kc, b_panel, alpha, beta, targets, phase);
    }
  }
}

// The serial GotoBLAS loop nest over one rectangle of C: NC columns at a time, then KC-deep slices
// (pack B), then MC rows (pack A), then the micro-tiles.
template <class Tile, class Src>
void gemm_rectangle(const GemmBlocking& blk, const OperandView<Src>& a, const OperandView<Src>& b, const Rectangle& r,
                    int64_t k, float alpha, float beta, void* c, int64_t ldc, OutType out_type, const void* bias) {
  constexpr int64_t kMR = Tile::kMR, kNR = Tile::kNR;
  const int64_t kKC = blk.kc, kMC = blk.mc, kNC = round_up(blk.nc, kNR);
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
        pack_b_panel<Tile::kNV>(b, pc, kc, jc + jr, std::min(kNR, nc - jr), b_packed + jr * kc);
      // f32 C: later slices add to what the first one wrote.
      const float beta_here = out_type == OutType::f32 && pc > 0 ? 1.0f : beta;
      const SlicePhase phase = slice_phase(pc, kc, k);
      for (int64_t ic = r.row_begin; ic < r.row_end; ic += kMC) {
        const int64_t mc = std::min(kMC, r.row_end - ic);
        if (Tile::kGroupPackA && !a.transposed)
          pack_a_block_by_16_rows<Tile::kMR>(a, ic, mc, pc, kc, a_packed);
        else if (Tile::kRowPackA && a.transposed)
          pack_a_block_from_rows<Tile::kMR>(a, ic, mc, pc, kc, a_packed);
        else
          for (int64_t ir = 0; ir < mc; ir += kMR)
            pack_a_panel<Tile::kMR>(a, ic + ir, std::min(kMR, mc - ir), pc, kc, a_packed + ir * kc);
        const OutBlock out{static_cast<char*>(c) + (ic * ldc + jc) * esize,
                           ldc,
                           out_type,
                           partial ? partial + (ic - r.row_begin) * ldp : nullptr,
                           ldp,
                           bias ? static_cast<const char*>(bias) + jc * esize : nullptr};
        multiply_packed_blocks<Tile>(a_packed, mc, b_packed, kc, nc, alpha, beta_here, phase, out);
      }
    }
  }
}

template <class Tile, class Src>
void gemm_packed_tile(const GemmBlocking& blk, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      float alpha, const Src* a, int64_t lda, const Src* b, int64_t ldb, float beta, void* c,
                      int64_t ldc, OutType out_type, const void* bias) {
  const OperandView<Src> op_a{a, lda, trans_a}, op_b{b, ldb, trans_b};
  // Below ~1 MFLOP the fork/join costs more than the second thread saves.
  const bool small = double(m) * double(n) * double(k) < 1.0e6;
  const int threads = small ? 1 : omp_get_max_threads();
  // Half C with k > KC keeps fp32 partials per thread: bound them (rows x NC) by running 2 MC rows
  // at a time.
  const int64_t chunk_rows = out_type != OutType::f32 && k > blk.kc ? 2 * blk.mc : 0;
  for_each_thread_rectangle(threads, m, n, Tile::kMR, Tile::kNR, chunk_rows, [&](const Rectangle& part) {
    gemm_rectangle<Tile>(blk, op_a, op_b, part, k, alpha, beta, c, ldc, out_type, bias);
  });
}

template <class Src>
void gemm_packed(const GemmBlocking& blk, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const Src* a, int64_t lda, const Src* b, int64_t ldb, float beta, void* c, int64_t ldc,
                 OutType out_type, const void* bias = nullptr) {
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == 0.0f) return scale_out(m, n, beta, c, ldc, out_type);
  if (blk.tile == GemmTile::mr14_nr32 && blk.pack_a_by_rows)
    gemm_packed_tile<Tile14x32RowPackA>(blk, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, out_type,
                                        bias);
  else if (blk.tile == GemmTile::mr6_nr64)
    gemm_packed_tile<Tile6x64>(blk, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, out_type, bias);
  else
    gemm_packed_tile<Tile14x32>(blk, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, out_type, bias);
}

// ---- the blocking for this CPU -------------------------------------------------------------------

// Size in bytes of the data or unified cache of `level` from a cpuid cache-parameters leaf (4 on
// Intel, 0x8000001D on AMD: same layout), 0 when not reported.
int64_t cpuid_cache_bytes(unsigned leaf, unsigned level) {
  for (unsigned sub = 0; sub < 16; ++sub) {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(leaf, sub, &eax, &ebx, &ecx, &edx)) return 0;
    const unsigned type = eax & 0x1f;  // 0: no more caches, 1: data, 2: instruction, 3: unified
    if (type == 0) return 0;
    if ((type == 1 || type == 3) && ((eax >> 5) & 0x7) == level) {
      const int64_t ways = ((ebx >> 22) & 0x3ff) + 1, partitions = ((ebx >> 12) & 0x3ff) + 1,
                    line = (ebx & 0xfff) + 1, sets = int64_t(ecx) + 1;
      return ways * partitions * line * sets;
    }
  }
  return 0;
}

}  // namespace

const char* gemm_tile_name(GemmTile tile) { return tile == GemmTile::mr6_nr64 ? "6x64" : "14x32"; }

CpuCaches detect_cpu_caches() {
  static const CpuCaches caches = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    CpuCaches found;
    if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return found;
    const bool amd = ebx == 0x68747541u;  // "Auth" of AuthenticAMD
    unsigned leaf = 4;
    if (amd) {
      unsigned max_ext = __get_cpuid_max(0x80000000u, nullptr);
      if (max_ext < 0x8000001du) return found;
      leaf = 0x8000001du;
    } else if (eax < 4) {
      return found;
    }
    found.l1d = cpuid_cache_bytes(leaf, 1);
    found.l2 = cpuid_cache_bytes(leaf, 2);
    return found;
  }();
  return caches;
}

GemmBlocking f32_blocking_of_tile(GemmTile tile, const CpuCaches& caches) {
  if (tile == GemmTile::mr6_nr64) return {GemmTile::mr6_nr64, 512, 6 * 40, 2048, true};
  return {GemmTile::mr14_nr32, 512, 14 * 16, 2048, caches.l1d >= 48 * 1024};
}

GemmBlocking f32_blocking_for(const CpuCaches& caches, int64_t k) {
  // Zen 4 (L1d 32 KiB, L2 1 MiB) and anything unknown: the 14 x 32 tile and its tuned blocking.
  if (caches.l1d < 48 * 1024) return f32_blocking_of_tile(GemmTile::mr14_nr32, caches);
  // A 48 KiB L1d (Intel since Ice Lake, two FMA pipes): a shallow k whose 14 x 32 B panel (k x 128
  // bytes) fits in 3/4 of L1d keeps the 14 x 32 tile, whose B panel then stays in L1; deeper k
  // takes the 6 x 64 tile (its B panel streams from L2 either way, and it needs 10 loads per 24
  // FMAs where 14 x 32 needs 16 per 28). A transposed A is packed a row at a time on both.
  if (k <= caches.l1d * 3 / 4 / (32 * int64_t(sizeof(float)))) return f32_blocking_of_tile(GemmTile::mr14_nr32, caches);
  return f32_blocking_of_tile(GemmTile::mr6_nr64, caches);
}

// f32_blocking(m, n, k) is gemm_calibration.cpp's: this file is compiled for AVX-512, and the
// standard-library code the plan needs must not be instantiated here (the linker could keep this
// copy of an inline function for the whole program, and it would fault on a CPU without AVX-512).

void gemm_f32_avx512_blocked(const GemmBlocking& blocking, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                             float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                             int64_t ldc) {
  gemm_packed(blocking, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, OutType::f32);
}
void gemm_half_via_f32_avx512_blocked(const GemmBlocking& blocking, bool trans_a, bool trans_b, int64_t m, int64_t n,
                                      int64_t k, float alpha, const half* a, int64_t lda, const half* b, int64_t ldb,
                                      float beta, void* c, int64_t ldc, bool c_is_half) {
  gemm_packed(blocking, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
              c_is_half ? OutType::f16 : OutType::f32);
}
void gemm_half_via_f32_avx512_blocked(const GemmBlocking& blocking, bool trans_a, bool trans_b, int64_t m, int64_t n,
                                      int64_t k, float alpha, const bfloat16* a, int64_t lda, const bfloat16* b,
                                      int64_t ldb, float beta, void* c, int64_t ldc, bool c_is_half) {
  gemm_packed(blocking, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
              c_is_half ? OutType::bf16 : OutType::f32);
}

void gemm_f32_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                     int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_packed(f32_blocking(m, n, k), trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, OutType::f32);
}

void gemm_half_via_f32_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                              const half* a, int64_t lda, const half* b, int64_t ldb, float beta, void* c,
                              int64_t ldc, bool c_is_half) {
  gemm_half_via_f32_avx512_blocked(f32_blocking(m, n, k), trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c,
                                   ldc, c_is_half);
}

void gemm_half_via_f32_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                              const bfloat16* a, int64_t lda, const bfloat16* b, int64_t ldb, float beta, void* c,
                              int64_t ldc, bool c_is_half) {
  gemm_half_via_f32_avx512_blocked(f32_blocking(m, n, k), trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c,
                                   ldc, c_is_half);
}

void gemm_bias_f32_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                          int64_t lda, const float* b, int64_t ldb, const float* bias, float* c, int64_t ldc) {
  gemm_packed(f32_blocking(m, n, k), trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, 0.0f, c, ldc, OutType::f32,
              bias);
}
void gemm_bias_half_via_f32_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                                   const half* a, int64_t lda, const half* b, int64_t ldb, const half* bias, half* c,
                                   int64_t ldc) {
  gemm_packed(f32_blocking(m, n, k), trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, 0.0f, c, ldc, OutType::f16,
              bias);
}
void gemm_bias_half_via_f32_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                                   const bfloat16* a, int64_t lda, const bfloat16* b, int64_t ldb,
                                   const bfloat16* bias, bfloat16* c, int64_t ldc) {
  gemm_packed(f32_blocking(m, n, k), trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, 0.0f, c, ldc, OutType::bf16,
              bias);
}

}  // namespace hg::kernels::cpu::detail
