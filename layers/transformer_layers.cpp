#include "layers/transformer_layers.h"

#include "layers/init.h"

namespace hg::nn {

namespace {
std::shared_ptr<MultiheadAttention> attention(const TransformerLayerOptions& o) {
  return std::make_shared<MultiheadAttention>(MultiheadAttentionOptions(o.d_model(), o.nhead())
                                                  .dropout(o.dropout())
                                                  .bias(o.bias())
                                                  .batch_first(o.batch_first()));
}
std::shared_ptr<LayerNorm> layer_norm_of(const TransformerLayerOptions& o) {
  return std::make_shared<LayerNorm>(Shape{o.d_model()}, o.layer_norm_eps(), true, o.bias());
}
void check(const TransformerLayerOptions& o, const char* who) {
  HG_CHECK(o.d_model() > 0 && o.dim_feedforward() > 0, "[", who, "] expected positive d_model and dim_feedforward, ",
           "got ", o.d_model(), " and ", o.dim_feedforward());
}
// linear1, dropout and linear2 of a layer, registered in PyTorch's order (between the attentions and the norms).
template <class Layer>
void register_feed_forward(Layer& layer, const TransformerLayerOptions& o) {
  layer.linear1 =
      layer.register_module("linear1", std::make_shared<Linear>(o.d_model(), o.dim_feedforward(), o.bias()));
  layer.dropout = layer.register_module("dropout", std::make_shared<Dropout>(o.dropout()));
  layer.linear2 =
      layer.register_module("linear2", std::make_shared<Linear>(o.dim_feedforward(), o.d_model(), o.bias()));
}
// dropoutK(linear2(dropout(activation(linear1(x))))), K the layer's last dropout.
template <class Layer>
Tensor feed_forward(Layer& layer, Dropout& last, const Tensor& x) {
  const Tensor h = layer.linear1->forward(x);
  const Tensor a =
      layer.options.activation() == TransformerActivation::relu ? relu(h) : gelu(h, GeluApproximation::Erf);
  return last.forward(layer.linear2->forward(layer.dropout->forward(a)));
}
}  // namespace

TransformerEncoderLayer::TransformerEncoderLayer(const TransformerLayerOptions& o) : options(o) {
  check(o, "TransformerEncoderLayer");
  self_attn = register_module("self_attn", attention(o));
  register_feed_forward(*this, o);
  norm1 = register_module("norm1", layer_norm_of(o));
  norm2 = register_module("norm2", layer_norm_of(o));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(o.dropout()));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(o.dropout()));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const AttentionMasks& masks) {
  ModuleScope scope(*this);
  auto sa = [&](const Tensor& x) { return dropout1->forward(self_attn->forward(x, x, x, masks)); };
  auto ff = [&](const Tensor& x) { return feed_forward(*this, *dropout2, x); };
  Tensor x = src;
  if (options.norm_first()) {
    x = x + sa(norm1->forward(x));
    return x + ff(norm2->forward(x));
  }
  x = norm1->forward(x + sa(x));
  return norm2->forward(x + ff(x));
}

TransformerDecoderLayer::TransformerDecoderLayer(const TransformerLayerOptions& o) : options(o) {
  check(o, "TransformerDecoderLayer");
  self_attn = register_module("self_attn", attention(o));
  multihead_attn = register_module("multihead_attn", attention(o));
  register_feed_forward(*this, o);
  norm1 = register_module("norm1", layer_norm_of(o));
  norm2 = register_module("norm2", layer_norm_of(o));
  norm3 = register_module("norm3", layer_norm_of(o));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(o.dropout()));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(o.dropout()));
  dropout3 = register_module("dropout3", std::make_shared<Dropout>(o.dropout()));
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory, const AttentionMasks& tgt_masks,
                                        const AttentionMasks& memory_masks) {
  ModuleScope scope(*this);
  auto sa = [&](const Tensor& x) { return dropout1->forward(self_attn->forward(x, x, x, tgt_masks)); };
  auto mha = [&](const Tensor& x) {
    return dropout2->forward(multihead_attn->forward(x, memory, memory, memory_masks));
  };
  auto ff = [&](const Tensor& x) { return feed_forward(*this, *dropout3, x); };
  Tensor x = tgt;
  if (options.norm_first()) {
    x = x + sa(norm1->forward(x));
    x = x + mha(norm2->forward(x));
    return x + ff(norm3->forward(x));
  }
  x = norm1->forward(x + sa(x));
  x = norm2->forward(x + mha(x));
  return norm3->forward(x + ff(x));
}

TransformerEncoder::TransformerEncoder(const TransformerLayerOptions& o, int64_t num_layers, bool final_norm) {
  HG_CHECK(num_layers > 0, "[TransformerEncoder] expected num_layers > 0, got ", num_layers);
  layers = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < num_layers; ++i) layers->push_back(std::make_shared<TransformerEncoderLayer>(o));
  if (final_norm) norm = register_module("norm", layer_norm_of(o));
}

Tensor TransformerEncoder::forward(const Tensor& src, const AttentionMasks& masks) {
  ModuleScope scope(*this);
  Tensor x = src;
  for (size_t i = 0; i < layers->size(); ++i) x = layers->at<TransformerEncoderLayer>(i)->forward(x, masks);
  return norm ? norm->forward(x) : x;
}

TransformerDecoder::TransformerDecoder(const TransformerLayerOptions& o, int64_t num_layers, bool final_norm) {
  HG_CHECK(num_layers > 0, "[TransformerDecoder] expected num_layers > 0, got ", num_layers);
  layers = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < num_layers; ++i) layers->push_back(std::make_shared<TransformerDecoderLayer>(o));
  if (final_norm) norm = register_module("norm", layer_norm_of(o));
}

Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory, const AttentionMasks& tgt_masks,
                                   const AttentionMasks& memory_masks) {
  ModuleScope scope(*this);
  Tensor x = tgt;
  for (size_t i = 0; i < layers->size(); ++i)
    x = layers->at<TransformerDecoderLayer>(i)->forward(x, memory, tgt_masks, memory_masks);
  return norm ? norm->forward(x) : x;
}

Transformer::Transformer(const TransformerLayerOptions& o, int64_t num_encoder_layers, int64_t num_decoder_layers) {
  encoder = register_module("encoder", std::make_shared<TransformerEncoder>(o, num_encoder_layers, true));
  decoder = register_module("decoder", std::make_shared<TransformerDecoder>(o, num_decoder_layers, true));
  for (const Tensor& p : parameters())
    if (p.dim() > 1) init::xavier_uniform_(p);
}

Tensor Transformer::forward(const Tensor& src, const Tensor& tgt, const AttentionMasks& src_masks,
                            const AttentionMasks& tgt_masks, const AttentionMasks& memory_masks) {
  ModuleScope scope(*this);
  const Tensor memory = encoder->forward(src, src_masks);
  return decoder->forward(tgt, memory, tgt_masks, memory_masks);
}

}  // namespace hg::nn
