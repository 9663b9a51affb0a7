// Fused attention on the CPU: FlashAttention-2 (Dao, 2023) tiled for the caches. The math, the
// causal rule and the dropout index are those of kernels/attention_problem.h; the T x T scores are
// never stored, only tiles of them in a per-thread buffer.
//
// Tiles: kQueryTile = 64 queries by kKeyTile = 64 keys. A score tile is kept TRANSPOSED, S^T[key][query]
// (16 KiB in f32): it is computed as K_tile (Q_tile scale)^T with Q^T packed once per query tile, so no
// key tile is ever transposed, and the softmax statistics of the 64 queries are then 64 contiguous
// lanes (column max, column sum: vertical vector operations, no horizontal reductions). Every
// product reads its left operand through strides (product in attention_tiles.h), so P = (P^T)^T and
// dS = (dS^T)^T cost nothing.
//
// Forward, one (batch * head, query tile) per task, tasks over OpenMP threads (dynamic: causal tiles
// differ in work). For each key tile up to the last one the tile's last query sees (fully masked
// tiles are skipped; on a diagonal tile the products skip the hidden half and the scores there are
// set to -inf):
//   S^T = K_j (scale Q_i)^T,  m' = max(m, colmax S^T),  P^T = exp(S^T - m'),  l = l e^(m - m') + colsum P^T,
//   O = O e^(m - m') + (P Z / (1 - p)) V_j                  (Z: the dropout keep bits, when p > 0)
// and at the end O /= l, lse = m + log l. An attention mask (kernels/attention_problem.h) is added to
// each score tile (bool: -inf where hidden), read through its broadcast strides; a query that has
// seen no key yet keeps m = -inf and shifts its tile by 0 (so its O and l stay exactly 0).
// Backward, one batch * head per task (so every dQ, dK, dV row has one writer, and the sums run in
// one fixed order: the bits do not depend on the thread count). Q^T and dO^T are packed once, per tile;
// D = rowsum(dO O) is written to `delta`. Outer loop over key tiles j (dK_j, dV_j accumulate in a
// tile buffer), inner over the query tiles that see them:
//   P^T = exp(S^T - lse),  dV_j += (P Z')^T dO_i,  dP^T = V_j dO_i^T,  dS^T = P^T (dP^T Z' - D),
//   dK_j += dS^T Q_i,  dQ_i += dS K_j     (Z' = Z / (1 - p); dK, dQ times scale once at the end).
// Five products of 64 x 64 x d per tile pair, on the AVX-512 micro-kernel of attention_avx512.cpp
// for f32 (when the CPU has AVX-512), on portable loops otherwise and for f64.
//
// (With batch * heads below the thread count the backward leaves threads idle; the GPT has 32+.)
// Memory per thread: the tiles (S^T, dP^T, Z, P Z, O and dK, dV accumulators: ~100 KiB in f32 at
// d = 64, in L2) and, in the backward, Q^T, dO^T and the dQ accumulator of one (b, h): 3 tq d values.
//
// Precision: f32 and f64 compute in their own type. f16 and bf16 operands are converted to f32 (the
// rows one task reads: a (b, h)'s keys and values, a query tile), everything accumulates in f32,
// and O, dQ, dK, dV are rounded to the dtype once, on store. lse and delta are in accumulate_dtype.
// The conversions prefetch the rows ahead (strided rows defeat the hardware prefetchers), and in the
// forward a thread extends the keys and values it converted for one query tile to the next tile of
// the same (b, h) rather than converting them again; the tasks are handed out a whole (b, h) at a
// time when there are at least two per thread, so that is the common case.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/attention_tiles.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/gemm_avx512.h"
#include "kernels/cpu/simd_math.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "kernels/philox.h"

namespace hg::kernels::cpu {
namespace {

constexpr int64_t kQueryTile = 64;  // queries per tile; also the leading dimension of S^T tiles
constexpr int64_t kKeyTile = 64;    // keys per tile

// ---- portable tile operations (contract: attention_tiles.h) -------------------------------------

template <class Acc>
void product_portable(int64_t m, int64_t n, int64_t k, const Acc* a, int64_t a_row, int64_t a_col, const Acc* b,
                      int64_t ldb, Acc* c, int64_t ldc, bool accumulate) {
  for (int64_t i = 0; i < m; ++i) {
    Acc* ci = c + i * ldc;
    if (!accumulate) std::fill(ci, ci + n, Acc(0));
    for (int64_t p = 0; p < k; ++p) {
      const Acc aip = a[i * a_row + p * a_col];
      const Acc* bp = b + p * ldb;
      for (int64_t j = 0; j < n; ++j) ci[j] += aip * bp[j];
    }
  }
}

template <class Acc>
void exp_shifted_portable(Acc* x, int64_t rows, int64_t cols, int64_t ld, const Acc* shift, Acc* sums) {
  if (sums) std::fill(sums, sums + cols, Acc(0));
  for (int64_t r = 0; r < rows; ++r) {
    Acc* xr = x + r * ld;
    for (int64_t c = 0; c < cols; ++c) xr[c] = vexp(xr[c] - shift[c]);
    if (sums)
      for (int64_t c = 0; c < cols; ++c) sums[c] += xr[c];
  }
}

template <class Acc>
detail::AttentionTileOps<Acc> portable_ops() {
  return {&product_portable<Acc>, &exp_shifted_portable<Acc>};
}

bool has_avx512() {
  static const bool has = detail::cpu_has_avx512_gemm();
  return has;
}

template <class Acc>
detail::AttentionTileOps<Acc> choose_ops(detail::AttentionPath path, const char* op) {
  if constexpr (std::is_same_v<Acc, float>) {
    if (path == detail::AttentionPath::avx512) {
      HG_CHECK(has_avx512(), "[", op, "] the AVX-512 path was asked for, but this CPU lacks AVX-512 F/VL/DQ or FMA");
      return detail::attention_tile_ops_avx512();
    }
    if (path == detail::AttentionPath::automatic && has_avx512()) return detail::attention_tile_ops_avx512();
  }
  return portable_ops<Acc>();
}

// ---- per-thread buffers ---------------------------------------------------------------------------

// Which rows of a thread's k and v buffers hold a forward call's converted keys and values
// (read_keys_values below).
struct ConvertedKeys {
  uint64_t call = 0;  // which forward call (forward_typed numbers them) the rows belong to
  int64_t group = -1;
  int64_t rows = 0;  // rows [0, rows) of k and v are in the workspace
};

// Grow-only, one set per thread and compute type: the tiles, the accumulators and the converted
// rows of half operands. Sized by the largest problem the thread has seen (the backward's packed
// Q^T and dO^T and its dQ accumulator are whole (b, h) slices: 3 tq d values).
template <class Acc>
struct Workspace {
  std::vector<Acc> q, k, v, o, dout;   // rows converted from f16 / bf16
  std::vector<Acc> qt, dout_t;         // packed transposes (scale Q)^T, dO^T
  std::vector<Acc> s, dp, z, pz;       // [kKeyTile][kQueryTile] tiles
  std::vector<Acc> acc_o, dq, dk, dv;  // accumulators
  std::vector<Acc> m, l, m_new, alpha, sums;
  ConvertedKeys keys;  // which rows of k and v hold a forward's converted keys and values

  static Acc* sized(std::vector<Acc>& buffer, int64_t n) {
    if (int64_t(buffer.size()) < n) buffer.resize(size_t(n));
    return buffer.data();
  }
};

template <class Acc>
Workspace<Acc>& workspace() {
  thread_local Workspace<Acc> w;
  return w;
}

// Rows [row0, row0 + rows) of one (b, h) of an operand, as compute-type rows with a row stride:
// in place when the dtype is the compute type, else converted into `buffer`.
template <class Acc>
struct Rows {
  const Acc* data;
  int64_t ld;
};

// Converts rows [from, to) of one (b, h) of a half operand into buffer (row r at (r - buffer_row0) d).
// The rows are d values a row stride apart (q, k, v of a [B, T, 3, H, D] tensor: 3 C values apart),
// a walk of two or three cache lines per row that the prefetchers do not run ahead of, so the lines
// of the row kPrefetchRows ahead are asked for while this one converts (without it the conversions,
// at ~3 cycles per element waiting on L3, were 6% of a bf16 GPT step at T = 256).
template <class T, class Acc>
void convert_rows(AttentionTensor t, int64_t b, int64_t h, int64_t from, int64_t to, int64_t d, Acc* buffer,
                  int64_t buffer_row0) {
  constexpr int64_t kPrefetchRows = 6;
  const T* src = static_cast<const T*>(t.data) + t.offset(b, h, 0);
  const int64_t row_bytes = d * int64_t(sizeof(T));
  for (int64_t r = from; r < to; ++r) {
    if (r + kPrefetchRows < to) {
      const char* ahead = reinterpret_cast<const char*>(src + (r + kPrefetchRows) * t.row_stride);
      for (int64_t byte = 0; byte < row_bytes; byte += 64) __builtin_prefetch(ahead + byte);
      __builtin_prefetch(ahead + row_bytes - 1);
    }
    if constexpr (std::is_same_v<Acc, float>) {
      to_float(src + r * t.row_stride, buffer + (r - buffer_row0) * d, d);  // SIMD, exact
    } else {
      for (int64_t c = 0; c < d; ++c) buffer[(r - buffer_row0) * d + c] = Acc(float(src[r * t.row_stride + c]));
    }
  }
}

template <class T, class Acc>
Rows<Acc> read_rows(AttentionTensor t, int64_t b, int64_t h, int64_t row0, int64_t rows, int64_t d,
                    std::vector<Acc>& buffer) {
  if constexpr (std::is_same_v<T, Acc>) {
    return {static_cast<const T*>(t.data) + t.offset(b, h, row0), t.row_stride};
  } else {
    Acc* dst = Workspace<Acc>::sized(buffer, rows * d);
    convert_rows<T, Acc>(t, b, h, row0, row0 + rows, d, dst, row0);
    return {dst, d};
  }
}

// The forward's keys and values, rows [0, rows) of one (b, h): a half operand's converted rows are
// kept per thread and extended, so the query tiles of one (b, h) that a thread runs one after the
// other (the tasks are handed out a whole (b, h) at a time when there are enough of them) convert
// each key and value row once instead of once per query tile (T / 64 times at most).
template <class T, class Acc>
std::pair<Rows<Acc>, Rows<Acc>> read_keys_values(AttentionTensor k, AttentionTensor v, int64_t b, int64_t h,
                                                 int64_t group, int64_t rows, int64_t d, uint64_t call,
                                                 ConvertedKeys& have, std::vector<Acc>& k_buffer,
                                                 std::vector<Acc>& v_buffer) {
  if constexpr (std::is_same_v<T, Acc>) {
    return {read_rows<T, Acc>(k, b, h, 0, rows, d, k_buffer), read_rows<T, Acc>(v, b, h, 0, rows, d, v_buffer)};
  } else {
    const int64_t from = have.call == call && have.group == group ? std::min(have.rows, rows) : 0;
    if (from < rows) {
      // sized() keeps the rows already there when it grows (std::vector::resize).
      convert_rows<T, Acc>(k, b, h, from, rows, d, Workspace<Acc>::sized(k_buffer, rows * d), 0);
      convert_rows<T, Acc>(v, b, h, from, rows, d, Workspace<Acc>::sized(v_buffer, rows * d), 0);
    }
    const bool same = have.call == call && have.group == group;
    have = {call, group, same ? std::max(have.rows, rows) : rows};
    return {Rows<Acc>{k_buffer.data(), d}, Rows<Acc>{v_buffer.data(), d}};
  }
}

// dst[c * ld_t + r] = factor * rows[r][c]: a row block packed transposed, 16 rows at a time so
// the stores run along the rows of dst (a row-at-a-time scatter with stride ld_t missed L1 on every
// store and cost ~8% of the backward).
template <class Acc>
void pack_transposed(Rows<Acc> rows, int64_t n_rows, int64_t d, Acc factor, Acc* dst, int64_t ld_t) {
  constexpr int64_t kRows = 16;
  for (int64_t r0 = 0; r0 < n_rows; r0 += kRows) {
    const int64_t r1 = std::min(n_rows, r0 + kRows);
    for (int64_t c = 0; c < d; ++c)
      for (int64_t r = r0; r < r1; ++r) dst[c * ld_t + r] = factor * rows.data[r * rows.ld + c];
  }
}

// Rows [row0, row0 + rows) of one (b, h) of an output = factor * src rows, rounded once to T.
template <class T, class Acc>
void write_rows(AttentionTensor t, int64_t b, int64_t h, int64_t row0, int64_t rows, int64_t d, const Acc* src,
                Acc factor) {
  T* dst = static_cast<T*>(t.data) + t.offset(b, h, row0);
  if constexpr (std::is_same_v<Acc, float> && !std::is_same_v<T, float>) {
    // Half outputs: scaled into a small float buffer, then rounded by convert.h's SIMD conversions
    // (the same bits as T(factor * x)).
    constexpr int64_t kPiece = 256;
    float scaled[kPiece];
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c0 = 0; c0 < d; c0 += kPiece) {
        const int64_t n = std::min(kPiece, d - c0);
        for (int64_t c = 0; c < n; ++c) scaled[c] = factor * src[r * d + c0 + c];
        from_float(scaled, dst + r * t.row_stride + c0, n);
      }
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < d; ++c) dst[r * t.row_stride + c] = T(factor * src[r * d + c]);
  }
}

// ---- masks ----------------------------------------------------------------------------------------

// The causal mask of one (key tile j0.., query tile i0..) pair: key jj is hidden from the queries
// ii < hidden_queries(jj) = jj + offset (clamped to [0, br]), offset = j0 - i0 - (tk - tq), i.e.
// key j is hidden from query i when j > i + (tk - tq). `partial`: the tile has hidden entries (it
// lies on the diagonal); tiles that are entirely hidden are never visited.
struct TileMask {
  int64_t bc, br, offset;
  bool partial;
  int64_t hidden_queries(int64_t jj) const { return partial ? std::clamp<int64_t>(jj + offset, 0, br) : 0; }
  // The keys that at least one of the queries [0, ii_end) sees.
  int64_t seen_keys(int64_t ii_end) const { return partial ? std::clamp<int64_t>(ii_end - offset, 0, bc) : bc; }
};

TileMask tile_mask(const AttentionProblem& p, int64_t j0, int64_t bc, int64_t i0, int64_t br) {
  const int64_t shift = p.tk - p.tq;
  return {bc, br, j0 - i0 - shift, p.causal && j0 + bc - 1 > i0 + shift};
}

// Writes `value` into the hidden entries of a transposed [key][query] tile.
template <class Acc>
void fill_hidden(const TileMask& mask, Acc* tile, Acc value) {
  for (int64_t jj = 0; jj < mask.bc; ++jj)
    std::fill(tile + jj * kQueryTile, tile + jj * kQueryTile + mask.hidden_queries(jj), value);
}

// Applies the problem's attention mask (kernels/attention_problem.h) to a transposed score tile of
// keys j0.., queries i0.. of (b, h): + the additive mask's value, or -inf where a bool mask hides the
// key. (Called before fill_hidden, which then overwrites a diagonal tile's causally hidden entries.)
template <class T, class Acc>
void apply_attention_mask(const AttentionMask& mask, int64_t b, int64_t h, int64_t i0, int64_t br, int64_t j0,
                          int64_t bc, Acc* tile) {
  if (mask.data == nullptr) return;
  for (int64_t jj = 0; jj < bc; ++jj) {
    Acc* row = tile + jj * kQueryTile;
    for (int64_t ii = 0; ii < br; ++ii) {
      const int64_t at = mask.offset(b, h, i0 + ii, j0 + jj);
      if (mask.additive)
        row[ii] += Acc(static_cast<const T*>(mask.data)[at]);
      else if (static_cast<const uint8_t*>(mask.data)[at] == 0)
        row[ii] = -std::numeric_limits<Acc>::infinity();
    }
  }
}

// The three shapes of product a tile pair needs, each skipping the hidden part of a diagonal tile in
// strips of kStrip rows (the entries skipped are hidden scores, filled afterwards, or exact zeros of
// P and dS, so nothing changes but the work: about half of each diagonal tile).
constexpr int64_t kStrip = 8;

// out[jj][ii] = sum_c a[jj][c] b[c][ii]: a [bc] key rows of d values, b [d][br] packed (stride ldb);
// out a transposed tile. Hidden entries are left unwritten.
template <class Acc>
void keys_by_queries(const detail::AttentionTileOps<Acc>& ops, const TileMask& mask, int64_t d, const Acc* a,
                     int64_t lda, const Acc* b, int64_t ldb, Acc* out) {
  if (!mask.partial) return ops.product(mask.bc, mask.br, d, a, lda, 1, b, ldb, out, kQueryTile, false);
  for (int64_t jj0 = 0; jj0 < mask.bc; jj0 += kStrip) {
    const int64_t c0 = mask.hidden_queries(jj0);
    if (c0 < mask.br)
      ops.product(std::min(kStrip, mask.bc - jj0), mask.br - c0, d, a + jj0 * lda, lda, 1, b + c0, ldb,
                  out + jj0 * kQueryTile + c0, kQueryTile, false);
  }
}

// c[jj][:] += sum_ii t[jj][ii] b[ii][:]: t a transposed tile, b [br] query rows, c [bc][d].
template <class Acc>
void accumulate_keys(const detail::AttentionTileOps<Acc>& ops, const TileMask& mask, int64_t d, const Acc* t,
                     const Acc* b, int64_t ldb, Acc* c) {
  if (!mask.partial) return ops.product(mask.bc, d, mask.br, t, kQueryTile, 1, b, ldb, c, d, true);
  for (int64_t jj0 = 0; jj0 < mask.bc; jj0 += kStrip) {
    const int64_t c0 = mask.hidden_queries(jj0);
    if (c0 < mask.br)
      ops.product(std::min(kStrip, mask.bc - jj0), d, mask.br - c0, t + jj0 * kQueryTile + c0, kQueryTile, 1,
                  b + c0 * ldb, ldb, c + jj0 * d, d, true);
  }
}

// c[ii][:] += sum_jj t[jj][ii] b[jj][:]: t a transposed tile read transposed, b [bc] key rows, c [br][d].
template <class Acc>
void accumulate_queries(const detail::AttentionTileOps<Acc>& ops, const TileMask& mask, int64_t d, const Acc* t,
                        const Acc* b, int64_t ldb, Acc* c) {
  if (!mask.partial) return ops.product(mask.br, d, mask.bc, t, 1, kQueryTile, b, ldb, c, d, true);
  for (int64_t ii0 = 0; ii0 < mask.br; ii0 += kStrip) {
    const int64_t rows = std::min(kStrip, mask.br - ii0), keys = mask.seen_keys(ii0 + rows);
    if (keys > 0) ops.product(rows, d, keys, t + ii0, 1, kQueryTile, b, ldb, c + ii0 * d, d, true);
  }
}

// z[jj][ii] = Z / (1 - p) for keys j0.., queries i0.. of (batch * head) g: the keep bits of
// attention_problem.h's index ((g tq + i) tk + j), one Philox block per 4 consecutive indices.
template <class Acc>
void dropout_tile(const AttentionProblem& p, int64_t g, int64_t i0, int64_t br, int64_t j0, int64_t bc, Acc* z) {
  const Acc keep_scale = Acc(1.0 / (1.0 - p.dropout_p));
  const float drop = float(p.dropout_p);
  for (int64_t ii = 0; ii < br; ++ii) {
    const uint64_t base = uint64_t(((g * p.tq + i0 + ii) * p.tk) + j0);
    uint64_t block_id = 0;
    Philox4 block{};
    for (int64_t jj = 0; jj < bc; ++jj) {
      const uint64_t index = base + uint64_t(jj);
      const uint64_t id = p.offset + index / 4;
      if (jj == 0 || id != block_id) {
        block = philox4x32_10(Philox4{{uint32_t(id), uint32_t(id >> 32), 0u, 0u}}, uint32_t(p.seed),
                              uint32_t(p.seed >> 32));
        block_id = id;
      }
      z[jj * kQueryTile + ii] = bits_to_uniform(block.v[index % 4]) >= drop ? keep_scale : Acc(0);
    }
  }
}

// ---- forward ----------------------------------------------------------------------------------------

struct ForwardOperands {
  AttentionTensor q, k, v, o;
  void* lse;
};

template <class T, class Acc>
void forward_task(const AttentionProblem& p, const ForwardOperands& x, int64_t g, int64_t i0, uint64_t call,
                  const detail::AttentionTileOps<Acc>& ops) {
  const int64_t b = g / p.heads, h = g % p.heads, d = p.d;
  const int64_t br = std::min(kQueryTile, p.tq - i0);
  const int64_t key_end = std::min(p.tk, p.visible_keys(i0 + br - 1));
  Workspace<Acc>& w = workspace<Acc>();
  const Rows<Acc> q = read_rows<T, Acc>(x.q, b, h, i0, br, d, w.q);
  const auto [k, v] = read_keys_values<T, Acc>(x.k, x.v, b, h, g, key_end, d, call, w.keys, w.k, w.v);
  Acc* qt = Workspace<Acc>::sized(w.qt, d * kQueryTile);
  pack_transposed(q, br, d, Acc(p.scale), qt, kQueryTile);

  Acc* s = Workspace<Acc>::sized(w.s, kKeyTile * kQueryTile);
  Acc* z = Workspace<Acc>::sized(w.z, kKeyTile * kQueryTile);
  Acc* acc = Workspace<Acc>::sized(w.acc_o, kQueryTile * d);
  Acc* m = Workspace<Acc>::sized(w.m, kQueryTile);
  Acc* l = Workspace<Acc>::sized(w.l, kQueryTile);
  Acc* m_new = Workspace<Acc>::sized(w.m_new, kQueryTile);
  Acc* alpha = Workspace<Acc>::sized(w.alpha, kQueryTile);
  Acc* sums = Workspace<Acc>::sized(w.sums, kQueryTile);
  std::fill(m, m + br, -std::numeric_limits<Acc>::infinity());
  std::fill(l, l + br, Acc(0));
  std::fill(acc, acc + br * d, Acc(0));

  for (int64_t j0 = 0; j0 < key_end; j0 += kKeyTile) {
    const int64_t bc = std::min(kKeyTile, key_end - j0);
    const TileMask mask = tile_mask(p, j0, bc, i0, br);
    keys_by_queries(ops, mask, d, k.data + j0 * k.ld, k.ld, qt, kQueryTile, s);
    apply_attention_mask<T, Acc>(p.mask, b, h, i0, br, j0, bc, s);
    if (mask.partial) fill_hidden(mask, s, -std::numeric_limits<Acc>::infinity());
    std::copy(m, m + br, m_new);
    for (int64_t jj = 0; jj < bc; ++jj)
      for (int64_t ii = 0; ii < br; ++ii) m_new[ii] = std::max(m_new[ii], s[jj * kQueryTile + ii]);
    // Without a mask every query sees key 0, so m' is finite from the first tile on. A masked query may
    // have seen no key yet (m' = -inf): its scores are all -inf, shifted by 0 to exact zeros, and O and l
    // stay 0 (alpha 1). One that never sees a key ends with l = 0: lse = -inf and O = 0 / 0 = NaN.
    bool rescale = false;
    for (int64_t ii = 0; ii < br; ++ii) {
      const bool none_seen = m_new[ii] == -std::numeric_limits<Acc>::infinity();
      alpha[ii] = none_seen ? Acc(1) : vexp(m[ii] - m_new[ii]);  // 0 on a query's first keys (m = -inf)
      rescale |= alpha[ii] != Acc(1);
      m[ii] = m_new[ii];
      if (none_seen) m_new[ii] = 0;  // the shift of this tile's exponentials
    }
    ops.exp_shifted(s, bc, br, kQueryTile, m_new, sums);
    for (int64_t ii = 0; ii < br; ++ii) l[ii] = l[ii] * alpha[ii] + sums[ii];
    if (rescale && j0 > 0)
      for (int64_t ii = 0; ii < br; ++ii)
        for (int64_t c = 0; c < d; ++c) acc[ii * d + c] *= alpha[ii];
    if (p.dropout_p > 0) {
      dropout_tile(p, g, i0, br, j0, bc, z);
      for (int64_t jj = 0; jj < bc; ++jj)
        for (int64_t ii = 0; ii < br; ++ii) s[jj * kQueryTile + ii] *= z[jj * kQueryTile + ii];
    }
    // O (+)= P V_j, P read transposed out of S^T.
    accumulate_queries(ops, mask, d, s, v.data + j0 * v.ld, v.ld, acc);
  }

  Acc* lse = static_cast<Acc*>(x.lse) + g * p.tq + i0;
  T* o = static_cast<T*>(x.o.data) + x.o.offset(b, h, i0);
  for (int64_t ii = 0; ii < br; ++ii) {
    lse[ii] = m[ii] + std::log(l[ii]);
    const Acc inv_l = Acc(1) / l[ii];
    Acc* row = acc + ii * d;
    for (int64_t c = 0; c < d; ++c) row[c] *= inv_l;
    // Half outputs through convert.h's SIMD rounding (the same bits as T(row[c])): the scalar
    // conversion here was 4% of an fp16 GPT step (perf, T = 64), 8x this loop's f32 cost.
    if constexpr (std::is_same_v<Acc, float> && !std::is_same_v<T, float>)
      from_float(row, o + ii * x.o.row_stride, d);
    else
      for (int64_t c = 0; c < d; ++c) o[ii * x.o.row_stride + c] = T(row[c]);
  }
}

// A number for each forward call, shared by every dtype (the converted rows of a bf16 call and an
// f16 call live in the same float workspace), so no call mistakes another's rows for its own.
uint64_t next_forward_call() {
  static std::atomic<uint64_t> calls{0};
  return ++calls;
}

template <class T, class Acc>
void forward_typed(const AttentionProblem& p, const ForwardOperands& x, const detail::AttentionTileOps<Acc>& ops) {
  const int64_t groups = p.batch * p.heads, tiles = (p.tq + kQueryTile - 1) / kQueryTile;
  const uint64_t call = next_forward_call();
  // A whole (b, h) per hand-out when there are at least two per thread (its query tiles then reuse
  // the converted keys and values, and every (b, h) has the same work, so the balance holds), else
  // single query tiles, so a few long rows still spread over every thread.
  const int64_t chunk = groups >= 2 * int64_t(omp_get_max_threads()) ? tiles : 1;
  // Exceptions must not leave an OpenMP region; nothing below throws (allocation aside).
#pragma omp parallel for schedule(dynamic, chunk) if (groups * tiles > 1)
  for (int64_t task = 0; task < groups * tiles; ++task)
    forward_task<T, Acc>(p, x, task / tiles, task % tiles * kQueryTile, call, ops);
}

// ---- backward ---------------------------------------------------------------------------------------

struct BackwardOperands {
  AttentionTensor q, k, v, o, dout, dq, dk, dv;
  const void* lse;
  void* delta;
};

template <class T, class Acc>
void backward_group(const AttentionProblem& p, const BackwardOperands& x, int64_t g,
                    const detail::AttentionTileOps<Acc>& ops) {
  const int64_t b = g / p.heads, h = g % p.heads, d = p.d, tq = p.tq, tk = p.tk;
  Workspace<Acc>& w = workspace<Acc>();
  const Rows<Acc> q = read_rows<T, Acc>(x.q, b, h, 0, tq, d, w.q);
  const Rows<Acc> k = read_rows<T, Acc>(x.k, b, h, 0, tk, d, w.k);
  const Rows<Acc> v = read_rows<T, Acc>(x.v, b, h, 0, tk, d, w.v);
  const Rows<Acc> o = read_rows<T, Acc>(x.o, b, h, 0, tq, d, w.o);
  const Rows<Acc> dout = read_rows<T, Acc>(x.dout, b, h, 0, tq, d, w.dout);
  // Q^T and dO^T packed per query tile, [tile][d][kQueryTile]: a tile's rows are 256 bytes apart.
  // (One [d][tq] matrix put them tq * 4 bytes apart, 4 KiB at T = 1024, all in the same few L1 sets:
  // the products reading them missed L1 on most rows.)
  const int64_t query_tiles = (tq + kQueryTile - 1) / kQueryTile;
  Acc* qt = Workspace<Acc>::sized(w.qt, query_tiles * d * kQueryTile);
  Acc* dout_t = Workspace<Acc>::sized(w.dout_t, query_tiles * d * kQueryTile);
  for (int64_t i0 = 0; i0 < tq; i0 += kQueryTile) {
    const int64_t br = std::min(kQueryTile, tq - i0), at = i0 * d;  // tile i0 / kQueryTile starts at i0 * d
    pack_transposed(Rows<Acc>{q.data + i0 * q.ld, q.ld}, br, d, Acc(p.scale), qt + at, kQueryTile);
    pack_transposed(Rows<Acc>{dout.data + i0 * dout.ld, dout.ld}, br, d, Acc(1), dout_t + at, kQueryTile);
  }

  const Acc* lse = static_cast<const Acc*>(x.lse) + g * tq;
  Acc* delta = static_cast<Acc*>(x.delta) + g * tq;
  for (int64_t i = 0; i < tq; ++i) {
    Acc sum = 0;
    for (int64_t c = 0; c < d; ++c) sum += dout.data[i * dout.ld + c] * o.data[i * o.ld + c];
    delta[i] = sum;
  }

  Acc* s = Workspace<Acc>::sized(w.s, kKeyTile * kQueryTile);
  Acc* dp = Workspace<Acc>::sized(w.dp, kKeyTile * kQueryTile);
  Acc* z = Workspace<Acc>::sized(w.z, kKeyTile * kQueryTile);
  Acc* pz = Workspace<Acc>::sized(w.pz, kKeyTile * kQueryTile);
  Acc* dq = Workspace<Acc>::sized(w.dq, tq * d);
  Acc* dk = Workspace<Acc>::sized(w.dk, kKeyTile * d);
  Acc* dv = Workspace<Acc>::sized(w.dv, kKeyTile * d);
  std::fill(dq, dq + tq * d, Acc(0));
  const bool dropout = p.dropout_p > 0;

  for (int64_t j0 = 0; j0 < tk; j0 += kKeyTile) {
    const int64_t bc = std::min(kKeyTile, tk - j0);
    std::fill(dk, dk + bc * d, Acc(0));
    std::fill(dv, dv + bc * d, Acc(0));
    const Acc* k_tile = k.data + j0 * k.ld;
    const Acc* v_tile = v.data + j0 * v.ld;
    // The first query that sees key j0 (causal), rounded down to its tile.
    const int64_t first_query = p.causal ? std::max<int64_t>(0, j0 - (tk - tq)) : 0;
    for (int64_t i0 = first_query / kQueryTile * kQueryTile; i0 < tq; i0 += kQueryTile) {
      const int64_t br = std::min(kQueryTile, tq - i0);
      const TileMask mask = tile_mask(p, j0, bc, i0, br);
      keys_by_queries(ops, mask, d, k_tile, k.ld, qt + i0 * d, kQueryTile, s);
      apply_attention_mask<T, Acc>(p.mask, b, h, i0, br, j0, bc, s);
      if (mask.partial) fill_hidden(mask, s, -std::numeric_limits<Acc>::infinity());
      ops.exp_shifted(s, bc, br, kQueryTile, lse + i0, nullptr);  // P^T
      const Acc* p_kept = s;
      if (dropout) {
        dropout_tile(p, g, i0, br, j0, bc, z);
        for (int64_t jj = 0; jj < bc; ++jj)
          for (int64_t ii = 0; ii < br; ++ii)
            pz[jj * kQueryTile + ii] = s[jj * kQueryTile + ii] * z[jj * kQueryTile + ii];
        p_kept = pz;
      }
      accumulate_keys(ops, mask, d, p_kept, dout.data + i0 * dout.ld, dout.ld, dv);
      keys_by_queries(ops, mask, d, v_tile, v.ld, dout_t + i0 * d, kQueryTile, dp);  // dP^T (before Z')
      if (mask.partial) fill_hidden(mask, dp, Acc(0));
      for (int64_t jj = 0; jj < bc; ++jj) {
        Acc* dp_row = dp + jj * kQueryTile;
        const Acc* p_row = s + jj * kQueryTile;
        const Acc* z_row = z + jj * kQueryTile;
        if (dropout)
          for (int64_t ii = 0; ii < br; ++ii) dp_row[ii] = p_row[ii] * (dp_row[ii] * z_row[ii] - delta[i0 + ii]);
        else
          for (int64_t ii = 0; ii < br; ++ii) dp_row[ii] = p_row[ii] * (dp_row[ii] - delta[i0 + ii]);
      }
      // dp now holds dS^T.
      accumulate_keys(ops, mask, d, dp, q.data + i0 * q.ld, q.ld, dk);
      accumulate_queries(ops, mask, d, dp, k_tile, k.ld, dq + i0 * d);
    }
    write_rows<T, Acc>(x.dk, b, h, j0, bc, d, dk, Acc(p.scale));
    write_rows<T, Acc>(x.dv, b, h, j0, bc, d, dv, Acc(1));
  }
  write_rows<T, Acc>(x.dq, b, h, 0, tq, d, dq, Acc(p.scale));
}

template <class T, class Acc>
void backward_typed(const AttentionProblem& p, const BackwardOperands& x, const detail::AttentionTileOps<Acc>& ops) {
  const int64_t groups = p.batch * p.heads;
#pragma omp parallel for schedule(dynamic) if (groups > 1)
  for (int64_t g = 0; g < groups; ++g) backward_group<T, Acc>(p, x, g, ops);
}

// ---- checks -------------------------------------------------------------------------------------------

void check_problem(const char* op, const AttentionProblem& p, DType dtype) {
  HG_CHECK(is_floating(dtype), "[", op, "] expected a floating dtype (f32, f64, f16, bf16), got ", dtype_name(dtype));
  HG_CHECK(p.batch >= 0 && p.heads >= 0 && p.tq >= 0 && p.tk >= 0, "[", op,
           "] expected non-negative sizes, got batch=", p.batch, ", heads=", p.heads, ", tq=", p.tq, ", tk=", p.tk);
  HG_CHECK(p.d >= 1, "[", op, "] expected a head dimension d >= 1, got d=", p.d);
  HG_CHECK(p.tq == 0 || p.tk >= 1, "[", op, "] expected at least one key for ", p.tq, " queries, got tk=0");
  HG_CHECK(!p.causal || p.tk >= p.tq, "[", op, "] causal attention expects tk >= tq, got tq=", p.tq, ", tk=", p.tk);
  HG_CHECK(p.dropout_p >= 0.0 && p.dropout_p < 1.0, "[", op, "] expected dropout_p in [0, 1), got ", p.dropout_p);
  HG_CHECK(std::isfinite(p.scale), "[", op, "] expected a finite scale, got ", p.scale);
}

void check_operand(const char* op, const char* name, const void* data, int64_t elements) {
  HG_CHECK(data != nullptr || elements == 0, "[", op, "] ", name, " is null; expected ", elements, " elements");
}

}  // namespace

namespace detail {

void attention_forward_on(AttentionPath path, const AttentionProblem& p, AttentionTensor q, AttentionTensor k,
                          AttentionTensor v, AttentionTensor o, void* lse, DType dtype) {
  const char* op = "attention_forward";
  check_problem(op, p, dtype);
  const int64_t bh = p.batch * p.heads;
  check_operand(op, "q", q.data, bh * p.tq * p.d);
  check_operand(op, "k", k.data, bh * p.tk * p.d);
  check_operand(op, "v", v.data, bh * p.tk * p.d);
  check_operand(op, "o", o.data, bh * p.tq * p.d);
  check_operand(op, "lse", lse, bh * p.tq);
  if (bh * p.tq == 0) return;
  const ForwardOperands x{q, k, v, o, lse};
  dispatch_floating(dtype, op, [&]<class T>() {
    using Acc = acc_t<T>;
    forward_typed<T, Acc>(p, x, choose_ops<Acc>(path, op));
  });
}

void attention_backward_on(AttentionPath path, const AttentionProblem& p, AttentionTensor q, AttentionTensor k,
                           AttentionTensor v, AttentionTensor o, AttentionTensor dout, const void* lse, void* delta,
                           AttentionTensor dq, AttentionTensor dk, AttentionTensor dv, DType dtype) {
  const char* op = "attention_backward";
  check_problem(op, p, dtype);
  const int64_t bh = p.batch * p.heads;
  check_operand(op, "q", q.data, bh * p.tq * p.d);
  check_operand(op, "k", k.data, bh * p.tk * p.d);
  check_operand(op, "v", v.data, bh * p.tk * p.d);
  check_operand(op, "o", o.data, bh * p.tq * p.d);
  check_operand(op, "dout", dout.data, bh * p.tq * p.d);
  check_operand(op, "lse", lse, bh * p.tq);
  check_operand(op, "delta", delta, bh * p.tq);
  check_operand(op, "dq", dq.data, bh * p.tq * p.d);
  check_operand(op, "dk", dk.data, bh * p.tk * p.d);
  check_operand(op, "dv", dv.data, bh * p.tk * p.d);
  if (bh * (p.tq + p.tk) == 0) return;
  const BackwardOperands x{q, k, v, o, dout, dq, dk, dv, lse, delta};
  dispatch_floating(dtype, op, [&]<class T>() {
    using Acc = acc_t<T>;
    backward_typed<T, Acc>(p, x, choose_ops<Acc>(path, op));
  });
}

}  // namespace detail

void attention_forward(const AttentionProblem& p, AttentionTensor q, AttentionTensor k, AttentionTensor v,
                       AttentionTensor o, void* lse, DType dtype) {
  detail::attention_forward_on(detail::AttentionPath::automatic, p, q, k, v, o, lse, dtype);
}

void attention_backward(const AttentionProblem& p, AttentionTensor q, AttentionTensor k, AttentionTensor v,
                        AttentionTensor o, AttentionTensor dout, const void* lse, void* delta, AttentionTensor dq,
                        AttentionTensor dk, AttentionTensor dv, DType dtype) {
  detail::attention_backward_on(detail::AttentionPath::automatic, p, q, k, v, o, dout, lse, delta, dq, dk, dv, dtype);
}

}  // namespace hg::kernels::cpu
