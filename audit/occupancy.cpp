// Theoretical occupancy on sm_90 (occupancy.h): each resource's block limit, then the minimum.
#include "audit/occupancy.h"

#include <algorithm>
#include <climits>

#include "kernels/error.h"

namespace hg::audit {
namespace {

int64_t round_up(int64_t value, int64_t unit) { return (value + unit - 1) / unit * unit; }
int64_t divide_up(int64_t value, int64_t unit) { return (value + unit - 1) / unit; }

}  // namespace

const SmLimits& sm90_limits() {
  static const SmLimits limits{};
  return limits;
}

const char* limiter_name(Limiter limiter) {
  switch (limiter) {
    case Limiter::warps: return "warps";
    case Limiter::registers: return "registers";
    case Limiter::shared_memory: return "shared_memory";
    case Limiter::blocks: return "blocks";
    case Limiter::barriers: return "barriers";
  }
  return "?";
}

Occupancy theoretical_occupancy(const OccupancyInput& in, const SmLimits& sm) {
  HG_CHECK(in.block_threads >= 1 && in.block_threads <= sm.max_threads_per_block, "[occupancy] block of ",
           in.block_threads, " threads: expected 1..", sm.max_threads_per_block);
  HG_CHECK(in.registers_per_thread >= 0 && in.static_shared_bytes >= 0 && in.dynamic_shared_bytes >= 0 && in.barriers >= 0,
           "[occupancy] registers ", in.registers_per_thread, ", static shared ", in.static_shared_bytes, " B, dynamic shared ",
           in.dynamic_shared_bytes, " B, barriers ", in.barriers, ": expected none negative");
  Occupancy out;
  out.warps_per_block = int(divide_up(in.block_threads, sm.warp_size));

  // Warp slots and block slots.
  out.blocks_by_warps = sm.max_warps_per_sm / out.warps_per_block;
  out.blocks_by_blocks = sm.max_blocks_per_sm;

  // Registers: allocated per warp, in units, from each sub-partition's share of the file.
  const int64_t regs_per_warp = round_up(int64_t(in.registers_per_thread) * sm.warp_size, sm.register_allocation_unit);
  out.registers_per_block = int(regs_per_warp * out.warps_per_block);
  const int64_t regs_checked_per_block = regs_per_warp * round_up(out.warps_per_block, sm.sub_partitions);
  if (in.registers_per_thread > sm.max_registers_per_thread) {
    out.blocks_by_registers = 0;
    out.why = hg::detail::concat(in.registers_per_thread, " registers per thread: at most ", sm.max_registers_per_thread);
  } else if (regs_checked_per_block > sm.max_registers_per_block) {
    out.blocks_by_registers = 0;
    out.why = hg::detail::concat(regs_checked_per_block, " registers per block: at most ", sm.max_registers_per_block);
  } else if (regs_per_warp == 0) {
    out.blocks_by_registers = INT_MAX;
  } else {
    const int64_t warps_per_sub_partition = (sm.registers_per_sm / sm.sub_partitions) / regs_per_warp;
    out.blocks_by_registers = int(warps_per_sub_partition * sm.sub_partitions / out.warps_per_block);
  }

  // Shared memory: static + dynamic + the driver's reserved KiB, in allocation units.
  const int64_t requested_shared = in.static_shared_bytes + in.dynamic_shared_bytes;
  out.shared_per_block = round_up(requested_shared + sm.reserved_shared_per_block, sm.shared_allocation_unit);
  if (requested_shared > sm.max_shared_per_block) {
    out.blocks_by_shared = 0;
    if (out.why.empty()) {
      out.why = hg::detail::concat(requested_shared, " bytes of shared memory per block: at most ", sm.max_shared_per_block);
    }
  } else {
    out.blocks_by_shared = int(sm.shared_per_sm / out.shared_per_block);
  }

  // Block barriers (sm_90: two per block slot).
  out.blocks_by_barriers = in.barriers > 0 ? sm.barriers_per_block_slot * sm.max_blocks_per_sm / in.barriers : INT_MAX;

  out.blocks_per_sm = std::min({out.blocks_by_warps, out.blocks_by_blocks, out.blocks_by_registers, out.blocks_by_shared,
                                out.blocks_by_barriers});
  const std::pair<int, Limiter> rules[] = {{out.blocks_by_warps, Limiter::warps},
                                           {out.blocks_by_registers, Limiter::registers},
                                           {out.blocks_by_shared, Limiter::shared_memory},
                                           {out.blocks_by_blocks, Limiter::blocks},
                                           {out.blocks_by_barriers, Limiter::barriers}};
  for (const auto& [blocks, limiter] : rules) {
    if (blocks == out.blocks_per_sm) out.limited_by.push_back(limiter);
  }
  out.warps_per_sm = out.blocks_per_sm * out.warps_per_block;
  out.fraction = double(out.warps_per_sm) / double(sm.max_warps_per_sm);
  return out;
}

}  // namespace hg::audit
