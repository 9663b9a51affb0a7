#pragma once
// makemore's model: a character-level MLP language model with BatchNorm (Bengio et al. 2003; Karpathy's
// makemore series), with PyTorch's names (an nn.Sequential: 0 embedding, 2 linear, 3 batch norm, 5 linear):
//
//   Embedding(27, 10) -> Flatten -> Linear(block * 10, w, bias=False) -> BatchNorm1d(w) -> Tanh -> Linear(w, 27)
//
// It reads the `block` characters before a position (ids: '.' 0, 'a'..'z' 1..26; data/words.h) and gives
// the logits of the next one.
#include <memory>

#include "layers/nn.h"

namespace hg::samples::zoo {

inline constexpr int64_t kMakemoreBlock = 3;

// width 0: 200 hidden units.
std::shared_ptr<nn::Sequential> make_char_mlp(int64_t width, int64_t block = kMakemoreBlock);

}  // namespace hg::samples::zoo
