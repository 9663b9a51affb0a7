#pragma once
// ZeroCheckpointDirectory: training checkpoints of a data-parallel ZeRO run (dist/zero_optimizer.h),
// one directory per entry, written by every rank and made visible all at once.
//
//   <dir>/step_<10 digits>/state.safetensors                     rank 0: the TrainingState
//       (train/checkpoint.h) without an optimizer -- the whole weights (stage 3: gathered for it, and
//       written back into the shards on load), the loss scaler, counters (step, LR schedule position),
//       generators, data position
//   <dir>/step_<10 digits>/optimizer.rank<r>-of-<N>.safetensors  rank r's optimizer shard
//       (ZeroOptimizer::save_state with the prefix "<entry>/optimizer")
//
// Loading reads the state file on every rank, then ZeroOptimizer::load_state re-partitions the shards,
// so an entry written at N ranks resumes at any world size and stage.
//
// CRASH SAFETY
//   - The ranks write into "step_<10 digits>.tmp.<pid of rank 0>" (each file itself atomic and
//     fsync'd by safetensors::save). Once every shard is complete (save_state's barrier) and the state
//     file is written, rank 0 renames that directory to the entry's name and fsyncs <dir>: an entry is
//     there whole or not at all. A run killed before the rename leaves a temporary directory that is
//     never listed; rank 0 removes it when a ZeroCheckpointDirectory is next opened on <dir> and its
//     process is gone.
//   - Entries beyond keep_last (and an older entry of the same step) are first renamed to
//     "step_<10 digits>.old.<pid>" -- no longer listed, at once -- and then deleted.
//   - <dir> must be one filesystem that every rank sees. Rank 0 decides which entry is the latest and
//     broadcasts it, so every rank resumes from the same one.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dist/communicator.h"
#include "dist/zero_optimizer.h"
#include "train/checkpoint.h"

namespace hg::dist {

class ZeroCheckpointDirectory {
 public:
  // Collective. Creates the directory when missing; keep_last >= 1.
  ZeroCheckpointDirectory(std::string directory, int64_t keep_last, Communicator& comm);

  // Collective: writes the entry of `step` (state must not register an optimizer: `optimizer`'s
  // shards stand for it), deletes the oldest beyond keep_last, and returns on every rank once the
  // entry is visible. Returns the entry's path.
  std::string save(const train::TrainingState& state, ZeroOptimizer& optimizer, int64_t step) const;
  // Collective: restores `state` (all checked before anything changes) and then `optimizer`'s shard
  // from `entry`. Load before training; returns the entry's step.
  int64_t load(const std::string& entry, const train::TrainingState& state, ZeroOptimizer& optimizer) const;
  // Collective: the newest entry (rank 0's listing, broadcast), if any.
  std::optional<std::string> latest() const;

  // The complete entries in `directory`, oldest first, as (step, path); temporaries are not listed.
  static std::vector<std::pair<int64_t, std::string>> list(const std::string& directory);
  const std::string& path() const { return directory_; }

 private:
  std::string directory_;
  int64_t keep_last_;
  Communicator& comm_;
};

}  // namespace hg::dist
