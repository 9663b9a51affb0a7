#pragma once
// CheckpointDirectory: a directory of training checkpoints, the newest keep_last kept, for a local
// optimizer and a sharded one (ZeRO) alike. The layout of an entry follows the TrainingState's
// optimizer (optim/optimizer.h: is_sharded()):
//
//   local (or none)   <dir>/step_<10 digits>.safetensors        the whole TrainingState in one file
//                     (train/checkpoint.h), written by rank 0 (the ranks' states are equal)
//   sharded           <dir>/step_<10 digits>/state.safetensors  rank 0: the TrainingState without the
//                         optimizer -- the whole weights (gathered for it under ZeRO stage 3, written
//                         back into the shards on load), loss scaler, counters, generators, data position
//                     <dir>/step_<10 digits>/optimizer.rank<r>-of-<N>.safetensors   rank r's shard
//                         (Optimizer::save_state with the prefix "<entry>/optimizer"; load_state
//                         re-partitions them, so an entry resumes at any world size and ZeRO stage)
//
// With a Communicator (dist/communicator.h) every call is collective over its ranks; without one the
// process is rank 0 of 1. Rank 0 lists, decides and broadcasts, so every rank resumes the same entry.
//
// CRASH SAFETY
//   - A file entry is written atomically (safetensors::save: "....safetensors.tmp.<pid>", fsync,
//     rename). A directory entry is written into "step_<10 digits>.tmp.<pid of rank 0>" and renamed
//     into place by rank 0 once every shard is complete, then <dir> is fsync'd: an entry is there
//     whole or not at all. Temporaries of writers that are gone (their pid no longer runs) are
//     removed when a CheckpointDirectory is next opened on <dir>; they are never listed.
//   - Entries of the layout written beyond keep_last (and an older directory entry of the same step)
//     are renamed to
//     "....old.<pid>" -- unlisted at once -- and then deleted.
//   - <dir> must be one filesystem that every rank sees.
//
// DAMAGED ENTRIES (silent corruption: a flipped bit on disk, a file cut short by something else)
//   Every tensor of every file of an entry carries a CRC32C (engine/safetensors.h CHECKSUMS). An entry
//   is damaged when one of its files is not a valid safetensors file or a tensor fails its checksum,
//   or when a file is missing (a sharded entry without state.safetensors or without one of its
//   optimizer.rank0..N-1-of-N shards) (damage()). latest_intact_for() -- what a resume uses -- verifies the entries newest first and
//   returns the newest intact one, with the damaged newer ones and why (the caller says so); when every
//   entry of the layout is damaged it is an hg::Error listing each. Entries without checksums (written
//   before them) count as intact when their structure is. A refusal that is not damage (a model of
//   another architecture, another layout) is load()'s error and no reason to fall back.
//
// WRITE FAILURES (a full disk, ENOSPC; a file-size limit, EFBIG; a quota, EDQUOT; a read-only path,
// EROFS or EACCES; EIO on write, fsync or rename): save() throws CheckpointWriteError on every rank
// alike (a rank whose optimizer shard failed tells the others, dist/rank0.h), after removing its
// temporaries: the new entry is not there, not even partly, and no older entry was touched (pruning
// runs only once the new entry is complete). Its message names the entry and the system's reason.
// A failure of the communicator itself (a dead or hung rank) is not one: it propagates as it is.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "train/checkpoint.h"

namespace hg::train {

// A checkpoint save() could not write (see WRITE FAILURES). The caller chooses: stop, or train on
// and try again at the next checkpoint (train::TrainerOptions::continue_after_checkpoint_error).
class CheckpointWriteError : public Error {
 public:
  CheckpointWriteError(std::string entry, const std::string& message) : Error(message), entry_(std::move(entry)) {}
  const std::string& entry() const { return entry_; }  // the entry that is not there

 private:
  std::string entry_;
};

class CheckpointDirectory {
 public:
  struct Entry {
    int64_t step = 0;
    std::string path;
    bool sharded = false;  // a directory of a sharded optimizer's state, or one file
  };

  // Creates the directory when missing and removes dead writers' temporaries. keep_last >= 1.
  explicit CheckpointDirectory(std::string directory, int64_t keep_last, dist::Communicator* comm = nullptr);

  // Writes the entry of `step`, deletes the oldest beyond keep_last, and returns (on every rank, once
  // the entry is visible) its path. CheckpointWriteError when it cannot be written (WRITE FAILURES).
  std::string save(const TrainingState& state, int64_t step) const;
  // Restores `state` from `entry` (everything checked before anything changes; a sharded
  // optimizer's shards after the weights). Returns the entry's step. An entry of the other layout
  // than the state's optimizer writes is refused with a message that says which it holds.
  int64_t load(const std::string& entry, const TrainingState& state) const;

  // The complete entries of both layouts, oldest first (rank 0's listing; not collective).
  std::vector<Entry> list() const;
  // Why `entry` is damaged (the hg::Error of the first of its files that fails to load with its
  // checksums verified), or nullopt when it is intact. Reads every byte of the entry; not collective.
  static std::optional<std::string> damage(const Entry& entry);
  struct Damaged {
    Entry entry;
    std::string reason;
    std::string moved_to;  // where latest_intact_for moved it aside ("<entry>.damaged"), empty if it could not
  };
  // The newest intact entry of the layout `state` writes (collective: rank 0 verifies, every rank gets
  // the same answer), nullopt when there is none of that layout (latest_for's error for the other
  // layout). The newer damaged entries are appended to `damaged` on rank 0, newest first; when an intact
  // entry is chosen they are renamed (rank 0) to "<entry>.damaged" (".damaged.2", ...: kept, never
  // listed, pruned or cleaned), so that keep_last counts only entries a resume can use. An hg::Error
  // naming each entry and its damage when every entry of the layout is damaged.
  std::optional<std::string> latest_intact_for(const TrainingState& state, std::vector<Damaged>* damaged) const;
  // The newest entry (collective).
  std::optional<std::string> latest() const;
  // The newest entry of the layout `state` writes; an error when the directory holds only entries of
  // the other layout (a ZeRO run's checkpoints resumed without ZeRO, or the reverse).
  std::optional<std::string> latest_for(const TrainingState& state) const;
  const std::string& path() const { return directory_; }

 private:
  std::optional<Entry> newest(std::optional<bool> sharded) const;  // collective
  std::string save_file(const TrainingState& state, int64_t step) const;
  std::string save_sharded(const TrainingState& state, optim::Optimizer& optimizer, int64_t step) const;
  void prune(bool sharded, const std::string& written) const;
  std::string directory_;
  int64_t keep_last_;
  dist::Communicator* comm_;
};

// The run config stored in the newest intact checkpoint of `directory` of the layout a run resumes
// (latest_intact_for; damaged entries are skipped, and every entry of the layout damaged is an error): `sharded` names it (a sharded entry's run config is in its state.safetensors);
// without it the directory must hold entries of one layout only (an hg::Error names the newest of
// each otherwise), read before the model is built so that --resume can restore the settings.
// nullopt when the directory does not exist, holds no checkpoint of that layout, or that checkpoint
// was written without a run config. Neither creates nor changes anything (any rank may call it). An
// hg::Error names an entry that is not a readable training checkpoint.
struct StoredRunConfig {
  std::string entry;  // the checkpoint it was read from
  std::string json;
  bool sharded = false;  // the entry's layout
};
std::optional<StoredRunConfig> read_run_config(const std::string& directory,
                                               std::optional<bool> sharded = std::nullopt);

}  // namespace hg::train
