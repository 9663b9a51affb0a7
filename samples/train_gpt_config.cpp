// train_gpt's flags and their checks (samples/train_gpt_config.h).
#include "samples/train_gpt_config.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <system_error>

#include "dist/bootstrap.h"
#include "data/token_shard.h"
#include "samples/gpt_datasets.h"
#include "train/checkpoint_directory.h"
#include "train/precision.h"
#include "train/trainer.h"

namespace hg::samples {

int64_t model_vocab(const TrainGptConfig& c) {
  // The addition task, or a text file (bytes: ids < 256, and --vocab >= 256 as before the shards had a
  // vocabulary): --vocab.
  if (c.data.empty() || !data::is_token_shard(c.data.substr(0, c.data.find(',')))) return c.vocab;
  // The shards' headers are read here first: a bad one is an error of the flag ("--data <paths>: ...").
  return app::or_usage_error(kProgram, "--data " + c.data, [&] {
    return fresh_model_vocab(token_data_vocab(c.data), c.flags.given("vocab") ? std::optional(c.vocab) : std::nullopt,
                             c.data);
  });
}

const app::ResumeRules& train_gpt_resume_rules() {
  // The ZeRO stage and optimizer offload may change: a checkpoint re-partitions its optimizer shards
  // at any world size and stage (train/checkpoint_directory.h); its layout (ZeRO or not) is checked
  // when the trainer resumes. The output files a run opens anew ("w": the metrics log, the profile's
  // trace) belong to each invocation: restored, they would overwrite the earlier segment's. So do
  // the loader workers: chosen for this machine and device (-1: thread_defaults.h chooses), and
  // checkpoints written before that choice existed stored the old default 1 as if a user set it.
  static const app::ResumeRules rules{
      {"data", "digits", "eval-problems", "layers", "heads", "dim", "context", "dropout", "load", "seed", "batch",
       "grad-accum", "batch-tokens", "curriculum", "curriculum-steps", "seq-warmup-steps", "seq-warmup-start",
       "precision", "loss-scale", "fp32-grads", "stochastic-rounding", "master-weights", "optimizer-state-bits",
       "vocab", "tokenizer"},
      {"resume", "checkpoint-dir", "stop-after-steps", "metrics-log", "profile", "profile-ops", "workers"},
      {"data", "load", "tokenizer"}};
  return rules;
}

namespace {

// Whether this run's optimizer is sharded (DataParallel: ZeRO at --zero >= 0, with
// --offload-optimizer, or in more than one process), which picks the checkpoint layout it resumes.
bool writes_sharded(const TrainGptConfig& c) {
  return c.zero >= 0 || c.offload_optimizer || dist::detect_process().world_size > 1;
}

// --resume: the run config of the newest checkpoint of the layout this run resumes, under what is
// given now. The layout is known before the restore when the flags given now decide it; otherwise
// the directory must hold one layout, and the restored settings must pick that layout.
void restore_run_config(TrainGptConfig& c) {
  if (!c.resume || c.checkpoint_dir.empty()) return;
  std::optional<bool> sharded;
  if (c.flags.given("zero") || (c.flags.given("offload-optimizer") && c.offload_optimizer) ||
      dist::detect_process().world_size > 1)
    sharded = writes_sharded(c);
  const auto stored =
      app::or_usage_error(kProgram, "--resume", [&] { return train::read_run_config(c.checkpoint_dir, sharded); });
  if (!stored) return;
  c.resume_entry = stored->entry;
  c.flags.restore(stored->json, stored->entry, train_gpt_resume_rules());
  if (writes_sharded(c) != stored->sharded)
    app::exit_with_usage_error(
        kProgram, "--resume: the run config of " + stored->entry + " (a " +
                      (stored->sharded ? "sharded" : "single-file") + " checkpoint) gives a " +
                      (writes_sharded(c) ? "sharded" : "single-file") + " run (--zero " + std::to_string(c.zero) +
                      ", --offload-optimizer " + (c.offload_optimizer ? "true" : "false") +
                      "); expected the checkpoint's layout: give --zero 0, 1, 2 or 3 for a sharded one, -1 for a "
                      "single-file one");
}

// The checks parse() cannot make: each a one-line usage error (exit 2). Run by parse() after the
// restore and before --print-config prints.
void check_settings(const TrainGptConfig& c) {

  auto fail = [](const std::string& message) { app::exit_with_usage_error(kProgram, message); };
  if (c.zero > 3) fail("--zero " + std::to_string(c.zero) + " is not a ZeRO stage; expected 0, 1, 2 or 3");
  if (c.offload != "off" && c.offload != "inputs" && c.offload != "all")
    fail("unknown --offload-activations \"" + c.offload + "\"; expected off, inputs or all");
  if (c.offload == "inputs" && c.recompute_every == 0)
    fail("--offload-activations inputs offloads the inputs of recompute regions; it needs --recompute-every K");
  app::or_usage_error(kProgram,
                      [&] { return train::parse_loss_scale(c.loss_scale, train::parse_precision(c.precision)); });
  if (c.stochastic_rounding && (c.zero >= 0 || c.offload_optimizer || dist::detect_process().world_size > 1))
    fail(
        "--stochastic-rounding is not implemented under ZeRO or data parallelism (the sharded update rounds to "
        "nearest even); expected a single process without --zero");
  if (c.optimizer_state_bits != 8 && c.optimizer_state_bits != 32)
    fail("--optimizer-state-bits " + std::to_string(c.optimizer_state_bits) + " is not a state width; expected 8 or 32");
  if (c.on_checkpoint_error != "stop" && c.on_checkpoint_error != "warn")
    fail("unknown --on-checkpoint-error \"" + c.on_checkpoint_error + "\"; expected stop or warn");
  if (c.checkpoint_dir.empty() && (c.resume || c.checkpoint_every > 0))
    fail("--resume and --checkpoint-every-steps need --checkpoint-dir DIR");
  if (!c.checkpoint_dir.empty()) {
    std::error_code error;
    const auto status = std::filesystem::status(c.checkpoint_dir, error);
    if (std::filesystem::exists(status) && !std::filesystem::is_directory(status))
      fail("--checkpoint-dir \"" + c.checkpoint_dir + "\" exists and is not a directory; expected a directory "
           "(created when missing)");
  }
  app::or_usage_error(kProgram, [&] { return parse_attention_impl(c.attention); });
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
  if (!c.tokenizer.empty() && c.data.empty())
    fail("--tokenizer names the tokenizer of --data's token shards; it needs --data");
  if (c.curriculum != "none" && !c.data.empty())
    fail("--curriculum easy-to-hard needs the addition task's difficulty score; it does not apply to --data");
  // Sizes within bounds (no overflow in batch x context x dim), input files readable.
  app::check_at_most(kProgram, {{"layers", c.layers, 1024},
                           {"dim", c.dim, 65536},
                           {"context", c.context, 1 << 20},
                           {"batch", c.batch, 1 << 20},
                           {"grad-accum", c.grad_accum, 1 << 20},
                           {"eval-problems", c.eval_problems, 1 << 24},
                           {"workers", c.workers, 256},
                           {"threads", c.threads, 4096},
                           {"sample", c.sample, 1 << 20},
                           {"memory-limit-mib", c.memory_limit_mib, int64_t(1) << 30}});
  // A directory is GPT::load's to judge (a published model: its model.safetensors + config.json).
  std::error_code not_a_directory;
  if (!c.load.empty() && !std::filesystem::is_directory(c.load, not_a_directory))
    app::check_readable_file(kProgram, "load", c.load);
  if (!c.tokenizer.empty() && !std::filesystem::is_directory(c.tokenizer, not_a_directory))
    app::check_readable_file(kProgram, "tokenizer", c.tokenizer);
  for (size_t start = 0; !c.data.empty() && start <= c.data.size();) {
    const size_t comma = std::min(c.data.find(',', start), c.data.size());
    app::check_readable_file(kProgram, "data", c.data.substr(start, comma - start));
    start = comma + 1;
  }
  if (c.plan)  // planning for a device need not run on one: --plan --device cuda works without a GPU
    app::or_usage_error(kProgram, "--device " + c.device, [&] { return Device::parse(c.device); });
  else
    app::checked_device(kProgram, c.device);
}

}  // namespace

TrainGptConfig::TrainGptConfig(int argc, char** argv) {
  // Activation recompute's flag was --checkpoint-every; "checkpoint" now means saved training state only.
  flags.rename("checkpoint-every", "recompute-every");
  // --resume restores the checkpoint's run config before anything is checked or printed
  // (--print-config shows the resumed settings, and only settings that pass the checks).
  flags.after_parse([this] { restore_run_config(*this); });
  flags.after_parse([this] { check_settings(*this); });
  // Token shards without --vocab: the vocabulary is the shards' (their header), and --vocab says so, so
  // that --print-config and the checkpoints' run configs hold the real size: a --config of the printed
  // settings, or a --resume, then gives --vocab that size, not the flag's default of 256.
  flags.after_parse([this] {
    if (!flags.given("vocab")) vocab = model_vocab(*this);
  });
  flags.parse(argc, argv);
}

}  // namespace hg::samples
