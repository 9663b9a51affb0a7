#include "samples/zoo/char_mlp.h"

namespace hg::samples::zoo {

std::shared_ptr<nn::Sequential> make_char_mlp(int64_t width, int64_t block) {
  constexpr int64_t kVocab = 27, kEmbedding = 10;
  const int64_t w = width > 0 ? width : 200;
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Embedding>(kVocab, kEmbedding), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(block * kEmbedding, w, false), std::make_shared<nn::BatchNorm1d>(w),
      std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(w, kVocab)});
}

}  // namespace hg::samples::zoo
