// Fuzz target: train/checkpoint.h load_checkpoint() on arbitrary bytes, into the TrainingState of a
// tiny GPT (AdamW with state, a dynamic loss scaler, counters, the Philox generator, a mt19937_64
// and an extra tensor): the registration train_gpt makes. Whatever the file holds, load either
// restores everything or throws hg::Error; a refused file must leave the live state bit for bit as
// it was (checked on every refusal).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "fuzz/fuzz_checkpoint_rig.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static hg::fuzz::CheckpointRig rig(/*seed=*/5);
  const std::string& path = hg::fuzz::write_input(data, size);
  const std::vector<std::vector<unsigned char>> before = rig.snapshot();
  try {
    hg::train::load_checkpoint(path, rig.state);
  } catch (const hg::Error& e) {
    if (std::strlen(e.what()) == 0) std::abort();
    if (rig.snapshot() != before) {
      std::fprintf(stderr, "fuzz_checkpoint: a refused checkpoint changed the live state\n");
      std::abort();
    }
  }
  return 0;
}
