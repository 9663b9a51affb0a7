// bf16 and f16 GEMMs on Intel AMX tiles (tdpbf16ps): C = alpha * op(A) op(B) + beta * C with A, B
// bf16 (or f16, below), row strides, any transposes, C f32 or bf16 (f16).
//
// f16 (gemm_f16_amx): each f16 splits exactly into two bf16, hi = bf16_rne(x) and lo = x - hi (see
// "sources" below), and a b = hi hi + hi lo + lo hi (+ lo lo), every product exact in fp32: an f16
// GEMM is this bf16 GEMM with 3 (or 4) tile products per 32-deep step. The packers move raw 16-bit
// words as for bf16 and split at the store, writing [hi tiles][lo tiles] per step; KC and the B pass
// are halved so the packed bytes stay those of bf16. Dropping lo*lo costs <= 2^-16 sum |a b| (docs/
// cpu_gemm.md, "f16 on AMX"). A C block whose operands hold inf/NaN is recomputed by the fp32 path.
// What follows describes the bf16 kernel; the f16 one differs only as just said.
// Products are summed in fp32 over all of k and C is rounded
// once (bf16: to nearest even, bit-identical to hg::bfloat16, subnormals kept -- so not vcvtneps2bf16,
// which flushes them). Note: AMX reads bf16 subnormal inputs as zero (and sums with its own fp32
// rounding), so results match an fp32 reference to fp32 accuracy for normal inputs only.
//
// The machine (Sapphire Rapids class): 8 tile registers of up to 16 rows x 64 bytes; tdpbf16ps
// C[16x16 f32] += A[16 x 32 bf16] B[16 k-pairs x 16 x 2 bf16] is 16384 FLOPs, one every 16 cycles per
// core (measured peak 899 GFLOP/s on one core); L1d 48 KiB, L2 2 MiB per core.
//
// Micro-kernel (32 x 32 of C). C lives in 4 fp32 tiles (tmm0..3, a 2 x 2 grid of 16 x 16); each
// 32-deep step of k loads 2 A tiles (tmm4, tmm5: rows 0-15 and 16-31, 32 k each) and 2 B tiles
// (tmm6, tmm7: columns 0-15 and 16-31, in the VNNI layout [k/2][16][2]) and issues 4 independent
// tdpbf16ps, each tile load feeding two of them: 4 KiB of loads per 64 cycles, which L1 serves.
// All 8 tile registers are used; a larger C grid would leave no room for operands.
//
// Blocking (per thread, on its rectangle of C):
//   jc: NC = 512 columns. op(B)[:, jc : jc + NC] is packed once for all of k (K x NC bf16, 2 MiB
//       at K = 2048; only the current KC slice, 512 KiB, needs to be in L2), so B is packed once
//       per thread and column block, and A once per column block (n / NC times in all). Deeper k
//       (> kKPass = 4096) is packed one 4096-deep pass at a time over groups of 512 rows, so the
//       per-thread buffers stay bounded (see gemm_rectangle).
//   ic: MC = 128 rows. For each KC slice the A block (MC x KC = 128 KiB, L2) is packed, then
//   jr, ir: for each 32-column B micro-panel (KC x 32 = 32 KiB, stays in L1 over the ir loop) the
//       kernel sweeps the 4 A micro-panels, which stream from L2 at ~32 B/cycle.
//   KC = 512 deep (a multiple of 32). Between KC slices the C tiles go to a per-thread fp32 block
//       (MC x NC = 256 KiB, L2): the first slice starts from tilezero, later ones reload it (8 KiB
//       per 2,048 tdpbf16ps cycles). After the last slice the epilogue reads that block once:
//       alpha * acc + beta * C (C not read when beta == 0), stored as f32 or rounded to bf16 (RNE,
//       the integer formula of hg::bfloat16 in AVX-512) with masked stores at the edges.
//   Tuned by single-thread CPU time, best of 75 calls per shape, interleaving builds (the VM was
//   loaded, so only the best runs mean anything): KC 256..512 x MC 128..256 x NC 256..1024 all gave
//   600-850 GFLOP/s on the GPT shapes; NC = 256 was worst where n >= 1024 (A repacked 4-8 times).
//   Profile (perf, 2048^3): ~85% in the tile loop, ~8% packing A, ~6% packing B. Single-thread bests:
//   77% of peak at 2048^3, 84-98% on the GPT forward and dX shapes, 61-65% on dW = dY^T X, where
//   packing A^T is a quarter of the time (perf: its loads, each k row a far cache line, not shuffles).
// Packing zero-pads m and n to 32 and k to 32, so the kernel always runs full tiles:
//   A micro-panel: [kc/32 steps][2 tiles][16 rows][32 k]; plain A rows are copied 64 bytes at a time;
//     A^T is read as k rows, 32 columns (both tiles) per 512-bit load: pairs of rows are interleaved
//     into 32-bit (k, k+1) pairs (unpacklo/hi_epi16) and two 16 x 16 32-bit transposes turn them
//     into tile rows (half the loads and conversions of doing each tile alone; the dW shapes
//     measured the same within noise either way, and with software prefetch of the next rows).
//   B micro-panel: [kc/32 steps][2 tiles][16 k-pairs][16 columns][2]; plain B interleaves pairs of k
//     rows (a tile row is exactly that); B^T reads 32 k of a column as 16 pairs and transposes 16 x 16.
//
// Threads: C is cut into one rectangle of whole 32 x 32 tiles per OpenMP thread (a tm x tn grid
// chosen so the busiest thread has the fewest tiles), as in gemm_avx512.cpp; each thread packs its
// own panels into thread_local grow-only buffers (fresh pages are slow to touch on these VMs), so
// threads never wait for each other until the join. The tile configuration is per thread: each
// thread loads it before its first tile instruction and releases the tiles before it leaves.
//
// The CPU check: cpuid AMX-TILE and AMX-BF16 (and AVX-512 F/BW/VL/DQ for packing and the
// epilogue), the OS enabling the tile state in XCR0, then once per process the Linux request for
// the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); any failure (AMD CPUs,
// old kernels, non-Linux) makes it false, so the caller never executes a tile instruction.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <new>

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "kernels/cpu/gemm_avx512.h"
#include "kernels/error.h"

// GCC 12 warns that AVX-512 intrinsics read an uninitialised variable: their headers pass
// _mm512_undefined_*() as unused merge sources (GCC bug 105593, fixed in GCC 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace hg::kernels::cpu::detail {
namespace {

constexpr int64_t kTile = 32;        // rows and columns of C per micro-kernel; k per step
constexpr int64_t kKC = 512;         // depth of one packed A slice (multiple of kTile)
constexpr int64_t kMC = 4 * kTile;   // rows of a packed A block
constexpr int64_t kNC = 16 * kTile;  // columns of a packed B block
constexpr int64_t kTileElems = 512;  // bf16 elements (1 KiB) in one operand tile
constexpr int64_t kKPass = 8 * kKC;  // most k packed of B at once (4 MiB per thread at NC)
constexpr int64_t kRowGroup = 4 * kMC;  // rows whose fp32 sums are kept when k > kKPass (1 MiB)

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// op(X)[row][col] of a row-major bf16 X with row stride ld, transposed or not.
struct OperandView {
  const uint16_t* data;
  int64_t ld;
  bool transposed;
};

// A grow-only, page-aligned buffer of T, one per thread (thread_local): touched once, then reused.
template <class T>
class PackBuffer {
 public:
  T* get(int64_t count) {
    if (count > capacity_) {
      data_.reset();
      capacity_ = 0;
      const size_t bytes = size_t(round_up(count * int64_t(sizeof(T)), 4096));
      T* memory = static_cast<T*>(std::aligned_alloc(4096, bytes));
      if (!memory) throw std::bad_alloc();
      data_.reset(memory);
      capacity_ = int64_t(bytes / sizeof(T));
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T[], Free> data_;
  int64_t capacity_ = 0;
};

__mmask32 first_lanes32(int64_t count) {
  return count >= 32 ? __mmask32(0xffffffffu) : __mmask32((1u << std::max<int64_t>(count, 0)) - 1u);
}
__mmask16 first_lanes16(int64_t count) {
  return count >= 16 ? __mmask16(0xffff) : __mmask16((1u << std::max<int64_t>(count, 0)) - 1u);
}

// ---- sources: bf16 as it is, f16 split into two bf16 ----------------------------------------
// A source says how many bf16 pieces a value packs into. bf16: one, the bits as stored. f16: two,
// hi = bf16_rne(x) and lo = x - hi, both exact: x has 11 significant bits, hi keeps the top 8
// (rounded to nearest even, so |lo| <= 2^-9 * 2^(e+1) <= 2^-8 |x|), and lo, a multiple of x's ulp
// below hi's half ulp, has at most 3 significant bits; f16's smallest step 2^-24 is a normal bf16,
// so AMX's subnormal flush never touches a piece. Infinities and NaN have no such split (inf times
// the other side's lo = 0 would be NaN where the fp32 path gives inf), so the packers OR "saw a
// non-finite value" into `bad`, and a C block whose operands held one is recomputed by the fp32
// path (see gemm_rectangle).

struct Bf16Source {
  static constexpr int parts = 1;
};
struct F16Source {
  static constexpr int parts = 2;
};

// 16 fp32 lanes (widened finite f16) -> (hi, lo) as fp32 bit patterns whose low 16 bits are zero
// (exact bf16 values). Non-finite lanes give meaningless pieces: emit() flags them in `bad`, and
// their C blocks are recomputed by the fp32 path.
inline void split_f32(__m512 x, __m512i& hi, __m512i& lo) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  hi = _mm512_and_si512(_mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))),
                        _mm512_set1_epi32(int(0xffff0000u)));
  lo = _mm512_castps_si512(_mm512_sub_ps(x, _mm512_castsi512_ps(hi)));
}

// The upper 16 bits of the 32 lanes of (x0, x1), in order: 32 bf16 words.
inline __m512i upper_halves(__m512i x0, __m512i x1) {
  const __m512i odd = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27,
                                       25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  return _mm512_permutex2var_epi16(x0, odd, x1);
}

// Stores 32 packed words v: bf16 as they are; f16 split, hi at dst and lo at dst + 2 tiles (the
// same place in the step's lo half). The packers move raw 16-bit words (loads, pair interleaves,
// transposes are the same for both types) and split only here, once per value.
template <class Src>
inline void emit(uint16_t* dst, __m512i v, uint32_t& bad) {
  if constexpr (Src::parts == 1) {
    _mm512_store_si512(dst, v);
  } else {
    const __m512i exponent = _mm512_set1_epi16(0x7c00);  // all ones: inf or NaN
    bad |= uint32_t(_mm512_cmpeq_epi16_mask(_mm512_and_si512(v, exponent), exponent));
    __m512i hi0, lo0, hi1, lo1;
    split_f32(_mm512_cvtph_ps(_mm512_castsi512_si256(v)), hi0, lo0);
    split_f32(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(v, 1)), hi1, lo1);
    _mm512_store_si512(dst, upper_halves(hi0, hi1));
    _mm512_store_si512(dst + 2 * kTileElems, upper_halves(lo0, lo1));
  }
}

// ---- packing -----------------------------------------------------------------------------------
// A packed step of k (32 deep) holds, per piece, 2 tiles: [piece][tile][16 x 32 words], so a
// bf16 step is 2 KiB and an f16 step 4 KiB (hi tiles, then lo tiles).

template <class Src>
constexpr int64_t step_elems() {
  return 2 * Src::parts * kTileElems;
}

// In-register transpose of 16 x 16 32-bit lanes: on entry v[r] is row r, on exit v[c] is column c.
void transpose_16x16(__m512i v[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
  }
  for (int g = 0; g < 16; g += 4) {
    u[g + 0] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
    u[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
    u[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
    u[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
  }
  // u[4g + q], 128-bit lane L: rows 4g..4g+3 of column 4L + q.
  for (int q = 0; q < 4; ++q) {
    const __m512i even_top = _mm512_shuffle_i32x4(u[q], u[4 + q], 0x88);
    const __m512i odd_top = _mm512_shuffle_i32x4(u[q], u[4 + q], 0xdd);
    const __m512i even_bottom = _mm512_shuffle_i32x4(u[8 + q], u[12 + q], 0x88);
    const __m512i odd_bottom = _mm512_shuffle_i32x4(u[8 + q], u[12 + q], 0xdd);
    v[q] = _mm512_shuffle_i32x4(even_top, even_bottom, 0x88);
    v[8 + q] = _mm512_shuffle_i32x4(even_top, even_bottom, 0xdd);
    v[4 + q] = _mm512_shuffle_i32x4(odd_top, odd_bottom, 0x88);
    v[12 + q] = _mm512_shuffle_i32x4(odd_top, odd_bottom, 0xdd);
  }
}

// One 16-row tile of plain op(A) = A[i0 : i0 + rows, p : p + 32] (zeros past p_end), to dst (1 KiB
// per piece).
template <class Src>
void pack_a_tile(const OperandView& a, int64_t i0, int64_t rows, int64_t p, int64_t p_end, uint16_t* dst,
                 uint32_t& bad) {
  const __mmask32 kmask = first_lanes32(p_end - p);
  for (int64_t r = 0; r < 16; ++r) {
    const __m512i v = r < rows ? _mm512_maskz_loadu_epi16(kmask, a.data + (i0 + r) * a.ld + p) : _mm512_setzero_si512();
    emit<Src>(dst + r * 32, v, bad);
  }
}

// A^T's micro-panel, both tiles of a step at once: each k row gives 32 values of op(A)'s column
// (one 512-bit load); rows 2q and 2q + 1 interleaved by unpacklo/hi_epi16 give the (k, k+1) pairs of
// 16 columns each (lo: columns 8L + 0..3 of 128-bit lane L, hi: 8L + 4..7), and a 16 x 16 32-bit
// transpose of each turns pairs-by-column into tile rows, stored where their column belongs.
template <class Src>
void pack_a_panel_transposed(const OperandView& a, int64_t i0, int64_t rows, int64_t p0, int64_t kc, uint16_t* dst,
                             uint32_t& bad) {
  const int64_t steps = round_up(kc, kTile) / kTile, p_end = p0 + kc;
  const __mmask32 cols = first_lanes32(rows);
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t p = p0 + s * kTile;
    __m512i lo[16], hi[16];
    for (int q = 0; q < 16; ++q) {
      const int64_t even = p + 2 * q, odd = even + 1;
      const __m512i r0 = even < p_end ? _mm512_maskz_loadu_epi16(cols, a.data + even * a.ld + i0) : _mm512_setzero_si512();
      const __m512i r1 = odd < p_end ? _mm512_maskz_loadu_epi16(cols, a.data + odd * a.ld + i0) : _mm512_setzero_si512();
      lo[q] = _mm512_unpacklo_epi16(r0, r1);
      hi[q] = _mm512_unpackhi_epi16(r0, r1);
    }
    transpose_16x16(lo);
    transpose_16x16(hi);
    uint16_t* step = dst + s * step_elems<Src>();
    for (int l = 0; l < 16; ++l) {
      const int column = (l / 4) * 8 + l % 4;  // of lo[l]; hi[l] is column + 4
      emit<Src>(step + (column / 16) * kTileElems + (column % 16) * 32, lo[l], bad);
      emit<Src>(step + ((column + 4) / 16) * kTileElems + ((column + 4) % 16) * 32, hi[l], bad);
    }
  }
}

// The A micro-panel for rows i0..i0+rows (<= 32) and k in [p0, p0 + kc): [kc/32][pieces][2][16][32].
template <class Src>
void pack_a_panel(const OperandView& a, int64_t i0, int64_t rows, int64_t p0, int64_t kc, uint16_t* dst,
                  uint32_t& bad) {
  if (a.transposed) return pack_a_panel_transposed<Src>(a, i0, rows, p0, kc, dst, bad);
  const int64_t steps = round_up(kc, kTile) / kTile;
  for (int64_t s = 0; s < steps; ++s)
    for (int64_t t = 0; t < 2; ++t)
      pack_a_tile<Src>(a, i0 + 16 * t, std::clamp<int64_t>(rows - 16 * t, 0, 16), p0 + s * kTile, p0 + kc,
                       dst + s * step_elems<Src>() + t * kTileElems, bad);
}

// One 16-column VNNI tile of B^T (B stored [n][k]) for op(B)[p : p + 32, j0 : j0 + cols] (k past
// p_end zero), to dst: 32 k of column j are 16 pairs; transpose columns into pair rows.
template <class Src>
void pack_b_tile(const OperandView& b, int64_t p, int64_t p_end, int64_t j0, int64_t cols, uint16_t* dst,
                 uint32_t& bad) {
  const __mmask32 kmask = first_lanes32(p_end - p);
  __m512i v[16];
  for (int j = 0; j < 16; ++j)
    v[j] = j < cols ? _mm512_maskz_loadu_epi16(kmask, b.data + (j0 + j) * b.ld + p) : _mm512_setzero_si512();
  transpose_16x16(v);
  for (int q = 0; q < 16; ++q) emit<Src>(dst + q * 32, v[q], bad);
}

// Plain B's micro-panel, both tiles of a step at once: rows 2q and 2q + 1 are read 32 columns (one
// 64-byte line each) at a time and interleaved into (k, k+1) pairs by two word permutes (columns
// 0-15 to tile 0, 16-31 to tile 1), so each row's line is touched once per step; the rows of the
// step after next are prefetched (the packer waits on these strided rows otherwise: perf showed
// the plain-B loads as a third of an f16 MLP step's packing).
template <class Src>
void pack_b_panel_plain(const OperandView& b, int64_t p0, int64_t kc, int64_t j0, int64_t cols, uint16_t* dst,
                        uint32_t& bad) {
  const int64_t steps = round_up(kc, kTile) / kTile, p_end = p0 + kc;
  const __mmask32 mask = first_lanes32(cols);
  alignas(64) static constexpr uint16_t kPairs[2][32] = {
      {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39, 8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47},
      {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
       24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63}};
  const __m512i first_half = _mm512_load_si512(kPairs[0]), second_half = _mm512_load_si512(kPairs[1]);
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t p = p0 + s * kTile;
    uint16_t* step = dst + s * step_elems<Src>();
    for (int q = 0; q < 16; ++q) {
      const int64_t even = p + 2 * q, odd = even + 1, ahead = even + 2 * kTile;
      if (ahead + 1 < p_end) {
        __builtin_prefetch(b.data + ahead * b.ld + j0);
        __builtin_prefetch(b.data + (ahead + 1) * b.ld + j0);
      }
      const __m512i r0 = even < p_end ? _mm512_maskz_loadu_epi16(mask, b.data + even * b.ld + j0) : _mm512_setzero_si512();
      const __m512i r1 = odd < p_end ? _mm512_maskz_loadu_epi16(mask, b.data + odd * b.ld + j0) : _mm512_setzero_si512();
      emit<Src>(step + q * 32, _mm512_permutex2var_epi16(r0, first_half, r1), bad);
      emit<Src>(step + kTileElems + q * 32, _mm512_permutex2var_epi16(r0, second_half, r1), bad);
    }
  }
}

// The B micro-panel for columns j0..j0+cols (<= 32) and k in [p0, p0 + kc):
// [kc/32][pieces][2][16][16][2].
template <class Src>
void pack_b_panel(const OperandView& b, int64_t p0, int64_t kc, int64_t j0, int64_t cols, uint16_t* dst,
                  uint32_t& bad) {
  if (!b.transposed) return pack_b_panel_plain<Src>(b, p0, kc, j0, cols, dst, bad);
  const int64_t steps = round_up(kc, kTile) / kTile;
  for (int64_t s = 0; s < steps; ++s)
    for (int64_t t = 0; t < 2; ++t)
      pack_b_tile<Src>(b, p0 + s * kTile, p0 + kc, j0 + 16 * t, std::clamp<int64_t>(cols - 16 * t, 0, 16),
                       dst + s * step_elems<Src>() + t * kTileElems, bad);
}

// ---- tiles -------------------------------------------------------------------------------------

// The LDTILECFG layout: palette 1, every tile 16 rows x 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64);

void configure_tiles() {
  TileConfig config{};
  config.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    config.colsb[t] = 64;
    config.rows[t] = 16;
  }
  _tile_loadconfig(&config);
}

#define HG_AMX_FOUR_PRODUCTS()   \
  do {                           \
    _tile_dpbf16ps(0, 4, 6);     \
    _tile_dpbf16ps(1, 4, 7);     \
    _tile_dpbf16ps(2, 5, 6);     \
    _tile_dpbf16ps(3, 5, 7);     \
  } while (0)

// One KC slice of a 32 x 32 C tile: acc (fp32, row stride acc_ld floats) = (first ? 0 : acc) +
// A micro-panel x B micro-panel, over `steps` packed 32-deep steps. `terms` picks the products of
// a step: 1 for bf16 (A x B); for split f16, 3 (hi hi + hi lo + lo hi) or 4 (+ lo lo), each pass of
// 4 tdpbf16ps reloading only the operand tiles whose piece changes (10 tile loads per step).
template <int Terms>
void micro_kernel(int64_t steps, const uint16_t* a, const uint16_t* b, bool first, float* acc, int64_t acc_ld) {
  const int64_t stride = acc_ld * int64_t(sizeof(float));
  if (first) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  } else {
    _tile_loadd(0, acc, stride);
    _tile_loadd(1, acc + 16, stride);
    _tile_loadd(2, acc + 16 * acc_ld, stride);
    _tile_loadd(3, acc + 16 * acc_ld + 16, stride);
  }
  constexpr int64_t E = kTileElems;
  for (int64_t s = 0; s < steps; ++s) {
    _tile_loadd(4, a, 64);
    _tile_loadd(6, b, 64);
    _tile_loadd(5, a + E, 64);
    _tile_loadd(7, b + E, 64);
    HG_AMX_FOUR_PRODUCTS();  // hi x hi (bf16: the only product)
    if constexpr (Terms > 1) {
      _tile_loadd(6, b + 2 * E, 64);
      _tile_loadd(7, b + 3 * E, 64);
      HG_AMX_FOUR_PRODUCTS();  // hi x lo
      _tile_loadd(4, a + 2 * E, 64);
      _tile_loadd(5, a + 3 * E, 64);
      if constexpr (Terms == 4) HG_AMX_FOUR_PRODUCTS();  // lo x lo
      _tile_loadd(6, b, 64);
      _tile_loadd(7, b + E, 64);
      HG_AMX_FOUR_PRODUCTS();  // lo x hi
    }
    a += (Terms > 1 ? 4 : 2) * E;
    b += (Terms > 1 ? 4 : 2) * E;
  }
  _tile_stored(0, acc, stride);
  _tile_stored(1, acc + 16, stride);
  _tile_stored(2, acc + 16 * acc_ld, stride);
  _tile_stored(3, acc + 16 * acc_ld + 16, stride);
}
#undef HG_AMX_FOUR_PRODUCTS

// ---- epilogue ----------------------------------------------------------------------------------

// float -> bf16 bits, round to nearest even, NaN -> 0x7fff: hg::float_to_bfloat16_bits on 16 lanes.
__m256i round_to_bf16(__m512 v) {
  const __m512i x = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __mmask16 nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  r = _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7fff));
  return _mm512_cvtepi32_epi16(r);
}

// float -> binary16 bits, round to nearest even (vcvtps2ph keeps subnormals and overflows to
// infinity, as hg::half does), every NaN to 0x7fff.
__m256i round_to_f16(__m512 v) {
  const __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return _mm256_mask_mov_epi16(h, __mmask16(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q)), _mm256_set1_epi16(0x7fff));
}

__m512 load_bf16(const uint16_t* p, __mmask16 mask) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, p)), 16));
}

enum class OutType { f32, bf16, f16 };

// Where C goes and how it is combined.
struct Output {
  void* c;
  int64_t ldc;
  OutType type;
  float alpha, beta;
};

// C[i0 : i0 + rows, j0 : j0 + cols] = alpha * acc + beta * C (C not read when beta == 0).
void epilogue(const float* acc, int64_t acc_ld, int64_t rows, int64_t cols, const Output& out, int64_t i0,
              int64_t j0) {
  const __m512 va = _mm512_set1_ps(out.alpha), vb = _mm512_set1_ps(out.beta);
  const bool read_c = out.beta != 0.0f;
  for (int64_t i = 0; i < rows; ++i) {
    const float* src = acc + i * acc_ld;
    for (int64_t j = 0; j < cols; j += 16) {
      const __mmask16 mask = first_lanes16(cols - j);
      __m512 v = _mm512_mul_ps(va, _mm512_load_ps(src + j));
      if (out.type == OutType::bf16) {
        uint16_t* dst = static_cast<uint16_t*>(out.c) + (i0 + i) * out.ldc + j0 + j;
        if (read_c) v = _mm512_fmadd_ps(vb, load_bf16(dst, mask), v);
        _mm256_mask_storeu_epi16(dst, mask, round_to_bf16(v));
      } else if (out.type == OutType::f16) {
        uint16_t* dst = static_cast<uint16_t*>(out.c) + (i0 + i) * out.ldc + j0 + j;
        if (read_c) v = _mm512_fmadd_ps(vb, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, dst)), v);
        _mm256_mask_storeu_epi16(dst, mask, round_to_f16(v));
      } else {
        float* dst = static_cast<float*>(out.c) + (i0 + i) * out.ldc + j0 + j;
        if (read_c) v = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mask, dst), v);
        _mm512_mask_storeu_ps(dst, mask, v);
      }
    }
  }
}

// C = beta * C (k == 0 or alpha == 0), without reading C when beta == 0.
void scale_c(int64_t m, int64_t n, const Output& out) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      if (out.type == OutType::bf16) {
        uint16_t& x = static_cast<uint16_t*>(out.c)[i * out.ldc + j];
        x = float_to_bfloat16_bits(out.beta == 0.0f ? 0.0f : out.beta * bfloat16_bits_to_float(x));
      } else if (out.type == OutType::f16) {
        half& x = static_cast<half*>(out.c)[i * out.ldc + j];
        x = half(out.beta == 0.0f ? 0.0f : out.beta * float(x));
      } else {
        float& x = static_cast<float*>(out.c)[i * out.ldc + j];
        x = out.beta == 0.0f ? 0.0f : out.beta * x;
      }
    }
}

// ---- blocking and threads ----------------------------------------------------------------------

struct Rectangle {
  int64_t row_begin, row_end;
  int64_t col_begin, col_end;
};

// This thread's rectangle of whole 32 x 32 tiles in a tm x tn grid minimising the busiest thread.
Rectangle rectangle_of(int thread, int threads, int64_t m, int64_t n) {
  const int64_t m_tiles = (m + kTile - 1) / kTile, n_tiles = (n + kTile - 1) / kTile;
  int best_tm = threads;
  int64_t best_cost = INT64_MAX;
  for (int tm = threads; tm >= 1; --tm) {
    if (threads % tm) continue;
    const int tn = threads / tm;
    const int64_t cost = ((m_tiles + tm - 1) / tm) * ((n_tiles + tn - 1) / tn);
    if (cost < best_cost) best_cost = cost, best_tm = tm;
  }
  const int tm = best_tm, tn = threads / best_tm;
  const int ti = thread / tn, tj = thread % tn;
  return {std::min(m, m_tiles * ti / tm * kTile), std::min(m, m_tiles * (ti + 1) / tm * kTile),
          std::min(n, n_tiles * tj / tn * kTile), std::min(n, n_tiles * (tj + 1) / tn * kTile)};
}

// The serial loop nest over one rectangle (see the file comment): jc -> row group -> k pass (pack
// B for the pass) -> ic -> pc -> pack A -> jr -> ir kernels into the fp32 block; then the epilogue
// of the row group. When k fits one pass (k <= kKPass, every shape measured) a row group is MC rows
// and B is packed once per column block, all of k. Deeper k packs B one kKPass slab at a time and
// keeps the partial sums of kRowGroup rows, so B is repacked once per row group; the per-thread
// buffers stay under kKPass x NC bf16 (4 MiB) + kRowGroup x NC fp32 (1 MiB) for any shape.
// C[i0 : i0 + rows, j0 : j0 + cols] from f16 operands by the packed fp32 path (serial here: it runs
// inside this GEMM's parallel region), for a block whose operands held an infinity or NaN: the
// split would turn inf * (lo = 0) into NaN. C is untouched until then, so beta * C is still there.
void recompute_in_fp32(const OperandView& a, const OperandView& b, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                       int64_t k, const Output& out) {
  const auto* a_block = reinterpret_cast<const half*>(a.data + (a.transposed ? i0 : i0 * a.ld));
  const auto* b_block = reinterpret_cast<const half*>(b.data + (b.transposed ? j0 * b.ld : j0));
  const size_t elem = out.type == OutType::f32 ? sizeof(float) : sizeof(uint16_t);
  void* c_block = static_cast<char*>(out.c) + size_t(i0 * out.ldc + j0) * elem;
  gemm_half_via_f32_avx512(a.transposed, b.transposed, rows, cols, k, out.alpha, a_block, a.ld, b_block, b.ld,
                           out.beta, c_block, out.ldc, out.type == OutType::f16);
}

// An f16 source (two pieces per value) halves KC and the pass depth, so the packed A block, a B
// micro-panel (KC x 32 x 2 pieces = 32 KiB, L1) and the B pass buffer keep their bf16 sizes.
template <class Src, int Terms>
void gemm_rectangle(const OperandView& a, const OperandView& b, const Rectangle& r, int64_t k, const Output& out) {
  constexpr int64_t P = Src::parts, KC = kKC / P, KPass = kKPass / P;
  thread_local PackBuffer<uint16_t> a_buffer, b_buffer;
  thread_local PackBuffer<float> acc_buffer;
  const bool one_pass = k <= KPass;
  const int64_t group_rows = one_pass ? kMC : kRowGroup;
  uint16_t* a_packed = a_buffer.get(kMC * kKC);
  uint16_t* b_packed = b_buffer.get(std::min(round_up(k, kTile), KPass) * P * kNC);
  float* acc = acc_buffer.get(group_rows * kNC);
  for (int64_t jc = r.col_begin; jc < r.col_end; jc += kNC) {
    const int64_t nc = std::min(kNC, r.col_end - jc), nc_padded = round_up(nc, kTile);
    bool b_packed_for_all_k = false;
    uint32_t b_bad = 0;  // non-finite f16 seen in this column block's B (all k)
    for (int64_t rg = r.row_begin; rg < r.row_end; rg += group_rows) {
      const int64_t rows = std::min(group_rows, r.row_end - rg);
      uint32_t a_bad = 0;  // ... and in this row group's A
      for (int64_t kp = 0; kp < k; kp += KPass) {
        const int64_t kp_end = std::min(k, kp + KPass);
        // Slice pc of the pass starts at (pc - kp) * P * nc_padded; its panel jr at + jr * P * kc_padded.
        if (!b_packed_for_all_k) {
          for (int64_t pc = kp; pc < kp_end; pc += KC) {
            const int64_t kc = std::min(KC, k - pc), kc_padded = round_up(kc, kTile);
            for (int64_t jr = 0; jr < nc; jr += kTile)
              pack_b_panel<Src>(b, pc, kc, jc + jr, std::min(kTile, nc - jr),
                                b_packed + ((pc - kp) * nc_padded + jr * kc_padded) * P, b_bad);
          }
          b_packed_for_all_k = one_pass;
        }
        for (int64_t ic = rg; ic < rg + rows; ic += kMC) {
          const int64_t mc = std::min(kMC, rg + rows - ic);
          float* acc_block = acc + (ic - rg) * kNC;
          for (int64_t pc = kp; pc < kp_end; pc += KC) {
            const int64_t kc = std::min(KC, k - pc), kc_padded = round_up(kc, kTile);
            for (int64_t ir = 0; ir < mc; ir += kTile)
              pack_a_panel<Src>(a, ic + ir, std::min(kTile, mc - ir), pc, kc, a_packed + ir * kc_padded * P, a_bad);
            const uint16_t* b_slice = b_packed + (pc - kp) * nc_padded * P;
            for (int64_t jr = 0; jr < nc; jr += kTile)
              for (int64_t ir = 0; ir < mc; ir += kTile)
                micro_kernel<Terms>(kc_padded / kTile, a_packed + ir * kc_padded * P, b_slice + jr * kc_padded * P,
                                    pc == 0, acc_block + ir * kNC + jr, kNC);
          }
        }
      }
      if (a_bad | b_bad)
        recompute_in_fp32(a, b, rg, rows, jc, nc, k, out);
      else
        epilogue(acc, kNC, rows, nc, out, rg, jc);
    }
  }
}

#if defined(__x86_64__)
// XCR0 (the OS-enabled state components); only valid when CPUID says OSXSAVE.
uint64_t read_xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}
#endif

bool detect_amx() {
#if defined(__x86_64__) && defined(__linux__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  if (!__get_cpuid_count(1, 0, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) return false;  // OSXSAVE
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  const bool amx_bf16 = edx & (1u << 22), amx_tile = edx & (1u << 24);
  const bool avx512 = (ebx & (1u << 16)) && (ebx & (1u << 17)) && (ebx & (1u << 30)) && (ebx & (1u << 31));  // F DQ BW VL
  if (!amx_bf16 || !amx_tile || !avx512) return false;
  // The OS must enable opmask/zmm state (bits 5-7) and the tile config/data state (bits 17, 18).
  const uint64_t xcr0 = read_xcr0();
  if ((xcr0 & 0xe6) != 0xe6 || (xcr0 & (3ull << 17)) != (3ull << 17)) return false;
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

}  // namespace

bool cpu_has_amx_bf16_gemm() {
  static const bool has = detect_amx();  // the permission request happens once per process
  return has;
}

namespace {

// The threads around gemm_rectangle<Src, Terms> (shared by the bf16 and the split-f16 entry points).
template <class Src, int Terms>
void gemm_amx(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
              int64_t lda, const uint16_t* b, int64_t ldb, const Output& out) {
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == 0.0f) return scale_c(m, n, out);

  const OperandView op_a{a, lda, trans_a};
  const OperandView op_b{b, ldb, trans_b};
  // Below ~4 MFLOP (of tile work) the fork/join costs more than the second thread saves.
  const bool small = 2.0 * double(m) * double(n) * double(k) * Terms < 4.0e6;
  const int threads = small ? 1 : omp_get_max_threads();
  // An exception (std::bad_alloc from a pack buffer) must not leave the parallel region, where it
  // would call std::terminate: the first one is kept and rethrown after the join.
  std::exception_ptr failure;
#pragma omp parallel num_threads(threads)
  {
    const Rectangle mine = rectangle_of(omp_get_thread_num(), omp_get_num_threads(), m, n);
    if (mine.row_begin < mine.row_end && mine.col_begin < mine.col_end) {
      try {
        configure_tiles();
        gemm_rectangle<Src, Terms>(op_a, op_b, mine, k, out);
      } catch (...) {
#pragma omp critical(hg_gemm_bf16_amx_failure)
        if (!failure) failure = std::current_exception();
      }
      _tile_release();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace

void gemm_bf16_amx(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const bfloat16* a,
                   int64_t lda, const bfloat16* b, int64_t ldb, float beta, void* c, int64_t ldc, bool c_is_bf16) {
  const Output out{c, ldc, c_is_bf16 ? OutType::bf16 : OutType::f32, alpha, beta};
  gemm_amx<Bf16Source, 1>(trans_a, trans_b, m, n, k, alpha, reinterpret_cast<const uint16_t*>(a), lda,
                          reinterpret_cast<const uint16_t*>(b), ldb, out);
}

void gemm_f16_amx(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const half* a,
                  int64_t lda, const half* b, int64_t ldb, float beta, void* c, int64_t ldc, bool c_is_f16,
                  int terms) {
  HG_CHECK(terms == 3 || terms == 4, "[gemm_f16_amx] terms = ", terms, "; expected 3 or 4");
  const Output out{c, ldc, c_is_f16 ? OutType::f16 : OutType::f32, alpha, beta};
  const auto* a16 = reinterpret_cast<const uint16_t*>(a);
  const auto* b16 = reinterpret_cast<const uint16_t*>(b);
  if (terms == 3)
    gemm_amx<F16Source, 3>(trans_a, trans_b, m, n, k, alpha, a16, lda, b16, ldb, out);
  else
    gemm_amx<F16Source, 4>(trans_a, trans_b, m, n, k, alpha, a16, lda, b16, ldb, out);
}

}  // namespace hg::kernels::cpu::detail

#pragma GCC diagnostic pop
