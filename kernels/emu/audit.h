#pragma once
// The kernel audit: what Nsight Compute's memory tables and `compute-sanitizer --tool racecheck` report
// on a GPU, measured on the SIMT emulator from every global and shared-memory access a kernel makes.
//
// Only the audit build flavour records (CMake -DHALFGRAD_EMU_AUDIT=ON, with HALFGRAD_CUDA=EMULATED and
// without sanitizers; `make test-audit` configures build-audit/). There the kernels/cuda/*.cu files (and
// any source given the flavour's instrumentation flags, HALFGRAD_EMU_AUDIT_FLAGS) are compiled with
// GCC's ThreadSanitizer instrumentation but without its runtime: the compiler calls __tsan_read4(p),
// __tsan_write16(p), __tsan_atomic32_fetch_add(p, ...) ... at every access, and
// kernels/emu/audit_trace.cpp defines those functions. No kernel source changes. Accesses made while no
// CUDA thread runs, and accesses to anything but device memory (cudaMalloc ranges) and shared memory
// (the static __shared__ variables, thread-locals of the kernel's module, and the block's dynamic
// shared buffer) are ignored: locals, kernel parameters, the emulator's own bookkeeping.
//
// How accesses become warp requests: accesses are grouped by (block, warp, instruction address of the
// access, the lane's occurrence count at that address): the k-th time lanes of one warp execute one
// load or store is one request, as a converged warp issues it on a GPU.
//
// Per request (global): the distinct 32-byte sectors its bytes touch. Efficiency = requested bytes /
// (sectors x 32), capped at 1 per request (a broadcast, many lanes reading one word, is efficient, not
// > 100%, and does not lift the efficiency of other requests of the same site).
// Per request (shared): 32 banks of 4 bytes; accesses wider than 4 bytes are split into phases of
// 128 bytes of lanes (8-byte: half-warps, 16-byte: quarter-warps), as the hardware does; a phase takes
// as many wavefronts as the largest number of distinct 4-byte words any one bank serves (lanes reading
// the same word are a broadcast). Bank conflicts = wavefronts - phases.
// Per launch, DRAM traffic through a model of the L2 (set_l2_bytes; the H200's 50 MiB by default): the
// accesses of the grid -- blocks one after another, the threads of a block in lockstep (between two
// barriers, every thread's k-th global access before anyone's (k+1)-th) -- pass through a cache of
// that many bytes of 32-byte sectors with least-recently-used replacement, its age counted in sectors
// brought in since (an approximation of LRU that needs one clock per sector). A load of a sector not
// in it is read from DRAM; a sector written is written back once per stay in it. With the default size
// and the audit's sizes, that is the distinct sectors read and written; with an L2 scaled down as the
// working set is (bench_kernels --audit audits a 1/256 scale model of the sizes it times on a GPU), a
// kernel that streams its input twice pays twice, as it would at full size.
//
// Races (racecheck): within a block, two accesses to the same byte by different threads, at least one a
// write, neither an atomic, not ordered by a __syncthreads between them (the barrier count differs) nor,
// for lanes of one warp, by a __syncwarp both took part in after the first and before the second (vector
// clocks per warp; shuffles, votes and __reduce_* exchange registers but do not order memory in CUDA's
// model, so they do not count). This includes the intra-warp races a lockstep-assuming kernel has.
// Accesses by different blocks to one address are not checked (the emulator runs blocks one after
// another; inter-block communication goes through atomics and fences).
//
// HG_EMU_AUDIT_JSONL=path records every launch of the program from start-up and writes them to `path`;
// it takes them as they finish (in batches, and at exit), so take_launches has nothing for the program
// itself then.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <vector_types.h>

namespace hg::emu::audit {

// Whether this build records accesses (the audit flavour); false elsewhere, where everything below is
// inert (set_enabled does nothing, take_launches returns nothing).
bool available();

// Start or stop recording the launches that follow (off at start-up). Recording runs blocks one at a
// time; it costs a few times the emulator's normal speed.
void set_enabled(bool enabled);
bool enabled();

// The modelled L2's capacity in bytes (default 50 MiB, the H200's); applies to launches that follow.
void set_l2_bytes(uint64_t bytes);
uint64_t l2_bytes();
inline constexpr uint64_t kH200L2Bytes = 50ull << 20;

enum class Space : uint8_t { global, shared };
enum class Kind : uint8_t { load, store, atomic };

const char* space_name(Space space);
const char* kind_name(Kind kind);

// Access figures of a set of warp requests (one site, or every site of one space and kind).
struct AccessTotals {
  uint64_t requests = 0;         // warp-level requests
  uint64_t accesses = 0;         // thread-level accesses
  uint64_t requested_bytes = 0;  // sum of the accesses' sizes
  uint64_t sectors = 0;          // global: distinct 32-byte sectors per request, summed
  uint64_t useful_bytes = 0;     // global: min(requested, sectors x 32) per request, summed
  uint64_t wide_accesses = 0;    // accesses of 16 bytes (one vector instruction per lane)
  uint64_t wavefronts = 0;       // shared: wavefronts per request, summed
  uint64_t phases = 0;           // shared: the conflict-free wavefronts (1, 2 or 4 per request)

  // useful bytes / fetched sector bytes: each request's requested / fetched, capped at 1 per request (a
  // broadcast cannot make up for a gather); 1 when nothing was fetched.
  double efficiency() const;
  uint64_t bank_conflicts() const { return wavefronts - phases; }  // extra wavefronts
  double vector_share() const { return accesses ? double(wide_accesses) / double(accesses) : 0.0; }
  AccessTotals& operator+=(const AccessTotals& other);
};

// One load or store instruction of the kernel (a call site of the instrumentation).
struct SiteTotals {
  uintptr_t pc = 0;        // the instruction's address in this process
  std::string location;    // "file:line" (from the binary's line table; "?" without debug info)
  Space space = Space::global;
  Kind kind = Kind::load;
  AccessTotals totals;
};

// Two conflicting accesses of one block.
struct Race {
  std::string hazard;  // "read-after-write", "write-after-read" or "write-after-write"
  Space space = Space::shared;
  uintptr_t address = 0;
  uint3 block{};
  uint3 first_thread{}, second_thread{};  // first: the earlier access, as the emulator ran them
  std::string first_location, second_location;
  uint64_t count = 1;  // how many conflicting access pairs of this (hazard, first site, second site)
};

// Everything recorded for one kernel launch.
struct LaunchAudit {
  std::string kernel;  // demangled name, as the emulator's error messages give it
  dim3 grid{}, block{};
  size_t dynamic_shared_bytes = 0;
  AccessTotals global_load, global_store, global_atomic, shared_load, shared_store;
  uint64_t dram_read_bytes = 0;   // sectors read from DRAM x 32 (the L2 model above)
  uint64_t dram_write_bytes = 0;  // sectors written back x 32 (atomics count as written)
  std::vector<SiteTotals> sites;  // by requested bytes, largest first
  std::vector<Race> races;        // one per (hazard, first site, second site), at most 32

  uint64_t dram_bytes() const { return dram_read_bytes + dram_write_bytes; }
  uint64_t bank_conflicts() const { return shared_load.bank_conflicts() + shared_store.bank_conflicts(); }
};

// The launches recorded since the last call, in launch order; clears them.
std::vector<LaunchAudit> take_launches();

// One JSON object (no newline) with every figure of `launch`, for reports.
std::string to_json(const LaunchAudit& launch);

}  // namespace hg::emu::audit
