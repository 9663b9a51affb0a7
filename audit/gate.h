#pragma once
// The kernel audit's gate: what makes `bench_kernels --audit --gate` (and the ctest labelled `audit`)
// fail. It judges one op at one dtype -- every launch the op made, summed (sum_launches) -- against:
//   - efficiency: every main global load/store site (one carrying >= 10% of the op's global requested
//     bytes) fetches at most 1/0.8 of what it requests in 32-byte sectors (efficiency >= 80%);
//   - DRAM: the distinct sectors read and written (kernels/emu/audit.h) are at most 1.3x the op's
//     minimum, which the caller states (each input read once, each output written once), and at least
//     0.75x of it (less means outputs not written or accesses not recorded);
//   - bank conflicts: none, for an op that claims none (every hand-written kernel does, unless its
//     OpClaims says otherwise);
//   - races: none, ever (no exemption).
// A finding that an exemption (audit/exemptions.cpp: the one list, each with its written reason, also
// recorded in the kernel's header comment) covers is reported as exempted, not as a violation.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/emu/audit.h"

namespace hg::audit {

struct GateLimits {
  static constexpr double min_efficiency = 0.80;   // requested / fetched sector bytes, per main site
  static constexpr double main_site_share = 0.10;  // of the op's global requested bytes
  static constexpr double max_dram_ratio = 1.3;    // DRAM bytes / the op's minimum
  // Below this, the recording saw less traffic than the op's contract implies: outputs not written, or
  // accesses the recording missed (e.g. the store of a read-modify-write the instrumentation folded into
  // its load). Either way the other checks cannot be trusted for the op.
  static constexpr double min_dram_ratio = 0.75;
};

// What the caller states about the op it ran.
struct OpClaims {
  std::string op;      // the op's name, as bench_kernels prints it ("softmax_forward"): exemptions key on it
  std::string dtype;   // for the messages
  uint64_t min_dram_bytes = 0;  // each input read once, each output written once (0: not checked)
  bool claims_no_bank_conflicts = true;
};

// The checks an exemption can waive. Races cannot be waived.
enum class Check : uint8_t { efficiency, dram_ratio, dram_floor, bank_conflicts };
const char* check_name(Check check);

struct GateResult {
  std::vector<std::string> violations;  // readable: the op, dtype, the site (file:line) and the figures
  std::vector<std::string> exempted;    // findings an exemption covers, with its reason
  bool passed() const { return violations.empty(); }
};

// Every launch of `launches` as one: figures added, sites merged by source line and space and kind
// (the instructions of one line: an unrolled loop's copies; largest first), races
// merged by (hazard, both sites). `name` becomes its kernel name; grid/block are the first launch's.
hg::emu::audit::LaunchAudit sum_launches(const std::vector<hg::emu::audit::LaunchAudit>& launches,
                                         const std::string& name);

// The global load/store sites carrying >= GateLimits::main_site_share of the op's global requested bytes.
std::vector<const hg::emu::audit::SiteTotals*> main_sites(const hg::emu::audit::LaunchAudit& summed);

// The gate on one op's summed launches.
GateResult evaluate_gate(const hg::emu::audit::LaunchAudit& summed, const OpClaims& claims);

}  // namespace hg::audit
