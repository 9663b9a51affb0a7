// Fuzz target: a training-checkpoint DIRECTORY (train/checkpoint_directory.h) resumed as train_gpt
// --resume does it. The input is unpacked into a directory tree (fuzz/checkpoint_directory_input.h:
// file entries, sharded entries with state and optimizer shards, temporaries, retired entries, stray
// files), then: read_run_config (what --resume reads before it builds the model), a CheckpointDirectory
// on it (which removes dead writers' temporaries), latest_intact_for (verifies entries newest first,
// skipping damaged ones) and load of the entry it picks into the TrainingState of a tiny GPT (the
// fuzz_checkpoint rig). Each step either succeeds or throws hg::Error; a refused load must leave the
// live state bit for bit as it was. Two invariants besides: the entry whose run config read_run_config
// returns (for the single-file layout the rig writes) is the one latest_intact_for picks, and the load
// of a picked entry never fails its checksums (latest_intact_for verified them).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz/checkpoint_directory_input.h"
#include "fuzz/fuzz_checkpoint_rig.h"
#include "fuzz/fuzz_input.h"
#include "train/checkpoint_directory.h"

namespace {

const std::filesystem::path& directory() {
  static const std::filesystem::path path = [] {
    std::filesystem::path p = hg::fuzz::input_path() + "_dir";
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(directory(), ignored);
    });
    return p;
  }();
  return path;
}

void require_message(const hg::Error& e) {
  if (std::strlen(e.what()) == 0) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static hg::fuzz::CheckpointRig rig(/*seed=*/5);
  hg::fuzz::write_directory(directory(), hg::fuzz::unpack_directory(data, size));
  const std::string dir = directory().string();
  try {
    (void)hg::train::read_run_config(dir);
  } catch (const hg::Error& e) {
    require_message(e);
  }
  std::string run_config_entry;  // "" when there is none or it was refused
  try {
    if (const auto stored = hg::train::read_run_config(dir, /*sharded=*/false)) run_config_entry = stored->entry;
  } catch (const hg::Error& e) {
    require_message(e);
  }
  const std::vector<std::vector<unsigned char>> before = rig.snapshot();
  try {
    hg::train::CheckpointDirectory checkpoints(dir, /*keep_last=*/3);
    std::vector<hg::train::CheckpointDirectory::Damaged> damaged;
    const auto entry = checkpoints.latest_intact_for(rig.state, &damaged);
    for (const auto& d : damaged)
      if (d.reason.empty()) std::abort();
    if (!run_config_entry.empty() && (!entry || *entry != run_config_entry)) {
      std::fprintf(stderr, "fuzz_checkpoint_directory: read_run_config read %s but latest_intact_for picked %s\n",
                   run_config_entry.c_str(), entry ? entry->c_str() : "none");
      std::abort();
    }
    if (entry) {
      try {
        checkpoints.load(*entry, rig.state);
      } catch (const hg::Error& e) {
        if (std::strstr(e.what(), "checksum mismatch") != nullptr) {
          std::fprintf(stderr, "fuzz_checkpoint_directory: the verified entry %s failed its checksums: %s\n",
                       entry->c_str(), e.what());
          std::abort();
        }
        throw;
      }
    }
  } catch (const hg::Error& e) {
    require_message(e);
    if (rig.snapshot() != before) {
      std::fprintf(stderr, "fuzz_checkpoint_directory: a refused checkpoint changed the live state\n");
      std::abort();
    }
  }
  return 0;
}
