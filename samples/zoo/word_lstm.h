#pragma once
// zoo --model word-lstm: a word-level LSTM language model on a text file (samples/zoo/word_lstm.cpp).
#include "samples/zoo/zoo_config.h"

namespace hg::samples::zoo {

int train_word_lstm(const ZooConfig& c);

}  // namespace hg::samples::zoo
