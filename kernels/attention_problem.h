#pragma once
// The problem a fused attention kernel solves, shared by the CPU and CUDA backends (plain structs
// passed by value to kernels::{cpu,cuda}::attention_forward / attention_backward, kernels/kernels.h).
//
// batch x heads independent attentions of tq queries over tk keys, head dimension d. For one
// (b, h), with q [tq, d], k [tk, d], v [tk, d] and o [tq, d]:
//   S[i, j] = scale * sum_c q[i, c] k[j, c] (+ mask[i, j])  for the visible (i, j); masked S = -inf
//   causal: query i sees keys j <= i + (tk - tq)            (tk >= tq; a query block at the end of a
//                                                             longer key sequence sees its whole past)
//   lse[i]  = log sum_j exp(S[i, j])                        (finite unless a mask hides every key)
//   P[i, j] = exp(S[i, j] - lse[i])
//   Z[i, j] = dropout_keep(seed, offset, ((b * heads + h) * tq + i) * tk + j, dropout_p)   (philox.h)
//   O[i, :] = sum_j P[i, j] Z[i, j] / (1 - dropout_p) v[j, :]       (Z = 1 when dropout_p = 0)
// The dropout index is that of the composed path's dropout over a contiguous [batch, heads, tq, tk]
// probability tensor, so the fused and composed paths drop the very same probabilities; a call
// consumes philox_blocks(batch * heads * tq * tk) Philox blocks.
// Backward, given dO [tq, d]:
//   D[i]     = sum_c dO[i, c] O[i, c]                        (= sum_j P Z/(1-p) dPz, FlashAttention-2)
//   dV[j, :] = sum_i P[i, j] Z[i, j] / (1 - p) dO[i, :]
//   dP[i, j] = Z[i, j] / (1 - p) sum_c dO[i, c] v[j, c]
//   dS[i, j] = P[i, j] (dP[i, j] - D[i])
//   dQ[i, :] = scale sum_j dS[i, j] k[j, :],   dK[j, :] = scale sum_i dS[i, j] q[i, :]
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/host_device.h"

namespace hg::kernels {

// An attention mask over [batch, heads, tq, tk], read through element strides (0 along a dimension
// it broadcasts over). Bool (b8: false hides the key, S = -inf) or additive (the operands' dtype, added
// to the scaled scores). A query that sees no key gets O = NaN and lse = -inf (PyTorch's NaN row).
// The CPU and CUDA kernels apply it inside the tiles (a broadcast mask is never expanded).
struct AttentionMask {
  const void* data = nullptr;  // null: no mask
  bool additive = false;
  int64_t batch_stride = 0, head_stride = 0, row_stride = 0, key_stride = 0;

  HG_HOST_DEVICE int64_t offset(int64_t b, int64_t h, int64_t i, int64_t j) const {
    return b * batch_stride + h * head_stride + i * row_stride + j * key_stride;
  }
};

struct AttentionProblem {
  int64_t batch = 0, heads = 0, tq = 0, tk = 0, d = 0;
  AttentionMask mask;
  double scale = 1.0;  // usually 1 / sqrt(d)
  bool causal = false;
  double dropout_p = 0.0;  // on the probabilities, in [0, 1); 0: no dropout, seed and offset unused
  uint64_t seed = 0, offset = 0;

  HG_HOST_DEVICE int64_t rows() const { return batch * heads * tq; }  // of lse and delta
  // The last key query i sees, plus one (tk without the causal mask).
  HG_HOST_DEVICE int64_t visible_keys(int64_t i) const { return causal ? i + (tk - tq) + 1 : tk; }
};

// One [batch, heads, rows, d] operand: its first element and the element strides of its batch, head
// and row axes. The head-dimension axis is contiguous (stride 1). The engine passes views as they
// are (the GPT's q, k, v are strided slices of one [B, T, 3C] projection; o is written [B, T, H, D]
// so that merging the heads is a view).
struct AttentionTensor {
  void* data = nullptr;
  int64_t batch_stride = 0, head_stride = 0, row_stride = 0;

  HG_HOST_DEVICE int64_t offset(int64_t b, int64_t h, int64_t row) const {
    return b * batch_stride + h * head_stride + row * row_stride;
  }
};

// What the fused CUDA kernels take (kernels/cuda/attention_*.cu): head dimension 64 or 128, f16 and bf16
// on tensor cores (WMMA), f32 on CUDA cores. The engine sends anything else to the composed path.
// The CPU kernel takes every floating dtype and every head dimension.
constexpr bool cuda_attention_supports(int64_t d, DType dtype) {
  return (d == 64 || d == 128) && (dtype == DType::f16 || dtype == DType::bf16 || dtype == DType::f32);
}

}  // namespace hg::kernels
