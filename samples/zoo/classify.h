#pragma once
// Image classification in the zoo (mlp, lenet, resnet, vit on an MNIST-format dataset): the splits, the
// augmentation, the model, the Trainer with the recipe's AdamW and warmup-cosine schedule, validation
// accuracy once per epoch, and the test accuracy at the end.
#include "samples/zoo/zoo_config.h"

namespace hg::samples::zoo {

int train_image_classifier(const ZooConfig& config);

}  // namespace hg::samples::zoo
