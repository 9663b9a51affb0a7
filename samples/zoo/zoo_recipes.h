#pragma once
// Each zoo model's training recipe: what `zoo --model NAME` uses for every flag not given. AdamW with a
// linear warmup and a cosine decay to lr / 20; the figures in docs/zoo.md are these recipes' results.
#include <cstdint>
#include <string>
#include <vector>

namespace hg::samples::zoo {

struct Recipe {
  std::string data = "/usr/share/datasets/fashion-mnist";  // Debian's dataset-fashion-mnist
  int64_t epochs = 10, batch = 128, warmup = 100;
  int64_t steps = 0;  // instead of epochs, when the recipe is counted in steps
  std::string optimizer = "adamw";
  double lr = 1e-3, weight_decay = 0.01;
  int64_t augment_pad = 0;  // random crop from the image padded by this many pixels (0: none)
  bool augment_flip = false;
  int64_t validation = 5000;  // held-out examples (images, words, numbers, nodes)
};

// "mlp", "lenet", "resnet", "vit", "vae", "dcgan", "diffusion", "makemore", "seq2seq", "gcn", "char-lstm",
// "word-lstm".
const std::vector<std::string>& zoo_model_names();
// The recipe of model `name` (one of zoo_model_names()).
Recipe recipe_for(const std::string& name);

}  // namespace hg::samples::zoo
