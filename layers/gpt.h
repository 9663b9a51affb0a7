#pragma once
// GPT: a GPT-2 style decoder-only transformer.
//   logits = ln_f(h_L(... h_0(wte[ids] + wpe[0..T)))) wte^T      (lm_head tied to wte)
// Parameter names follow Hugging Face's GPT-2 (wte, wpe, h.{i}.ln_1, h.{i}.attn.c_attn, ...), but
// Linear weights are stored [out, in] (PyTorch's nn.Linear), where Hugging Face's Conv1D stores
// [in, out]. Initialisation is GPT-2's: N(0, 0.02) for weights and embeddings, zero biases, and the
// residual projections (attn.c_proj, mlp.c_proj) N(0, 0.02 / sqrt(2 L)).
#include <string>

#include "layers/transformer.h"

namespace hg::nn {

struct GPTConfig {
  int64_t vocab_size = 256;
  int64_t context = 64;
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  double dropout = 0.0;
  void validate() const;
  TransformerOptions block_options() const;
};

class GPT : public Module {
 public:
  explicit GPT(const GPTConfig& config);
  // ids [B, T] (i32/i64, T <= context) -> logits [B, T, vocab] in the model's dtype.
  Tensor forward(const Tensor& ids);
  // Mean cross-entropy of next-token prediction; targets [B, T], ignore_index -100 (f32 loss).
  Tensor loss(const Tensor& ids, const Tensor& targets);

  // Saves the native layout (safetensors, metadata records the config).
  void save(const std::string& path) const;
  // Loads a file written by save(), or a Hugging Face GPT-2 checkpoint (Conv1D weights [in, out]
  // transposed on load, optional "transformer." prefix, config inferred from the tensors).
  static std::shared_ptr<GPT> load(const std::string& path);

  const GPTConfig config;
  std::shared_ptr<Embedding> wte, wpe;
  std::vector<std::shared_ptr<Block>> h;
  std::shared_ptr<LayerNorm> ln_f;
};

}  // namespace hg::nn
