// zoo: classic small models trained on real data, one command each (docs/zoo.md).
//
//   zoo --model mlp          an MLP on Fashion-MNIST
//   zoo --model lenet        a LeNet-style CNN on Fashion-MNIST
//   zoo --model resnet       a small ResNet (BatchNorm, skip connections, crops and flips) on Fashion-MNIST
//   zoo --model vit          a small Vision Transformer on Fashion-MNIST
//   zoo --model vae          a variational autoencoder of Fashion-MNIST's images
//   zoo --model dcgan        a DCGAN drawing Fashion-MNIST's garments
//   zoo --model diffusion    a tiny DDPM U-Net drawing Fashion-MNIST's garments
//   zoo --model seq2seq      an encoder-decoder Transformer writing numbers in words
//   zoo --model gcn          a graph convolutional network classifying the nodes of a generated graph
//   zoo --model char-lstm    an LSTM language model on make train-text's corpus, beside its GPT
//   zoo --model word-lstm    a word-level LSTM language model on a text file (the same corpus's words)
//   zoo --model makemore     a character MLP with BatchNorm on English words, generating new ones
//
// Every model trains through the Trainer (progress, --metrics-log, --checkpoint-dir / --resume,
// --device cuda, --precision bf16) with its recipe's settings (samples/zoo/zoo_recipes.h) unless a flag
// says otherwise. Written only against halfgrad's public headers.
#include "app/cli.h"
#include "app/thread_defaults.h"
#include "samples/zoo/char_lstm.h"
#include "samples/zoo/classify.h"
#include "samples/zoo/gcn.h"
#include "samples/zoo/generative.h"
#include "samples/zoo/makemore.h"
#include "samples/zoo/seq2seq.h"
#include "samples/zoo/word_lstm.h"
#include "samples/zoo/zoo_config.h"

using namespace hg;

// Nothing escapes: a usage or input error exits 2, any other error 1, on one line (app/cli.h).
int main(int argc, char** argv) {
  app::bound_openmp_spin(argv);  // before libgomp's threads or anything else exists
  return app::guarded_main(samples::zoo::kProgram, [&] {
    const samples::zoo::ZooConfig config(argc, argv);
    if (config.model == "makemore") return samples::zoo::train_makemore(config);
    if (config.model == "vae") return samples::zoo::train_vae(config);
    if (config.model == "dcgan") return samples::zoo::train_dcgan(config);
    if (config.model == "diffusion") return samples::zoo::train_diffusion(config);
    if (config.model == "seq2seq") return samples::zoo::train_seq2seq(config);
    if (config.model == "gcn") return samples::zoo::train_gcn(config);
    if (config.model == "char-lstm") return samples::zoo::train_char_lstm(config);
    if (config.model == "word-lstm") return samples::zoo::train_word_lstm(config);
    return samples::zoo::train_image_classifier(config);
  });
}
