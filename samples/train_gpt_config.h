#pragma once
// train_gpt's settings: every flag, bound by name to the member that holds its value (no positional
// initialisation: two flags cannot be swapped by their order), and the checks parse() cannot make.
#include <cstdint>
#include <string>

#include "app/cli.h"
#include "app/thread_defaults.h"

namespace hg::samples {

inline constexpr const char* kProgram = "train_gpt";

// Every flag, bound by name to the member that holds its value.
struct TrainGptConfig {
  app::Flags flags{kProgram,
              "Trains a GPT on the CPU or a CUDA device. By default it learns 3-digit addition (byte-level)\n"
              "and reports exact-match accuracy on held-out problems; --data trains on a text file\n"
              "(byte-level) or on token shards (prepare_data, BPE with --tokenizer) instead." HG_THREADS_HELP};
  std::string& device = flags.add_string("device", "cpu", "device to train on: cpu, cuda or cuda:N");
  std::string& data = flags.add_string("data", "",
                                       "train on this text file (byte-level) or these comma-separated "
                                       "token shards (prepare_data) instead of the addition task");
  int64_t& layers = flags.add_int("layers", 2, "transformer blocks", 1);
  int64_t& heads = flags.add_int("heads", 4, "attention heads (must divide --dim)", 1);
  int64_t& dim = flags.add_int("dim", 128, "model width", 1);
  int64_t& context = flags.add_int("context", 16, "context length in tokens (bytes for the byte-level tasks)", 1);
  int64_t& batch = flags.add_int("batch", 64, "sequences per micro-batch (x --grad-accum per optimizer step)", 1);
  int64_t& steps = flags.add_int("steps", 4000, "optimizer steps", 0);
  double& lr = flags.add_double("lr", 2e-3, "peak learning rate", 0.0);
  int64_t& warmup = flags.add_int("warmup", 100, "linear warmup steps", 0);
  double& min_lr = flags.add_double("min-lr", 1e-4, "learning rate at the end of the cosine decay", 0.0);
  double& weight_decay = flags.add_double("weight-decay", 0.1, "AdamW decoupled weight decay (matrices only)", 0.0);
  double& clip = flags.add_double("clip", 1.0, "clip the global gradient norm to this (0: off)", 0.0);
  double& dropout = flags.add_double("dropout", 0.0, "dropout probability", 0.0, 0.99);
  std::string& attention = flags.add_string(
      "attention", "auto", "attention kernels: fused (FlashAttention-2), composed (GEMM + softmax + GEMM) or auto");
  int64_t& eval_every = flags.add_int("eval-every", 500, "evaluate every N steps (0: only at the end)", 0);
  int64_t& eval_problems = flags.add_int("eval-problems", 1000, "held-out problems per evaluation", 1);
  int64_t& digits = flags.add_int("digits", 3, "digits per operand of the addition task", 1);
  int64_t& seed = flags.add_int("seed", 1337, "random seed (weights, data order, dropout)", 0);
  int64_t& threads = flags.add_int(
      "threads", 0, "OpenMP threads (0: OMP_NUM_THREADS when set, else the usable cores less the loader workers)", 0);
  std::string& save = flags.add_string("save", "", "save the trained model to this safetensors file");
  std::string& load = flags.add_string(
      "load", "", "start from this safetensors file (native or GPT-2 layout) or a GPT-2 directory (model.safetensors)");
  int64_t& sample = flags.add_int("sample", 8, "print N answers (or N tokens of text) at the end", 0);
  std::string& checkpoint_dir =
      flags.add_string("checkpoint-dir", "", "write training checkpoints into this directory");
  int64_t& checkpoint_every =
      flags.add_int("checkpoint-every-steps", 0, "checkpoint every N steps (0: only at the end)", 0);
  int64_t& keep_checkpoints = flags.add_int("keep-checkpoints", 3, "keep the newest K checkpoints", 1);
  bool& resume =
      flags.add_bool("resume", false, "continue from the newest checkpoint in --checkpoint-dir, bit-exactly");
  std::string& on_checkpoint_error = flags.add_string(
      "on-checkpoint-error", "stop",
      "a checkpoint that cannot be written (full disk, read-only path): stop (exit 1; the previous checkpoint is "
      "intact) or warn (train on, try again at the next checkpoint)");
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
      "recompute-every", 0,
      "activation recompute (\"checkpointing\"): keep only the inputs of segments of K blocks, recompute the rest "
      "in backward (0: off; formerly --checkpoint-every)",
      0);
  std::string& offload = flags.add_string(
      "offload-activations", "off", "move saved activations to host memory: off, inputs (of recompute regions) or all");
  int64_t& workers = flags.add_int(
      "workers", -1,
      "data loader threads (0: build batches on the training thread; -1: choose, 0 on a CPU device and 1 on CUDA; "
      "not kept by --resume)",
      -1);
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
  bool& cuda_graph = flags.add_bool("cuda-graph", false,
                                    "capture the training step into a CUDA graph after 2 eager steps and replay it "
                                    "(--device cuda, one process, ON THE DEVICE: AdamW, no dropout, offload or "
                                    "sequence warmup)");
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
  // Optimizer state and mixed precision (issue 18: 8-bit AdamW states; master weights as a choice).
  int64_t& optimizer_state_bits = flags.add_int(
      "optimizer-state-bits", 32, "AdamW moments: 32 (fp32) or 8 (block-wise quantised, bitsandbytes-style)", 8, 32);
  bool& master_weights = flags.add_bool("master-weights", true,
                                        "half precision: keep an fp32 master copy of the weights in the optimizer");
  // The memory planner (plan/plan.h).
  bool& plan = flags.add_bool("plan", false, "print the ranked configurations that fit --memory-budget, then exit");
  double& memory_budget_gib = flags.add_double(
      "memory-budget", 0.0, "device memory per rank in GiB: with --plan, plan for it; alone, train with the plan's pick",
      0.0);
  double& host_memory_gib = flags.add_double("host-memory", 0.0, "host memory budget in GiB for the plan (0: unlimited)", 0.0);
  int64_t& vocab = flags.add_int("vocab", 256,
                                 "vocabulary of a fresh model: 256 for the byte-level tasks; token shards' comes from their header "
                                 "(a value given must match it); --plan plans for any",
                                 256, 1 << 20);
  int64_t& plan_world = flags.add_int("world", 0, "ranks to plan for (0: this run's world size)", 0);
  // Text (issue 19): the BPE tokenizer of --data's shards, for bits per byte and the sample's text.
  std::string& tokenizer = flags.add_string(
      "tokenizer", "",
      "the tokenizer (tokenizer.json, or vocab.json + merges.txt) of --data's shards: reports bits per byte "
      "and decodes the sample");
  std::string& write_config =
      flags.add_string("write-config", "", "with --plan: write the recommended configuration to this JSON file");
  // --resume: the checkpoint entry whose run config was restored (""; none): the Trainer must resume
  // that entry and no other (TrainerOptions::resume_entry).
  std::string resume_entry;

  // Parses argv (with --config FILE; --resume restores the checkpoint's run config under the flags
  // given now, see train_gpt_resume_rules) and checks what parse() cannot (a usage error, exit 2,
  // names the flag).
  TrainGptConfig(int argc, char** argv);
  TrainGptConfig(const TrainGptConfig&) = delete;
};

// The vocabulary of a fresh model: --vocab for the addition task and a text file (byte-level); for
// token shards, their header's, which --vocab, when given, must equal (a usage error otherwise).
int64_t model_vocab(const TrainGptConfig& c);

// train_gpt --resume (app/cli.h ResumeRules): the keys that cannot change mid-run -- the model,
// the data and its order (data, load and tokenizer compared as files), the numerics and the optimizer state's
// layout -- and those each invocation sets anew (resume, checkpoint-dir, stop-after-steps, the
// files a run opens anew: metrics-log, profile, profile-ops; a bare --resume writes neither, so the
// first segment's log and trace stay; and workers, a choice for this machine and device that older
// checkpoints stored as 1 when nobody chose it). Every other key (steps, lr, eval-every, checkpoint-every-steps,
// keep-checkpoints, on-checkpoint-error, sample, save, threads, device, zero, ...) takes the
// value given now, or the checkpoint's when not given (a run resumed with a bare --resume keeps the
// policy it was started with).
const app::ResumeRules& train_gpt_resume_rules();

}  // namespace hg::samples
