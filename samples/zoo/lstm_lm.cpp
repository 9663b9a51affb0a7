#include "samples/zoo/lstm_lm.h"

namespace hg::samples::zoo {

LstmLanguageModel::LstmLanguageModel(int64_t vocab, int64_t width, int64_t layers) {
  const int64_t w = width > 0 ? width : 256;
  embed = register_module("embed", std::make_shared<nn::Embedding>(vocab, w));
  lstm =
      register_module("lstm", std::make_shared<nn::LSTM>(nn::LSTMOptions(w, w).num_layers(layers).batch_first(true)));
  head = register_module("head", std::make_shared<nn::Linear>(w, vocab));
}

Tensor LstmLanguageModel::forward(const Tensor& ids) { return (*head)(lstm->forward((*embed)(ids)).output); }

Tensor LstmLanguageModel::next_token_loss(const Tensor& ids, const Tensor& targets) {
  const Tensor logits = forward(ids);
  return cross_entropy(logits.reshape({-1, logits.size(2)}).to(DType::f32), targets.reshape({-1}));
}

}  // namespace hg::samples::zoo
