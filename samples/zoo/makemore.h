#pragma once
// makemore in the zoo: the character MLP of samples/zoo/char_mlp.h trained on an English word list
// (Debian's wamerican) to predict each next character from the 3 before it (data/words.h
// CharContextDataset). Validation loss (nats per character) once per epoch, the test loss at the end,
// then new words sampled from the model one character at a time (BatchNorm in eval mode: its running
// statistics).
#include "samples/zoo/zoo_config.h"

namespace hg::samples::zoo {

int train_makemore(const ZooConfig& config);

}  // namespace hg::samples::zoo
