// The kernel audit's race check (see audit.h): a finished block's log replayed in execution order
// against a byte-granular shadow of the memory it touched since the last __syncthreads.
//
// Happens-before within a block:
//   * program order within a thread;
//   * a released __syncthreads orders everything before it before everything after it, so the shadow
//     (and the warps' clocks) start afresh at every barrier;
//   * within one warp, a completed __syncwarp orders what its lanes did before it before what they do
//     after it (shuffles, votes and __reduce_* do not order memory in CUDA's model): each lane carries a
//     vector clock over the 32 lanes of its warp; a __syncwarp joins its lanes' clocks and advances each
//     lane's own entry. An access by lane a with own clock c is ordered before lane b's later access iff
//     b's clock[a] >= c.
// Two accesses to one byte by different threads, at least one a store and neither an atomic, that are
// not ordered are a race: read-after-write, write-after-read or write-after-write, named by which came
// second in the emulator's execution. Per byte the shadow keeps the last store and up to four loads by
// distinct threads since it (more readers are rare in kernels and only make a missed report possible).
#include <algorithm>
#include <array>
#include <cstring>

#include "kernels/emu/audit_log.h"

namespace hg::emu::audit::detail {
namespace {

constexpr size_t kMaxRaceKinds = 32;  // distinct (hazard, site, site) per launch
constexpr unsigned kMaxBytesChecked = 64;

struct Stamp {
  uint32_t thread = UINT32_MAX;  // UINT32_MAX: none
  uint32_t clock = 0;
  uint32_t entry = 0;
  bool valid() const { return thread != UINT32_MAX; }
};

struct ByteState {
  Stamp store;
  std::array<Stamp, 4> loads{};
  uint8_t n_loads = 0;
};

class Replay {
 public:
  Replay(const BlockLog& log, LaunchState& launch) : log_(log), launch_(launch) {
    const dim3 d = log.block_dim;
    const uint32_t threads = d.x * d.y * d.z;
    n_warps_ = (threads + 31) / 32;
    reset_clocks();
  }

  void run() {
    for (uint32_t i = 0; i < log_.entries.size(); ++i) {
      const Entry& e = log_.entries[i];
      switch (e.type) {
        case EntryType::barrier:
          shadow_.clear();
          reset_clocks();
          break;
        case EntryType::warp_sync:
          warp_sync(e.thread, unsigned(e.address));
          break;
        case EntryType::access:
          if (e.kind != Kind::atomic) access(e, i);
          break;
      }
    }
  }

 private:
  uint32_t& clock(uint32_t thread, uint32_t of_lane) { return clocks_[size_t(thread) * 32 + of_lane]; }

  void reset_clocks() {
    clocks_.assign(size_t(n_warps_) * 32 * 32, 0);
    for (uint32_t t = 0; t < n_warps_ * 32; ++t) clock(t, t % 32) = 1;
  }

  void warp_sync(uint32_t warp, unsigned lanes) {
    std::array<uint32_t, 32> joined{};
    for (unsigned l = lanes; l; l &= l - 1) {
      const uint32_t t = warp * 32 + uint32_t(__builtin_ctz(l));
      for (uint32_t j = 0; j < 32; ++j) joined[j] = std::max(joined[j], clock(t, j));
    }
    for (unsigned l = lanes; l; l &= l - 1) {
      const uint32_t lane = uint32_t(__builtin_ctz(l));
      const uint32_t t = warp * 32 + lane;
      for (uint32_t j = 0; j < 32; ++j) clock(t, j) = joined[j];
      clock(t, lane) = joined[lane] + 1;
    }
  }

  // Whether `earlier` (made before, by its thread) happens before the current access of `thread`.
  bool ordered(const Stamp& earlier, uint32_t thread) {
    if (earlier.thread == thread) return true;
    if (earlier.thread / 32 != thread / 32) return false;
    return clock(thread, earlier.thread % 32) >= earlier.clock;
  }

  void access(const Entry& e, uint32_t index) {
    const Stamp now{e.thread, clock(e.thread, e.thread % 32), index};
    const unsigned bytes = std::min<unsigned>(e.size, kMaxBytesChecked);
    for (unsigned b = 0; b < bytes; ++b) {
      ByteState& s = shadow_[e.address + b];
      if (e.kind == Kind::load) {
        if (s.store.valid() && !ordered(s.store, e.thread)) report("read-after-write", s.store, e, index);
        add_load(s, now);
      } else {
        if (s.store.valid() && !ordered(s.store, e.thread)) report("write-after-write", s.store, e, index);
        for (uint8_t r = 0; r < s.n_loads; ++r) {
          if (!ordered(s.loads[r], e.thread)) {
            report("write-after-read", s.loads[r], e, index);
            break;
          }
        }
        s.store = now;
        s.n_loads = 0;
      }
    }
  }

  static void add_load(ByteState& s, const Stamp& now) {
    for (uint8_t r = 0; r < s.n_loads; ++r) {
      if (s.loads[r].thread == now.thread) {
        s.loads[r] = now;
        return;
      }
    }
    if (s.n_loads < s.loads.size()) {
      s.loads[s.n_loads++] = now;
    } else {
      s.loads[s.loads.size() - 1] = now;
    }
  }

  uint3 thread_index(uint32_t linear) const {
    const dim3 d = log_.block_dim;
    return uint3{linear % d.x, linear / d.x % d.y, linear / (d.x * d.y)};
  }

  void report(const char* hazard, const Stamp& first, const Entry& second, uint32_t index) {
    const Entry& a = log_.entries[first.entry];
    for (RawRace& r : launch_.races) {
      if (std::strcmp(r.hazard, hazard) == 0 && r.first_pc == a.pc && r.second_pc == second.pc) {
        ++r.count;
        return;
      }
    }
    if (launch_.races.size() >= kMaxRaceKinds) return;
    (void)index;
    launch_.races.push_back(RawRace{hazard, second.space, second.address, log_.block, thread_index(first.thread),
                                    thread_index(second.thread), a.pc, second.pc, 1});
  }

  const BlockLog& log_;
  LaunchState& launch_;
  uint32_t n_warps_ = 0;
  std::vector<uint32_t> clocks_;
  std::unordered_map<uintptr_t, ByteState> shadow_;
};

}  // namespace

void add_races(const BlockLog& log, LaunchState& launch) { Replay(log, launch).run(); }

}  // namespace hg::emu::audit::detail
