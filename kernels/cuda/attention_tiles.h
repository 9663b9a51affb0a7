#pragma once
// Building blocks of the fused attention kernels (kernels/cuda/attention_forward.cu and
// attention_backward.cu; the math: kernels/attention_problem.h), shared so that both tile the problem,
// lay out shared memory and draw the dropout mask the same way.
//
//   kQueryTile x kKeyTile tiles: a block owns kQueryTile = 64 query rows of one (batch, head); each of
//   its kWarps = 4 warps owns kWarpRows = 16 of them (one WMMA row of fragments); key/value rows are
//   staged kKeyTile = 64 at a time.
//
//   Shared memory rows are padded: a [rows, cols] tile of T has leading dimension tile_ld<T>(cols) =
//   cols + 16 bytes, a float scratch scratch_ld(cols) = cols + 8 floats (32 bytes). Every row length
//   used (d = 64 or 128 elements, 64 keys) is a multiple of 128 bytes, so without a pad a column would
//   sit in one bank for every row. With the pads (checked by enumerating the lanes' addresses):
//     - T tiles, rows 16 B apart mod 128: load_tile's 16-byte stores (8 lanes per row and phase), the
//       ldmatrix-style 8 rows x 16 B reads of a WMMA operand load, and 32-bit reads of row g, word t by
//       lane 4 g + t (the mma.sync fragment order: banks 4 g + t) are all conflict-free;
//     - the float scratch, ld = 8 mod 32 words: 8-byte stores of an accumulator in the mma.sync order
//       (lane 4 g + t: row g, columns 2 t, 2 t + 1; per half-warp banks pairs 4 g + t mod 16) and the
//       ScratchLane walk below are conflict-free.
//   (The emulator's WMMA moves tiles in these same orders, ldmatrix's for operands and mma.sync's for
//   accumulators: kernels/emu/wmma.h, so the kernel audit checks the claims above.)
//   The pads also keep every WMMA pointer 32-byte aligned (16-row steps are multiples of 32 bytes).
//
//   load_tile: the whole block copies a strided [rows, D] operand tile (rows of one (batch, head),
//   AttentionTensor::row_stride apart) into a padded tile, 16 bytes per thread and step when the
//   operand allows (vector_loads_ok), else element by element; rows past the operand's end are
//   written as zeros (a NaN there would survive a multiplication by a zero probability).
//
//   ScratchLane: which elements of a warp's [16, 64] float score scratch a lane visits, so that the
//   per-row work (online softmax max/sum, recomputed probabilities) is conflict-free. Lane l owns row
//   r = l % 16 and the 32 columns of half h = l / 16 of that row; at step k = 0..15 it visits the
//   column pair 32 h + 2 x, x = (k + r) mod 16. With the scratch's ld = 72 or 136 floats (8 mod 32):
//     - 8-byte reads of a pair (float2; served per half-warp, h fixed): bank pair (4 r + x) mod 16 =
//       (5 r + k) mod 16, distinct for the 16 rows;
//     - 4-byte writes of the pair as two halves into a [16, tile_ld<half>(64) = 72] buffer (36 words a
//       row): bank (4 r + 16 h + x) mod 32, distinct for the 32 lanes;
//     - 8-byte writes of the pair as floats into a [16, tile_ld<float>(64) = 68] buffer: bank pair
//       (2 r + x) mod 16 = (3 r + k) mod 16, distinct for the 16 rows.
//   The two lanes of a row are l and l ^ 16 (a row reduction is one __shfl_xor_sync(.., 16)).
//
//   dropout_keep_at: element (i, j) of (batch * heads index) bh keeps its probability when philox.h's
//   dropout_keep at index (bh * tq + i) * tk + j says so: the index of the composed path's dropout over
//   a contiguous [batch, heads, tq, tk] probability tensor.
#include <cstdint>

#include "kernels/attention_problem.h"
#include "kernels/cuda/device_math.h"
#include "kernels/philox.h"

// A loop the compiler must not unroll: the product loops' outer levels, and the mask passes, whose
// unrolled loads would be hoisted into registers the whole kernel then holds.
#if defined(__CUDACC__)
#define HG_NO_UNROLL _Pragma("unroll 1")
#else
#define HG_NO_UNROLL
#endif

namespace hg::kernels::cuda::attention {

inline constexpr int kQueryTile = 64;
inline constexpr int kKeyTile = 64;
inline constexpr int kWarpRows = 16;
inline constexpr int kWarps = kQueryTile / kWarpRows;
inline constexpr int kThreads = kWarps * kWarpSize;

// Leading dimension (elements) of a [rows, cols] tile of T in shared memory: cols plus 16 bytes.
template <class T>
HG_HOST_DEVICE constexpr int tile_ld(int cols) {
  return cols + int(16 / sizeof(T));
}
// Leading dimension (floats) of a float scratch of cols columns: cols plus 32 bytes.
HG_HOST_DEVICE constexpr int scratch_ld(int cols) { return cols + 8; }

// Host: whether every row of the operand starts on a 16-byte boundary, so load_tile may move 16 bytes
// per thread (the data pointer and the batch, head and row strides in bytes are multiples of 16).
template <class T>
inline bool vector_loads_ok(const AttentionTensor& t) {
  constexpr int64_t kAlign = 16;
  const auto fits = [](int64_t elements) { return (elements * int64_t(sizeof(T))) % kAlign == 0; };
  return reinterpret_cast<uintptr_t>(t.data) % kAlign == 0 && fits(t.batch_stride) && fits(t.head_stride) &&
         fits(t.row_stride);
}

// The whole block copies rows [0, rows) of a [.., D] operand whose row 0 is at src (row_stride elements
// apart) into tile (leading dimension tile_ld<T>(D)); rows >= valid_rows (past the operand) become 0.
// No barrier inside: the caller synchronises before the tile is read.
template <class T, int D>
HG_DEVICE void load_tile(T* __restrict__ tile, const T* __restrict__ src, int64_t row_stride, int rows, int valid_rows,
                         bool vector) {
  constexpr int kLd = tile_ld<T>(D);
  if (vector) {
    constexpr int kChunk = kPack<T>;  // elements per 16 bytes
    constexpr int kChunks = D / kChunk;
    for (int u = int(threadIdx.x); u < rows * kChunks; u += int(blockDim.x)) {
      const int row = u / kChunks, col = (u % kChunks) * kChunk;
      Pack<T, kChunk> chunk;
      if (row < valid_rows) {
        chunk = load_pack<kChunk>(src + row * row_stride + col);
      } else {
        HG_UNROLL
        for (int e = 0; e < kChunk; ++e) chunk.v[e] = from_acc<T>(0.0f);
      }
      store_pack<kChunk>(tile + row * kLd + col, chunk);
    }
  } else {
    for (int u = int(threadIdx.x); u < rows * D; u += int(blockDim.x)) {
      const int row = u / D, col = u % D;
      tile[row * kLd + col] = row < valid_rows ? src[row * row_stride + col] : from_acc<T>(0.0f);
    }
  }
}

// The first element of warp `warp`'s [kWarpRows, cols] region of a block's per-warp scratch (each
// warp's region is kWarpRows rows of leading dimension ld).
template <class E>
HG_DEVICE E* warp_region(E* base, int warp, int ld) {
  return base + warp * kWarpRows * ld;
}

// The columns a lane visits in a warp's [16, 64] score scratch (see the header comment).
struct ScratchLane {
  int row;   // 0..15
  int half;  // 0 or 1: columns [32 half, 32 half + 32)

  HG_DEVICE static ScratchLane of(int lane) { return {lane & 15, lane >> 4}; }
  // The first of the two columns visited at step k, 0 <= k < kPairSteps.
  HG_DEVICE int pair_column(int k) const { return 32 * half + 2 * ((k + row) & 15); }
  static constexpr int kPairSteps = 16;
  static constexpr int kPartnerMask = 16;  // shuffle xor mask of the row's other lane
};

// The dropout draw of probability (i, j) of (batch * heads index) bh; see the header comment.
struct AttentionDropout {
  uint64_t seed = 0, offset = 0;
  float p = 0.0f;           // 0: no dropout
  float keep_scale = 1.0f;  // 1 / (1 - p)

  static AttentionDropout of(const AttentionProblem& problem) {
    return {problem.seed, problem.offset, float(problem.dropout_p), float(1.0 / (1.0 - problem.dropout_p))};
  }
  HG_DEVICE bool active() const { return p > 0.0f; }
  HG_DEVICE bool keep_at(int64_t bh, int64_t tq, int64_t tk, int64_t i, int64_t j) const {
    return dropout_keep(seed, offset, uint64_t((bh * tq + i) * tk + j), p);
  }
  // keep_at(.., j) in bit 0 and keep_at(.., j + 1) in bit 1, from one Philox evaluation when the two
  // indices share a Philox block (3 times in 4).
  HG_DEVICE unsigned keep_pair_at(int64_t bh, int64_t tq, int64_t tk, int64_t i, int64_t j) const {
    const uint64_t index = uint64_t((bh * tq + i) * tk + j);
    const uint64_t block = offset + index / 4;
    const Philox4 w =
        philox4x32_10(Philox4{{uint32_t(block), uint32_t(block >> 32), 0u, 0u}}, uint32_t(seed), uint32_t(seed >> 32));
    const unsigned first = unsigned(index % 4);
    // Selects, not w.v[first]: a run-time index would put w in local memory.
    const uint32_t bits0 = first == 0 ? w.v[0] : first == 1 ? w.v[1] : first == 2 ? w.v[2] : w.v[3];
    const bool keep0 = bits_to_uniform(bits0) >= p;
    bool keep1;
    if (first < 3) {
      keep1 = bits_to_uniform(first == 0 ? w.v[1] : first == 1 ? w.v[2] : w.v[3]) >= p;
    } else {
      keep1 = dropout_keep(seed, offset, index + 1, p);
    }
    return unsigned(keep0) | (unsigned(keep1) << 1);
  }
};

}  // namespace hg::kernels::cuda::attention
