#pragma once
// Training checkpoints: everything a run needs to continue bit-exactly, in one safetensors file.
//
// A TrainingState names the live objects of a training loop -- the model, the optimizer, the loss
// scaler, counters (the step, the LR schedule's position), random generators (the engine's Philox
// Generator, std::mt19937_64 engines of the data order) and extra named tensors (e.g. a data
// loader's position) -- and turns them into named tensors and back:
//
//   model.<name>              every parameter and buffer (Module::state_dict), in its dtype
//   optimizer.<index>.<state> Optimizer::state_tensors (moments, steps, master weights, ...); not for
//                             a sharded optimizer (ZeRO), whose shards are files of their own
//                             (train/checkpoint_directory.h writes both)
//   scaler.<state>            LossScaler::state_tensors
//   optimizers.<name>.<index>.<state>, scalers.<name>.<state>
//                             the named optimizers and loss scalers of a custom step
//                             (train/custom_step.h: one per Update), as the unnamed ones
//   counter.<name>            i64 [1]
//   generator.<name>          i64 [2]: Philox seed and offset (bit patterns of the u64s)
//   mt19937_64.<name>         i64 [313]: the engine's state words and position (bit patterns)
//   extra.<name>              the caller's tensor, as it is
//
// The file's metadata holds "format" = "halfgrad.training_checkpoint", "version" = "2" (with the
// tensors' and the header's checksums, which a version-2 load requires; "1": the same layout written
// before checksums, loaded unverified), "step" and
// the names of the registered parts, so a model-only safetensors file or another program's file is
// refused with a message that says so; and, when the state has one, "run_config": the program's
// settings as JSON text (app/cli.h RUN CONFIG FILES), which --resume reads back before it builds
// the model (read_run_config, train/checkpoint_directory.h). Loading ignores it.
//
// CONVENTION
//   - save() writes atomically (safetensors::save: a temporary file, fsync, rename, fsync of the
//     directory): the path holds the old checkpoint or the whole new one, never a torn one.
//   - load() checks everything before it changes anything: the format, every registered part present
//     with the shape and dtype of the live object (a model of another architecture shows as missing,
//     unexpected or reshaped tensors, each named), no unknown entries, counters and generator words
//     well formed, the optimizer and scaler state valid (their own load_state_tensors checks). Only
//     then is the state applied; on an hg::Error the live objects are as they were.
//   - Tensors are restored on the device of the live object (a CUDA model loads from a CPU file).
//   - The objects registered must outlive the TrainingState.
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/random.h"
#include "engine/safetensors.h"
#include "engine/tensor.h"
#include "layers/module.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"

namespace hg::train {

class TrainingState {
 public:
  // Each registration returns *this, so they chain. Names are non-empty, without '.' where a
  // prefix follows, and unique within their kind.
  TrainingState& model(nn::Module& model);
  TrainingState& optimizer(optim::Optimizer& optimizer);
  TrainingState& scaler(optim::LossScaler& scaler);
  // Named ones (several optimizers, each with its scaler: a GAN's discriminator and generator). A
  // sharded optimizer is refused here. Note: several optimizers load one after the other, each
  // checking its own state first; the other parts are all checked before any changes.
  TrainingState& optimizer(const std::string& name, optim::Optimizer& optimizer);
  TrainingState& scaler(const std::string& name, optim::LossScaler& scaler);
  TrainingState& counter(const std::string& name, int64_t& value);
  TrainingState& generator(const std::string& name, Generator& generator);
  TrainingState& mt19937_64(const std::string& name, std::mt19937_64& engine);
  // A caller-owned tensor (e.g. a data position as i64). load() replaces `value` with the saved
  // tensor (same shape and dtype, on value's device) -- a new tensor, so read it after load().
  // `check`, when given, is part of load()'s checks: it throws hg::Error for a saved value the
  // caller cannot use (e.g. DataLoader::check_state), before anything changes.
  TrainingState& extra(const std::string& name, Tensor& value, std::function<void(const Tensor&)> check = {});

  // Every registered part as named tensors (the live tensors where there are some: no copies).
  safetensors::NamedTensors tensors() const;
  // What is registered, for the file's metadata ("model optimizer scaler counter:step ...").
  std::string describe() const;

  // Checks `file` against the registered parts, then restores them (see CONVENTION).
  void restore(const safetensors::File& file, const std::string& source) const;

  // The registered optimizer (nullptr when none).
  optim::Optimizer* registered_optimizer() const { return optimizer_; }

  // The run config saved into the file's metadata ("run_config"; none when empty). Opaque text here.
  TrainingState& run_config(std::string json) {
    run_config_ = std::move(json);
    return *this;
  }
  const std::string& run_config() const { return run_config_; }

 private:
  nn::Module* model_ = nullptr;
  optim::Optimizer* optimizer_ = nullptr;
  optim::LossScaler* scaler_ = nullptr;
  std::vector<std::pair<std::string, optim::Optimizer*>> named_optimizers_;
  std::vector<std::pair<std::string, optim::LossScaler*>> named_scalers_;
  std::vector<std::pair<std::string, int64_t*>> counters_;
  std::vector<std::pair<std::string, Generator*>> generators_;
  std::vector<std::pair<std::string, std::mt19937_64*>> engines_;
  std::vector<std::pair<std::string, Tensor*>> extras_;
  std::vector<std::function<void(const Tensor&)>> extra_checks_;  // parallel to extras_
  std::string run_config_;
};

// Writes `state` to `path` atomically; `step` goes into the metadata.
void save_checkpoint(const std::string& path, const TrainingState& state, int64_t step);
// Reads `path` and restores `state` (all checked first); returns the step of its metadata.
int64_t load_checkpoint(const std::string& path, const TrainingState& state);
// The "run_config" metadata of the checkpoint file `path` (format checked; nothing restored), or
// nullopt for a checkpoint written without one.
std::optional<std::string> checkpoint_run_config(const std::string& path);

}  // namespace hg::train
