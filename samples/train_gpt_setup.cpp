// What train_gpt builds from its config (samples/train_gpt_setup.h): the model, the task, the loader and
// the trainer's options, and the start-up lines that describe them.
#include "samples/train_gpt_setup.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "app/cli.h"
#include "optim/optim.h"
#include "samples/shard_tokenizer.h"
#include "train/precision.h"

namespace hg::samples {
namespace {

// --tokenizer: the tokenizer of --data's shards, as the text task uses it (bits per byte, the sample).
std::optional<samples::ShardTokenizer> shard_tokenizer(const TrainGptConfig& c) {
  if (c.tokenizer.empty()) return std::nullopt;
  return app::or_usage_error(kProgram, "--tokenizer " + c.tokenizer,
                             [&] { return samples::load_shard_tokenizer(c.tokenizer); });
}

}  // namespace

// "fused" or "composed (why the fused kernels refuse this model)", for the chosen implementation on
// the model's device, dtype and head dimension. --attention fused where they refuse: a usage error.
std::string attention_description(const nn::GPT& model) {
  const Tensor weight = model.wte->weight;
  const Tensor probe = empty({1, 1, 1, model.config.n_embd() / model.config.n_head()}, weight.dtype(), weight.device());
  std::string why;
  const AttentionImpl automatic = attention_impl_for(probe, probe, probe, &why);
  switch (model.attention()) {
    case AttentionImpl::Composed:
      return "composed (--attention composed)";
    case AttentionImpl::Fused:
      if (!why.empty()) app::exit_with_usage_error(kProgram, "--attention fused: " + why);
      return "fused (FlashAttention-2 kernels)";
    case AttentionImpl::Auto:
      break;
  }
  return automatic == AttentionImpl::Fused ? "fused (FlashAttention-2 kernels)" : "composed (" + why + ")";
}

// "optimizer state: 8-bit AdamW moments 2.01 bytes/parameter (32-bit: 8.00) ...": the moments' bytes
// (codes and block scales, optim::AdamW::moment_bytes) per parameter, and the fp32 master copy's.
std::string optimizer_state_line(const nn::GPT& model, const TrainGptConfig& c) {
  const optim::AdamWOptions eight = optim::AdamWOptions().state_bits(8), wide = optim::AdamWOptions();
  int64_t params = 0, quantised = 0, bytes8 = 0, bytes32 = 0, master = 0;
  for (const Tensor& p : model.parameters()) {
    params += p.numel();
    if (optim::AdamW::quantizes(p, eight)) quantised += p.numel();
    bytes8 += optim::AdamW::moment_bytes(p, eight);
    bytes32 += optim::AdamW::moment_bytes(p, wide);
    if (c.master_weights && is_half(p.dtype())) master += 4 * p.numel();
  }
  const double n = double(std::max<int64_t>(params, 1));
  char line[256];
  std::snprintf(
      line, sizeof line,
      "optimizer state: 8-bit AdamW moments %.2f bytes/parameter (32-bit: %.2f), %.1f%% of parameters "
      "quantised%s",
      double(bytes8) / n, double(bytes32) / n, 100.0 * double(quantised) / n,
      master > 0 ? (" | fp32 master weights " + std::to_string(master / params) + " bytes/parameter").c_str() : "");
  return line;
}

// A fresh GPT, or --load's; in the precision and on the device of the run.
std::shared_ptr<nn::GPT> make_model(const TrainGptConfig& c) {
  std::shared_ptr<nn::GPT> model;
  if (!c.load.empty()) {
    model = app::or_usage_error(kProgram, "--load " + c.load, [&] { return nn::GPT::load(c.load); });
    if (!c.data.empty())
      app::or_usage_error(kProgram, [&] {
        samples::check_model_vocab(model->config.vocab_size(), samples::token_data_vocab(c.data), c.load, c.data);
      });
    const int64_t positions = model->config.context();
    if (!c.data.empty() && c.context > positions)
      app::exit_with_usage_error(kProgram, "--context " + std::to_string(c.context) + " is longer than the " +
                                               std::to_string(positions) + " positions of --load " + c.load +
                                               "; expected --context <= " + std::to_string(positions));
    if (c.data.empty() && positions < 3 * c.digits + 3)
      app::exit_with_usage_error(kProgram, "the " + std::to_string(positions) + " positions of --load " + c.load +
                                               " are too few for " + std::to_string(c.digits) +
                                               "-digit problems; expected at least " +
                                               std::to_string(3 * c.digits + 3));
  } else {
    const auto config = nn::GPTConfig()
                            .vocab_size(samples::model_vocab(c))
                            .context(c.context)
                            .n_layer(c.layers)
                            .n_head(c.heads)
                            .n_embd(c.dim)
                            .dropout(c.dropout);
    model = std::make_shared<nn::GPT>(config);
  }
  model->to(train::parse_precision(c.precision));
  model->to(Device::parse(c.device));
  if (c.fp32_grads) model->set_grad_dtype(DType::f32);
  model->set_recompute_every(c.recompute_every);
  model->set_attention(parse_attention_impl(c.attention));
  return model;
}

std::unique_ptr<samples::GptTask> make_task(const TrainGptConfig& c, const nn::GPT& model) {
  if (c.data.empty()) {  // a fresh problem for every training row (up to 2^24; a longer run repeats the pool)
    const int64_t pool = std::clamp<int64_t>(c.steps * c.batch, int64_t(1) << 20, int64_t(1) << 24);
    return samples::addition_task(int(c.digits), pool, uint64_t(c.seed) * 7919 + 1, c.eval_problems);
  }
  const int64_t T = std::min(c.context, model.config.context());
  return app::or_usage_error(kProgram, "--data " + c.data,
                             [&] { return samples::text_task(c.data, T, c.batch, shard_tokenizer(c)); });
}

// This rank's rows of each global batch, in the seed's order (--curriculum: easy problems first).
std::unique_ptr<data::DataLoader> make_loader(const TrainGptConfig& c, const samples::GptTask& task,
                                              const dist::DataParallel& parallel, int workers) {
  const auto options = data::DataLoaderOptions()
                           .batch_size(parallel.rows_per_rank(c.batch))
                           .rank(parallel.rank(), parallel.world_size())
                           .seed(uint64_t(c.seed))
                           .drop_last(true)
                           .shuffle(task.shuffle())
                           .workers(workers)
                           .device(Device::parse(c.device));
  std::shared_ptr<const data::BatchSampler> sampler =
      std::make_shared<data::DistributedBatchSampler>(task.training_set()->size(), options.sampler());
  if (c.curriculum == "easy-to-hard")
    sampler = task.curriculum(sampler, c.curriculum_steps, options.sampler().batch_size(), uint64_t(c.seed),
                              parallel.rank(), parallel.world_size());
  return std::make_unique<data::DataLoader>(task.training_set(), sampler, options);
}

train::TrainerOptions trainer_options(const TrainGptConfig& c, const samples::GptTask& task, int64_t micro_batches,
                                      dist::Communicator* comm) {
  return train::TrainerOptions()
      .steps(c.steps)
      .stop_after(c.stop_after)
      .grad_accum(micro_batches)
      .clip(c.clip)
      .eval_every(c.eval_every)
      .metric_name(task.metric_name())
      .metric_mode(task.metric_mode())
      .seq_warmup_steps(c.seq_warmup_steps)
      .seq_warmup_start(c.seq_warmup_start > 0 ? c.seq_warmup_start : task.shortest_length())
      .offload_activations(parse_offload_mode(c.offload))
      .checkpoint_dir(c.checkpoint_dir)
      .checkpoint_every(c.checkpoint_every)
      .keep_checkpoints(c.keep_checkpoints)
      .resume(c.resume)
      .continue_after_checkpoint_error(c.on_checkpoint_error == "warn")
      .resume_entry(c.resume_entry)
      .run_config(c.flags.run_config(samples::train_gpt_resume_rules()))
      .cuda_graph(c.cuda_graph)
      .monitor(train::MonitorOptions()
                   .profile_path(c.profile)
                   .profile_ops(c.profile_ops)
                   .metrics_path(c.metrics_log)
                   .early_stop_patience(c.early_stop)
                   .early_stop_min_delta(c.early_stop_delta))
      .communicator(comm);
}

}  // namespace hg::samples
