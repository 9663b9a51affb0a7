#pragma once
// PyTorch's Transformer family: TransformerEncoderLayer, TransformerDecoderLayer, their stacks
// TransformerEncoder / TransformerDecoder (with the optional final norm) and Transformer -- the same
// arguments, submodule names (self_attn, multihead_attn, linear1, linear2, norm1..3, dropout..3,
// encoder.layers.0..., encoder.norm) and printed form, so their state dicts load key for key. One layer:
//
//   post-norm (default): x = norm1(x + sa(x)); [x = norm2(x + mha(x, memory));] x = normK(x + ff(x))
//   norm_first:          x = x + sa(norm1(x)); [x = x + mha(norm2(x), memory);] x = x + ff(normK(x))
//   ff(x) = dropoutK(linear2(dropout(activation(linear1(x)))))      (activation relu, or exact-erf gelu)
//
// (The GPT's pre-LN Block, layers/transformer.h, is a separate, fused design.)
#include <memory>

#include "kernels/options.h"
#include "layers/containers.h"
#include "layers/multihead_attention.h"

namespace hg::nn {

enum class TransformerActivation { relu, gelu };

//   TransformerLayerOptions(256, 4).dim_feedforward(1024).batch_first(true).norm_first(true)
struct TransformerLayerOptions {
  TransformerLayerOptions(int64_t d_model, int64_t nhead) : d_model_(d_model), nhead_(nhead) {}
  HG_OPTION(TransformerLayerOptions, int64_t, d_model, 0);
  HG_OPTION(TransformerLayerOptions, int64_t, nhead, 1);
  HG_OPTION(TransformerLayerOptions, int64_t, dim_feedforward, 2048);
  HG_OPTION(TransformerLayerOptions, double, dropout, 0.1);
  HG_OPTION(TransformerLayerOptions, TransformerActivation, activation, TransformerActivation::relu);
  HG_OPTION(TransformerLayerOptions, double, layer_norm_eps, 1e-5);
  HG_OPTION(TransformerLayerOptions, bool, batch_first, false);
  HG_OPTION(TransformerLayerOptions, bool, norm_first, false);
  HG_OPTION(TransformerLayerOptions, bool, bias, true);
};

class TransformerEncoderLayer : public Module {
 public:
  explicit TransformerEncoderLayer(const TransformerLayerOptions& options);
  // src [S, N, E] (batch_first: [N, S, E]); masks as MultiheadAttention's (src_mask, src_key_padding_mask).
  Tensor forward(const Tensor& src, const AttentionMasks& src_masks = {});
  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Dropout> dropout, dropout1, dropout2;
  std::shared_ptr<LayerNorm> norm1, norm2;
  const TransformerLayerOptions options;
};

class TransformerDecoderLayer : public Module {
 public:
  explicit TransformerDecoderLayer(const TransformerLayerOptions& options);
  // tgt [T, N, E], memory [S, N, E] (batch_first: [N, T, E], [N, S, E]).
  Tensor forward(const Tensor& tgt, const Tensor& memory, const AttentionMasks& tgt_masks = {},
                 const AttentionMasks& memory_masks = {});
  std::shared_ptr<MultiheadAttention> self_attn, multihead_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<Dropout> dropout, dropout1, dropout2, dropout3;
  std::shared_ptr<LayerNorm> norm1, norm2, norm3;
  const TransformerLayerOptions options;
};

// num_layers layers built from `options` (each its own parameters), then `norm` when final_norm.
class TransformerEncoder : public Module {
 public:
  TransformerEncoder(const TransformerLayerOptions& options, int64_t num_layers, bool final_norm = false);
  Tensor forward(const Tensor& src, const AttentionMasks& src_masks = {});
  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<LayerNorm> norm;  // null without final_norm
};

class TransformerDecoder : public Module {
 public:
  TransformerDecoder(const TransformerLayerOptions& options, int64_t num_layers, bool final_norm = false);
  Tensor forward(const Tensor& tgt, const Tensor& memory, const AttentionMasks& tgt_masks = {},
                 const AttentionMasks& memory_masks = {});
  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<LayerNorm> norm;
};

// PyTorch's nn.Transformer: an encoder and a decoder of layers from `options`, each with its final norm;
// every parameter of rank >= 2 re-initialised xavier_uniform_ (PyTorch's _reset_parameters).
class Transformer : public Module {
 public:
  Transformer(const TransformerLayerOptions& options, int64_t num_encoder_layers = 6, int64_t num_decoder_layers = 6);
  // src [S, N, E], tgt [T, N, E] (batch_first: [N, S, E], [N, T, E]) -> [T, N, E]. memory_masks apply to
  // the decoder's attention over the encoder's output (memory_mask, memory_key_padding_mask).
  Tensor forward(const Tensor& src, const Tensor& tgt, const AttentionMasks& src_masks = {},
                 const AttentionMasks& tgt_masks = {}, const AttentionMasks& memory_masks = {});
  std::shared_ptr<TransformerEncoder> encoder;
  std::shared_ptr<TransformerDecoder> decoder;
};

}  // namespace hg::nn
