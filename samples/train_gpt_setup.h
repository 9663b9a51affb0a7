#pragma once
// What train_gpt builds from its config (TrainGptConfig), one function per piece, so that
// samples/train_gpt.cpp reads as the run itself: the model (fresh or --load's), the task (addition or
// --data's text), this rank's loader, the trainer's options, and the start-up lines naming the attention
// path and the 8-bit optimizer state.
#include <cstdint>
#include <memory>
#include <string>

#include "data/data_loader.h"
#include "dist/data_parallel.h"
#include "layers/nn.h"
#include "samples/gpt_tasks.h"
#include "samples/train_gpt_config.h"
#include "train/trainer.h"

namespace hg::samples {

// A fresh GPT, or --load's (checked against --data's vocabulary and --context); in the precision and on
// the device of the run, with its recompute and attention settings.
std::shared_ptr<nn::GPT> make_model(const TrainGptConfig& c);
// 3-digit addition, or --data's text (byte-level or BPE shards, with --tokenizer).
std::unique_ptr<GptTask> make_task(const TrainGptConfig& c, const nn::GPT& model);
// This rank's rows of each global batch, in the seed's order (--curriculum: easy problems first).
std::unique_ptr<data::DataLoader> make_loader(const TrainGptConfig& c, const GptTask& task,
                                              const dist::DataParallel& parallel, int workers);
train::TrainerOptions trainer_options(const TrainGptConfig& c, const GptTask& task, int64_t micro_batches,
                                      dist::Communicator* comm);
// "fused (FlashAttention-2 kernels)" or "composed (why)"; --attention fused where the kernels refuse
// this model is a usage error.
std::string attention_description(const nn::GPT& model);
// "optimizer state: 8-bit AdamW moments 2.01 bytes/parameter (32-bit: 8.00) ...".
std::string optimizer_state_line(const nn::GPT& model, const TrainGptConfig& c);

}  // namespace hg::samples
