#pragma once
// zoo --model gcn: node classification on a generated graph with a graph convolutional network (docs/zoo.md).
#include "samples/zoo/zoo_config.h"

namespace hg::samples::zoo {

int train_gcn(const ZooConfig& c);

}  // namespace hg::samples::zoo
