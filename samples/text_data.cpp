#include "samples/text_data.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace hg::samples {

TextData::TextData(const std::string& path, int64_t context) : context_(context) {
  std::ifstream file(path, std::ios::binary);
  HG_CHECK(file.good(), "[train_gpt] cannot read --data file \"", path, "\": ", std::strerror(errno));
  std::ostringstream bytes;
  bytes << file.rdbuf();
  const std::string text = bytes.str();
  const size_t split = text.size() * 9 / 10;
  train_ = text.substr(0, split);
  validation_ = text.substr(split);
  HG_CHECK(int64_t(validation_.size()) > context + 1, "[train_gpt] --data file \"", path, "\" has ", text.size(),
           " bytes; expected at least ", 10 * (context + 2), " for a context of ", context,
           " (10% is held out for validation)");
}

std::pair<Tensor, Tensor> TextData::batch(int64_t batch, bool validation, std::mt19937_64& rng) const {
  const std::string& source = validation ? validation_ : train_;
  std::uniform_int_distribution<size_t> start(0, source.size() - size_t(context_) - 1);
  std::vector<int64_t> ids(size_t(batch * context_)), targets(size_t(batch * context_));
  for (int64_t row = 0; row < batch; ++row) {
    const size_t s = start(rng);
    for (int64_t t = 0; t < context_; ++t) {
      ids[size_t(row * context_ + t)] = (unsigned char)source[s + size_t(t)];
      targets[size_t(row * context_ + t)] = (unsigned char)source[s + size_t(t) + 1];
    }
  }
  return {from_vector(ids, {batch, context_}), from_vector(targets, {batch, context_})};
}

}  // namespace hg::samples
