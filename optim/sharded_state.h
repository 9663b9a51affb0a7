#pragma once
// ShardedState: the sharding capability of an optimizer (optim/optimizer.h Optimizer::sharded_state):
// its state is split over ranks (dist::ZeroOptimizer), and it saves and restores that state itself,
// one file per rank, instead of handing it to the training checkpoint as state_tensors().
#include <string>

namespace hg::optim {

// save_state and load_state are collective: every rank calls them alike.
class ShardedState {
 public:
  virtual ~ShardedState() = default;
  // Writes this rank's shard under `prefix` (and removes shards a larger world left there).
  virtual void save_state(const std::string& prefix) = 0;
  // Reads the shards under `prefix` at any world size, re-partitioned for this one (checked before
  // anything changes).
  virtual void load_state(const std::string& prefix) = 0;
  // Whether files written by save_state exist under `prefix`; and a check of them that load_state
  // would pass, changing nothing.
  virtual bool has_saved_state(const std::string& prefix) const = 0;
  virtual void check_saved_state(const std::string& prefix) const = 0;
  // Drops what check_saved_state kept for load_state (the files it read, mapped): called when the load
  // it was for is abandoned, so that no later load_state of the same prefix uses files that have since
  // been rewritten.
  virtual void forget_checked_state() const = 0;
};

}  // namespace hg::optim
