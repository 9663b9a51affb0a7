#pragma once
// Pieces shared by the packed AVX-512 GEMMs (gemm_avx512.cpp: fp32 FMA on f32/f16/bf16 sources;
// gemm_bf16_avx512.cpp: vdpbf16ps on bf16): the grow-only pack buffers, the 16 x 16 in-register
// transpose used by the packers, the split of C into one rectangle per thread, and the tile
// store that writes a micro-tile's fp32 accumulators to C as f32, f16 or bf16.
//
// Half-precision C is rounded once, from the fp32 sum over all of k: when k spans several KC
// slices the slices' sums go to a per-thread fp32 partial buffer (first: store, middle: add) and
// only the last slice adds its sum, applies alpha and beta * C, and rounds to nearest even
// bit-identically to hg::half / hg::bfloat16 (kernels/half.h: subnormals kept, every NaN to the
// canonical 0x7fff). vcvtneps2bf16 is not used: it flushes subnormals and keeps NaN payloads.
//
// Only for translation units compiled with AVX-512 F/VL/BW/DQ (see kernels/CMakeLists.txt);
// everything here has internal linkage, so each of them gets its own copy.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <new>

namespace hg::kernels::cpu::detail {
namespace {

inline int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

inline __mmask16 first_lanes(int64_t count) {
  return count >= 16 ? __mmask16(0xffff) : __mmask16((1u << std::max<int64_t>(count, 0)) - 1u);
}
inline __mmask32 first_lanes32(int64_t count) {
  return count >= 32 ? __mmask32(0xffffffffu) : __mmask32((1u << std::max<int64_t>(count, 0)) - 1u);
}

// A grow-only, page-aligned buffer. One per thread and purpose (thread_local), so its pages are
// touched once and reused by every later GEMM on that thread (a fresh page costs ~17 us per 4 KiB
// to touch on our VMs).
class PackBuffer {
 public:
  template <class T>
  T* get(int64_t count) {
    const int64_t bytes = count * int64_t(sizeof(T));
    if (bytes > capacity_) {
      data_.reset();
      capacity_ = 0;
      const size_t rounded = size_t(round_up(bytes, 4096));
      void* memory = std::aligned_alloc(4096, rounded);
      if (!memory) throw std::bad_alloc();
      data_.reset(static_cast<unsigned char*>(memory));
      capacity_ = int64_t(rounded);
    }
    return reinterpret_cast<T*>(data_.get());
  }

 private:
  struct Free {
    void operator()(unsigned char* p) const { std::free(p); }
  };
  std::unique_ptr<unsigned char[], Free> data_;
  int64_t capacity_ = 0;
};

// GCC 12 warns that the shuffle intrinsics below read an uninitialised variable: their headers
// pass _mm512_undefined_ps() as the unused merge source (GCC bug 105593, fixed in GCC 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// In-register transpose of a 16 x 16 block of 32-bit values: on entry v[r] is row r, on exit v[c]
// is column c. Three rounds of shuffles: interleave pairs of rows, gather 4-row groups within
// 128-bit lanes, then move whole 128-bit lanes across registers.
inline void transpose_16x16(__m512 v[16]) {
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

#pragma GCC diagnostic pop

// ---- threads -------------------------------------------------------------------------------------

// The rectangle of C one thread computes: whole mr-row tiles by whole nr-column panels. The threads
// form a tm x tn grid, tm * tn = threads, chosen so the busiest thread has the fewest micro-tiles;
// each thread then runs the serial blocked GEMM on its rectangle with its own pack buffers, so
// threads never wait for each other until the join.
struct Rectangle {
  int64_t row_begin, row_end;
  int64_t col_begin, col_end;
};

inline Rectangle rectangle_of(int thread, int threads, int64_t m, int64_t n, int64_t mr, int64_t nr) {
  const int64_t m_tiles = (m + mr - 1) / mr, n_panels = (n + nr - 1) / nr;
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
  return {std::min(m, m_tiles * ti / tm * mr), std::min(m, m_tiles * (ti + 1) / tm * mr),
          std::min(n, n_panels * tj / tn * nr), std::min(n, n_panels * (tj + 1) / tn * nr)};
}

// Runs body(rectangle) for every OpenMP thread's rectangle (none for an empty one). With
// chunk_rows > 0 a rectangle is run chunk_rows rows at a time: a half C with k over one KC slice
// keeps fp32 partial sums of rows x min(NC, cols) per thread, which chunking bounds whatever m is
// (B is then packed once per chunk). The first exception of any thread (std::bad_alloc from a pack
// buffer) is rethrown after the join: thrown out of the parallel region it would call terminate.
template <class Body>
void for_each_thread_rectangle(int threads, int64_t m, int64_t n, int64_t mr, int64_t nr, int64_t chunk_rows,
                               const Body& body) {
  std::exception_ptr failure;
#pragma omp parallel num_threads(threads)
  {
    const Rectangle mine = rectangle_of(omp_get_thread_num(), omp_get_num_threads(), m, n, mr, nr);
    const int64_t step = chunk_rows > 0 ? chunk_rows : std::max<int64_t>(1, mine.row_end - mine.row_begin);
    try {
      if (mine.col_begin < mine.col_end)
        for (int64_t row = mine.row_begin; row < mine.row_end; row += step)
          body(Rectangle{row, std::min(mine.row_end, row + step), mine.col_begin, mine.col_end});
    } catch (...) {
#pragma omp critical(hg_gemm_avx512_failure)
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

// ---- storing a micro-tile --------------------------------------------------------------------------

enum class OutType { f32, f16, bf16 };
inline int64_t out_bytes(OutType t) { return t == OutType::f32 ? 4 : 2; }

// Which KC slice of k a tile store belongs to (half-precision C only; see the file comment).
enum class SlicePhase { only, first, middle, last };
inline SlicePhase slice_phase(int64_t pc, int64_t kc, int64_t k) {
  if (pc == 0) return kc >= k ? SlicePhase::only : SlicePhase::first;
  return pc + kc >= k ? SlicePhase::last : SlicePhase::middle;
}

// Where a micro-tile goes: `rows` x (lanes of mask_lo, mask_hi) of C starting at c (type `type`,
// row stride ldc elements), its fp32 partial sums (row stride ldp) when C is half precision and k
// spans several slices, and the tile's 32 values of gemm_bias's row vector (type `type`) or null.
struct TileOut {
  void* c;
  int64_t ldc;
  OutType type;
  float* partial;
  int64_t ldp;
  int64_t rows;
  __mmask16 mask_lo, mask_hi;
  const void* bias;
};

// Asks for what store_tile will touch (for writing): the fp32 partial rows while a half C is kept
// as partials, C's rows on the slice that writes C.
inline void prefetch_tile(const TileOut& t, SlicePhase phase) {
  const bool uses_partial = t.type != OutType::f32 && phase != SlicePhase::only;
  const bool writes_c = t.type == OutType::f32 || phase == SlicePhase::only || phase == SlicePhase::last;
  const int64_t esize = out_bytes(t.type), row_bytes = 32 * esize;
  for (int64_t i = 0; i < t.rows; ++i) {
    if (uses_partial) {
      const char* partial_row = reinterpret_cast<const char*>(t.partial + i * t.ldp);
      __builtin_prefetch(partial_row, 1);
      __builtin_prefetch(partial_row + 64, 1);
      __builtin_prefetch(partial_row + 127, 1);
    }
    if (writes_c) {
      const char* row = static_cast<const char*>(t.c) + i * t.ldc * esize;
      __builtin_prefetch(row, 1);
      __builtin_prefetch(row + row_bytes - 1, 1);
      if (row_bytes > 64) __builtin_prefetch(row + 64, 1);
    }
  }
}

// float -> bf16 bits, round to nearest even, every NaN to 0x7fff (kernels/half.h's
// float_to_bfloat16_bits, 16 lanes at once).
inline __m256i round_to_bf16(__m512 v) {
  const __m512i x = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb), 16);
  r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_epi32(0x7fff));
  return _mm512_cvtepi32_epi16(r);
}
// float -> binary16 bits, round to nearest even (vcvtps2ph keeps subnormals and overflows to
// infinity, as kernels/half.h does), every NaN to 0x7fff.
inline __m256i round_to_f16(__m512 v) {
  const __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return _mm256_mask_mov_epi16(h, __mmask16(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q)), _mm256_set1_epi16(0x7fff));
}

inline __m512 load_out(OutType type, const void* p, __mmask16 mask) {
  if (type == OutType::f32) return _mm512_maskz_loadu_ps(mask, p);
  const __m256i bits = _mm256_maskz_loadu_epi16(mask, p);
  if (type == OutType::f16) return _mm512_cvtph_ps(bits);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}
inline void store_out(OutType type, void* p, __mmask16 mask, __m512 v) {
  if (type == OutType::f32) return _mm512_mask_storeu_ps(p, mask, v);
  _mm256_mask_storeu_epi16(p, mask, type == OutType::f16 ? round_to_f16(v) : round_to_bf16(v));
}

// Writes the accumulators lo[i], hi[i] (columns 0..15 and 16..31 of row i) of one micro-tile.
// f32 C: C = alpha * acc + beta * C (the caller passes beta = 1 for every slice after the first).
// Half C: the slice phase decides between keeping fp32 partials and the final rounded store,
// C = round(alpha * (partial + acc) + beta * C). C is not read when beta == 0. With a bias (callers
// pass beta = 0 then) the bias takes the place of the initial C: added once, in fp32, on the first
// slice of an f32 C and before the single rounding of a half C.
template <int kRows>
inline void store_tile(__m512 (&lo)[kRows], __m512 (&hi)[kRows], const TileOut& t, float alpha, float beta,
                       SlicePhase phase) {
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  const int64_t esize = out_bytes(t.type);
  const bool add_bias =
      t.bias && (t.type != OutType::f32 || phase == SlicePhase::only || phase == SlicePhase::first);
  __m512 bias_lo = _mm512_setzero_ps(), bias_hi = _mm512_setzero_ps();
  if (add_bias) {
    bias_lo = load_out(t.type, t.bias, t.mask_lo);
    bias_hi = load_out(t.type, static_cast<const char*>(t.bias) + 16 * esize, t.mask_hi);
  }
#pragma GCC unroll 16
  for (int i = 0; i < kRows; ++i) {
    if (i >= t.rows) break;
    __m512 r_lo = lo[i], r_hi = hi[i];
    if (t.type != OutType::f32 && phase != SlicePhase::only) {
      float* p = t.partial + i * t.ldp;
      if (phase != SlicePhase::first) {
        r_lo = _mm512_add_ps(r_lo, _mm512_loadu_ps(p));
        r_hi = _mm512_add_ps(r_hi, _mm512_loadu_ps(p + 16));
      }
      if (phase != SlicePhase::last) {
        _mm512_storeu_ps(p, r_lo);
        _mm512_storeu_ps(p + 16, r_hi);
        continue;
      }
    }
    char* row = static_cast<char*>(t.c) + i * t.ldc * esize;
    r_lo = _mm512_mul_ps(va, r_lo);
    r_hi = _mm512_mul_ps(va, r_hi);
    if (add_bias) {
      r_lo = _mm512_add_ps(r_lo, bias_lo);
      r_hi = _mm512_add_ps(r_hi, bias_hi);
    }
    if (beta != 0.0f) {
      r_lo = _mm512_fmadd_ps(vb, load_out(t.type, row, t.mask_lo), r_lo);
      r_hi = _mm512_fmadd_ps(vb, load_out(t.type, row + 16 * esize, t.mask_hi), r_hi);
    }
    store_out(t.type, row, t.mask_lo, r_lo);
    store_out(t.type, row + 16 * esize, t.mask_hi, r_hi);
  }
}

// C = beta * C (k == 0 or alpha == 0), without reading C when beta == 0; rounded like store_out.
inline void scale_out(int64_t m, int64_t n, float beta, void* c, int64_t ldc, OutType type) {
  const int64_t esize = out_bytes(type);
  for (int64_t i = 0; i < m; ++i) {
    char* row = static_cast<char*>(c) + i * ldc * esize;
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 mask = first_lanes(n - j);
      const __m512 v = beta == 0.0f ? _mm512_setzero_ps()
                                    : _mm512_mul_ps(_mm512_set1_ps(beta), load_out(type, row + j * esize, mask));
      store_out(type, row + j * esize, mask, v);
    }
  }
}

}  // namespace
}  // namespace hg::kernels::cpu::detail
