#include "samples/zoo/zoo_recipes.h"

#include "kernels/error.h"

namespace hg::samples::zoo {

const std::vector<std::string>& zoo_model_names() {
  static const std::vector<std::string> names{"mlp",       "lenet",    "resnet",  "vit", "vae",       "dcgan",
                                              "diffusion", "makemore", "seq2seq", "gcn", "char-lstm", "word-lstm"};
  return names;
}

Recipe recipe_for(const std::string& name) {
  Recipe r;
  if (name == "mlp") return r;
  if (name == "lenet") {
    r.lr = 2e-3;
    return r;
  }
  if (name == "resnet") {  // BatchNorm and skip connections take a higher rate; crops and flips against overfitting
    r.epochs = 15;
    r.lr = 3e-3;
    r.weight_decay = 0.05;
    r.augment_pad = 2;
    r.augment_flip = true;
    return r;
  }
  if (name == "vit") {  // attention has no convolution's prior: it needs more epochs and the augmentation
    r.epochs = 20;
    r.weight_decay = 0.05;
    r.augment_pad = 2;
    r.augment_flip = true;
    return r;
  }
  if (name == "vae") {  // PyTorch's examples/vae: Adam at 1e-3, no weight decay
    r.optimizer = "adam";
    r.weight_decay = 0.0;
    return r;
  }
  if (name == "dcgan") {  // Radford et al.: Adam(lr 2e-4, betas (0.5, 0.999)) for both nets, constant rate
    r.optimizer = "adam";
    r.lr = 2e-4;
    r.weight_decay = 0.0;
    r.warmup = 0;
    return r;
  }
  if (name == "diffusion") {  // AdamW without decay is Ho et al.'s Adam; this tiny U-Net takes 1e-3, not 2e-4
    r.epochs = 10;
    r.weight_decay = 0.0;
    return r;
  }
  if (name == "makemore") {  // Debian's wamerican; ~500k characters an epoch
    r.data = "/usr/share/dict/words";
    r.epochs = 5;
    r.lr = 3e-3;
    return r;
  }
  if (name == "seq2seq") {  // generated data: 100,000 examples an epoch; 100% on held-out numbers by epoch 2
    r.data = "";
    r.epochs = 3;
    return r;
  }
  if (name == "gcn") {  // Kipf & Welling: 200 full-graph steps of Adam at 0.01, L2 5e-4, 500 validation nodes
    r.data = "";
    r.epochs = 200;
    r.batch = 100;  // every labelled node, every step
    r.optimizer = "adam";
    r.lr = 0.01;
    r.weight_decay = 5e-4;
    r.warmup = 0;
    r.validation = 500;
    return r;
  }
  if (name == "char-lstm") {  // make train-text's GPT's budget: 600 steps of 16 windows of 128 tokens
    r.data = "build/text/v4096/shard_000000.bin";
    r.steps = 600;
    r.batch = 16;
    r.lr = 1e-2;  // 2.106 bits per byte after 600 steps; the GPT's 3e-3 gave the LSTM 2.141
    r.warmup = 50;
    return r;
  }
  if (name == "word-lstm") {  // make train-text's corpus as words: 90% of its lines, windows of 35 words
    r.data = "build/text/corpus.txt";
    r.steps = 1000;
    r.batch = 20;  // PyTorch's examples/word_language_model
    r.lr = 3e-3;
    r.warmup = 50;
    return r;
  }
  HG_INPUT_FAIL("[zoo] no recipe for model \"", name, "\"");
}

}  // namespace hg::samples::zoo
