// train_gpt: trains a GPT and reports what it learned.
//
// Default task: 3-digit addition ("482+039=0521\n"), generated here, judged by exact-match accuracy
// on held-out problems never seen in training. --data FILE trains on any text file (byte-level)
// or on token shards (byte-level or BPE, the vocabulary from their header) instead and reports the
// validation loss per token and bits per byte (--tokenizer: the shards' BPE). The loop is
// train::Trainer; data parallelism and ZeRO come from dist::DataParallel. What the run builds from its
// config is in train_gpt_setup.cpp, the planner's glue (--plan, --memory-budget) in train_gpt_plan.cpp.
// Written only against halfgrad's public headers, as a user would.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/cli.h"
#include "app/thread_defaults.h"
#include "dist/data_parallel.h"
#include "engine/allocator.h"
#include "engine/anomaly.h"
#include "engine/random.h"
#include "kernels/cpu/gemm_calibration.h"
#include "kernels/cpu/tier_calibration.h"
#include "kernels/cpu/vector_math.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "samples/train_gpt_config.h"
#include "samples/train_gpt_plan.h"
#include "samples/train_gpt_setup.h"
#include "train/checkpoint_directory.h"
#include "train/precision.h"
#include "train/trainer.h"

using namespace hg;

namespace {

using samples::attention_description;
using samples::kProgram;
using samples::make_loader;
using samples::make_model;
using samples::make_task;
using samples::optimizer_state_line;
using samples::trainer_options;
using samples::TrainGptConfig;

int run(const TrainGptConfig& c) {
  // OpenMP threads and loader workers sized together (app/thread_defaults.h); flags and env win.
  const app::ThreadSettings threads = app::apply_thread_settings(
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
  optim::ShardedState* shards = optimizer->sharded_state();
  if (shards && !c.load.empty() && shards->has_saved_state(c.load))  // ZeRO shards beside it: the user's files too
    app::or_usage_error(kProgram, "--load " + c.load + " (its optimizer shards)", [&] { shards->load_state(c.load); });
  const std::unique_ptr<data::DataLoader> loader = make_loader(c, *task, parallel, threads.workers);
  const int64_t tokens_per_micro_batch = c.batch * task->sequence_length();
  const int64_t micro_batches = app::or_usage_error(
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
  if (Device::parse(c.device).is_cpu()) {  // the CPU kernel tiers and GEMM paths, and how each was chosen
    std::printf("cpu row kernels: %s | half conversions: %s\n", kernels::cpu::vector_math_description().c_str(),
                kernels::cpu::convert_tier_description().c_str());
    std::printf("%s\n", kernels::cpu::gemm_plan_line(precision).c_str());
  }
  if (c.recompute_every > 0 || c.offload != "off")
    std::printf("memory savers: checkpoint every %lld block(s) | activation offload %s\n", (long long)c.recompute_every,
                c.offload.c_str());
  if (c.optimizer_state_bits == 8) std::printf("%s\n", optimizer_state_line(*model, c).c_str());
  if (c.resume) app::or_usage_error(kProgram, [&] { return trainer.resume(); });
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

// Nothing escapes: a usage or input error exits 2, any other error 1, on one line (app/cli.h).
int main(int argc, char** argv) {
  app::bound_openmp_spin(argv);  // before libgomp's threads, MPI or anything else exists
  return app::guarded_main(kProgram, [&] { return main_body(argc, argv); });
}
