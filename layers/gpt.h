#pragma once
// GPT: a GPT-2 style decoder-only transformer.
//   logits = ln_f(h_L(... h_0(wte[ids] + wpe[0..T)))) wte^T      (lm_head tied to wte)
// Parameter names follow Hugging Face's GPT-2 (wte, wpe, h.{i}.ln_1, h.{i}.attn.c_attn, ...), but
// Linear weights are stored [out, in] (PyTorch's nn.Linear), where Hugging Face's Conv1D stores
// [in, out]. Initialisation is GPT-2's: N(0, 0.02) for weights and embeddings, zero biases, and the
// residual projections (attn.c_proj, mlp.c_proj) N(0, 0.02 / sqrt(2 L)).
#include <string>

#include "kernels/options.h"
#include "layers/transformer.h"

namespace hg::nn {

class KVCache;  // layers/kv_cache.h

// The model's shape, validated by GPT's constructor.
//   GPTConfig().n_layer(4).n_head(4).n_embd(128)
struct GPTConfig {
  HG_OPTION(GPTConfig, int64_t, vocab_size, 256);
  HG_OPTION(GPTConfig, int64_t, context, 64);
  HG_OPTION(GPTConfig, int64_t, n_layer, 4);
  HG_OPTION(GPTConfig, int64_t, n_head, 4);
  HG_OPTION(GPTConfig, int64_t, n_embd, 128);
  HG_OPTION(GPTConfig, double, dropout, 0.0);
  // Every LayerNorm's epsilon (GPT-2: 1e-5) and the MLP's GELU (GPT-2's "gelu_new": Tanh).
  HG_OPTION(GPTConfig, double, layer_norm_eps, 1e-5);
  HG_OPTION(GPTConfig, GeluApproximation, activation, GeluApproximation::Tanh);
  // The attention implementation of every block (engine/ops.h; Composed: the reference path).
  HG_OPTION(GPTConfig, AttentionImpl, attention, AttentionImpl::Auto);
  // Activation recompute (engine/recompute.h): 0 keeps every activation; K >= 1 runs the blocks
  // in segments of K consecutive blocks, each one hg::recompute region (K = 1: every block), so the
  // forward keeps only the segments' inputs and the backward recomputes one segment at a time.
  HG_OPTION(GPTConfig, int64_t, recompute_every, 0);
  // loss() through the fused classifier (linear_cross_entropy: the head and the cross-entropy in
  // chunks of rows, never storing the [B T, vocab] logits or their gradient); false: the composed
  // cross_entropy(forward(ids)), kept for comparison and benchmarks. forward() returns logits either way.
  // A run-time choice, not saved in checkpoints (loaded models start with the default).
  HG_OPTION(GPTConfig, bool, fused_classifier, true);

 public:
  void validate() const;
  TransformerOptions block_options() const;
};

class GPT : public Module {
 public:
  explicit GPT(const GPTConfig& config);
  // ids [B, T] (i32/i64, T <= context) -> logits [B, T, vocab] in the model's dtype.
  Tensor forward(const Tensor& ids);
  // Incremental forward for generation (no autograd): ids [B, T_new] are the tokens at positions
  // cache.length() .. cache.length() + T_new - 1 (<= context); their keys and values are appended to
  // `cache` and each attends to every cached token before it. Returns the logits [B, T_new, vocab].
  // Equal to the matching rows of forward() on the whole sequence (to rounding).
  Tensor forward(const Tensor& ids, KVCache& cache);
  // The same step, but ln_f and the head run on the last new position only: logits [B, 1, vocab], equal
  // to forward(ids, cache)'s last row. What generation reads (a prefill of T tokens skips T - 1 rows of
  // the vocab-wide head).
  Tensor forward_last(const Tensor& ids, KVCache& cache);
  // Mean cross-entropy of next-token prediction; targets [B, T], ignore_index -100 (f32 loss; f64
  // for f64). Through the fused classifier unless config.fused_classifier() is false.
  Tensor loss(const Tensor& ids, const Tensor& targets);

  // Saves the native layout (safetensors, metadata records the config).
  void save(const std::string& path) const;
  // Loads a file written by save(), or a Hugging Face GPT-2 model.safetensors as published (Conv1D
  // weights [in, out] transposed on load, optional "transformer." prefix, attn.bias / attn.masked_bias
  // buffers ignored, lm_head tied), its architecture read from the config.json beside it (n_head,
  // n_positions, layer_norm_epsilon, activation_function) or from the file's metadata; with neither, an
  // hg::Error asks for one (the head count cannot be inferred from the tensors). A directory means its
  // model.safetensors. Everything is checked (and named in the error) before the model is built.
  static std::shared_ptr<GPT> load(const std::string& path);
  // Writes the Hugging Face GPT-2 layout: `directory`/model.safetensors (Conv1D weights [in, out],
  // "transformer."-less names as published, lm_head omitted: tied) and `directory`/config.json.
  void save_hf(const std::string& directory) const;

  // Activation recompute from now on (starts at config.recompute_every(); also for loaded models).
  void set_recompute_every(int64_t k);
  // The attention implementation of every block (config.attention() at construction), e.g. after load().
  void set_attention(AttentionImpl impl);
  AttentionImpl attention() const { return h.empty() ? config.attention() : h.front()->attn->attention; }
  int64_t recompute_every() const { return recompute_every_; }

  const GPTConfig config;
  std::shared_ptr<Embedding> wte, wpe;
  std::vector<std::shared_ptr<Block>> h;
  std::shared_ptr<LayerNorm> ln_f;

 private:
  // The modules only, GPT-2's initialisation skipped (load() overwrites every parameter).
  struct Uninitialised {};
  GPT(const GPTConfig& config, Uninitialised);

  // ln_f of the last block's output: [B, T, n_embd], what the tied head multiplies by wte^T.
  Tensor final_hidden(const Tensor& ids);
  // forward(ids, cache) and forward_last (layers/gpt_cached_forward.cpp).
  Tensor cached_step(const Tensor& ids, KVCache& cache, bool last_only);

  int64_t recompute_every_ = 0;
};

}  // namespace hg::nn
