#pragma once
// The zoo's command line: one program, `zoo --model NAME`, whose flags every model shares. A model's
// recipe (zoo_recipes.h: epochs, batch, learning rate, weight decay, warmup, augmentation) fills every
// flag the user did not give, before --print-config prints and before a run config is stored, so the
// settings a run used are the ones printed and checkpointed.
#include <cstdint>
#include <string>

#include "app/cli.h"

namespace hg::samples::zoo {

inline constexpr const char* kProgram = "zoo";

struct ZooConfig {
  app::Flags flags{kProgram,
                   "Trains one model of the zoo on real data through the Trainer and reports its held-out result "
                   "(docs/zoo.md)."};
  std::string& model = flags.add_string(
      "model", "",
      "the model: mlp, lenet, resnet, vit, vae, dcgan or diffusion (Fashion-MNIST), makemore (English words), seq2seq "
      "(numbers to words), gcn (a generated graph), char-lstm and word-lstm (make train-text's corpus)");
  std::string& data = flags.add_string(
      "data", "",
      "the images' directory of four MNIST-format files (default: Debian's dataset-fashion-mnist) or a CIFAR-10 "
      "binary one; makemore's word list (default: /usr/share/dict/words, Debian's wamerican); char-lstm's token "
      "shards or text file (default: make train-text's build/text/v4096/shard_000000.bin); word-lstm's text file "
      "(default: make train-text's build/text/corpus.txt)");
  std::string& device = flags.add_string("device", "cpu", "device to train on: cpu, cuda or cuda:N");
  std::string& precision = flags.add_string("precision", "fp32", "compute dtype of the model: fp32, bf16 or fp16");
  int64_t& epochs = flags.add_int("epochs", 0, "passes over the training split (0: the model's recipe)", 0);
  int64_t& steps =
      flags.add_int("steps", 0, "optimizer steps (0: --epochs x the batches of one epoch); the schedule spans them", 0);
  int64_t& stop_after =
      flags.add_int("stop-after-steps", 0, "end this run after step N (the schedule still spans --steps)", 0);
  int64_t& batch = flags.add_int("batch", 0, "examples per step: images, or characters (0: the model's recipe)", 0);
  std::string& optimizer =
      flags.add_string("optimizer", "", "the optimizer (\"\": the model's recipe; optim/by_name.h)");
  double& lr = flags.add_double("lr", 0.0, "peak learning rate (0: the model's recipe)", 0.0);
  double& weight_decay = flags.add_double("weight-decay", -1.0, "weight decay (-1: the model's recipe)", -1.0);
  int64_t& warmup = flags.add_int("warmup", -1, "linear warmup steps before the cosine decay (-1: the recipe)", -1);
  int64_t& augment_pad = flags.add_int(
      "augment-pad", -1, "random crop from the image padded by N pixels (0: none; -1: the model's recipe)", -1);
  std::string& augment_flip =
      flags.add_string("augment-flip", "", "random horizontal flips: on or off (\"\": the model's recipe)");
  int64_t& width =
      flags.add_int("width", 0, "the model's width: hidden units, channels or model dim (0: its default)", 0);
  int64_t& validation =
      flags.add_int("validation", 0,
                    "held-out examples: training images for validation (makemore: words and seq2seq: numbers, as many "
                    "again for test; gcn: nodes) (0: the recipe's, 5000; gcn 500)",
                    0);
  int64_t& nodes = flags.add_int("nodes", 0, "gcn: nodes of the generated graph (0: 2000)", 0);
  int64_t& train_limit = flags.add_int(
      "train-limit", 0,
      "train on the first N images (words) of the training split only (0: all; seq2seq: N examples an epoch)", 0);
  int64_t& eval_limit =
      flags.add_int("eval-limit", 0, "evaluate on the first N examples of each held-out split only (0: all)", 0);
  int64_t& eval_every = flags.add_int(
      "eval-every", 0,
      "validate every N steps (0: once per epoch, at most 20 times a run, 3 times a run under an epoch)", 0);
  int64_t& seed = flags.add_int("seed", 1337, "random seed (weights, data order, augmentation)", 0);
  int64_t& threads = flags.add_int(
      "threads", 0, "OpenMP threads (0: OMP_NUM_THREADS when set, else the usable cores less the loader workers)", 0);
  int64_t& workers = flags.add_int(
      "workers", -1, "data loader threads (0: on the training thread; -1: choose; not kept by --resume)", -1);
  std::string& checkpoint_dir =
      flags.add_string("checkpoint-dir", "", "write training checkpoints into this directory");
  int64_t& checkpoint_every =
      flags.add_int("checkpoint-every-steps", 0, "checkpoint every N steps (0: only at the end)", 0);
  bool& resume =
      flags.add_bool("resume", false, "continue from the newest checkpoint in --checkpoint-dir, bit-exactly");
  std::string& metrics_log =
      flags.add_string("metrics-log", "", "write one JSON line of metrics per step to this file");
  std::string& save = flags.add_string("save", "", "save the trained model to this safetensors file");
  std::string& tokenizer = flags.add_string(
      "tokenizer", "",
      "char-lstm: the tokenizer.json of --data's shards, for bits per byte (default: the one beside them)");
  std::string& images = flags.add_string(
      "images", "", "vae, dcgan, diffusion: write PNG grids of samples (vae: and reconstructions) into this directory");
  std::string& save_init = flags.add_string(
      "save-init", "", "save the initial weights to this safetensors file (for the PyTorch side by side)");
  std::string& save_batches = flags.add_string(
      "save-batches", "",
      "save the first 64 steps' batches (FIELD.K: image, label; context, target) to this safetensors file");

  ZooConfig(int argc, char** argv);
  ZooConfig(const ZooConfig&) = delete;
  ZooConfig& operator=(const ZooConfig&) = delete;
};

// Which settings --resume restores and which must not change (app/cli.h ResumeRules).
const app::ResumeRules& zoo_resume_rules();

}  // namespace hg::samples::zoo
