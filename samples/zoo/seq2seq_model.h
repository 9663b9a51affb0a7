#pragma once
// seq2seq's model: an encoder-decoder Transformer (Vaswani et al. 2017) over PyTorch's nn.Transformer, with
// PyTorch's names (bench/peers/zoo_models.py builds the same):
//
//   src_embed Embedding(source vocabulary, w) + src_pos [1, S, w]  -> transformer.encoder (with the source's
//   key-padding mask) -> memory;  tgt_embed Embedding(target vocabulary, w) + tgt_pos [1, T, w]
//   -> transformer.decoder (causal self-attention with the target's padding mask; cross-attention over the
//   memory with the source's padding mask) -> generator Linear(w, target vocabulary): logits [B, T, V]
//
// Post-norm layers (PyTorch's default) with each stack's final LayerNorm, ReLU, no dropout, batch first;
// positions learned, N(0, 0.02^2). Padding is id 0 on both sides.
#include <memory>

#include "layers/nn.h"

namespace hg::samples::zoo {

struct Seq2SeqSpec {
  int64_t source_vocabulary = 0, target_vocabulary = 0, source_length = 0, target_length = 0;
  int64_t width = 0;   // 0: 64 (4 heads of 16, feed-forward 4 w)
  int64_t layers = 2;  // encoder layers, and as many decoder layers
};

class Seq2SeqTransformer : public nn::Module {
 public:
  explicit Seq2SeqTransformer(const Seq2SeqSpec& spec);
  // source [B, S] and decoder_input [B, T] ids (0: padding) -> logits [B, T, target vocabulary].
  Tensor forward(const Tensor& source, const Tensor& decoder_input);

  std::shared_ptr<nn::Embedding> src_embed, tgt_embed;
  Tensor src_pos, tgt_pos;
  std::shared_ptr<nn::Transformer> transformer;
  std::shared_ptr<nn::Linear> generator;
};

}  // namespace hg::samples::zoo
