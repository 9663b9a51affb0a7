// Fused attention forward, FlashAttention-2 (Dao, 2023): O and the row log-sum-exp of
//   S = scale Q K^T (+ attn_mask; causal mask: query i sees keys j <= i + tk - tq),  P = exp(S - lse),
//   O = (P * Z / (1 - p)) V,  Z the Philox dropout keep bits of attention_problem.h,
// without ever storing S or P: the keys are visited a tile at a time with an online softmax, in fp32.
// (The math, operands and dropout index: kernels/attention_problem.h; reusable pieces:
// kernels/cuda/attention_tiles.h.)
//
// Parallel strategy. A block of 4 warps owns a 64-query tile of one (batch, head) (grid: q tiles x
// batch * heads, flattened); warp w owns query rows 16 w .. 16 w + 15 of the tile. Per 64-key tile
// (only the tiles a causal block sees: those wholly above its diagonal are skipped):
//   1. the block stages K and V [64, d] in shared memory (load_tile: 16-byte loads, zero rows past tk);
//   2. each warp computes its S block [16, 64] into its float scratch:
//      f16/bf16: WMMA 16x16x16 (Q fragments loaded once, held in registers; K read as a col-major B
//      operand), fp32 accumulation; f32: a scalar product on CUDA cores (each lane two keys);
//      with an attn_mask, the warp then adds it in place (mask_scores: S = scale S + mask, -inf where a
//      bool mask hides the key; lane-consecutive keys, so coalesced mask reads);
//   3. online softmax, per row, by the warp's lanes (ScratchLane: 2 lanes per row, 32 columns each,
//      one shuffle to combine): m' = max(m, rowmax), alpha = exp(m - m'), l' = alpha l + rowsum(exp(S -
//      m')); P = exp(S - m') times the dropout keep bit is written to the warp's P buffer in T (half P
//      feeds the tensor cores; lse uses the undropped sum); alpha goes to a per-warp row array;
//   4. O (fp32, in registers, lane l owning columns l + 32 c of the warp's 16 rows: the layout is ours,
//      never WMMA's, whose element-to-lane mapping is unspecified) is rescaled by alpha per row, then
//      P V is added: f16/bf16: WMMA into fresh accumulators, stored to the scratch and added column by
//      column; f32: accumulated directly from P (broadcast reads) and V (lane-contiguous reads).
// Finally O / l / (1 - p) is written to o (rows past tq skipped) and lse = m + log l.
//
// Shared memory (ForwardLayout; bytes for f16/bf16 d = 64 / 128: 55,552 / 96,512; f32: 88,320 /
// 137,472, all above the default 48 KiB, so the launch raises the limit with cudaFuncSetAttribute; on an
// H200, 2 blocks per SM for f16/bf16 (the registers allow 2 too), 1-2 for f32):
//   Q, K, V tiles  [64, d + 16 B]           T       (Q staged; the WMMA path then keeps it in registers)
//   scratch        4 warps x [16, n + 8]    float   n = max(64, d) (tensor cores: S, then P V), 64 (f32)
//   P              4 warps x [16, 64 + 16 B] T
//   row scale      4 warps x 16             float   alpha per tile, then 1 / l
// Bank conflicts (the enumeration is in attention_tiles.h): the 16-byte pad of the T tiles and the
// 32-byte pad of the float scratch make load_tile's 16-byte stores, WMMA operand loads (as ldmatrix or as
// 32-bit fragment-order reads), accumulator stores in the mma.sync order and the softmax walk
// (ScratchLane: float2 scratch reads, T-pair P writes) conflict-free on a GPU. Reading the scratch or V
// by columns lane + 32 c is consecutive words; P and the row scales are broadcast reads. The f32 S product
// walks the head dimension skewed by lane: lane j reads K[j][(c + j) mod d] and Q[r][(c + j) mod d],
// banks 5 j + c and 4 r + c + j mod 32, distinct across the warp. The kernel audit sees the WMMA calls'
// accesses in a GPU's order (kernels/emu/wmma.h) and finds no conflict.
//
// Not done (yet): K/V tiles are not double-buffered (no cp.async prefetch of tile j + 1 while tile j
// is computed), and dropout evaluates Philox once per pair of probabilities, not once per 4.
#include <cmath>
#include <type_traits>

#include "kernels/cuda/attention_tiles.h"
#include "kernels/cuda/device_math.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/cuda/online_softmax.h"
#include "kernels/kernels_cuda.h"

namespace hg::kernels::cuda {
namespace {

using attention::kKeyTile;
using attention::kQueryTile;
using attention::kThreads;
using attention::kWarpRows;
using attention::kWarps;

// Byte offsets of a block's shared-memory regions (the comment above).
template <class T, int D>
struct ForwardLayout {
  static constexpr bool kTensorCores = !std::is_same_v<T, float>;
  static constexpr int kTileLd = attention::tile_ld<T>(D);
  static constexpr int kScratchLd = attention::scratch_ld(kTensorCores && D > kKeyTile ? D : kKeyTile);
  static constexpr int kProbLd = attention::tile_ld<T>(kKeyTile);
  static constexpr size_t kTileBytes = size_t(kQueryTile) * kTileLd * sizeof(T);
  static constexpr size_t kQ = 0;
  static constexpr size_t kK = kQ + kTileBytes;
  static constexpr size_t kV = kK + kTileBytes;
  static constexpr size_t kScratch = kV + kTileBytes;
  static constexpr size_t kProb = kScratch + size_t(kWarps) * kWarpRows * kScratchLd * sizeof(float);
  static constexpr size_t kRowScale = kProb + size_t(kWarps) * kWarpRows * kProbLd * sizeof(T);
  static constexpr size_t kBytes = kRowScale + size_t(kWarps) * kWarpRows * sizeof(float);
  static_assert(kQueryTile == kKeyTile, "one tile size serves Q, K and V");
  static_assert(kK % 32 == 0 && kScratch % 32 == 0 && kProb % 32 == 0 && kRowScale % 32 == 0,
                "WMMA pointers must be 32-byte aligned");
};

// The warp's O block [16, D] in fp32: o[r][c] is row r, column lane + 32 c.
template <int D>
using OutputBlock = float[kWarpRows][D / kWarpSize];

// Tensor cores (f16, bf16): nvcuda::wmma 16x16x16 products, fp32 accumulation.
template <class T, int D>
struct TensorCoreTiles {
  using L = ForwardLayout<T, D>;
  using Acc = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>;
  using RowA = nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, T, nvcuda::wmma::row_major>;
  using ColB = nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, T, nvcuda::wmma::col_major>;
  using RowB = nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, T, nvcuda::wmma::row_major>;

  RowA q[D / 16];  // the warp's 16 query rows, all D columns

  HG_DEVICE void load_queries(const T* q_rows) {
    HG_UNROLL
    for (int c = 0; c < D / 16; ++c) nvcuda::wmma::load_matrix_sync(q[c], q_rows + 16 * c, L::kTileLd);
  }

  // scratch[r][j] = sum_c q[r][c] k[j][c] for the warp's 16 rows and the tile's 64 keys. K [64, D]
  // row-major is K^T [D, 64] col-major: the B operand as stored.
  HG_DEVICE void scores(const T* k_tile, float* scratch, int /*lane*/) const {
    HG_UNROLL
    for (int n = 0; n < kKeyTile / 16; ++n) {
      Acc acc;
      nvcuda::wmma::fill_fragment(acc, 0.0f);
      HG_UNROLL
      for (int c = 0; c < D / 16; ++c) {
        ColB kf;
        nvcuda::wmma::load_matrix_sync(kf, k_tile + 16 * n * L::kTileLd + 16 * c, L::kTileLd);
        nvcuda::wmma::mma_sync(acc, q[c], kf, acc);
      }
      nvcuda::wmma::store_matrix_sync(scratch + 16 * n, acc, L::kScratchLd, nvcuda::wmma::mem_row_major);
    }
  }

  // o[r][c] += sum_j p[r][j] v[j][c]: each 16-column block of P V into a fresh accumulator, stored to
  // the scratch (free once the softmax has read S), then added by the lanes in o's own layout.
  HG_DEVICE void add_pv(const T* prob, const T* v_tile, float* scratch, OutputBlock<D>& o, int lane) const {
    RowA pf[kKeyTile / 16];
    HG_UNROLL
    for (int t = 0; t < kKeyTile / 16; ++t) nvcuda::wmma::load_matrix_sync(pf[t], prob + 16 * t, L::kProbLd);
    HG_UNROLL
    for (int n = 0; n < D / 16; ++n) {
      Acc acc;
      nvcuda::wmma::fill_fragment(acc, 0.0f);
      HG_UNROLL
      for (int t = 0; t < kKeyTile / 16; ++t) {
        RowB vf;
        nvcuda::wmma::load_matrix_sync(vf, v_tile + 16 * t * L::kTileLd + 16 * n, L::kTileLd);
        nvcuda::wmma::mma_sync(acc, pf[t], vf, acc);
      }
      nvcuda::wmma::store_matrix_sync(scratch + 16 * n, acc, L::kScratchLd, nvcuda::wmma::mem_row_major);
    }
    __syncwarp();
    HG_UNROLL
    for (int r = 0; r < kWarpRows; ++r) {
      HG_UNROLL
      for (int c = 0; c < D / kWarpSize; ++c) o[r][c] += scratch[r * L::kScratchLd + lane + kWarpSize * c];
    }
  }
};

// CUDA cores (f32): the same tiles, scalar products.
template <int D>
struct ScalarTiles {
  using L = ForwardLayout<float, D>;
  const float* q = nullptr;  // the warp's 16 query rows in the shared Q tile

  HG_DEVICE void load_queries(const float* q_rows) { q = q_rows; }

  // Lane j computes keys j and j + 32 for the 16 rows, walking the head dimension from column j
  // (skewed, so that the lanes' K and Q reads fall in distinct banks).
  HG_DEVICE void scores(const float* k_tile, float* scratch, int lane) const {
    float acc[kWarpRows][2] = {};
    for (int c = 0; c < D; ++c) {
      const int cc = (c + lane) & (D - 1);
      const float k0 = k_tile[lane * L::kTileLd + cc];
      const float k1 = k_tile[(lane + kWarpSize) * L::kTileLd + cc];
      HG_UNROLL
      for (int r = 0; r < kWarpRows; ++r) {
        const float qv = q[r * L::kTileLd + cc];
        acc[r][0] += qv * k0;
        acc[r][1] += qv * k1;
      }
    }
    HG_UNROLL
    for (int r = 0; r < kWarpRows; ++r) {
      scratch[r * L::kScratchLd + lane] = acc[r][0];
      scratch[r * L::kScratchLd + lane + kWarpSize] = acc[r][1];
    }
  }

  HG_DEVICE void add_pv(const float* prob, const float* v_tile, float* /*scratch*/, OutputBlock<D>& o, int lane) const {
    for (int j = 0; j < kKeyTile; ++j) {
      float vv[D / kWarpSize];
      HG_UNROLL
      for (int c = 0; c < D / kWarpSize; ++c) vv[c] = v_tile[j * L::kTileLd + lane + kWarpSize * c];
      HG_UNROLL
      for (int r = 0; r < kWarpRows; ++r) {
        const float pr = prob[r * L::kProbLd + j];
        HG_UNROLL
        for (int c = 0; c < D / kWarpSize; ++c) o[r][c] += pr * vv[c];
      }
    }
  }
};

struct ForwardArgs {
  AttentionTensor q, k, v, o;
  AttentionMask mask;  // data null: none
  float* lse;
  int64_t heads, tq, tk, q_tiles;
  float scale;
  bool causal;
  attention::AttentionDropout dropout;
  bool vector_q, vector_k, vector_v;
};

// The keys rows up to `last_row` see, plus one (all tk without the mask).
HG_DEVICE int64_t keys_seen(const ForwardArgs& a, int64_t last_row) {
  const int64_t seen = a.causal ? last_row + (a.tk - a.tq) + 1 : a.tk;
  return seen < a.tk ? seen : a.tk;
}

// With an attention mask: the warp's scores of rows row0 .. row0 + 15 (below tq) and keys j0 .. j0 + 63
// (below tk) become scale S + mask(i, j), or -inf where a bool mask hides the key, in place in its
// scratch [16, Ld], and the softmax then scales by 1. Lane l takes keys l and l + 32 of each row: the
// lanes read consecutive mask elements (one request of one or two sectors per row; a key-padding
// mask's row is the same for every query, so those come from L1) and write consecutive scratch words.
template <class T, int Ld>
HG_DEVICE void mask_scores(const ForwardArgs& a, int64_t b, int64_t h, int64_t row0, int64_t j0, float* scratch,
                           int lane) {
  // Not unrolled: the loads stay in the loop, and the kernel's registers those of the unmasked path.
  HG_NO_UNROLL
  for (int r = 0; r < kWarpRows && row0 + r < a.tq; ++r) {
    const int64_t seen = keys_seen(a, row0 + r);  // keys past it (past tk, or causal) stay: -inf anyway
    HG_NO_UNROLL
    for (int half = 0; half < 2; ++half) {
      // Every lane reads and writes its word (one conflict-free request each); only the mask read is
      // predicated.
      const int c = lane + kWarpSize * half;
      const float score = scratch[r * Ld + c];
      float masked = score;
      if (j0 + c < seen) {
        const int64_t at = a.mask.offset(b, h, row0 + r, j0 + c);
        if (a.mask.additive) {
          masked = score * a.scale + to_acc(static_cast<const T*>(a.mask.data)[at]);
        } else {
          const bool keep = static_cast<const unsigned char*>(a.mask.data)[at] != 0;
          masked = keep ? score * a.scale : neg_infinity<float>();
        }
      }
      scratch[r * Ld + c] = masked;
    }
  }
}

template <class T, int D, class Tiles>
__global__ void __launch_bounds__(kThreads) attention_forward_kernel(ForwardArgs a) {
  using L = ForwardLayout<T, D>;
  HG_DYNAMIC_SHARED(unsigned char, smem);
  T* q_tile = reinterpret_cast<T*>(smem + L::kQ);
  T* k_tile = reinterpret_cast<T*>(smem + L::kK);
  T* v_tile = reinterpret_cast<T*>(smem + L::kV);
  const int warp = int(threadIdx.x) / kWarpSize, lane = int(threadIdx.x) % kWarpSize;
  float* scratch = attention::warp_region(reinterpret_cast<float*>(smem + L::kScratch), warp, L::kScratchLd);
  T* prob = attention::warp_region(reinterpret_cast<T*>(smem + L::kProb), warp, L::kProbLd);
  float* row_scale = reinterpret_cast<float*>(smem + L::kRowScale) + warp * kWarpRows;

  const int64_t bh = int64_t(blockIdx.x) / a.q_tiles, q0 = (int64_t(blockIdx.x) % a.q_tiles) * kQueryTile;
  const int64_t b = bh / a.heads, h = bh % a.heads;
  const int64_t warp_row0 = q0 + warp * kWarpRows;
  const attention::ScratchLane sl = attention::ScratchLane::of(lane);
  const int64_t i = warp_row0 + sl.row;  // the query row this lane's softmax work belongs to
  const int64_t visible = keys_seen(a, i);
  const int64_t block_rows = a.tq - q0 < kQueryTile ? a.tq - q0 : kQueryTile;
  const int64_t block_keys = keys_seen(a, q0 + block_rows - 1);
  // Keys this warp needs: none when all its rows lie past tq.
  const int64_t warp_keys = warp_row0 < a.tq ? keys_seen(a, warp_row0 + kWarpRows - 1) : 0;

  attention::load_tile<T, D>(q_tile, static_cast<const T*>(a.q.data) + a.q.offset(b, h, q0), a.q.row_stride, kQueryTile,
                             int(block_rows), a.vector_q);
  __syncthreads();
  Tiles tiles;
  tiles.load_queries(q_tile + warp * kWarpRows * L::kTileLd);

  const bool masked = a.mask.data != nullptr;
  const float score_scale = masked ? 1.0f : a.scale;  // mask_scores applies the scale itself
  float m = neg_infinity<float>(), l = 0.0f;
  OutputBlock<D> o = {};
  const T* k_rows = static_cast<const T*>(a.k.data) + a.k.offset(b, h, 0);
  const T* v_rows = static_cast<const T*>(a.v.data) + a.v.offset(b, h, 0);
  for (int64_t j0 = 0; j0 < block_keys; j0 += kKeyTile) {
    __syncthreads();  // every warp is done with the previous K and V tiles
    const int valid = int(a.tk - j0 < kKeyTile ? a.tk - j0 : kKeyTile);
    attention::load_tile<T, D>(k_tile, k_rows + j0 * a.k.row_stride, a.k.row_stride, kKeyTile, valid, a.vector_k);
    attention::load_tile<T, D>(v_tile, v_rows + j0 * a.v.row_stride, a.v.row_stride, kKeyTile, valid, a.vector_v);
    __syncthreads();
    if (j0 >= warp_keys) continue;  // warp-uniform: every key of the tile is masked for all 16 rows

    tiles.scores(k_tile, scratch, lane);
    __syncwarp();
    if (masked) {  // block-uniform
      mask_scores<T, L::kScratchLd>(a, b, h, warp_row0, j0, scratch, lane);
      __syncwarp();
    }

    // Online softmax of row sl.row over the lane's 32 columns of this tile.
    float s[2 * attention::ScratchLane::kPairSteps];
    float tile_max = neg_infinity<float>();
    HG_UNROLL
    for (int k = 0; k < attention::ScratchLane::kPairSteps; ++k) {
      const int c = sl.pair_column(k);
      const float2 pair = *reinterpret_cast<const float2*>(scratch + sl.row * L::kScratchLd + c);
      s[2 * k] = j0 + c < visible ? pair.x * score_scale : neg_infinity<float>();
      s[2 * k + 1] = j0 + c + 1 < visible ? pair.y * score_scale : neg_infinity<float>();
      tile_max = fmaxf(tile_max, fmaxf(s[2 * k], s[2 * k + 1]));
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, attention::ScratchLane::kPartnerMask));
    const float m_new = fmaxf(m, tile_max);
    const float alpha = rescale(m, m_new);
    const float base = m_new == neg_infinity<float>() ? 0.0f : m_new;  // a row with nothing visible yet
    float sum = 0.0f;
    HG_UNROLL
    for (int k = 0; k < attention::ScratchLane::kPairSteps; ++k) {
      const int c = sl.pair_column(k);
      float p0 = exp_acc(s[2 * k] - base), p1 = exp_acc(s[2 * k + 1] - base);
      sum += p0 + p1;
      if (a.dropout.active() && i < a.tq && (p0 != 0.0f || p1 != 0.0f)) {
        const unsigned keep = a.dropout.keep_pair_at(bh, a.tq, a.tk, i, j0 + c);
        if (!(keep & 1u)) p0 = 0.0f;
        if (!(keep & 2u)) p1 = 0.0f;
      }
      store_pack<2>(prob + sl.row * L::kProbLd + c, Pack<T, 2>{{from_acc<T>(p0), from_acc<T>(p1)}});
    }
    sum += __shfl_xor_sync(kFullMask, sum, attention::ScratchLane::kPartnerMask);
    l = l * alpha + sum;
    m = m_new;
    if (sl.half == 0) row_scale[sl.row] = alpha;
    __syncwarp();

    HG_UNROLL
    for (int r = 0; r < kWarpRows; ++r) {
      const float scale_r = row_scale[r];
      HG_UNROLL
      for (int c = 0; c < D / kWarpSize; ++c) o[r][c] *= scale_r;
    }
    tiles.add_pv(prob, v_tile, scratch, o, lane);
    __syncwarp();  // the scratch, P and row scales are rewritten by the next tile
  }

  if (sl.half == 0) row_scale[sl.row] = a.dropout.keep_scale / l;
  __syncwarp();
  T* o_rows = static_cast<T*>(a.o.data) + a.o.offset(b, h, 0);
  for (int r = 0; r < kWarpRows; ++r) {
    const int64_t row = warp_row0 + r;
    if (row >= a.tq) break;
    const float scale_r = row_scale[r];
    T* out = o_rows + row * a.o.row_stride;
    HG_UNROLL
    for (int c = 0; c < D / kWarpSize; ++c) out[lane + kWarpSize * c] = from_acc<T>(o[r][c] * scale_r);
  }
  if (sl.half == 0 && i < a.tq) a.lse[bh * a.tq + i] = m + log_acc(l);
}

template <class T, int D, class Tiles>
void launch_forward(const ForwardArgs& args, int64_t blocks, Stream stream) {
  using L = ForwardLayout<T, D>;
  const auto kernel = attention_forward_kernel<T, D, Tiles>;
  HG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(L::kBytes)));
  launch(kernel, dim3(unsigned(blocks)), dim3(kThreads), L::kBytes, stream, args);
}

template <class T, int D>
void launch_forward_for(const ForwardArgs& args, int64_t blocks, Stream stream) {
  if constexpr (std::is_same_v<T, float>) {
    launch_forward<T, D, ScalarTiles<D>>(args, blocks, stream);
  } else {
    launch_forward<T, D, TensorCoreTiles<T, D>>(args, blocks, stream);
  }
}

}  // namespace

void attention_forward(const AttentionProblem& p, AttentionTensor q, AttentionTensor k, AttentionTensor v,
                       AttentionTensor o, void* lse, DType dtype, Stream stream) {
  HG_CHECK(cuda_attention_supports(p.d, dtype), "[attention_forward] the CUDA kernel takes head dimension 64 or 128 ",
           "in f16, bf16 or f32, got head dimension ", p.d, " in ", dtype_name(dtype),
           " (other shapes take the composed path)");
  HG_CHECK(p.batch >= 0 && p.heads >= 0 && p.tq >= 0 && p.tk >= 0, "[attention_forward] batch = ", p.batch,
           ", heads = ", p.heads, ", tq = ", p.tq, ", tk = ", p.tk, ", expected all >= 0");
  HG_CHECK(p.tq == 0 || p.tk > 0, "[attention_forward] tq = ", p.tq, " queries over tk = 0 keys, expected tk >= 1");
  HG_CHECK(!p.causal || p.tk >= p.tq, "[attention_forward] causal attention with tq = ", p.tq, " > tk = ", p.tk,
           ", expected tk >= tq (the queries are the last tq of the tk positions)");
  HG_CHECK(p.dropout_p >= 0.0 && p.dropout_p < 1.0, "[attention_forward] dropout_p = ", p.dropout_p,
           ", expected 0 <= dropout_p < 1");
  HG_CHECK(std::isfinite(p.scale), "[attention_forward] scale = ", p.scale, ", expected a finite number");
  const int64_t bh = p.batch * p.heads;
  if (bh == 0 || p.tq == 0) return;
  HG_CHECK(q.data && k.data && v.data && o.data && lse, "[attention_forward] null operand pointer");
  const int64_t q_tiles = (p.tq + kQueryTile - 1) / kQueryTile;
  HG_CHECK(bh <= (int64_t(1) << 31) / q_tiles - 1, "[attention_forward] batch * heads = ", bh, " times ", q_tiles,
           " query tiles exceeds the grid (2^31 - 1 blocks)");

  dispatch_floating_cuda(dtype, "attention_forward", [&]<class T>() {
    if constexpr (!std::is_same_v<T, double>) {
      ForwardArgs args;
      args.q = q, args.k = k, args.v = v, args.o = o;
      args.mask = p.mask;
      args.lse = static_cast<float*>(lse);
      args.heads = p.heads, args.tq = p.tq, args.tk = p.tk, args.q_tiles = q_tiles;
      args.scale = float(p.scale);
      args.causal = p.causal;
      args.dropout = attention::AttentionDropout::of(p);
      args.vector_q = attention::vector_loads_ok<T>(q);
      args.vector_k = attention::vector_loads_ok<T>(k);
      args.vector_v = attention::vector_loads_ok<T>(v);
      if (p.d == 64) {
        launch_forward_for<T, 64>(args, q_tiles * bh, stream);
      } else {
        launch_forward_for<T, 128>(args, q_tiles * bh, stream);
      }
    }
  });
}

}  // namespace hg::kernels::cuda
