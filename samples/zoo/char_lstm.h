#pragma once
// zoo --model char-lstm: an LSTM language model on make train-text's corpus, in bits per byte (docs/zoo.md).
#include "samples/zoo/zoo_config.h"

namespace hg::samples::zoo {

int train_char_lstm(const ZooConfig& c);

}  // namespace hg::samples::zoo
