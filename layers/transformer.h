#pragma once
// The pieces of a GPT-2 style transformer: MLP, CausalSelfAttention and the pre-LN Block.
//   Block(x) = h + mlp(ln_2(h)),  h = x + attn(ln_1(x))
// With fuse_add_layer_norm (the default) each residual add runs fused with the LayerNorm after it
// (add_layer_norm, engine/ops.h: one op, two outputs): h with ln_2(h) inside the block, and -- through
// forward_pair, which leaves the block's last add to whoever runs next -- the previous block's output
// add with this block's ln_1 (GPT::final_hidden; the last block's with ln_f).
//   attn(x)  = dropout(c_proj(dropout(softmax(q k^T / sqrt(D) + causal)) v)), q, k, v split from one c_attn(x)
//   mlp(x)   = dropout(c_proj(gelu(c_fc(x))))
// The attention runs scaled_dot_product_attention with `attention` (engine/ops.h: Auto takes the fused
// FlashAttention-2 kernels where they apply); dropout on the probabilities only while training.
// forward_cached runs the same math for generation against a KV cache (layers/kv_cache.h): the new
// tokens' keys and values are written into the cache, the queries attend to the cached ones before them.
#include "kernels/options.h"
#include "layers/basic.h"

namespace hg::nn {

// One block's shape, validated by the constructors of MLP, CausalSelfAttention and Block.
//   TransformerOptions().n_embd(128).n_head(4).dropout(0.1)
struct TransformerOptions {
  HG_OPTION(TransformerOptions, int64_t, n_embd, 128);
  HG_OPTION(TransformerOptions, int64_t, n_head, 4);
  HG_OPTION(TransformerOptions, int64_t, mlp_ratio, 4);
  HG_OPTION(TransformerOptions, double, dropout, 0.0);
  HG_OPTION(TransformerOptions, double, layer_norm_eps, 1e-5);
  // The MLP's GELU: Tanh is GPT-2's "gelu_new" (and "gelu_pytorch_tanh"), Erf the exact "gelu".
  HG_OPTION(TransformerOptions, GeluApproximation, activation, GeluApproximation::Tanh);
  HG_OPTION(TransformerOptions, AttentionImpl, attention, AttentionImpl::Auto);

 public:
  // Throws naming the offending field (e.g. n_embd % n_head != 0).
  void validate() const;
};

class MLP : public UnaryModule {
 public:
  explicit MLP(const TransformerOptions& options);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Linear> c_fc, c_proj;
  std::shared_ptr<Dropout> drop;
  const GeluApproximation activation;
  // true: c_fc and the GELU as one op, linear_gelu, which picks the device's fastest form (the CPU: the
  // GEMM without bias, then bias_gelu); false: Linear then gelu, the composed reference (tests and
  // bench_step compare the two).
  bool fuse_bias_gelu = true;
};

class CausalSelfAttention : public UnaryModule {
 public:
  explicit CausalSelfAttention(const TransformerOptions& options);
  // x [B, T, C] -> [B, T, C]
  Tensor forward(const Tensor& x) override;
  // Inference (no dropout): x [B, T, C] holds positions past .. past + T - 1. Their keys and values go
  // into rows past .. past + T - 1 of k_cache and v_cache ([B, H, capacity, D], past + T <= capacity);
  // query i attends to rows 0 .. past + i. Equal to the matching rows of forward() on the whole sequence.
  Tensor forward_cached(const Tensor& x, const Tensor& k_cache, const Tensor& v_cache, int64_t past);
  std::shared_ptr<Linear> c_attn, c_proj;
  std::shared_ptr<Dropout> drop;
  const int64_t n_head;
  const double attention_dropout;
  AttentionImpl attention;  // may be changed between steps (GPT::set_attention)
  // true: where the fused kernels apply, attention_qkv (q, k, v read from qkv, their gradients written
  // into one [B, T, 3C] tensor); false: narrow views into scaled_dot_product_attention (the reference).
  bool attention_from_qkv = true;
};

// The residual stream between blocks as two terms, base + delta (delta undefined: the stream is base),
// so that the add can run fused with the next LayerNorm.
struct ResidualPair {
  Tensor base, delta;
};

class Block : public UnaryModule {
 public:
  explicit Block(const TransformerOptions& options);
  Tensor forward(const Tensor& x) override;
  // The block on the stream base + delta, its own output left unsummed: returns {h, mlp(ln_2(h))}.
  // Fused: sum and ln_1 in one add_layer_norm (when delta is defined), h and ln_2(h) in another. Runs
  // in this block's module scope, so ZeRO stage 3 has gathered ln_1's parameters for the first one.
  ResidualPair forward_pair(const Tensor& base, const Tensor& delta);
  // The block with attn->forward_cached (see CausalSelfAttention); the caller turns dropout off (eval).
  Tensor forward_cached(const Tensor& x, const Tensor& k_cache, const Tensor& v_cache, int64_t past);
  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<MLP> mlp;
  // true: residual adds fused with the LayerNorms after them (add_layer_norm; CPU and CUDA, where it is
  // one fused kernel each way); false: add then layer_norm, the composed reference (tests and
  // bench_step compare the two).
  bool fuse_add_layer_norm = true;
};

// base + delta followed by `norm`: {sum, norm(sum)}, one add_layer_norm when `fused` (inside norm's
// module scope), else the composed add and LayerNorm::forward.
AddLayerNorm add_then_norm(const Tensor& base, const Tensor& delta, LayerNorm& norm, bool fused);

}  // namespace hg::nn
