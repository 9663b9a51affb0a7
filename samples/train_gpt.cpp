// train_gpt: trains a GPT and reports what it learned.
//
// Default task: 3-digit addition ("482+039=0521\n"), generated here, judged by exact-match accuracy
// on held-out problems never seen in training. --data FILE trains on any text file (byte-level)
// or on token shards (byte-level or BPE, the vocabulary from their header) instead and reports the
// validation loss per token and bits per byte (--tokenizer: the shards' BPE). The loop is train::Trainer; data parallelism and ZeRO come from
// dist::DataParallel. Written only against halfgrad's public headers, as a user would.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "dist/data_parallel.h"
#include "engine/allocator.h"
#include "engine/anomaly.h"
#include "engine/random.h"
#include "kernels/cpu/vector_math.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "samples/cli.h"
#include "samples/gpt_tasks.h"
#include "samples/thread_defaults.h"
#include "samples/train_gpt_config.h"
#include "samples/train_gpt_plan.h"
#include "text/tokenizer.h"
#include "train/checkpoint_directory.h"
#include "train/precision.h"
#include "train/trainer.h"

using namespace hg;

namespace {

using samples::kProgram;
using samples::TrainGptConfig;

// "fused" or "composed (why the fused kernels refuse this model)", for the chosen implementation on
// the model's device, dtype and head dimension. --attention fused where they refuse: a usage error.
std::string attention_description(const nn::GPT& model) {
  const Tensor weight = model.wte->weight;
  const Tensor probe = empty({1, 1, 1, model.config.n_embd() / model.config.n_head()}, weight.dtype(), weight.device());
  std::string why;
  const AttentionImpl automatic = attention_impl_for(probe, probe, probe, &why);
  switch (model.attention()) {
    case AttentionImpl::Composed: return "composed (--attention composed)";
    case AttentionImpl::Fused:
      if (!why.empty()) samples::exit_with_usage_error(kProgram, "--attention fused: " + why);
      return "fused (FlashAttention-2 kernels)";
    case AttentionImpl::Auto: break;
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
  std::snprintf(line, sizeof line,
                "optimizer state: 8-bit AdamW moments %.2f bytes/parameter (32-bit: %.2f), %.1f%% of parameters "
                "quantised%s",
                double(bytes8) / n, double(bytes32) / n, 100.0 * double(quantised) / n,
                master > 0 ? (" | fp32 master weights " + std::to_string(master / params) + " bytes/parameter").c_str()
                           : "");
  return line;
}

// A fresh GPT, or --load's; in the precision and on the device of the run.
std::shared_ptr<nn::GPT> make_model(const TrainGptConfig& c) {
  std::shared_ptr<nn::GPT> model;
  if (!c.load.empty()) {
    model = samples::or_usage_error(kProgram, "--load " + c.load, [&] { return nn::GPT::load(c.load); });
    if (!c.data.empty())
      samples::or_usage_error(kProgram, [&] {
        samples::check_model_vocab(model->config.vocab_size(), samples::token_data_vocab(c.data), c.load, c.data);
      });
    const int64_t positions = model->config.context();
    if (!c.data.empty() && c.context > positions)
      samples::exit_with_usage_error(kProgram, "--context " + std::to_string(c.context) + " is longer than the " +
                                                   std::to_string(positions) + " positions of --load " + c.load +
                                                   "; expected --context <= " + std::to_string(positions));
    if (c.data.empty() && positions < 3 * c.digits + 3)
      samples::exit_with_usage_error(kProgram, "the " + std::to_string(positions) + " positions of --load " + c.load +
                                                   " are too few for " + std::to_string(c.digits) +
                                                   "-digit problems; expected at least " +
                                                   std::to_string(3 * c.digits + 3));
  } else {
    const auto config =
        nn::GPTConfig().vocab_size(samples::model_vocab(c)).context(c.context).n_layer(c.layers).n_head(c.heads).n_embd(c.dim).dropout(
            c.dropout);
    model = std::make_shared<nn::GPT>(config);
  }
  model->to(train::parse_precision(c.precision));
  model->to(Device::parse(c.device));
  if (c.fp32_grads) model->set_grad_dtype(DType::f32);
  model->set_checkpoint_every(c.recompute_every);
  model->set_attention(parse_attention_impl(c.attention));
  return model;
}

// --tokenizer: the tokenizer of --data's shards, as the text task uses it (bits per byte, the sample).
std::optional<samples::ShardTokenizer> shard_tokenizer(const TrainGptConfig& c) {
  if (c.tokenizer.empty()) return std::nullopt;
  auto tokenizer = std::make_shared<const text::Tokenizer>(samples::or_usage_error(
      kProgram, "--tokenizer " + c.tokenizer, [&] { return text::Tokenizer::load(c.tokenizer); }));
  std::vector<uint32_t> lengths(tokenizer->vocab_size(), 0);
  for (uint32_t id = 0; id < lengths.size(); ++id) {
    try {
      lengths[id] = uint32_t(tokenizer->token_bytes(id).size());
    } catch (const Error&) {  // an id a loaded vocabulary skips: it never occurs in prepare_data's shards
    }
  }
  std::vector<std::string> specials;
  for (const text::SpecialToken& s : tokenizer->special_tokens()) specials.push_back(s.content);
  return samples::ShardTokenizer{c.tokenizer, samples::TokenBytes(std::move(lengths)),
                                 [tokenizer](std::span<const uint32_t> ids) { return tokenizer->decode(ids); },
                                 [tokenizer](std::string_view text) { return tokenizer->encode(text); },
                                 std::move(specials)};
}

std::unique_ptr<samples::GptTask> make_task(const TrainGptConfig& c, const nn::GPT& model) {
  if (c.data.empty()) {  // a fresh problem for every training row (up to 2^24; a longer run repeats the pool)
    const int64_t pool = std::clamp<int64_t>(c.steps * c.batch, int64_t(1) << 20, int64_t(1) << 24);
    return samples::addition_task(int(c.digits), pool, uint64_t(c.seed) * 7919 + 1, c.eval_problems);
  }
  const int64_t T = std::min(c.context, model.config.context());
  return samples::or_usage_error(kProgram, "--data " + c.data, [&] { return samples::text_task(c.data, T, c.batch, shard_tokenizer(c)); });
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
      .offload_activations(train::parse_offload_activations(c.offload))
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

int run(const TrainGptConfig& c) {
  // OpenMP threads and loader workers sized together (samples/thread_defaults.h); flags and env win.
  const samples::ThreadSettings threads = samples::apply_thread_settings(
      c.threads, c.workers >= 0 ? std::optional<int64_t>(c.workers) : std::nullopt,
      !Device::parse(c.device).is_cpu());
  manual_seed(uint64_t(c.seed));
  if (c.memory_limit_mib > 0) set_memory_limit(Device::parse(c.device), c.memory_limit_mib << 20);
  set_detect_anomaly(c.detect_anomaly);
  const std::shared_ptr<nn::GPT> model = make_model(c);
  const std::unique_ptr<samples::GptTask> task = make_task(c, *model);
  dist::DataParallel parallel(dist::DataParallelOptions()
                                  .zero_stage(int(c.zero))
                                  .offload_optimizer(c.offload_optimizer)
                                  .persistence_threshold(4 * c.dim));
  const std::unique_ptr<optim::Optimizer> optimizer = parallel.adamw(
      *model,
      optim::AdamWOptions()
          .lr(c.lr)
          .weight_decay(c.weight_decay)
          .decay_only_matrices(true)
          .state_bits(int(c.optimizer_state_bits)),
      optim::MixedPrecisionOptions()
          .master_weights(c.master_weights)
          .stochastic_rounding(c.stochastic_rounding)
          .rounding_seed(uint64_t(c.seed)));
  if (!c.load.empty() && optimizer->has_saved_state(c.load))  // ZeRO shards beside it: the user's files too
    samples::or_usage_error(kProgram, "--load " + c.load + " (its optimizer shards)", [&] { optimizer->load_state(c.load); });
  const std::unique_ptr<data::DataLoader> loader = make_loader(c, *task, parallel, threads.workers);
  const int64_t tokens_per_micro_batch = c.batch * task->sequence_length();
  const int64_t micro_batches = samples::or_usage_error(
      kProgram, [&] { return train::accumulation_steps(c.grad_accum, c.batch_tokens, tokens_per_micro_batch); });
  const DType precision = train::parse_precision(c.precision);
  train::Trainer trainer(
      *model, *optimizer, *loader, [&](const data::Batch& b) { return model->loss(b[0], b[1]); },
      trainer_options(c, *task, micro_batches, parallel.communicator()));
  // A run shorter than the warmup warms up over all but its last step.
  const int64_t total_steps = std::max<int64_t>(c.steps, 1);
  trainer
      .schedule(std::make_shared<optim::WarmupCosine>(c.lr, std::min(c.warmup, total_steps - 1), total_steps, c.min_lr))
      .loss_scaler(train::parse_loss_scale(c.loss_scale, precision))
      .evaluator([&] { return task->evaluate(*model); });

  const nn::GPTConfig& m = model->config;
  std::printf(
      "train_gpt: %s on %s | GPT L%lld H%lld C%lld T%lld, %.2fM parameters | batch %lld x %lld (%lld tokens) "
      "| %s%s | %s\n",
      task->description().c_str(), Device::parse(c.device).str().c_str(), (long long)m.n_layer(), (long long)m.n_head(),
      (long long)m.n_embd(), (long long)m.context(), double(model->parameter_count()) / 1e6, (long long)c.batch,
      (long long)micro_batches, (long long)(tokens_per_micro_batch * micro_batches), train::precision_name(precision),
      trainer.scaler().enabled() ? (std::string(", ") + trainer.scaler().mode_name() + " loss scale").c_str() : "",
      threads.describe().c_str());
  std::printf("attention: %s\n", attention_description(*model).c_str());
  if (Device::parse(c.device).is_cpu())  // which row kernels run (HG_VECTOR_MATH may choose)
    std::printf("cpu row kernels: %s (softmax, GELU, LayerNorm)\n",
                kernels::cpu::vector_math_name(kernels::cpu::vector_math_active()));
  if (c.recompute_every > 0 || c.offload != "off")
    std::printf("memory savers: checkpoint every %lld block(s) | activation offload %s\n", (long long)c.recompute_every,
                c.offload.c_str());
  if (c.optimizer_state_bits == 8) std::printf("%s\n", optimizer_state_line(*model, c).c_str());
  if (c.resume) samples::or_usage_error(kProgram, [&] { return trainer.resume(); });
  train::TrainResult result;
  try {
    result = trainer.fit();
  } catch (const train::CheckpointWriteError& e) {  // --on-checkpoint-error stop: one line, exit 1
    throw Error(std::string(e.what()) +
                " | stopped: free space or make --checkpoint-dir writable, then --resume (--on-checkpoint-error "
                "warn trains on without the checkpoint)");
  }
  if (c.sample > 0) task->show_samples(*model, c.sample);
  if (!c.save.empty()) {
    trainer.save_model(c.save, [&](const std::string& path) { model->save(path); });
    std::printf("saved %s\n", c.save.c_str());
  }
  if (c.memory_summary) std::printf("%s", memory_summary().c_str());
  // --on-checkpoint-error warn: the run trained on, but its final state is on no disk.
  HG_CHECK(!result.final_checkpoint_failed, "the final checkpoint (step ", result.last_step,
           ") could not be written (see the warning above): the run's last steps are lost on exit; the summary "
           "counts ", result.checkpoint_failures, " failed checkpoint(s)");
  return 0;
}

int main_body(int argc, char** argv) {
  const TrainGptConfig config(argc, argv);
  if (config.plan) return samples::print_plan(config, argc, argv);
  if (config.memory_budget_gib <= 0) return run(config);
  // --memory-budget alone: train with the plan's pick, its flags appended to the command line.
  std::vector<std::string> args = samples::planned_arguments(config, argc, argv);
  std::vector<char*> planned_argv;
  for (std::string& a : args) planned_argv.push_back(a.data());
  const TrainGptConfig planned(int(planned_argv.size()), planned_argv.data());
  return run(planned);
}

}  // namespace

// Nothing escapes: a usage or input error exits 2, any other error 1, on one line (samples/cli.h).
int main(int argc, char** argv) {
  samples::bound_openmp_spin(argv);  // before libgomp's threads, MPI or anything else exists
  return samples::guarded_main(kProgram, [&] { return main_body(argc, argv); });
}
