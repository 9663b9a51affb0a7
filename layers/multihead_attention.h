#pragma once
// MultiheadAttention: PyTorch's nn.MultiheadAttention -- its arguments, parameter names
// (in_proj_weight / in_proj_bias, or q_proj_weight / k_proj_weight / v_proj_weight when kdim or vdim
// differ from embed_dim; out_proj.weight / out_proj.bias), initialisation and mask conventions -- over
// scaled_dot_product_attention, so the fused kernels run it where they apply.
//
//   y = out_proj(concat_h attention(q W_q^h, k W_k^h, v W_v^h))   with h = 1 .. num_heads, D = E / num_heads
//
// Masks follow MultiheadAttention's convention, which is the opposite of scaled_dot_product_attention's
// for bool masks: true means "may NOT attend". attn_mask is [L, S] or [N * num_heads, L, S], bool or
// additive (floating, added to the scores); key_padding_mask is [N, S], bool (true: a padding key) or
// additive. A key-padding mask alone is read through broadcasting: no [N, H, L, S] tensor is built.
#include <array>

#include "kernels/options.h"
#include "layers/basic.h"

namespace hg::nn {

//   MultiheadAttentionOptions(256, 4).batch_first(true).dropout(0.1)
struct MultiheadAttentionOptions {
  MultiheadAttentionOptions(int64_t embed_dim, int64_t num_heads) : embed_dim_(embed_dim), num_heads_(num_heads) {}
  HG_OPTION(MultiheadAttentionOptions, int64_t, embed_dim, 0);
  HG_OPTION(MultiheadAttentionOptions, int64_t, num_heads, 1);
  HG_OPTION(MultiheadAttentionOptions, double, dropout, 0.0);
  HG_OPTION(MultiheadAttentionOptions, bool, bias, true);
  HG_OPTION(MultiheadAttentionOptions, int64_t, kdim, 0);  // 0: embed_dim
  HG_OPTION(MultiheadAttentionOptions, int64_t, vdim, 0);  // 0: embed_dim
  HG_OPTION(MultiheadAttentionOptions, bool, batch_first, false);
};

// The optional inputs of a forward, PyTorch's keyword arguments.
struct AttentionMasks {
  Tensor attn_mask;         // [L, S] or [N * num_heads, L, S]; undefined: none
  Tensor key_padding_mask;  // [N, S]; undefined: none
  bool is_causal = false;   // query i sees keys j <= i + (S - L), on top of the masks
};

// What forward_with_weights returns: PyTorch's (attn_output, attn_output_weights).
struct AttentionOutput {
  Tensor output;   // as forward's
  Tensor weights;  // [N, L, S] averaged over the heads, or [N, num_heads, L, S]
};

class MultiheadAttention : public Module {
 public:
  explicit MultiheadAttention(const MultiheadAttentionOptions& options);
  MultiheadAttention(int64_t embed_dim, int64_t num_heads)
      : MultiheadAttention(MultiheadAttentionOptions(embed_dim, num_heads)) {}
  // query [L, N, E] (batch_first: [N, L, E]), key [S, N, kdim], value [S, N, vdim] -> [L, N, E]
  // (batch_first: [N, L, E]). PyTorch's need_weights=False output; the fused attention where it applies.
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value, const AttentionMasks& masks = {});
  // PyTorch's need_weights=True: the output and the attention weights softmax(q k^T / sqrt(D) + mask),
  // after dropout as PyTorch returns them, averaged over the heads (average_attn_weights) or per head.
  // Both are differentiable. The weights are built, so this runs the composed attention (matmul,
  // softmax, matmul), not the fused kernels: O(N H L S) memory, like PyTorch's need_weights path.
  AttentionOutput forward_with_weights(const Tensor& query, const Tensor& key, const Tensor& value,
                                       const AttentionMasks& masks = {}, bool average_attn_weights = true);
  std::string extra_repr() const override { return ""; }

  // One projection when kdim == vdim == embed_dim (PyTorch's packed in_proj), else three.
  Tensor in_proj_weight, in_proj_bias, q_proj_weight, k_proj_weight, v_proj_weight;
  std::shared_ptr<Linear> out_proj;
  const MultiheadAttentionOptions options;

 private:
  // The projections of query, key and value, each [N, T, E] (batch first).
  std::array<Tensor, 3> project(const Tensor& query, const Tensor& key, const Tensor& value) const;
  // The masks in scaled_dot_product_attention's convention, broadcastable to [N, H, L, S].
  Tensor combined_mask(const AttentionMasks& masks, int64_t n, int64_t l, int64_t s, DType dtype) const;
  // forward and forward_with_weights: weights (nullable) receives the [N, H, L, S] weights when given.
  Tensor attend(const Tensor& query, const Tensor& key, const Tensor& value, const AttentionMasks& masks,
                Tensor* weights);
};

}  // namespace hg::nn
