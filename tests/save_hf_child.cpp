// A helper of check_generate.sh: converts a GPT file (anything GPT::load reads, e.g. train_gpt --save's
// native safetensors) into a Hugging Face GPT-2 directory with GPT::save_hf (model.safetensors +
// config.json), so the script can run `generate --model DIR` and `train_gpt --load DIR` on one.
// Usage: save_hf_child MODEL DIR
#include <cstdio>

#include "layers/gpt.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: save_hf_child MODEL DIR\n");
    return 2;
  }
  try {
    hg::nn::GPT::load(argv[1])->save_hf(argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "save_hf_child: %s\n", e.what());
    return 1;
  }
  return 0;
}
