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
#include "kernels/cpu/gemm_avx512.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <new>

namespace hg::kernels::cpu::detail {
namespace {

// The blocking explained in the file comment.
constexpr int64_t kMR = 14;        // rows of a micro-tile (accumulator registers / 2)
constexpr int64_t kNR = 32;        // columns of a micro-tile: two zmm of 16 floats
constexpr int64_t kKC = 512;       // depth of one packed slice
constexpr int64_t kMC = kMR * 16;  // rows of a packed A block (L2)
constexpr int64_t kNC = 2048;      // columns of a packed B block (L3)

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// op(X)[row][col] for a row-major X with row stride ld, transposed or not.
struct OperandView {
  const float* data;
  int64_t ld;
  bool transposed;
};

// A grow-only, page-aligned float buffer. One per thread (thread_local), so its pages are touched
// once and reused by every later GEMM on that thread.
class PackBuffer {
 public:
  float* get(int64_t floats) {
    if (floats > capacity_) {
      data_.reset();
      capacity_ = 0;
      const size_t bytes = size_t(round_up(floats * int64_t(sizeof(float)), 4096));
      float* memory = static_cast<float*>(std::aligned_alloc(4096, bytes));
      if (!memory) throw std::bad_alloc();
      data_.reset(memory);
      capacity_ = int64_t(bytes / sizeof(float));
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float[], Free> data_;
  int64_t capacity_ = 0;
};

__mmask16 first_lanes(int64_t count) {
  return count >= 16 ? __mmask16(0xffff) : __mmask16((1u << std::max<int64_t>(count, 0)) - 1u);
}

// ---- packing -----------------------------------------------------------------------------------

// GCC 12 warns that the shuffle intrinsics below read an uninitialised variable: their headers
// pass _mm512_undefined_ps() as the unused merge source (GCC bug 105593, fixed in GCC 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// In-register transpose of a 16 x 16 block: on entry v[r] is row r, on exit v[c] is column c.
// Three rounds of shuffles: interleave pairs of rows, gather 4-row groups within 128-bit lanes,
// then move whole 128-bit lanes across registers.
void transpose_16x16(__m512 v[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(v[i], v[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(v[i], v[i + 1]);
  }
  // u[4g + q], 128-bit lane L: rows 4g..4g+3 of column 4L + q.
  __m512 u[16];
  for (int g = 0; g < 16; g += 4) {
    u[g + 0] = _mm512_shuffle_ps(t[g], t[g + 2], 0x44);
    u[g + 1] = _mm512_shuffle_ps(t[g], t[g + 2], 0xee);
    u[g + 2] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0x44);
    u[g + 3] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0xee);
  }
  for (int q = 0; q < 4; ++q) {
    const __m512 even_top = _mm512_shuffle_f32x4(u[q], u[4 + q], 0x88);          // columns q, 8+q; rows 0..7
    const __m512 odd_top = _mm512_shuffle_f32x4(u[q], u[4 + q], 0xdd);           // columns 4+q, 12+q
    const __m512 even_bottom = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0x88);  // rows 8..15
    const __m512 odd_bottom = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0xdd);
    v[q] = _mm512_shuffle_f32x4(even_top, even_bottom, 0x88);
    v[8 + q] = _mm512_shuffle_f32x4(even_top, even_bottom, 0xdd);
    v[4 + q] = _mm512_shuffle_f32x4(odd_top, odd_bottom, 0x88);
    v[12 + q] = _mm512_shuffle_f32x4(odd_top, odd_bottom, 0xdd);
  }
}

// Copies a `rows` x `cols` block (rows, cols <= 16) of a row-major matrix transposed: column c of
// the source becomes dst[c * dst_ld : + dst_width], where lanes >= rows are written as zeros.
void transpose_block_to(const float* src, int64_t ld, int64_t rows, int64_t cols, float* dst, int64_t dst_ld,
                        int64_t dst_width) {
  __m512 v[16];
  const __mmask16 load = first_lanes(cols), store = first_lanes(dst_width);
  for (int r = 0; r < 16; ++r) v[r] = r < rows ? _mm512_maskz_loadu_ps(load, src + r * ld) : _mm512_setzero_ps();
  transpose_16x16(v);
  for (int c = 0; c < cols; ++c) _mm512_mask_storeu_ps(dst + c * dst_ld, store, v[c]);
}

#pragma GCC diagnostic pop

// One MR-row panel of op(A)[i0 : i0 + rows, p0 : p0 + kc], laid out [kc][kMR], rows >= `rows`
// zero-filled so the micro-kernel always computes a full tile.
void pack_a_panel(const OperandView& a, int64_t i0, int64_t rows, int64_t p0, int64_t kc, float* dst) {
  if (a.transposed) {
    // op(A)[i][p] = A[p][i]: for each p the panel's row is contiguous in A.
    const __mmask16 load = first_lanes(rows), store = first_lanes(kMR);
    for (int64_t p = 0; p < kc; ++p) {
      const __m512 v = _mm512_maskz_loadu_ps(load, a.data + (p0 + p) * a.ld + i0);
      _mm512_mask_storeu_ps(dst + p * kMR, store, v);
    }
    return;
  }
  // op(A) = A: the panel is a transpose of `rows` stored rows, done 16 values of p at a time.
  const float* src = a.data + i0 * a.ld + p0;
  for (int64_t p = 0; p < kc; p += 16)
    transpose_block_to(src + p, a.ld, rows, std::min<int64_t>(16, kc - p), dst + p * kMR, kMR, kMR);
}

// One NR-column panel of op(B)[p0 : p0 + kc, j0 : j0 + cols], laid out [kc][kNR], zero-filled.
void pack_b_panel(const OperandView& b, int64_t p0, int64_t kc, int64_t j0, int64_t cols, float* dst) {
  if (!b.transposed) {
    const __mmask16 lo = first_lanes(cols), hi = first_lanes(cols - 16);
    for (int64_t p = 0; p < kc; ++p) {
      const float* src = b.data + (p0 + p) * b.ld + j0;
      _mm512_store_ps(dst + p * kNR, _mm512_maskz_loadu_ps(lo, src));
      _mm512_store_ps(dst + p * kNR + 16, _mm512_maskz_loadu_ps(hi, src + 16));
    }
    return;
  }
  // op(B)[p][j] = B[j][p]: the panel is a transpose of `cols` stored rows, in two 16-column halves.
  for (int64_t half = 0; half < kNR; half += 16) {
    const float* src = b.data + (j0 + half) * b.ld + p0;
    const int64_t half_cols = std::clamp<int64_t>(cols - half, 0, 16);
    for (int64_t p = 0; p < kc; p += 16)
      transpose_block_to(src + p, b.ld, half_cols, std::min<int64_t>(16, kc - p), dst + p * kNR + half, kNR, 16);
  }
}

// ---- micro-kernel ------------------------------------------------------------------------------

// Where a micro-tile goes: `rows` x (lanes in mask_lo, mask_hi) of C starting at c.
struct TileTarget {
  float* c;
  int64_t ldc;
  int64_t rows;
  __mmask16 mask_lo, mask_hi;
};

void prefetch_tile(const TileTarget& t) {
  for (int64_t i = 0; i < t.rows; ++i) {
    const char* row = reinterpret_cast<const char*>(t.c + i * t.ldc);
    __builtin_prefetch(row, 1);
    __builtin_prefetch(row + 64, 1);
    __builtin_prefetch(row + 127, 1);
  }
}

// C_tile = alpha * A_panel B_panel + beta * C_tile over one kc slice; C is not read when beta == 0.
void micro_kernel(int64_t kc, const float* __restrict a, const float* __restrict b, float alpha, float beta,
                  const TileTarget& t) {
  // C is read and written only after the kc loop; asking for it now (for writing) hides its cache
  // misses behind the FMAs.
  prefetch_tile(t);
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
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 14
  for (int i = 0; i < kMR; ++i) {
    if (i >= t.rows) break;
    float* row = t.c + i * t.ldc;
    __m512 r_lo = _mm512_mul_ps(va, lo[i]), r_hi = _mm512_mul_ps(va, hi[i]);
    if (beta != 0.0f) {
      r_lo = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(t.mask_lo, row), r_lo);
      r_hi = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(t.mask_hi, row + 16), r_hi);
    }
    _mm512_mask_storeu_ps(row, t.mask_lo, r_lo);
    _mm512_mask_storeu_ps(row + 16, t.mask_hi, r_hi);
  }
}

// ---- blocking and threads ----------------------------------------------------------------------

// C = beta * C (k == 0 or alpha == 0), without reading C when beta == 0.
void scale_c(int64_t m, int64_t n, float beta, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    for (int64_t j = 0; j < n; ++j) row[j] = beta == 0.0f ? 0.0f : beta * row[j];
  }
}

// The rectangle of C one thread computes: whole MR-row tiles by whole NR-column panels. The
// threads form a tm x tn grid, tm * tn = threads, chosen so the busiest thread has the fewest
// micro-tiles; each thread then runs the serial blocked GEMM on its rectangle with its own pack
// buffers, so threads never wait for each other until the join.
struct Rectangle {
  int64_t row_begin, row_end;
  int64_t col_begin, col_end;
};

Rectangle rectangle_of(int thread, int threads, int64_t m, int64_t n) {
  const int64_t m_tiles = (m + kMR - 1) / kMR, n_panels = (n + kNR - 1) / kNR;
  int best_tm = threads;
  int64_t best_cost = INT64_MAX;
  for (int tm = threads; tm >= 1; --tm) {
    if (threads % tm) continue;
    const int tn = threads / tm;
    const int64_t cost = ((m_tiles + tm - 1) / tm) * ((n_panels + tn - 1) / tn);
    if (cost < best_cost) best_cost = cost, best_tm = tm;
  }
  const int tm = best_tm, tn = threads / best_tm;
  const int ti = thread / tn, tj = thread % tn;
  return {std::min(m, m_tiles * ti / tm * kMR), std::min(m, m_tiles * (ti + 1) / tm * kMR),
          std::min(n, n_panels * tj / tn * kNR), std::min(n, n_panels * (tj + 1) / tn * kNR)};
}

PackBuffer& thread_a_buffer() {
  thread_local PackBuffer buffer;
  return buffer;
}
PackBuffer& thread_b_buffer() {
  thread_local PackBuffer buffer;
  return buffer;
}

// Runs the micro-kernel over every tile of a packed (mc x kc) A block times a packed (kc x nc)
// B block; c points at the block's top-left element of C.
void multiply_packed_blocks(const float* a_packed, int64_t mc, const float* b_packed, int64_t kc, int64_t nc,
                            float alpha, float beta, float* c, int64_t ldc) {
  for (int64_t jr = 0; jr < nc; jr += kNR) {
    const int64_t cols = std::min(kNR, nc - jr);
    const float* b_panel = b_packed + jr * kc;
    for (int64_t ir = 0; ir < mc; ir += kMR) {
      const TileTarget target{c + ir * ldc + jr, ldc, std::min(kMR, mc - ir), first_lanes(cols),
                              first_lanes(cols - 16)};
      micro_kernel(kc, a_packed + ir * kc, b_panel, alpha, beta, target);
    }
  }
}

// The serial GotoBLAS loop nest over one rectangle of C: NC columns at a time, then KC-deep slices
// (pack B), then MC rows (pack A), then the micro-tiles.
void gemm_rectangle(const OperandView& a, const OperandView& b, const Rectangle& r, int64_t k, float alpha, float beta,
                    float* c, int64_t ldc) {
  float* a_packed = thread_a_buffer().get(kMC * kKC);
  float* b_packed = thread_b_buffer().get(kKC * kNC);
  for (int64_t jc = r.col_begin; jc < r.col_end; jc += kNC) {
    const int64_t nc = std::min(kNC, r.col_end - jc);
    for (int64_t pc = 0; pc < k; pc += kKC) {
      const int64_t kc = std::min(kKC, k - pc);
      for (int64_t jr = 0; jr < nc; jr += kNR)
        pack_b_panel(b, pc, kc, jc + jr, std::min(kNR, nc - jr), b_packed + jr * kc);
      // Later slices add to what the first one wrote.
      const float beta_here = pc == 0 ? beta : 1.0f;
      for (int64_t ic = r.row_begin; ic < r.row_end; ic += kMC) {
        const int64_t mc = std::min(kMC, r.row_end - ic);
        for (int64_t ir = 0; ir < mc; ir += kMR)
          pack_a_panel(a, ic + ir, std::min(kMR, mc - ir), pc, kc, a_packed + ir * kc);
        multiply_packed_blocks(a_packed, mc, b_packed, kc, nc, alpha, beta_here, c + ic * ldc + jc, ldc);
      }
    }
  }
}

}  // namespace

void gemm_f32_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                     int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == 0.0f) return scale_c(m, n, beta, c, ldc);

  const OperandView op_a{a, lda, trans_a}, op_b{b, ldb, trans_b};
  // Below ~1 MFLOP the fork/join costs more than the second thread saves.
  const bool small = double(m) * double(n) * double(k) < 1.0e6;
  const int threads = small ? 1 : omp_get_max_threads();
#pragma omp parallel num_threads(threads)
  {
    const Rectangle mine = rectangle_of(omp_get_thread_num(), omp_get_num_threads(), m, n);
    if (mine.row_begin < mine.row_end && mine.col_begin < mine.col_end)
      gemm_rectangle(op_a, op_b, mine, k, alpha, beta, c, ldc);
  }
}

}  // namespace hg::kernels::cpu::detail
