#pragma once
// The two implementations behind scaled_dot_product_attention (engine/ops/attention.cpp), for the
// front and for tests that run one explicitly. Arguments are already checked by the front.
#include <string>

#include "engine/tensor.h"

namespace hg::ops {

// Batched GEMM, attn_mask (bool: false hides a key, masked_fill with -inf; else added), the (causal)
// softmax kernel, dropout, batched GEMM; saves the probabilities.
Tensor attention_composed(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double dropout_p,
                          const Tensor& attn_mask = Tensor());
// The FlashAttention-2 kernels; saves q, k, v, O and the row log-sum-exp (engine/ops/attention_fused.cpp).
Tensor attention_fused(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double dropout_p,
                       const Tensor& attn_mask = Tensor());
// Empty when attention_fused takes these operands, else why not ("head dimension 80: the CUDA kernels
// take 64 or 128").
std::string attention_fused_refusal(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask = Tensor());

}  // namespace hg::ops
