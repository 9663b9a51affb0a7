#include "samples/zoo/seq2seq_model.h"

namespace hg::samples::zoo {

Seq2SeqTransformer::Seq2SeqTransformer(const Seq2SeqSpec& s) {
  const int64_t w = s.width > 0 ? s.width : 64;
  HG_INPUT_CHECK(w % 4 == 0, "[zoo seq2seq] width ", w, " is not a multiple of the 4 heads");
  src_embed = register_module("src_embed", std::make_shared<nn::Embedding>(s.source_vocabulary, w));
  tgt_embed = register_module("tgt_embed", std::make_shared<nn::Embedding>(s.target_vocabulary, w));
  src_pos = register_parameter("src_pos", zeros({1, s.source_length, w}));
  tgt_pos = register_parameter("tgt_pos", zeros({1, s.target_length, w}));
  nn::init::normal_(src_pos, 0.0, 0.02);
  nn::init::normal_(tgt_pos, 0.0, 0.02);
  const auto layer = nn::TransformerLayerOptions(w, 4).dim_feedforward(4 * w).dropout(0.0).batch_first(true);
  transformer = register_module("transformer", std::make_shared<nn::Transformer>(layer, s.layers, s.layers));
  generator = register_module("generator", std::make_shared<nn::Linear>(w, s.target_vocabulary));
}

Tensor Seq2SeqTransformer::forward(const Tensor& source, const Tensor& decoder_input) {
  const Tensor source_padding = eq(source, 0.0), target_padding = eq(decoder_input, 0.0);
  const Tensor src = (*src_embed)(source) + src_pos.narrow(1, 0, source.size(1));
  const Tensor tgt = (*tgt_embed)(decoder_input) + tgt_pos.narrow(1, 0, decoder_input.size(1));
  const Tensor out = transformer->forward(src, tgt, {.key_padding_mask = source_padding},
                                          {.key_padding_mask = target_padding, .is_causal = true},
                                          {.key_padding_mask = source_padding});
  return (*generator)(out);
}

}  // namespace hg::samples::zoo
