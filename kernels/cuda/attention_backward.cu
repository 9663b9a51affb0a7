// Fused attention backward (FlashAttention-2, Dao 2023, Algorithm 2), deterministic: dQ, dK, dV of
// kernels/attention_problem.h without a T x T buffer. For one (b, h), with P recomputed from q, k and
// the forward's lse, Z the regenerated dropout keep (scaled by 1 / (1 - p)):
//   D[i]  = sum_c dO[i, c] O[i, c]                                   (delta_kernel, fp32)
//   P     = exp(scale q k^T - lse),   dP = dO v^T
//   dV    = (P Z)^T dO,   dS = P (dP Z - D),   dK = scale dS^T q,   dQ = scale dS k
//
// Three kernels, each output element written (=) by exactly one block in a fixed order, so the same
// inputs give the same bits run to run whatever order the blocks run in:
//   1. delta_kernel: a warp per row of dO and O, D in fp32 into `delta`.
//   2. key_tile_kernel: a block per (b, h, 64-key tile j). K_j and V_j stay in shared memory; the
//      block walks the query tiles i that see any key of the tile (causal: from the first such tile
//      on, the fully masked ones before it are skipped) and accumulates dK_j and dV_j in fp32.
//   3. query_tile_kernel: a block per (b, h, 64-query tile i). Q_i, dO_i, lse_i and D_i stay in
//      shared memory; the block walks the key tiles j the tile sees (causal: up to the last visible
//      key) and accumulates dQ_i in fp32.
// Why not FlashAttention-2's single pass with fp32 atomicAdd into dQ: the order of the atomics
// differs run to run, and so would the bits of dQ; it also needs a B*H*T*d fp32 dQ scratch and a
// conversion kernel. The price of determinism: both kernels recompute S = q k^T and dP = dO v^T, so
// the backward does 7 tile products of 64 x 64 x d instead of 5 (1.4x the FLOPs of FA-2's backward),
// with no atomic traffic and no scratch beyond `delta`. And in DRAM traffic: each kernel reads its
// operands once, so q, k, v and dO are read by both tile kernels and o, dO by the delta kernel,
// 1.63x one pass of the op's buffers (the kernel audit's DRAM check is exempted for this reason:
// audit/exemptions.cpp).
//
// Per step of either kernel (a 64 x 64 tile pair; i = query row, j = key row):
//   S[64][64]  = Q_i K_j^T          (scores)          dP[64][64] = dO_i V_j^T        (fp32 products)
//   with an attn_mask, mask_score_tile first makes S = scale S + mask (-inf where a bool mask hides the
//     key; coalesced mask reads, one more block barrier), and the scale below becomes 1;
//   elementwise, four columns per thread step, in fp32: P = exp(scale S - lse[i]) on the visible
//     (i, j) (0 elsewhere, rows past tq and keys past tk included), z = keep(i, j) / (1 - p),
//     Pz = P z, dS = P (dP z - D[i]); Pz and dS rounded to the operand type
//   key kernel:   dV_j += Pz^T dO_i,  dK_j += dS^T Q_i          query kernel:  dQ_i += dS K_j
//   The scale of dK and dQ is applied once, in fp32, when the accumulators are written.
// The dropout keep of (i, j) is philox.h's dropout_keep at index ((b * heads + h) * tq + i) * tk + j
// (the composed path's index), evaluated in both kernels, one Philox block per four keys (two when tk
// is not a multiple of 4).
//
// Tile products: one policy per operand type so the kernels are written once.
//   WmmaProducts<__half / __nv_bfloat16>: tensor cores through nvcuda::wmma 16x16x16 fragments,
//     fp32 accumulate. 8 warps: for a 64 x 64 score tile warp w computes the 16 x 16 blocks (w / 2,
//     2 (w % 2)) and (w / 2, 2 (w % 2) + 1); for a 64 x d accumulator warp w owns rows 16 (w % 4) and
//     columns (w / 4) d / 2 .. + d / 2 (d / 32 fragments). Per-element work never touches fragment
//     elements: scores are stored to shared fp32 (store_matrix_sync), and Pz / dS are fed to the next
//     mma as half tiles loaded from shared (load_matrix_sync), so no register layout is assumed.
//   SimtProducts (f32, CUDA cores): thread (warp w, lane l) owns rows w + 8 r (r < 8) and columns
//     l + 32 c of each product; every inner step reads one value that is the same for the whole warp
//     (a broadcast) and one per lane (a row of B for S = A B^T, 16 bytes at a time; consecutive
//     elements of a row for the accumulators).
//
// Shared memory (dynamic, over 48 KiB: raised with cudaFuncSetAttribute), in the operand type Op;
// tiles, pads, strided tile loads and the dropout draw are attention_tiles.h's, shared with the forward:
//   Q, dO, K, V   [64][d + 16 B]     the four 64 x d operand tiles (zero rows past tq / tk)
//   S, dP         [64][72] fp32      products, then the elementwise pass reads them
//   Pz, dS        [64][72] Op        WMMA: the next mma's operands; SIMT: they alias S and dP
//   lse, D        [64] fp32          of the query tile
// At the end the accumulators go through a [64][d + 8] fp32 tile over the operand tiles, so the
// global stores are coalesced rows (and the scale is applied there).
// Bank conflicts (32 banks of 4 bytes):
//   - operand tiles have rows of d + 16 bytes (each row starts 4 banks after the previous mod 32), so
//     the eight 16-byte row segments a WMMA fragment load (or a SIMT lane's 16-byte read of its own
//     row) touches per phase fall on 32 distinct banks; the [64][72] half tiles likewise (144-byte
//     rows).
//   - fp32 tiles have rows of 72 (or d + 8) floats: 8 banks apart, so the accumulator's 8-byte pairs
//     that a half warp stores (4 rows x 8 columns) cover 32 distinct banks.
//   - SIMT row reads [k][c] are consecutive words; loads of operand tiles and the elementwise pass move
//     consecutive elements per lane.
#include "kernels/attention_problem.h"
#include "kernels/cuda/attention_tiles.h"
#include "kernels/cuda/device_math.h"
#include "kernels/kernels_cuda.h"

// Partial unrolling of the product loops keeps the WMMA kernels within 255 registers (no spills).
#if defined(__CUDACC__)
#define HG_UNROLL_TWO _Pragma("unroll 2")
#else
#define HG_UNROLL_TWO
#endif

namespace hg::kernels::cuda {
namespace {

using attention::AttentionDropout;
using attention::tile_ld;

constexpr int kTile = attention::kQueryTile;  // query rows and key rows of a tile
static_assert(attention::kKeyTile == kTile, "square tiles: one shared layout serves both kernels");
constexpr int kThreads = 256;  // 8 warps (the forward uses 4: here two 64 x d accumulators share them)
constexpr int kWarps = kThreads / kWarpSize;
// Row length of the [64][64] tiles (fp32 and Op): 8 more than the 64 columns, not attention_tiles.h's
// 4, so that whole accumulator fragments stored by store_matrix_sync are conflict-free (see above).
constexpr int kScoreLd = kTile + 8;

// ---- tile products -------------------------------------------------------------------------------

// Tensor cores: Op is __half or __nv_bfloat16.
template <class Op, int D>
struct WmmaProducts {
  using Operand = Op;
  static constexpr int kLd = tile_ld<Op>(D);         // operand tile rows: d + 8
  static constexpr bool kAliasScores = false;        // Pz, dS are separate half tiles
  static constexpr int kAccFragments = D / 32;       // per warp: 16 rows x d / 2 columns
  static constexpr int kK = 16;                      // WMMA's 16 x 16 x 16

  using AccFrag = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>;

  struct Acc {
    AccFrag f[kAccFragments];
  };

  HG_DEVICE static void zero(Acc& acc) {
    HG_UNROLL
    for (int n = 0; n < kAccFragments; ++n) nvcuda::wmma::fill_fragment(acc.f[n], 0.0f);
  }

  // out[64][64] (fp32, row length kScoreLd) = A[64][D] B[64][D]^T, A and B operand tiles.
  HG_DEVICE static void scores(float* out, const Op* a, const Op* b) {
    namespace w = nvcuda::wmma;
    const int warp = int(threadIdx.x) / kWarpSize;
    const int row = (warp / 2) * 16, col = (warp % 2) * 32;
    AccFrag s0, s1;
    w::fill_fragment(s0, 0.0f);
    w::fill_fragment(s1, 0.0f);
    HG_UNROLL_TWO
    for (int k = 0; k < D; k += kK) {
      w::fragment<w::matrix_a, 16, 16, 16, Op, w::row_major> fa;
      w::fragment<w::matrix_b, 16, 16, 16, Op, w::col_major> fb0, fb1;  // B^T[k][n] = B[n][k]
      w::load_matrix_sync(fa, a + row * kLd + k, kLd);
      w::load_matrix_sync(fb0, b + col * kLd + k, kLd);
      w::load_matrix_sync(fb1, b + (col + 16) * kLd + k, kLd);
      w::mma_sync(s0, fa, fb0, s0);
      w::mma_sync(s1, fa, fb1, s1);
    }
    w::store_matrix_sync(out + row * kScoreLd + col, s0, kScoreLd, w::mem_row_major);
    w::store_matrix_sync(out + row * kScoreLd + col + 16, s1, kScoreLd, w::mem_row_major);
  }

  // acc[64][D] += op(A)[64][64] B[64][D]: op(A) = A^T when kTransposeA (A[k][m], e.g. Pz^T), else A
  // (A[m][k]); A has rows of kScoreLd, B is an operand tile.
  template <bool kTransposeA>
  HG_DEVICE static void accumulate(Acc& acc, const Op* a, const Op* b) {
    namespace w = nvcuda::wmma;
    const int warp = int(threadIdx.x) / kWarpSize;
    const int row = (warp % 4) * 16, col = (warp / 4) * (D / 2);
    using LayoutA = std::conditional_t<kTransposeA, w::col_major, w::row_major>;
    HG_NO_UNROLL
    for (int k = 0; k < kTile; k += kK) {
      w::fragment<w::matrix_a, 16, 16, 16, Op, LayoutA> fa;
      w::load_matrix_sync(fa, kTransposeA ? a + k * kScoreLd + row : a + row * kScoreLd + k, kScoreLd);
      HG_UNROLL
      for (int n = 0; n < kAccFragments; ++n) {
        w::fragment<w::matrix_b, 16, 16, 16, Op, w::row_major> fb;
        w::load_matrix_sync(fb, b + k * kLd + col + 16 * n, kLd);
        w::mma_sync(acc.f[n], fa, fb, acc.f[n]);
      }
    }
  }

  // tile[64][D + 8] (fp32) = acc.
  HG_DEVICE static void store(const Acc& acc, float* tile) {
    const int warp = int(threadIdx.x) / kWarpSize;
    const int row = (warp % 4) * 16, col = (warp / 4) * (D / 2);
    HG_UNROLL
    for (int n = 0; n < kAccFragments; ++n) {
      nvcuda::wmma::store_matrix_sync(tile + row * (D + 8) + col + 16 * n, acc.f[n], D + 8, nvcuda::wmma::mem_row_major);
    }
  }
};

// CUDA cores, fp32 operands.
template <int D>
struct SimtProducts {
  using Operand = float;
  static constexpr int kLd = tile_ld<float>(D);  // d + 4: 16-byte row reads hit distinct bank groups
  static constexpr bool kAliasScores = true;   // Pz, dS overwrite S, dP in place (same thread, same element)
  static constexpr int kRows = kTile / kWarps;  // 8 rows per thread: warp + 8 r
  static constexpr int kCols = D / kWarpSize;   // columns lane + 32 c

  struct Acc {
    float v[kRows][kCols];
  };

  HG_DEVICE static void zero(Acc& acc) {
    HG_UNROLL
    for (int r = 0; r < kRows; ++r) {
      HG_UNROLL
      for (int c = 0; c < kCols; ++c) acc.v[r][c] = 0.0f;
    }
  }

  HG_DEVICE static void scores(float* out, const float* a, const float* b) {
    const int warp = int(threadIdx.x) / kWarpSize, lane = int(threadIdx.x) % kWarpSize;
    constexpr int kScoreCols = kTile / kWarpSize;
    float s[kRows][kScoreCols] = {};
    for (int k = 0; k < D; k += 4) {
      Pack<float, 4> bk[kScoreCols];
      HG_UNROLL
      for (int c = 0; c < kScoreCols; ++c) bk[c] = load_pack<4>(b + (lane + kWarpSize * c) * kLd + k);
      HG_UNROLL
      for (int r = 0; r < kRows; ++r) {
        const Pack<float, 4> ak = load_pack<4>(a + (warp + kWarps * r) * kLd + k);
        HG_UNROLL
        for (int c = 0; c < kScoreCols; ++c) {
          HG_UNROLL
          for (int w = 0; w < 4; ++w) s[r][c] += ak.v[w] * bk[c].v[w];
        }
      }
    }
    HG_UNROLL
    for (int r = 0; r < kRows; ++r) {
      HG_UNROLL
      for (int c = 0; c < kScoreCols; ++c) out[(warp + kWarps * r) * kScoreLd + lane + kWarpSize * c] = s[r][c];
    }
  }

  template <bool kTransposeA>
  HG_DEVICE static void accumulate(Acc& acc, const float* a, const float* b) {
    const int warp = int(threadIdx.x) / kWarpSize, lane = int(threadIdx.x) % kWarpSize;
    for (int k = 0; k < kTile; ++k) {
      float bk[kCols];
      HG_UNROLL
      for (int c = 0; c < kCols; ++c) bk[c] = b[k * kLd + lane + kWarpSize * c];
      HG_UNROLL
      for (int r = 0; r < kRows; ++r) {
        const int m = warp + kWarps * r;
        const float ak = kTransposeA ? a[k * kScoreLd + m] : a[m * kScoreLd + k];
        HG_UNROLL
        for (int c = 0; c < kCols; ++c) acc.v[r][c] += ak * bk[c];
      }
    }
  }

  HG_DEVICE static void store(const Acc& acc, float* tile) {
    const int warp = int(threadIdx.x) / kWarpSize, lane = int(threadIdx.x) % kWarpSize;
    HG_UNROLL
    for (int r = 0; r < kRows; ++r) {
      HG_UNROLL
      for (int c = 0; c < kCols; ++c) tile[(warp + kWarps * r) * (D + 8) + lane + kWarpSize * c] = acc.v[r][c];
    }
  }
};

// ---- shared memory -------------------------------------------------------------------------------

template <class Products, int D>
struct SharedLayout {
  using Op = typename Products::Operand;
  static constexpr size_t kOperandTile = size_t(kTile) * Products::kLd * sizeof(Op);
  static constexpr size_t kScoreTile = size_t(kTile) * kScoreLd * sizeof(float);
  static constexpr size_t kHalfScoreTile = Products::kAliasScores ? 0 : size_t(kTile) * kScoreLd * sizeof(Op);
  static constexpr size_t q = 0, dout = q + kOperandTile, k = dout + kOperandTile, v = k + kOperandTile;
  static constexpr size_t s = v + kOperandTile, dp = s + kScoreTile;
  static constexpr size_t pz = dp + kScoreTile, ds = pz + kHalfScoreTile;
  static constexpr size_t lse = ds + kHalfScoreTile, delta = lse + kTile * sizeof(float);
  static constexpr size_t bytes = delta + kTile * sizeof(float);
  static_assert(size_t(kTile) * (D + 8) * sizeof(float) <= s, "the output tile reuses the operand tiles");
  static_assert(kOperandTile % 32 == 0 && kScoreTile % 32 == 0 && kHalfScoreTile % 32 == 0,
                "WMMA pointers must stay 32-byte aligned");

  unsigned char* base;
  HG_DEVICE Op* at(size_t offset) const { return reinterpret_cast<Op*>(base + offset); }
  HG_DEVICE float* f32(size_t offset) const { return reinterpret_cast<float*>(base + offset); }
  HG_DEVICE Op* pz_tile() const { return Products::kAliasScores ? at(s) : at(pz); }
  HG_DEVICE Op* ds_tile() const { return Products::kAliasScores ? at(dp) : at(ds); }
};

// ---- arguments and per-block coordinates ---------------------------------------------------------

struct Args {
  AttentionTensor q, k, v, o, dout, dq, dk, dv;
  AttentionMask mask;  // data null: none
  const float* lse;
  float* delta;
  int64_t heads, tq, tk;
  bool causal;
  float scale;
  AttentionDropout dropout;
  bool vector_loads;  // every operand's pointer and strides allow 16-byte loads into shared memory
};

// A block's (batch, head) and tile index: blockIdx.x = (b * heads + h) * tiles + tile.
struct BlockTile {
  int64_t bh, b, h, tile;
};

HG_DEVICE BlockTile block_tile(int64_t heads, int64_t tiles) {
  BlockTile t;
  t.bh = int64_t(blockIdx.x) / tiles;
  t.tile = int64_t(blockIdx.x) % tiles;
  t.b = t.bh / heads;
  t.h = t.bh % heads;
  return t;
}

// ---- tile moves ----------------------------------------------------------------------------------

// dst[64][tile_ld(D)] = rows row0 .. row0 + 63 of one (b, h) of t; rows at or past `rows` are 0.
template <int D, class T>
HG_DEVICE void load_operand_tile(T* dst, const AttentionTensor& t, int64_t b, int64_t h, int64_t row0, int64_t rows,
                                 bool vector_loads) {
  const int valid = int(rows - row0 < kTile ? rows - row0 : kTile);
  attention::load_tile<T, D>(dst, static_cast<const T*>(t.data) + t.offset(b, h, row0), t.row_stride, kTile, valid,
                             vector_loads);
}

// lse and D of the query rows i0 .. i0 + 63 (0 past tq: those rows are masked anyway).
HG_DEVICE void load_row_stats(float* lse, float* delta, const Args& a, int64_t bh, int64_t i0) {
  for (int r = int(threadIdx.x); r < kTile; r += kThreads) {
    const int64_t i = i0 + r;
    lse[r] = i < a.tq ? a.lse[bh * a.tq + i] : 0.0f;
    delta[r] = i < a.tq ? a.delta[bh * a.tq + i] : 0.0f;
  }
}

// Writes scale * tile[64][D + 8] to rows row0 .. (below `rows`) of one (b, h) of t, a row per
// group of lanes, consecutive columns per lane.
template <int D, class T>
HG_DEVICE void write_output_tile(const float* tile, float scale, const AttentionTensor& t, int64_t b, int64_t h,
                                 int64_t row0, int64_t rows) {
  T* dst = static_cast<T*>(t.data) + t.offset(b, h, row0);
  const int valid = int(rows - row0 < kTile ? rows - row0 : kTile);
  for (int e = int(threadIdx.x); e < valid * D; e += kThreads) {
    const int r = e / D, c = e % D;
    dst[r * t.row_stride + c] = from_acc<T>(tile[r * (D + 8) + c] * scale);
  }
}

// ---- the elementwise step ------------------------------------------------------------------------

// The keep bits of the four consecutive draws index .. index + 3 (attention_tiles.h's dropout_keep_at
// of four neighbouring keys): one Philox block serves all four when index is a multiple of 4 (tk a
// multiple of 4), two otherwise, instead of one block per element.
struct Keep4 {
  bool keep[4];
};

HG_DEVICE uint32_t philox_word(const Philox4& words, int w) {
  return w == 0 ? words.v[0] : w == 1 ? words.v[1] : w == 2 ? words.v[2] : words.v[3];
}

HG_DEVICE Keep4 dropout_keep4(const AttentionDropout& dropout, uint64_t index) {
  const uint32_t k0 = uint32_t(dropout.seed), k1 = uint32_t(dropout.seed >> 32);
  const uint64_t block = dropout.offset + index / 4;
  const int first = int(index % 4);
  const Philox4 low = philox4x32_10(Philox4{{uint32_t(block), uint32_t(block >> 32), 0u, 0u}}, k0, k1);
  Philox4 high = low;
  if (first != 0) high = philox4x32_10(Philox4{{uint32_t(block + 1), uint32_t((block + 1) >> 32), 0u, 0u}}, k0, k1);
  Keep4 out;
  HG_UNROLL
  for (int m = 0; m < 4; ++m) {
    const int w = first + m;
    out.keep[m] = bits_to_uniform(w < 4 ? philox_word(low, w) : philox_word(high, w - 4)) >= dropout.p;
  }
  return out;
}

// From S = Q_i K_j^T and dP = dO_i V_j^T (fp32, shared) of the query tile at i0 and the key tile at
// j0: Pz = P z (when kWithPz) and dS = P (dP z - D), rounded to Op, into their tiles. A thread handles
// 4 consecutive columns of a row per step (16-byte reads, one 4-element store per tile; one dropout
// draw of four): a warp covers two whole rows.
template <bool kWithPz, class Op>
HG_DEVICE void probabilities_and_ds(const float* s, const float* dp, Op* pz, Op* ds, const float* lse,
                                    const float* delta, const Args& a, int64_t bh, int64_t i0, int64_t j0) {
  const int64_t shift = a.tk - a.tq;  // causal: query i sees keys j <= i + shift
  const float score_scale = a.mask.data != nullptr ? 1.0f : a.scale;  // mask_score_tile scaled them
  constexpr int kGroups = kTile / 4;  // of 4 columns, per row
  for (int e = int(threadIdx.x); e < kTile * kGroups; e += kThreads) {
    const int r = e / kGroups, c0 = (e % kGroups) * 4;
    const int64_t i = i0 + r;
    const Pack<float, 4> s4 = load_pack<4>(s + r * kScoreLd + c0);
    const Pack<float, 4> dp4 = load_pack<4>(dp + r * kScoreLd + c0);
    const float row_lse = lse[r], row_delta = delta[r];  // once per row, by every lane (no divergent read)
    Keep4 keep = {{true, true, true, true}};
    if (a.dropout.active()) keep = dropout_keep4(a.dropout, uint64_t((bh * a.tq + i) * a.tk + j0 + c0));
    Pack<Op, 4> pz4, ds4;
    HG_UNROLL
    for (int m = 0; m < 4; ++m) {
      const int64_t j = j0 + c0 + m;
      const bool visible = i < a.tq && j < a.tk && (!a.causal || j <= i + shift);
      const float p = visible ? expf(s4.v[m] * score_scale - row_lse) : 0.0f;
      const float z = keep.keep[m] ? a.dropout.keep_scale : 0.0f;  // keep_scale = 1 without dropout
      pz4.v[m] = from_acc<Op>(p * z);
      ds4.v[m] = from_acc<Op>(p * (dp4.v[m] * z - row_delta));
    }
    // One 4-element store per tile (8 bytes for half types, 16 for f32): a half-warp (quarter-warp)
    // phase writes one 128-byte row segment. Four scalar stores, lanes 4 elements apart, would hit
    // each bank 2 (f32: 4) times per request across the warp's two rows.
    if constexpr (kWithPz) store_pack<4>(pz + r * kScoreLd + c0, pz4);
    store_pack<4>(ds + r * kScoreLd + c0, ds4);
  }
}

// With an attention mask: S[r][c] = scale S + mask(i0 + r, j0 + c) over the block's score tile, or -inf
// where a bool mask hides the key, for the query rows below tq and the keys below tk that the causal
// rule shows (probabilities_and_ds zeroes the rest, and then scales by 1). Consecutive threads take
// consecutive keys of a row: coalesced mask reads (a key-padding mask's row is one L1-resident row for
// every query) and consecutive shared-memory words.
template <class Op>
HG_DEVICE void mask_score_tile(float* s, const Args& a, int64_t b, int64_t h, int64_t i0, int64_t j0) {
  // Not unrolled: unrolled, its hoisted loads raised every tile kernel's registers by 30-100 (ptxas).
  HG_NO_UNROLL
  for (int e = int(threadIdx.x); e < kTile * kTile; e += kThreads) {
    const int r = e / kTile, c = e % kTile;
    const int64_t i = i0 + r, j = j0 + c;
    // Every thread reads and writes its word; only the mask read is predicated.
    const float score = s[r * kScoreLd + c];
    float masked = score;
    if (i < a.tq && j < a.tk && (!a.causal || j <= i + (a.tk - a.tq))) {
      const int64_t at = a.mask.offset(b, h, i, j);
      if (a.mask.additive) {
        masked = score * a.scale + to_acc(static_cast<const Op*>(a.mask.data)[at]);
      } else {
        const bool keep = static_cast<const unsigned char*>(a.mask.data)[at] != 0;
        masked = keep ? score * a.scale : neg_infinity<float>();
      }
    }
    s[r * kScoreLd + c] = masked;
  }
}

// ---- kernels -------------------------------------------------------------------------------------

// D[row] = sum_c dO[row, c] O[row, c], a warp per row of [batch, heads, tq].
template <class T, int D>
__global__ void __launch_bounds__(kThreads) delta_kernel(Args a, int64_t rows) {
  const int lane = int(threadIdx.x) % kWarpSize;
  const int64_t row = int64_t(blockIdx.x) * kWarps + int(threadIdx.x) / kWarpSize;
  if (row >= rows) return;  // a whole warp: no block barrier follows
  const int64_t i = row % a.tq, bh = row / a.tq;
  const int64_t b = bh / a.heads, h = bh % a.heads;
  const T* o = static_cast<const T*>(a.o.data) + a.o.offset(b, h, i);
  const T* dout = static_cast<const T*>(a.dout.data) + a.dout.offset(b, h, i);
  float sum = 0.0f;
  for (int c = lane; c < D; c += kWarpSize) sum += to_acc(dout[c]) * to_acc(o[c]);
  sum = warp_reduce(sum, SumOp{});
  if (lane == 0) a.delta[row] = sum;
}

// dK and dV of one 64-key tile (the file's header: kernel 2).
template <class Products, class T, int D>
__global__ void __launch_bounds__(kThreads, 1) key_tile_kernel(Args a, int64_t key_tiles) {
  using Layout = SharedLayout<Products, D>;
  HG_DYNAMIC_SHARED(unsigned char, smem);
  const Layout sm{smem};
  const BlockTile t = block_tile(a.heads, key_tiles);
  const int64_t j0 = t.tile * kTile;
  load_operand_tile<D>(sm.at(Layout::k), a.k, t.b, t.h, j0, a.tk, a.vector_loads);
  load_operand_tile<D>(sm.at(Layout::v), a.v, t.b, t.h, j0, a.tk, a.vector_loads);

  typename Products::Acc dk, dv;
  Products::zero(dk);
  Products::zero(dv);
  // Causal: query i sees key j0 once i >= j0 - (tk - tq); earlier query tiles are fully masked.
  const int64_t first_query = a.causal && j0 > a.tk - a.tq ? j0 - (a.tk - a.tq) : 0;
  for (int64_t i0 = first_query / kTile * kTile; i0 < a.tq; i0 += kTile) {
    __syncthreads();  // the previous step's readers of Q, dO, Pz, dS are done
    load_operand_tile<D>(sm.at(Layout::q), a.q, t.b, t.h, i0, a.tq, a.vector_loads);
    load_operand_tile<D>(sm.at(Layout::dout), a.dout, t.b, t.h, i0, a.tq, a.vector_loads);
    load_row_stats(sm.f32(Layout::lse), sm.f32(Layout::delta), a, t.bh, i0);
    __syncthreads();
    Products::scores(sm.f32(Layout::s), sm.at(Layout::q), sm.at(Layout::k));
    Products::scores(sm.f32(Layout::dp), sm.at(Layout::dout), sm.at(Layout::v));
    __syncthreads();
    if (a.mask.data != nullptr) {  // block-uniform
      mask_score_tile<T>(sm.f32(Layout::s), a, t.b, t.h, i0, j0);
      __syncthreads();
    }
    probabilities_and_ds<true>(sm.f32(Layout::s), sm.f32(Layout::dp), sm.pz_tile(), sm.ds_tile(),
                               sm.f32(Layout::lse), sm.f32(Layout::delta), a, t.bh, i0, j0);
    __syncthreads();
    Products::template accumulate<true>(dv, sm.pz_tile(), sm.at(Layout::dout));
    Products::template accumulate<true>(dk, sm.ds_tile(), sm.at(Layout::q));
  }
  float* out = sm.f32(0);  // over the operand tiles, free once every warp is past its last product
  __syncthreads();
  Products::store(dv, out);
  __syncthreads();
  write_output_tile<D, T>(out, 1.0f, a.dv, t.b, t.h, j0, a.tk);
  __syncthreads();
  Products::store(dk, out);
  __syncthreads();
  write_output_tile<D, T>(out, a.scale, a.dk, t.b, t.h, j0, a.tk);
}

// dQ of one 64-query tile (the file's header: kernel 3).
template <class Products, class T, int D>
__global__ void __launch_bounds__(kThreads, 1) query_tile_kernel(Args a, int64_t query_tiles) {
  using Layout = SharedLayout<Products, D>;
  HG_DYNAMIC_SHARED(unsigned char, smem);
  const Layout sm{smem};
  const BlockTile t = block_tile(a.heads, query_tiles);
  const int64_t i0 = t.tile * kTile;
  load_operand_tile<D>(sm.at(Layout::q), a.q, t.b, t.h, i0, a.tq, a.vector_loads);
  load_operand_tile<D>(sm.at(Layout::dout), a.dout, t.b, t.h, i0, a.tq, a.vector_loads);
  load_row_stats(sm.f32(Layout::lse), sm.f32(Layout::delta), a, t.bh, i0);

  typename Products::Acc dq;
  Products::zero(dq);
  // Causal: the tile's last query row sees keys up to last + (tk - tq); later key tiles are masked.
  const int64_t last_query = (i0 + kTile < a.tq ? i0 + kTile : a.tq) - 1;
  const int64_t key_end = a.causal && last_query + (a.tk - a.tq) + 1 < a.tk ? last_query + (a.tk - a.tq) + 1 : a.tk;
  for (int64_t j0 = 0; j0 < key_end; j0 += kTile) {
    __syncthreads();  // the previous step's readers of K, dS are done
    load_operand_tile<D>(sm.at(Layout::k), a.k, t.b, t.h, j0, a.tk, a.vector_loads);
    load_operand_tile<D>(sm.at(Layout::v), a.v, t.b, t.h, j0, a.tk, a.vector_loads);
    __syncthreads();
    Products::scores(sm.f32(Layout::s), sm.at(Layout::q), sm.at(Layout::k));
    Products::scores(sm.f32(Layout::dp), sm.at(Layout::dout), sm.at(Layout::v));
    __syncthreads();
    if (a.mask.data != nullptr) {  // block-uniform
      mask_score_tile<T>(sm.f32(Layout::s), a, t.b, t.h, i0, j0);
      __syncthreads();
    }
    probabilities_and_ds<false>(sm.f32(Layout::s), sm.f32(Layout::dp), sm.pz_tile(), sm.ds_tile(),
                                sm.f32(Layout::lse), sm.f32(Layout::delta), a, t.bh, i0, j0);
    __syncthreads();
    Products::template accumulate<false>(dq, sm.ds_tile(), sm.at(Layout::k));
  }
  float* out = sm.f32(0);
  __syncthreads();
  Products::store(dq, out);
  __syncthreads();
  write_output_tile<D, T>(out, a.scale, a.dq, t.b, t.h, i0, a.tq);
}

// ---- host side -----------------------------------------------------------------------------------

template <class Kernel>
void launch_tiles(Kernel kernel, int64_t blocks, size_t shared_bytes, cudaStream_t stream, const Args& a,
                  int64_t tiles) {
  HG_CHECK(blocks <= int64_t(0x7fffffff), "[attention_backward] ", blocks,
           " blocks exceed the grid limit of 2^31 - 1 (batch * heads * tiles)");
  // Per device and per kernel; cheap, so set before every launch rather than tracking devices.
  HG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared_bytes)));
  launch(kernel, dim3(unsigned(blocks)), dim3(kThreads), shared_bytes, stream, a, tiles);
}

template <class Products, class T, int D>
void run_backward(const AttentionProblem& p, Args a, cudaStream_t stream) {
  a.vector_loads = attention::vector_loads_ok<T>(a.q) && attention::vector_loads_ok<T>(a.k) &&
                   attention::vector_loads_ok<T>(a.v) && attention::vector_loads_ok<T>(a.dout);
  const int64_t bh = p.batch * p.heads;
  const int64_t rows = bh * p.tq;
  if (rows > 0) {
    HG_CHECK((rows + kWarps - 1) / kWarps <= int64_t(0x7fffffff), "[attention_backward] ", rows,
             " rows exceed the grid limit");
    launch(delta_kernel<T, D>, dim3(unsigned((rows + kWarps - 1) / kWarps)), dim3(kThreads), 0, stream, a, rows);
  }
  constexpr size_t kShared = SharedLayout<Products, D>::bytes;
  const int64_t key_tiles = (p.tk + kTile - 1) / kTile, query_tiles = (p.tq + kTile - 1) / kTile;
  launch_tiles(key_tile_kernel<Products, T, D>, bh * key_tiles, kShared, stream, a, key_tiles);
  launch_tiles(query_tile_kernel<Products, T, D>, bh * query_tiles, kShared, stream, a, query_tiles);
}

template <template <int> class ProductsOf, class T>
void run_backward_d(const AttentionProblem& p, const Args& a, cudaStream_t stream) {
  if (p.d == 64) {
    run_backward<ProductsOf<64>, T, 64>(p, a, stream);
  } else {
    run_backward<ProductsOf<128>, T, 128>(p, a, stream);
  }
}

template <int D>
using WmmaHalf = WmmaProducts<__half, D>;
template <int D>
using WmmaBfloat16 = WmmaProducts<__nv_bfloat16, D>;

}  // namespace

void attention_backward(const AttentionProblem& p, AttentionTensor q, AttentionTensor k, AttentionTensor v,
                        AttentionTensor o, AttentionTensor dout, const void* lse, void* delta, AttentionTensor dq,
                        AttentionTensor dk, AttentionTensor dv, DType dtype, Stream stream) {
  HG_CHECK(cuda_attention_supports(p.d, dtype),
           "[attention_backward] the CUDA kernels take head dimension 64 or 128 "
           "in f16, bf16 or f32; got head dimension ",
           p.d, " and dtype ", dtype_name(dtype));
  HG_CHECK(p.batch >= 0 && p.heads >= 0 && p.tq >= 0 && p.tk >= 0, "[attention_backward] batch = ", p.batch,
           ", heads = ", p.heads, ", tq = ", p.tq, ", tk = ", p.tk, ", expected all >= 0");
  HG_CHECK(p.tq == 0 || p.tk > 0, "[attention_backward] tq = ", p.tq, " queries over tk = 0 keys: expected tk >= 1");
  HG_CHECK(!p.causal || p.tk >= p.tq, "[attention_backward] causal with tq = ", p.tq, " > tk = ", p.tk,
           ": expected tk >= tq (the queries are the last tq positions of the keys)");
  HG_CHECK(p.dropout_p >= 0.0 && p.dropout_p < 1.0, "[attention_backward] dropout_p = ", p.dropout_p,
           ", expected 0 <= dropout_p < 1");
  if (p.batch * p.heads == 0) return;

  Args a;
  a.q = q, a.k = k, a.v = v, a.o = o, a.dout = dout, a.dq = dq, a.dk = dk, a.dv = dv;
  a.mask = p.mask;
  a.lse = static_cast<const float*>(lse);
  a.delta = static_cast<float*>(delta);
  a.heads = p.heads, a.tq = p.tq, a.tk = p.tk;
  a.causal = p.causal;
  a.scale = float(p.scale);
  a.dropout = AttentionDropout::of(p);

  switch (dtype) {
    case DType::f16:
      run_backward_d<WmmaHalf, __half>(p, a, stream);
      break;
    case DType::bf16:
      run_backward_d<WmmaBfloat16, __nv_bfloat16>(p, a, stream);
      break;
    default:
      run_backward_d<SimtProducts, float>(p, a, stream);
      break;
  }
}

}  // namespace hg::kernels::cuda
