#pragma once
// char-lstm's model: a recurrent language model (Zaremba et al. 2014; Karpathy's char-rnn) with PyTorch's
// names (bench/peers/zoo_models.py builds the same):
//
//   embed Embedding(V, w) -> lstm LSTM(w, w, num_layers=2, batch_first) -> head Linear(w, V)
//
// over the ids of a window [B, T]: the logits [B, T, V] of each next token. V is 256 for bytes (a character
// model) or a BPE vocabulary (the tokens of make train-text's shards).
#include <memory>

#include "layers/nn.h"

namespace hg::samples::zoo {

class LstmLanguageModel : public nn::Module {
 public:
  LstmLanguageModel(int64_t vocab, int64_t width, int64_t layers = 2);  // width 0: 256
  Tensor forward(const Tensor& ids);
  // The mean cross-entropy of predicting `targets` [B, T] from `ids` [B, T] (both on the model's device),
  // in f32 whatever the model's dtype (a bf16 mean keeps 3 digits).
  Tensor next_token_loss(const Tensor& ids, const Tensor& targets);
  std::shared_ptr<nn::Embedding> embed;
  std::shared_ptr<nn::LSTM> lstm;
  std::shared_ptr<nn::Linear> head;
};

}  // namespace hg::samples::zoo
