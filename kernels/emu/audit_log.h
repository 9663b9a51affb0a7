#pragma once
// The kernel audit's internals (see audit.h): what the instrumentation records while one block runs,
// and the hooks the emulator calls. Internal to kernels/emu.
//
// While a block runs, every access the audit keeps (device or shared memory, made by a CUDA thread) and
// every synchronisation event is appended to one log, in the order the emulator executed them. When
// the block ends the log is analysed twice (audit_requests.cpp: warp requests, sectors, banks;
// audit_races.cpp: races) and folded into the launch's figures, then cleared. Blocks run one at a time
// in the audit flavour (serial blocks), so one log per process suffices; it is owned by the OS thread
// that runs blocks (the grid mutex serialises them).
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/emu/audit.h"

namespace hg::emu::audit::detail {

enum class EntryType : uint8_t { access, warp_sync, barrier };

struct Entry {
  uintptr_t address = 0;  // access: the first byte; warp_sync: the lanes' mask
  uintptr_t pc = 0;       // access: the instruction (the callback's return address)
  uint32_t thread = 0;    // linear thread index in the block; warp_sync: the warp
  uint16_t size = 0;      // bytes
  EntryType type = EntryType::access;
  Space space = Space::global;
  Kind kind = Kind::load;
};

// Per-site figures of one launch, keyed by (pc, space, kind).
struct SiteKey {
  uintptr_t pc;
  Space space;
  Kind kind;
  bool operator==(const SiteKey&) const = default;
};
struct SiteKeyHash {
  size_t operator()(const SiteKey& k) const { return std::hash<uintptr_t>()(k.pc * 4 + size_t(k.space) * 2 + size_t(k.kind)); }
};

// A race before symbolisation: the two sites' pcs.
struct RawRace {
  const char* hazard;
  Space space;
  uintptr_t address;
  uint3 block;
  uint3 first_thread, second_thread;
  uintptr_t first_pc, second_pc;
  uint64_t count;
};

// The figures of the launch being recorded.
struct LaunchState {
  LaunchAudit audit;  // sites and races filled in at the end
  std::unordered_map<SiteKey, AccessTotals, SiteKeyHash> sites;
  // The L2 model (audit.h): per sector, the clock when it last entered or was touched; the clock counts
  // sectors brought into the L2. `dirty`: written since it entered.
  struct CachedSector {
    uint64_t touched = 0;
    bool dirty = false;
  };
  std::unordered_map<uint64_t, CachedSector> l2;
  uint64_t l2_clock = 0;
  uint64_t l2_capacity_sectors = 0;
  std::vector<RawRace> races;
};

// The log of the running block and what the analysis needs to know of it.
struct BlockLog {
  std::vector<Entry> entries;
  uint3 block{};
  dim3 block_dim{};
};

// audit_requests.cpp: warp requests of one block into the launch's figures.
void add_requests(const BlockLog& log, LaunchState& launch);
// audit_races.cpp: conflicting accesses of one block into the launch's race list.
void add_races(const BlockLog& log, LaunchState& launch);
// audit_report.cpp: "file:line" of instruction addresses of this process.
std::vector<std::string> locate(const std::vector<uintptr_t>& pcs);

// Hooks, called by the emulator (launch.cpp, block.cpp, emu.h). Each is a no-op unless recording.
extern bool g_recording;  // set_enabled and the audit flavour both on
void begin_launch(const void* kernel, dim3 grid, dim3 block, size_t dynamic_shared_bytes);
void end_launch();
void abort_launch();  // the launch threw: drop what was recorded
void begin_block(uint3 block, dim3 block_dim);
void end_block();
void on_barrier();                                    // a __syncthreads released
void on_warp_sync(uint32_t warp, unsigned lanes);     // a __syncwarp completed for `lanes`
// The hot path (audit_trace.cpp): one access of the running CUDA thread.
void record(uintptr_t address, unsigned size, Kind kind, uintptr_t pc);

}  // namespace hg::emu::audit::detail
