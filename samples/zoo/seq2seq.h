#pragma once
// zoo --model seq2seq: numbers to English words with an encoder-decoder Transformer (docs/zoo.md).
#include "samples/zoo/zoo_config.h"

namespace hg::samples::zoo {

int train_seq2seq(const ZooConfig& c);

}  // namespace hg::samples::zoo
