#pragma once
// The default random generator: a Philox4x32-10 stream identified by (seed, offset). Random ops
// reserve a range of Philox blocks by advancing offset, so the values they draw depend only on the
// generator state when they run, never on threads or devices. The state can be saved and restored
// (checkpoints, activation recomputation).
#include <cstdint>
#include <mutex>

namespace hg {

struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;
  friend bool operator==(const GeneratorState&, const GeneratorState&) = default;
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed) : state_{seed, 0} {}
  void manual_seed(uint64_t seed);
  GeneratorState state() const;
  void set_state(const GeneratorState& state);
  // Returns the state to draw from and advances offset by `blocks` Philox blocks.
  GeneratorState reserve(uint64_t blocks);

 private:
  mutable std::mutex mutex_;
  GeneratorState state_;
};

Generator& default_generator();
// Seeds the default generator (offset back to 0).
void manual_seed(uint64_t seed);

}  // namespace hg
