// train_gpt: trains a byte-level GPT on the CPU and reports what it learned.
//
// Default task: 3-digit addition ("482+039=0521\n"), generated here, judged by exact-match accuracy
// on held-out problems never seen in training. --data FILE trains on any text file instead and
// reports validation loss. Written only against halfgrad's public headers, as a user would.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <string>

#include "data/curriculum.h"
#include "data/data_loader.h"
#include "dist/bootstrap.h"
#include "dist/communicator.h"
#include "dist/distributed_sampler.h"
#include "dist/zero_checkpoint.h"
#include "dist/zero_optimizer.h"
#include "engine/activation_offload.h"
#include "engine/allocator.h"
#include "engine/anomaly.h"
#include "engine/cuda/cuda_context.h"
#include "engine/random.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "samples/addition_task.h"
#include "samples/cli.h"
#include "samples/gpt_datasets.h"
#include "samples/precision_flags.h"
#include "samples/progress.h"
#include "samples/training_monitor.h"
#include "train/checkpoint.h"

using namespace hg;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string device, data, save, load, curriculum;
  int64_t workers, seq_warmup_steps, seq_warmup_start, curriculum_steps;
  int64_t layers, heads, dim, context, batch, steps, warmup, eval_every, seed, threads, sample, digits, eval_problems;
  double lr, min_lr, weight_decay, clip, dropout;
  std::string checkpoint_dir = "";  // checkpoint and resume (train/checkpoint.h)
  int64_t checkpoint_every = 0, keep_checkpoints = 3, stop_after = 0;
  bool resume = false;
  std::string precision = "fp32", loss_scale = "";  // mixed precision (samples/precision_flags.h)
  int64_t grad_accum = 1, batch_tokens = 0;
  bool fp32_grads = false, stochastic_rounding = false;
  int64_t recompute_every = 0;     // activation checkpointing: segments of K blocks (0: off)
  std::string offload_activations;  // "off", "inputs" (checkpoint inputs) or "all"
  int64_t zero = -1;  // data-parallel ZeRO stage; -1: plain AdamW unless launched as several processes
  bool offload_optimizer = false;
  samples::MonitorOptions monitor = {};
  bool detect_anomaly = false, memory_summary = false;  // reliability (engine/anomaly.h, allocator.h)
  int64_t memory_limit_mib = 0;
};

Options parse_options(int argc, char** argv) {
  samples::Flags flags("train_gpt",
                       "Trains a byte-level GPT on the CPU. By default it learns 3-digit addition and reports\n"
                       "exact-match accuracy on held-out problems; --data FILE trains on a text file instead.");
  Options o;
  auto& device = flags.add_string("device", "cpu", "device to train on: cpu, cuda or cuda:N");
  auto& data = flags.add_string("data", "", "train on this text file (byte-level) or these comma-separated token "
                                            "shards (prepare_data) instead of the addition task");
  auto& layers = flags.add_int("layers", 2, "transformer blocks", 1);
  auto& heads = flags.add_int("heads", 4, "attention heads (must divide --dim)", 1);
  auto& dim = flags.add_int("dim", 128, "model width", 1);
  auto& context = flags.add_int("context", 16, "context length in bytes", 1);
  auto& batch = flags.add_int("batch", 64, "sequences per micro-batch (x --grad-accum per optimizer step)", 1);
  auto& steps = flags.add_int("steps", 3000, "optimizer steps", 0);
  auto& lr = flags.add_double("lr", 2e-3, "peak learning rate", 0.0);
  auto& warmup = flags.add_int("warmup", 100, "linear warmup steps", 0);
  auto& min_lr = flags.add_double("min-lr", 1e-4, "learning rate at the end of the cosine decay", 0.0);
  auto& weight_decay = flags.add_double("weight-decay", 0.1, "AdamW decoupled weight decay (matrices only)", 0.0);
  auto& clip = flags.add_double("clip", 1.0, "clip the global gradient norm to this (0: off)", 0.0);
  auto& dropout = flags.add_double("dropout", 0.0, "dropout probability", 0.0, 0.99);
  auto& eval_every = flags.add_int("eval-every", 500, "evaluate every N steps (0: only at the end)", 0);
  auto& eval_problems = flags.add_int("eval-problems", 1000, "held-out problems per evaluation", 1);
  auto& digits = flags.add_int("digits", 3, "digits per operand of the addition task", 1);
  auto& seed = flags.add_int("seed", 1337, "random seed (weights, data order, dropout)", 0);
  auto& threads = flags.add_int("threads", 0, "CPU threads (0: all cores)", 0);
  auto& save = flags.add_string("save", "", "save the trained model to this safetensors file");
  auto& load = flags.add_string("load", "", "start from this safetensors file (native or GPT-2 layout)");
  auto& sample = flags.add_int("sample", 8, "print N answers (or N bytes of text) at the end", 0);
  auto& checkpoint_dir = flags.add_string("checkpoint-dir", "", "write training checkpoints into this directory");
  auto& checkpoint_every =
      flags.add_int("checkpoint-every-steps", 0, "checkpoint every N steps (0: only at the end)", 0);
  auto& keep_checkpoints = flags.add_int("keep-checkpoints", 3, "keep the newest K checkpoints", 1);
  auto& resume =
      flags.add_bool("resume", false, "continue from the newest checkpoint in --checkpoint-dir, bit-exactly");
  auto& stop_after =
      flags.add_int("stop-after-steps", 0, "end this run after step N (the schedule still spans --steps)", 0);
  auto& precision = flags.add_string("precision", "fp32", "compute dtype of the model: fp32, bf16 or fp16");
  auto& loss_scale = flags.add_string("loss-scale", "",
                                      "dynamic, static:S or none (default: dynamic for fp16, none otherwise)");
  auto& grad_accum = flags.add_int("grad-accum", 1, "micro-batches per optimizer step", 1);
  auto& batch_tokens =
      flags.add_int("batch-tokens", 0, "tokens per optimizer step; sets --grad-accum to match (0: off)", 0);
  auto& fp32_grads = flags.add_bool("fp32-grads", false, "keep fp32 gradient buffers for a half model");
  auto& stochastic_rounding =
      flags.add_bool("stochastic-rounding", false, "round updated half weights stochastically (seeded)");
  auto& recompute_every = flags.add_int(
      "checkpoint-every", 0, "activation checkpointing: recompute segments of K blocks in backward (0: off)", 0);
  auto& offload = flags.add_string("offload-activations", "off",
                                   "move saved activations to host memory: off, inputs (checkpoint inputs) or all");
  // The data pipeline (data/): loader threads and curriculum learning.
  auto& workers = flags.add_int("workers", 1, "data loader threads (0: build batches on the training thread)", 0);
  auto& seq_warmup_steps =
      flags.add_int("seq-warmup-steps", 0, "grow the sequence length to full over N steps (0: off)", 0);
  auto& seq_warmup_start =
      flags.add_int("seq-warmup-start", 0, "first length of the warmup (0: the shortest with a target)", 0);
  auto& curriculum =
      flags.add_string("curriculum", "none", "example order: none, or easy-to-hard (addition: fewer digits first)");
  auto& curriculum_steps = flags.add_int("curriculum-steps", 600, "steps until easy-to-hard reaches the full task", 1);
  auto& zero = flags.add_int("zero", -1, "data parallel with ZeRO stage 0, 1, 2 or 3 across the processes of mpirun or "
                             "RANK/WORLD_SIZE (-1: off in a single process, stage 0 otherwise; stage 3 shards each "
                             "block's weights, tensors of at most 4 x dim elements stay whole)", -1);
  auto& offload_optimizer = flags.add_bool("offload-optimizer", false, "keep the optimizer state in host memory, "
                                           "updated by the SIMD CPU AdamW (ZeRO-Offload; implies --zero 0 or higher)");
  auto& profile = flags.add_string("profile", "", "profile the run: Chrome trace JSON to this file (rank r > 0 of a data-parallel run: FILE.rank<r>.json), tables at the end");
  auto& profile_ops = flags.add_bool("profile-ops", false, "with --profile: also a range per kernel call (trace detail)");
  auto& metrics_log = flags.add_string("metrics-log", "", "write one JSON line of metrics per step to this file");
  auto& early_stop = flags.add_int("early-stop", 0, "stop after N evaluations without improvement, keep the best weights (0: off)", 0);
  auto& early_stop_delta = flags.add_double("early-stop-delta", 0.0, "smallest change that counts as an improvement", 0.0);
  // Reliability: anomaly mode, a memory budget (rehearses out-of-memory), the allocators' table.
  auto& detect_anomaly = flags.add_bool("detect-anomaly", false, "stop at the first op whose output or gradient "
                                                                 "holds NaN/inf, naming it and its module (slow)");
  auto& memory_limit =
      flags.add_int("memory-limit-mib", 0, "cap the training device's allocator at N MiB (0: none)", 0);
  auto& memory_summary = flags.add_bool("memory-summary", false, "print every allocator's statistics at the end");
  flags.parse(argc, argv);
  o = Options{device, data, save, load, curriculum, workers, seq_warmup_steps, seq_warmup_start, curriculum_steps,
              layers, heads, dim, context, batch, steps, warmup, eval_every, seed, threads,
              sample, digits, eval_problems, lr, min_lr, weight_decay, clip, dropout};
  o.checkpoint_dir = checkpoint_dir, o.checkpoint_every = checkpoint_every, o.keep_checkpoints = keep_checkpoints;
  o.resume = resume, o.stop_after = stop_after;
  o.precision = precision, o.loss_scale = loss_scale, o.grad_accum = grad_accum, o.batch_tokens = batch_tokens;
  o.fp32_grads = fp32_grads, o.stochastic_rounding = stochastic_rounding;
  o.recompute_every = recompute_every, o.offload_activations = offload;
  o.zero = zero, o.offload_optimizer = offload_optimizer;
  if (o.zero > 3)
    samples::exit_with_usage_error("train_gpt", "--zero " + std::to_string(o.zero) + " is not a ZeRO stage; expected "
                                                    "0, 1, 2 or 3");
  o.detect_anomaly = detect_anomaly, o.memory_limit_mib = memory_limit, o.memory_summary = memory_summary;
  if (o.offload_activations != "off" && o.offload_activations != "inputs" && o.offload_activations != "all")
    samples::exit_with_usage_error("train_gpt", "unknown --offload-activations \"" + o.offload_activations +
                                                    "\"; expected off, inputs or all");
  if (o.offload_activations == "inputs" && o.recompute_every == 0)
    samples::exit_with_usage_error("train_gpt", "--offload-activations inputs offloads checkpoint inputs; "
                                                "it needs --checkpoint-every K");
  // --precision / --loss-scale checked here (a bad value exits 2); the scaler is built in run().
  samples::parse_loss_scale("train_gpt", o.loss_scale, samples::parse_precision("train_gpt", o.precision));
  if (o.checkpoint_dir.empty() && (o.resume || o.checkpoint_every > 0))
    samples::exit_with_usage_error("train_gpt", "--resume and --checkpoint-every-steps need --checkpoint-dir DIR");
  o.monitor = {profile, metrics_log, profile_ops, early_stop, early_stop_delta, Device::cpu()};
  if (profile_ops && profile.empty()) samples::exit_with_usage_error("train_gpt", "--profile-ops needs --profile FILE");
  if (o.dim % o.heads != 0)
    samples::exit_with_usage_error("train_gpt", "--heads " + std::to_string(o.heads) + " does not divide --dim " +
                                                    std::to_string(o.dim) + "; expected dim % heads == 0");
  if (o.min_lr > o.lr)
    samples::exit_with_usage_error("train_gpt", "--min-lr must not exceed --lr (the cosine decays from --lr to --min-lr)");
  if (o.digits > 9) samples::exit_with_usage_error("train_gpt", "--digits must be in [1, 9], got " + std::to_string(o.digits));
  if (o.data.empty() && o.context < 3 * o.digits + 3)
    samples::exit_with_usage_error("train_gpt", "--context " + std::to_string(o.context) + " is too short for " +
                                                    std::to_string(o.digits) + "-digit problems; expected at least " +
                                                    std::to_string(3 * o.digits + 3));
  if (o.curriculum != "none" && o.curriculum != "easy-to-hard")
    samples::exit_with_usage_error("train_gpt",
                                   "unknown --curriculum \"" + o.curriculum + "\"; expected none or easy-to-hard");
  if (o.curriculum != "none" && !o.data.empty())
    samples::exit_with_usage_error("train_gpt", "--curriculum easy-to-hard needs the addition task's difficulty score; "
                                                "it does not apply to --data");
  // Sizes within bounds (no overflow in batch x context x dim), input files readable: a bad flag is a
  // one-line usage error, exit 2 (run() turns a --load / --data / --resume file it cannot use into one).
  samples::check_at_most("train_gpt", {{"layers", o.layers, 1024}, {"dim", o.dim, 65536},
                                       {"context", o.context, 1 << 20}, {"batch", o.batch, 1 << 20},
                                       {"grad-accum", o.grad_accum, 1 << 20},
                                       {"eval-problems", o.eval_problems, 1 << 24}, {"workers", o.workers, 256},
                                       {"threads", o.threads, 4096}, {"sample", o.sample, 1 << 20},
                                       {"memory-limit-mib", o.memory_limit_mib, int64_t(1) << 30}});
  if (!o.load.empty()) samples::check_readable_file("train_gpt", "load", o.load);
  for (size_t start = 0; !o.data.empty() && start <= o.data.size();) {
    const size_t comma = std::min(o.data.find(',', start), o.data.size());
    samples::check_readable_file("train_gpt", "data", o.data.substr(start, comma - start));
    start = comma + 1;
  }
  samples::checked_device("train_gpt", o.device);  // exits 2 for an unknown or absent device
  return o;
}

std::string megabytes(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", double(bytes) / (1024.0 * 1024.0));
  return text;
}

int run(const Options& o) {
  if (o.threads > 0) omp_set_num_threads(int(o.threads));
  manual_seed(uint64_t(o.seed));

  std::shared_ptr<nn::GPT> model;
  if (!o.load.empty()) {
    model = samples::or_usage_error("train_gpt", "--load " + o.load, [&] { return nn::GPT::load(o.load); });
    if (!o.data.empty() && o.context > model->config.context())
      samples::exit_with_usage_error("train_gpt",
                                     "--context " + std::to_string(o.context) + " is longer than the " +
                                         std::to_string(model->config.context()) + " positions of --load " + o.load +
                                         "; expected --context <= " + std::to_string(model->config.context()));
  } else {
    nn::GPTConfig config;
    config.vocab_size(256);
    config.context(o.context);
    config.n_layer(o.layers);
    config.n_head(o.heads);
    config.n_embd(o.dim);
    config.dropout(o.dropout);
    model = std::make_shared<nn::GPT>(config);
  }
  const Device device = Device::parse(o.device);
  if (o.memory_limit_mib > 0) set_memory_limit(device, o.memory_limit_mib << 20);
  set_detect_anomaly(o.detect_anomaly);
  const DType precision = samples::parse_precision("train_gpt", o.precision);
  model->to(precision);
  model->to(device);
  if (o.fp32_grads) model->set_grad_dtype(DType::f32);
  model->set_checkpoint_every(o.recompute_every);
  const int64_t T = o.data.empty() ? 0 : std::min(o.context, model->config.context());

  std::unique_ptr<samples::AdditionTask> task;
  std::unique_ptr<samples::TokenData> text;
  std::shared_ptr<data::Dataset> train_set;
  std::vector<std::pair<Tensor, Tensor>> validation;
  if (o.data.empty()) {
    task = std::make_unique<samples::AdditionTask>(int(o.digits));
    if (model->config.context() < task->problem_length() - 1)
      samples::exit_with_usage_error("train_gpt", "the " + std::to_string(model->config.context()) +
                                                      " positions of --load " + o.load + " are too few for " +
                                                      std::to_string(o.digits) + "-digit problems; expected at least " +
                                                      std::to_string(task->problem_length() - 1));
    // A fresh problem for every training row (up to 2^24 of them; a longer run repeats the pool).
    const int64_t pool = std::clamp<int64_t>(o.steps * o.batch, int64_t(1) << 20, int64_t(1) << 24);
    train_set = std::make_shared<samples::AdditionDataset>(*task, pool, uint64_t(o.seed) * 7919 + 1);
  } else {
    text = std::make_unique<samples::TokenData>(
        samples::or_usage_error("train_gpt", "--data " + o.data, [&] { return samples::load_token_data(o.data, T); }));
    train_set = std::make_shared<data::TokenWindowDataset>(text->train, T, 1);
    validation = samples::validation_batches(*text, T, o.batch, 8);
  }
  const auto held_out = task ? task->held_out_pairs(o.eval_problems) : std::vector<std::pair<int64_t, int64_t>>{};
  const int64_t full_length = task ? task->problem_length() - 1 : T;
  // Batches come from the DataLoader (worker threads; on CUDA, pinned staging + async copies), in an
  // order fixed by the seed (the addition pool is random already: read in order); --curriculum
  // easy-to-hard draws the first steps from easy problems.
  const auto loader_options = data::DataLoaderOptions()
                                  .batch_size(o.batch)
                                  .seed(uint64_t(o.seed))
                                  .drop_last(true)
                                  .shuffle(!task)
                                  .workers(int(o.workers))
                                  .device(device);
  std::shared_ptr<const data::BatchSampler> sampler =
      std::make_shared<data::DistributedBatchSampler>(train_set->size(), loader_options.sampler());
  if (o.curriculum == "easy-to-hard")
    sampler = std::make_shared<data::DifficultyCurriculumSampler>(
        sampler, static_cast<const samples::AdditionDataset&>(*train_set).difficulties(), o.curriculum_steps, o.batch,
        uint64_t(o.seed));
  data::DataLoader loader(train_set, sampler, loader_options);
  // Sequence-length warmup starts at the shortest prefix that still scores a token.
  const int64_t warmup_start = o.seq_warmup_start > 0
                                   ? std::min(o.seq_warmup_start, full_length)
                                   : (task ? task->prompt_length() : std::min<int64_t>(8, full_length));
  const data::SequenceLengthWarmup seq_warmup(warmup_start, full_length, o.seq_warmup_steps);
  const int64_t tokens_per_micro_batch = o.batch * full_length;
  const int64_t micro_batches =
      samples::accumulation_steps("train_gpt", o.grad_accum, o.batch_tokens, tokens_per_micro_batch);
  const int64_t tokens_per_step = tokens_per_micro_batch * micro_batches;

  const auto adamw_options = optim::AdamWOptions().lr(o.lr).weight_decay(o.weight_decay).decay_only_matrices(true);
  optim::AdamW optimizer(model->parameters(), adamw_options);
  // Half weights are updated through fp32 master copies (the optimizer's default).
  optimizer.set_mixed_precision(
      optim::MixedPrecisionOptions().stochastic_rounding(o.stochastic_rounding).rounding_seed(uint64_t(o.seed)));
  optim::LossScaler scaler = samples::parse_loss_scale("train_gpt", o.loss_scale, precision);
  // Data parallel (dist/): each rank trains on its DistributedSampler rows of the same global batch;
  // only rank 0 prints.
  std::unique_ptr<dist::Communicator> comm;
  std::unique_ptr<dist::ZeroOptimizer> zero;
  std::vector<int64_t> my_rows;
  if (o.zero >= 0 || o.offload_optimizer || dist::detect_process().world_size > 1) {
    comm = std::make_unique<dist::Communicator>();
    HG_CHECK(o.batch % comm->world_size() == 0, "[train_gpt] --batch ", o.batch, " must be a multiple of the ",
             comm->world_size(), " ranks (each trains on batch / ranks rows of the global batch)");
    zero = std::make_unique<dist::ZeroOptimizer>(
        *model, *comm,
        dist::ZeroOptions()
            .stage(int(std::max<int64_t>(o.zero, 0)))
            .offload_optimizer(o.offload_optimizer)
            .persistence_threshold(4 * o.dim)  // stage 3: LayerNorms and biases stay whole
            .adamw(adamw_options));
    if (!o.load.empty() && dist::ZeroOptimizer::saved_world_size(o.load) > 0) zero->load_state(o.load);
    my_rows = dist::DistributedSampler(o.batch, comm->world_size(), comm->rank(), false).indices();
    if (comm->rank() != 0 && !std::freopen("/dev/null", "w", stdout)) return 1;
  }
  auto rows_of_rank = [&](const Tensor& x) {
    std::vector<Tensor> rows;
    for (int64_t r : my_rows) rows.push_back(x.narrow(0, r, 1));
    return cat(rows, 0);
  };
  // A run shorter than the warmup warms up over all but its last step.
  const int64_t total_steps = std::max<int64_t>(o.steps, 1);
  optim::WarmupCosine schedule(o.lr, std::min(o.warmup, total_steps - 1), total_steps, o.min_lr);

  std::printf(
      "train_gpt: %s on %s | GPT L%lld H%lld C%lld T%lld, %.2fM parameters | batch %lld x %lld (%lld tokens) "
      "| %s%s | %d threads\n",
      task ? (std::to_string(o.digits) + "-digit addition").c_str() : text->description.c_str(), device.str().c_str(),
      (long long)model->config.n_layer(), (long long)model->config.n_head(), (long long)model->config.n_embd(),
      (long long)model->config.context(), double(model->parameter_count()) / 1e6, (long long)o.batch,
      (long long)micro_batches, (long long)tokens_per_step, samples::precision_name(precision),
      scaler.enabled() ? (std::string(", ") + scaler.mode_name() + " loss scale").c_str() : "", omp_get_max_threads());

  if (o.recompute_every > 0 || o.offload_activations != "off")
    std::printf("memory savers: checkpoint every %lld block(s) | activation offload %s\n", (long long)o.recompute_every,
                o.offload_activations.c_str());

  auto evaluate = [&](std::vector<std::string>* answers = nullptr) -> std::pair<double, double> {
    if (task) return {task->accuracy(*model, held_out, answers), NAN};
    NoGradGuard no_grad;
    model->eval();
    double loss = 0;
    for (const auto& [ids, targets] : validation)
      loss += model->loss(ids.to(device), targets.to(device)).item() / double(validation.size());
    model->train();
    return {NAN, loss};
  };

  // Checkpoints hold everything that decides the next step: weights, AdamW state, the step, the
  // dropout generator and the data order. A resumed run continues bit-exactly. Under ZeRO an entry is
  // a directory: this state (without AdamW) + every rank's optimizer shard (dist/zero_checkpoint.h).
  int64_t completed_steps = 0, optimizer_steps = 0;  // optimizer_steps: not skipped by the scaler
  train::TrainingState state;
  state.model(*model).scaler(scaler).counter("step", completed_steps);
  if (!zero) state.optimizer(optimizer);
  state.counter("optimizer_steps", optimizer_steps);
  Tensor loader_position = loader.state();  // where the data order stands (refreshed before each save)
  state.generator("default", default_generator()).extra("loader", loader_position);
  std::optional<train::CheckpointDirectory> checkpoints;
  std::optional<dist::ZeroCheckpointDirectory> zero_checkpoints;
  if (!o.checkpoint_dir.empty() && zero) zero_checkpoints.emplace(o.checkpoint_dir, o.keep_checkpoints, *comm);
  if (!o.checkpoint_dir.empty() && !zero) checkpoints.emplace(o.checkpoint_dir, o.keep_checkpoints);
  if (o.resume) {
    const bool zero_entries = !dist::ZeroCheckpointDirectory::list(o.checkpoint_dir).empty();
    const bool file_entries = zero ? train::CheckpointDirectory(o.checkpoint_dir, 1).latest().has_value() : false;
    if ((zero && file_entries && !zero_entries) || (!zero && zero_entries && !checkpoints->latest()))
      samples::exit_with_usage_error("train_gpt", "--checkpoint-dir " + o.checkpoint_dir + " holds " +
                                                      (zero ? "single-process" : "ZeRO (data-parallel)") +
                                                      " checkpoints; expected " + (zero ? "no --zero" : "--zero S") +
                                                      " to resume them");
    if (const auto latest = zero ? zero_checkpoints->latest() : checkpoints->latest()) {
      samples::or_usage_error("train_gpt", "--resume from " + *latest, [&] {
        return zero ? zero_checkpoints->load(*latest, state, *zero) : train::load_checkpoint(*latest, state);
      });
      loader.load_state(loader_position);
      std::printf("resumed from %s at step %lld\n", latest->c_str(), (long long)completed_steps);
    } else {
      std::printf("no checkpoint in %s yet: starting at step 0\n", o.checkpoint_dir.c_str());
    }
  }
  const int64_t last_step = o.stop_after > 0 ? std::min(o.steps, o.stop_after) : o.steps;
  samples::MonitorOptions monitor_options = o.monitor;
  monitor_options.device = device;
  if (comm && comm->rank() != 0) monitor_options.metrics_path.clear();  // one log: rank 0's (the values agree)
  if (comm && comm->rank() != 0 && !monitor_options.profile_path.empty()) {  // one trace per rank: FILE.rank<r>.json
    std::string& path = monitor_options.profile_path;
    const size_t dot = path.rfind('.');
    const bool has_extension = dot != std::string::npos && path.find('/', dot) == std::string::npos;
    path = (has_extension ? path.substr(0, dot) : path) + ".rank" + std::to_string(comm->rank()) +
           (has_extension ? path.substr(dot) : std::string(".json"));
  }
  samples::TrainingMonitor monitor(monitor_options, model->parameters(), task ? optim::StopMode::max : optim::StopMode::min);
  using profiler::Category;
  using profiler::ScopedRange;

  samples::Progress progress;
  model->train();
  const auto start = Clock::now();
  double last_loss = NAN, accuracy = NAN, val_loss = NAN;
  int64_t timed_steps = 0;
  double timed_seconds = 0, timed_tokens = 0;
  for (int64_t step = completed_steps + 1; step <= last_step; ++step) {
    const auto step_start = Clock::now();
    monitor.begin_step(step);
    std::optional<ScopedRange> step_range(std::in_place, "step", Category::step);
    std::optional<ScopedRange> phase;
    const int64_t length = seq_warmup.length(step - 1);
    // Each micro-batch's loss is divided by their number, so the summed gradients are those of the
    // mean over all of them; the scaler multiplies it by S for fp16 (1 otherwise). Under data
    // parallelism each rank takes its rows of every global micro-batch, and only the last micro-batch's
    // backward communicates.
    last_loss = 0.0;
    double step_tokens = 0;
    for (int64_t micro = 0; micro < micro_batches; ++micro) {
      phase.emplace("data", Category::data);
      const data::Batch batch = loader.next();
      Tensor ids = length < full_length ? batch[0].narrow(1, 0, length).contiguous() : batch[0];
      Tensor targets = length < full_length ? batch[1].narrow(1, 0, length).contiguous() : batch[1];
      step_tokens += double(ids.numel());
      if (zero) {
        std::tie(ids, targets) = std::pair(rows_of_rank(ids), rows_of_rank(targets));
        zero->set_gradient_sync(micro == micro_batches - 1);
      }
      phase.emplace("forward", Category::forward, device);
      Tensor loss;
      if (o.offload_activations != "off") {
        ActivationOffload offload(parse_offload_mode(o.offload_activations));
        loss = model->loss(ids, targets) * (1.0 / double(micro_batches));
      } else {
        loss = model->loss(ids, targets) * (1.0 / double(micro_batches));
      }
      phase.emplace("backward", Category::backward, device);
      scaler.scale(loss).backward();
      phase.reset();
      last_loss += loss.item();
    }
    timed_tokens += step_tokens;
    phase.emplace("optimizer", Category::optimizer, device);
    double grad_norm = NAN;
    const double lr = schedule.lr(optimizer_steps);
    if (zero) {
      // The same order; ZeRO divides by the scale inside its norm, clip and update, and finds an
      // inf/NaN across ranks: every rank skips the step and the scaler backs off alike.
      zero->set_grad_scale(1.0 / scaler.scale_value());
      if (o.clip > 0) grad_norm = zero->clip_grad_norm(o.clip);
      zero->set_lr(lr);
      if (scaler.step([&] { return zero->step(); })) ++optimizer_steps;
      scaler.update();
      zero->zero_grad();
    } else {
      // unscale -> clip -> step -> update. A step with inf/NaN gradients is skipped: the weights and
      // the LR schedule stay where they are.
      const std::vector<Tensor> params = model->parameters();
      scaler.unscale_(params);
      if (o.clip > 0) grad_norm = optim::clip_grad_norm(params, o.clip);
      optimizer.set_lr(lr);
      if (scaler.step(optimizer, params)) ++optimizer_steps;
      scaler.update();
      optimizer.zero_grad();
    }
    phase.reset();
    if (comm) comm->all_reduce(&last_loss, 1, DType::f64, dist::ReduceOp::avg).wait();
    const double seconds = std::chrono::duration<double>(Clock::now() - step_start).count();
    timed_steps += 1;
    timed_seconds += seconds;

    const bool eval_now = (o.eval_every > 0 && step % o.eval_every == 0) || step == o.steps;
    const MemoryStats memory = memory_stats(device);
    char line[320];
    const int used = std::snprintf(line, sizeof line,
                               "step %6lld/%lld | loss %.4f | lr %.2e | %7.0f tok/s | %6.1f ms/step | mem %s/%s MiB "
                               "(reserved %s)",
                               (long long)step, (long long)o.steps, last_loss, lr, step_tokens / seconds,
                               seconds * 1e3, megabytes(memory.allocated_bytes).c_str(),
                               megabytes(memory.peak_allocated_bytes).c_str(),
                               megabytes(memory.reserved_bytes).c_str());
    if (scaler.enabled())
      std::snprintf(line + used, sizeof line - size_t(used), " | scale %g | skipped %lld", scaler.scale_value(),
                    (long long)scaler.skipped_steps());
    if (zero)  // this rank's model state (parameters + gradients + optimizer) under its ZeRO stage
      std::snprintf(line + std::strlen(line), sizeof line - std::strlen(line), " | zero %d x%d: state %s MiB/rank",
                    zero->stage(), comm->world_size(), megabytes(zero->model_state_bytes().total()).c_str());
    progress.step_line(line, eval_now || step % 100 == 0);
    step_range.reset();
    metrics::Record record(step);
    record.set("loss", last_loss).set("lr", lr).set("tokens_per_s", step_tokens / seconds).set("step_ms", seconds * 1e3);
    if (o.clip > 0) record.set("grad_norm", grad_norm);
    if (scaler.enabled()) record.set("loss_scale", scaler.scale_value()).set("skipped_steps", double(scaler.skipped_steps()));
    bool stop = false;
    if (eval_now) {
      {
        ScopedRange eval_range("evaluate", Category::other);
        std::tie(accuracy, val_loss) = evaluate();
      }
      record.set(task ? "accuracy" : "val_loss", task ? accuracy : val_loss);
      {
        std::optional<dist::ZeroOptimizer::GatheredParameters> whole;  // stage 3: early stopping snapshots them
        if (zero && o.monitor.early_stop_patience > 0) whole.emplace(zero->gather_parameters());
        stop = monitor.evaluated(step, task ? accuracy : val_loss);
      }
      char result[128];
      if (task)
        std::snprintf(result, sizeof result, "eval  step %lld | held-out exact match %.2f%% (%zu problems)",
                      (long long)step, 100.0 * accuracy, held_out.size());
      else
        std::snprintf(result, sizeof result, "eval  step %lld | validation loss %.4f", (long long)step, val_loss);
      progress.line(result);
    }
    completed_steps = step;
    if ((checkpoints || zero_checkpoints) &&
        ((o.checkpoint_every > 0 && step % o.checkpoint_every == 0) || step == last_step)) {
      const auto save_start = Clock::now();
      loader_position = loader.state();
      const std::string path = zero ? zero_checkpoints->save(state, *zero, step) : checkpoints->save(state, step);
      int64_t bytes = zero ? 0 : int64_t(std::filesystem::file_size(path));  // the file, or a ZeRO entry's files
      if (zero)
        for (const auto& file : std::filesystem::directory_iterator(path)) bytes += int64_t(file.file_size());
      char saved[512];
      std::snprintf(saved, sizeof saved, "checkpoint step %lld -> %s | loss %.9g | %s MiB in %.0f ms", (long long)step,
                    path.c_str(), last_loss, megabytes(bytes).c_str(),
                    1e3 * std::chrono::duration<double>(Clock::now() - save_start).count());
      progress.line(saved);
    }
    monitor.end_step(std::move(record));
    if (stop) {
      progress.line("early stopping: no improvement in " + std::to_string(o.monitor.early_stop_patience) +
                    " evaluations, stopping at step " + std::to_string(step));
      break;
    }
  }
  std::optional<dist::ZeroOptimizer::GatheredParameters> best_weights;  // stage 3: restored into the whole units
  if (zero && o.monitor.early_stop_patience > 0) best_weights.emplace(zero->gather_parameters());
  const std::string restored = monitor.finish();
  if (best_weights) {
    best_weights->write_back();
    best_weights.reset();
  }
  if (!restored.empty()) {
    progress.line(restored);
    (task ? accuracy : val_loss) = *monitor.best();
  }
  const double total = std::chrono::duration<double>(Clock::now() - start).count();

  if (o.sample > 0 && task) {
    std::vector<std::pair<int64_t, int64_t>> shown(held_out.begin(), held_out.begin() + std::min<int64_t>(o.sample, held_out.size()));
    std::vector<std::string> answers;
    task->accuracy(*model, shown, &answers);
    std::printf("samples (held-out problems, model's answers after '='):\n");
    for (size_t i = 0; i < shown.size(); ++i) {
      std::string answer = answers[i];
      if (!answer.empty() && answer.back() == '\n') answer.pop_back();
      const bool right = answers[i] == task->problem(shown[i].first, shown[i].second);
      std::printf("  %s  %s\n", answer.c_str(), right ? "ok" : "WRONG");
    }
  } else if (o.sample > 0 && text) {
    const std::vector<int64_t> prompt = text->prompt(8);
    const int64_t prompt_length = int64_t(prompt.size());
    model->eval();
    const std::vector<int64_t> out =
        samples::generate_greedy(*model, from_vector(prompt, {1, prompt_length}), o.sample).to_vector<int64_t>();
    std::string generated;
    for (int64_t b : out) generated += char(b);
    std::printf("sample: %s\n", generated.c_str());
  }

  if (!o.save.empty()) {
    {
      std::optional<dist::ZeroOptimizer::GatheredParameters> whole;  // stage 3: gathered for rank 0 to write
      if (zero) whole.emplace(zero->gather_parameters());
      if (!comm || comm->rank() == 0) model->save(o.save);  // whole weights
    }
    if (zero) zero->save_state(o.save);  // + each rank's optimizer shard
    std::printf("saved %s\n", o.save.c_str());
  }
  std::printf("summary: %lld steps in %.1f s | final loss %.4f | ", (long long)timed_steps, total, last_loss);
  if (task)
    std::printf("held-out exact match %.2f%%", 100.0 * accuracy);
  else
    std::printf("validation loss %.4f", val_loss);
  if (scaler.enabled()) std::printf(" | %lld skipped steps", (long long)scaler.skipped_steps());
  std::printf(" | waiting for data %.2f%% of the time",
              timed_seconds > 0 ? 100.0 * loader.wait_seconds() / timed_seconds : 0.0);
  std::printf(" | %.0f tok/s | %.1f ms/step | peak memory %s MiB\n",
              timed_seconds > 0 ? timed_tokens / timed_seconds : 0.0,
              timed_steps > 0 ? 1e3 * timed_seconds / double(timed_steps) : 0.0,
              megabytes(memory_stats(device).peak_allocated_bytes).c_str());
  if (o.memory_summary) std::printf("%s", memory_summary().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  try {
    return run(options);
  } catch (const Error& e) {
    std::fprintf(stderr, "train_gpt: error: %s\n", e.what());
    return 1;
  }
}
