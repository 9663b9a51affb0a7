#pragma once
// Theoretical occupancy of a kernel launch on an sm_90 SM (H100 / H200): how many blocks of a launch fit
// on one SM at once, given the block size and the kernel's registers, shared memory and barriers, and
// which resource stops the next block. The rules are those of the CUDA occupancy calculator
// (cuda_occupancy.h in the toolkit, cudaOccMaxActiveBlocksPerMultiprocessor) for compute capability 9.0
// with the largest shared-memory carveout (228 KiB per SM), partitioned global caching off:
//   warps/threads: floor(64 warps per SM / warps per block)
//   blocks:        32 per SM
//   registers:     registers per warp = regs/thread x 32 rounded up to 256; each of the 4 SM sub-partitions
//                  holds floor(16384 / registers per warp) warps; blocks = floor(4 x that / warps per block).
//                  A block needing more than 64 K registers (warps rounded up to a multiple of 4), or a
//                  kernel above 255 registers per thread, does not launch.
//   shared memory: per block = static + dynamic + 1 KiB reserved by the driver, rounded up to 128 B;
//                  blocks = floor(228 KiB / that). More than 227 KiB of static + dynamic per block (the
//                  opt-in maximum) does not launch.
//   barriers:      sm_90 has 2 x 32 block barriers per SM: blocks = floor(64 / barriers per block) when
//                  the kernel uses any (ptxas -v "used N barriers").
// The limiting factors are every rule whose block count equals the minimum (ties are all reported).
#include <cstdint>
#include <string>
#include <vector>

namespace hg::audit {

// The sm_90 figures, in one place. Source: CUDA C++ Programming Guide, "Compute Capabilities", table of
// technical specifications per compute capability (9.0), and the occupancy calculator's rules for 9.x in
// cuda_occupancy.h (register allocation unit, sub-partitions, shared allocation unit, barriers).
struct SmLimits {
  int warp_size = 32;
  int max_threads_per_sm = 2048;
  int max_warps_per_sm = 64;
  int max_blocks_per_sm = 32;
  int max_threads_per_block = 1024;
  int registers_per_sm = 65536;
  int max_registers_per_block = 65536;
  int max_registers_per_thread = 255;
  int register_allocation_unit = 256;  // registers, allocated per warp
  int sub_partitions = 4;              // registers are split evenly between them
  int64_t shared_per_sm = 228 * 1024;
  int64_t max_shared_per_block = 227 * 1024;  // static + dynamic, with the opt-in attribute
  int64_t reserved_shared_per_block = 1024;   // taken by the driver from every block
  int shared_allocation_unit = 128;
  int barriers_per_block_slot = 2;  // block barriers per SM = 2 x max blocks per SM
};

const SmLimits& sm90_limits();

enum class Limiter : uint8_t { warps, registers, shared_memory, blocks, barriers };
const char* limiter_name(Limiter limiter);

struct OccupancyInput {
  int block_threads = 0;
  int registers_per_thread = 0;
  int64_t static_shared_bytes = 0;
  int64_t dynamic_shared_bytes = 0;
  int barriers = 0;  // block barriers the kernel uses (0: no barrier limit)
};

struct Occupancy {
  int blocks_per_sm = 0;       // active blocks per SM (0: the block cannot launch; see `why`)
  int warps_per_block = 0;
  int warps_per_sm = 0;        // active warps
  double fraction = 0.0;       // active warps / max warps per SM
  std::vector<Limiter> limited_by;
  // Per rule: the blocks it alone would allow.
  int blocks_by_warps = 0, blocks_by_registers = 0, blocks_by_shared = 0, blocks_by_blocks = 0, blocks_by_barriers = 0;
  int registers_per_block = 0;  // allocated
  int64_t shared_per_block = 0; // allocated, reserved KiB included
  std::string why;              // when blocks_per_sm is 0: which limit the block exceeds
};

// Throws hg::Error for a block size outside 1..1024 or negative figures.
Occupancy theoretical_occupancy(const OccupancyInput& input, const SmLimits& limits = sm90_limits());

}  // namespace hg::audit
