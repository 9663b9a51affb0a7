// train_gpt: trains a byte-level GPT and reports what it learned.
//
// Default task: 3-digit addition ("482+039=0521\n"), generated here, judged by exact-match accuracy
// on held-out problems never seen in training. --data FILE trains on any text file instead and
// reports validation loss. The loop is train::Trainer; data parallelism and ZeRO come from
// dist::DataParallel. Written only against halfgrad's public headers, as a user would.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "dist/data_parallel.h"
#include "engine/allocator.h"
#include "engine/anomaly.h"
#include "engine/random.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "samples/cli.h"
#include "samples/gpt_tasks.h"
#include "train/precision.h"
#include "train/trainer.h"

using namespace hg;

namespace {

constexpr const char* kProgram = "train_gpt";

// Every flag, bound by name to the member that holds its value.
struct Config {
  samples::Flags flags{kProgram,
                       "Trains a byte-level GPT on the CPU. By default it learns 3-digit addition and reports\n"
                       "exact-match accuracy on held-out problems; --data FILE trains on a text file instead."};
  std::string& device = flags.add_string("device", "cpu", "device to train on: cpu, cuda or cuda:N");
  std::string& data = flags.add_string("data", "",
                                       "train on this text file (byte-level) or these comma-separated "
                                       "token shards (prepare_data) instead of the addition task");
  int64_t& layers = flags.add_int("layers", 2, "transformer blocks", 1);
  int64_t& heads = flags.add_int("heads", 4, "attention heads (must divide --dim)", 1);
  int64_t& dim = flags.add_int("dim", 128, "model width", 1);
  int64_t& context = flags.add_int("context", 16, "context length in bytes", 1);
  int64_t& batch = flags.add_int("batch", 64, "sequences per micro-batch (x --grad-accum per optimizer step)", 1);
  int64_t& steps = flags.add_int("steps", 3000, "optimizer steps", 0);
  double& lr = flags.add_double("lr", 2e-3, "peak learning rate", 0.0);
  int64_t& warmup = flags.add_int("warmup", 100, "linear warmup steps", 0);
  double& min_lr = flags.add_double("min-lr", 1e-4, "learning rate at the end of the cosine decay", 0.0);
  double& weight_decay = flags.add_double("weight-decay", 0.1, "AdamW decoupled weight decay (matrices only)", 0.0);
  double& clip = flags.add_double("clip", 1.0, "clip the global gradient norm to this (0: off)", 0.0);
  double& dropout = flags.add_double("dropout", 0.0, "dropout probability", 0.0, 0.99);
  int64_t& eval_every = flags.add_int("eval-every", 500, "evaluate every N steps (0: only at the end)", 0);
  int64_t& eval_problems = flags.add_int("eval-problems", 1000, "held-out problems per evaluation", 1);
  int64_t& digits = flags.add_int("digits", 3, "digits per operand of the addition task", 1);
  int64_t& seed = flags.add_int("seed", 1337, "random seed (weights, data order, dropout)", 0);
  int64_t& threads = flags.add_int("threads", 0, "CPU threads (0: all cores)", 0);
  std::string& save = flags.add_string("save", "", "save the trained model to this safetensors file");
  std::string& load = flags.add_string("load", "", "start from this safetensors file (native or GPT-2 layout)");
  int64_t& sample = flags.add_int("sample", 8, "print N answers (or N bytes of text) at the end", 0);
  std::string& checkpoint_dir =
      flags.add_string("checkpoint-dir", "", "write training checkpoints into this directory");
  int64_t& checkpoint_every =
      flags.add_int("checkpoint-every-steps", 0, "checkpoint every N steps (0: only at the end)", 0);
  int64_t& keep_checkpoints = flags.add_int("keep-checkpoints", 3, "keep the newest K checkpoints", 1);
  bool& resume =
      flags.add_bool("resume", false, "continue from the newest checkpoint in --checkpoint-dir, bit-exactly");
  int64_t& stop_after =
      flags.add_int("stop-after-steps", 0, "end this run after step N (the schedule still spans --steps)", 0);
  std::string& precision = flags.add_string("precision", "fp32", "compute dtype of the model: fp32, bf16 or fp16");
  std::string& loss_scale =
      flags.add_string("loss-scale", "", "dynamic, static:S or none (default: dynamic for fp16, none otherwise)");
  int64_t& grad_accum = flags.add_int("grad-accum", 1, "micro-batches per optimizer step", 1);
  int64_t& batch_tokens =
      flags.add_int("batch-tokens", 0, "tokens per optimizer step; sets --grad-accum to match (0: off)", 0);
  bool& fp32_grads = flags.add_bool("fp32-grads", false, "keep fp32 gradient buffers for a half model");
  bool& stochastic_rounding =
      flags.add_bool("stochastic-rounding", false, "round updated half weights stochastically (seeded)");
  int64_t& recompute_every = flags.add_int(
      "checkpoint-every", 0, "activation checkpointing: recompute segments of K blocks in backward (0: off)", 0);
  std::string& offload = flags.add_string(
      "offload-activations", "off", "move saved activations to host memory: off, inputs (checkpoint inputs) or all");
  int64_t& workers = flags.add_int("workers", 1, "data loader threads (0: build batches on the training thread)", 0);
  int64_t& seq_warmup_steps =
      flags.add_int("seq-warmup-steps", 0, "grow the sequence length to full over N steps (0: off)", 0);
  int64_t& seq_warmup_start =
      flags.add_int("seq-warmup-start", 0, "first length of the warmup (0: the shortest with a target)", 0);
  std::string& curriculum =
      flags.add_string("curriculum", "none", "example order: none, or easy-to-hard (addition: fewer digits first)");
  int64_t& curriculum_steps =
      flags.add_int("curriculum-steps", 600, "steps until easy-to-hard reaches the full task", 1);
  int64_t& zero = flags.add_int("zero", -1,
                                "data parallel with ZeRO stage 0, 1, 2 or 3 across the processes of mpirun or "
                                "RANK/WORLD_SIZE (-1: off in a single process, stage 0 otherwise; stage 3 shards each "
                                "block's weights, tensors of at most 4 x dim elements stay whole)",
                                -1);
  bool& offload_optimizer = flags.add_bool("offload-optimizer", false,
                                           "keep the optimizer state in host memory, updated by the SIMD CPU AdamW "
                                           "(ZeRO-Offload; implies --zero 0 or higher)");
  std::string& profile = flags.add_string("profile", "",
                                          "profile the run: Chrome trace JSON to this file (rank r > 0 of a "
                                          "data-parallel run: FILE.rank<r>.json), tables at the end");
  bool& profile_ops =
      flags.add_bool("profile-ops", false, "with --profile: also a range per kernel call (trace detail)");
  std::string& metrics_log =
      flags.add_string("metrics-log", "", "write one JSON line of metrics per step to this file");
  int64_t& early_stop =
      flags.add_int("early-stop", 0, "stop after N evaluations without improvement, keep the best weights (0: off)", 0);
  double& early_stop_delta =
      flags.add_double("early-stop-delta", 0.0, "smallest change that counts as an improvement", 0.0);
  bool& detect_anomaly =
      flags.add_bool("detect-anomaly", false,
                     "stop at the first op whose output or gradient holds NaN/inf, naming it and its module (slow)");
  int64_t& memory_limit_mib =
      flags.add_int("memory-limit-mib", 0, "cap the training device's allocator at N MiB (0: none)", 0);
  bool& memory_summary = flags.add_bool("memory-summary", false, "print every allocator's statistics at the end");

  Config(int argc, char** argv) { flags.parse(argc, argv); }
  Config(const Config&) = delete;
};

// The checks parse() cannot make: each a one-line usage error (exit 2).
void validate(const Config& c) {
  auto fail = [](const std::string& message) { samples::exit_with_usage_error(kProgram, message); };
  if (c.zero > 3) fail("--zero " + std::to_string(c.zero) + " is not a ZeRO stage; expected 0, 1, 2 or 3");
  samples::or_usage_error(kProgram, [&] { return train::parse_offload_activations(c.offload); });
  if (c.offload == "inputs" && c.recompute_every == 0)
    fail("--offload-activations inputs offloads checkpoint inputs; it needs --checkpoint-every K");
  samples::or_usage_error(kProgram,
                          [&] { return train::parse_loss_scale(c.loss_scale, train::parse_precision(c.precision)); });
  if (c.checkpoint_dir.empty() && (c.resume || c.checkpoint_every > 0))
    fail("--resume and --checkpoint-every-steps need --checkpoint-dir DIR");
  if (c.profile_ops && c.profile.empty()) fail("--profile-ops needs --profile FILE");
  if (c.dim % c.heads != 0)
    fail("--heads " + std::to_string(c.heads) + " does not divide --dim " + std::to_string(c.dim) +
         "; expected dim % heads == 0");
  if (c.min_lr > c.lr) fail("--min-lr must not exceed --lr (the cosine decays from --lr to --min-lr)");
  if (c.digits > 9) fail("--digits must be in [1, 9], got " + std::to_string(c.digits));
  if (c.data.empty() && c.context < 3 * c.digits + 3)
    fail("--context " + std::to_string(c.context) + " is too short for " + std::to_string(c.digits) +
         "-digit problems; expected at least " + std::to_string(3 * c.digits + 3));
  if (c.curriculum != "none" && c.curriculum != "easy-to-hard")
    fail("unknown --curriculum \"" + c.curriculum + "\"; expected none or easy-to-hard");
  if (c.curriculum != "none" && !c.data.empty())
    fail("--curriculum easy-to-hard needs the addition task's difficulty score; it does not apply to --data");
  // Sizes within bounds (no overflow in batch x context x dim), input files readable.
  samples::check_at_most(kProgram, {{"layers", c.layers, 1024},
                                    {"dim", c.dim, 65536},
                                    {"context", c.context, 1 << 20},
                                    {"batch", c.batch, 1 << 20},
                                    {"grad-accum", c.grad_accum, 1 << 20},
                                    {"eval-problems", c.eval_problems, 1 << 24},
                                    {"workers", c.workers, 256},
                                    {"threads", c.threads, 4096},
                                    {"sample", c.sample, 1 << 20},
                                    {"memory-limit-mib", c.memory_limit_mib, int64_t(1) << 30}});
  if (!c.load.empty()) samples::check_readable_file(kProgram, "load", c.load);
  for (size_t start = 0; !c.data.empty() && start <= c.data.size();) {
    const size_t comma = std::min(c.data.find(',', start), c.data.size());
    samples::check_readable_file(kProgram, "data", c.data.substr(start, comma - start));
    start = comma + 1;
  }
  samples::checked_device(kProgram, c.device);
}

// A fresh GPT, or --load's; in the precision and on the device of the run.
std::shared_ptr<nn::GPT> make_model(const Config& c) {
  std::shared_ptr<nn::GPT> model;
  if (!c.load.empty()) {
    model = samples::or_usage_error(kProgram, "--load " + c.load, [&] { return nn::GPT::load(c.load); });
    const int64_t positions = model->config.context;
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
    nn::GPTConfig config;
    config.vocab_size = 256;
    config.context = c.context;
    config.n_layer = c.layers;
    config.n_head = c.heads;
    config.n_embd = c.dim;
    config.dropout = c.dropout;
    model = std::make_shared<nn::GPT>(config);
  }
  model->to(train::parse_precision(c.precision));
  model->to(Device::parse(c.device));
  if (c.fp32_grads) model->set_grad_dtype(DType::f32);
  model->set_checkpoint_every(c.recompute_every);
  return model;
}

std::unique_ptr<samples::GptTask> make_task(const Config& c, const nn::GPT& model) {
  if (c.data.empty()) {  // a fresh problem for every training row (up to 2^24; a longer run repeats the pool)
    const int64_t pool = std::clamp<int64_t>(c.steps * c.batch, int64_t(1) << 20, int64_t(1) << 24);
    return samples::addition_task(int(c.digits), pool, uint64_t(c.seed) * 7919 + 1, c.eval_problems);
  }
  const int64_t T = std::min(c.context, model.config.context);
  return samples::or_usage_error(kProgram, "--data " + c.data, [&] { return samples::text_task(c.data, T, c.batch); });
}

// This rank's rows of each global batch, in the seed's order (--curriculum: easy problems first).
std::unique_ptr<data::DataLoader> make_loader(const Config& c, const samples::GptTask& task,
                                              const dist::DataParallel& parallel) {
  const auto options = data::DataLoaderOptions()
                           .batch_size(parallel.rows_per_rank(c.batch))
                           .rank(parallel.rank(), parallel.world_size())
                           .seed(uint64_t(c.seed))
                           .drop_last(true)
                           .shuffle(task.shuffle())
                           .workers(int(c.workers))
                           .device(Device::parse(c.device));
  std::shared_ptr<const data::BatchSampler> sampler =
      std::make_shared<data::DistributedBatchSampler>(task.training_set()->size(), options.sampler());
  if (c.curriculum == "easy-to-hard")
    sampler = task.curriculum(sampler, c.curriculum_steps, options.sampler().batch_size, uint64_t(c.seed),
                              parallel.rank(), parallel.world_size());
  return std::make_unique<data::DataLoader>(task.training_set(), sampler, options);
}

train::TrainerOptions trainer_options(const Config& c, const samples::GptTask& task, int64_t micro_batches,
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
      .monitor(train::MonitorOptions()
                   .profile_path(c.profile)
                   .profile_ops(c.profile_ops)
                   .metrics_path(c.metrics_log)
                   .early_stop_patience(c.early_stop)
                   .early_stop_min_delta(c.early_stop_delta))
      .communicator(comm);
}

int run(const Config& c) {
  if (c.threads > 0) omp_set_num_threads(int(c.threads));
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
      *model, optim::AdamWOptions().lr(c.lr).weight_decay(c.weight_decay).decay_only_matrices(true),
      optim::MixedPrecisionOptions().stochastic_rounding(c.stochastic_rounding).rounding_seed(uint64_t(c.seed)));
  if (!c.load.empty() && optimizer->has_saved_state(c.load)) optimizer->load_state(c.load);  // ZeRO shards beside it
  const std::unique_ptr<data::DataLoader> loader = make_loader(c, *task, parallel);
  const int64_t tokens_per_micro_batch = c.batch * task->sequence_length();
  const int64_t micro_batches = samples::or_usage_error(
      kProgram, [&] { return train::accumulation_steps(c.grad_accum, c.batch_tokens, tokens_per_micro_batch); });
  const DType precision = train::parse_precision(c.precision);
  train::Trainer trainer(
      *model, *optimizer, *loader, [&](const data::Batch& b) { return model->loss(b[0], b[1]); },
      trainer_options(c, *task, micro_batches, parallel.communicator()));
  const int64_t total_steps =
      std::max<int64_t>(c.steps, 1);  // a run shorter than the warmup warms up over all but its last step
  trainer
      .schedule(std::make_shared<optim::WarmupCosine>(c.lr, std::min(c.warmup, total_steps - 1), total_steps, c.min_lr))
      .loss_scaler(train::parse_loss_scale(c.loss_scale, precision))
      .evaluator([&] { return task->evaluate(*model); });

  const nn::GPTConfig& m = model->config;
  std::printf(
      "train_gpt: %s on %s | GPT L%lld H%lld C%lld T%lld, %.2fM parameters | batch %lld x %lld (%lld tokens) "
      "| %s%s | %d threads\n",
      task->description().c_str(), Device::parse(c.device).str().c_str(), (long long)m.n_layer, (long long)m.n_head,
      (long long)m.n_embd, (long long)m.context, double(model->parameter_count()) / 1e6, (long long)c.batch,
      (long long)micro_batches, (long long)(tokens_per_micro_batch * micro_batches), train::precision_name(precision),
      trainer.scaler().enabled() ? (std::string(", ") + trainer.scaler().mode_name() + " loss scale").c_str() : "",
      omp_get_max_threads());
  if (c.recompute_every > 0 || c.offload != "off")
    std::printf("memory savers: checkpoint every %lld block(s) | activation offload %s\n", (long long)c.recompute_every,
                c.offload.c_str());
  if (c.resume) samples::or_usage_error(kProgram, [&] { return trainer.resume(); });
  trainer.fit();
  if (c.sample > 0) task->show_samples(*model, c.sample);
  if (!c.save.empty()) {
    trainer.save_model(c.save, [&](const std::string& path) { model->save(path); });
    std::printf("saved %s\n", c.save.c_str());
  }
  if (c.memory_summary) std::printf("%s", memory_summary().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Config config(argc, argv);
  validate(config);
  try {
    return run(config);
  } catch (const Error& e) {
    std::fprintf(stderr, "train_gpt: error: %s\n", e.what());
    return 1;
  }
}
