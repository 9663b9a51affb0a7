// The kernel audit's gate (rules: gate.h).
#include "audit/gate.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <tuple>

#include "audit/exemptions.h"

namespace hg::audit {

namespace emu = hg::emu::audit;

namespace {

std::string format(const char* fmt, ...) {
  va_list args, again;
  va_start(args, fmt);
  va_copy(again, args);
  const int size = std::vsnprintf(nullptr, 0, fmt, args);
  va_end(args);
  std::string out(size_t(std::max(size, 0)), '\0');
  std::vsnprintf(out.data(), out.size() + 1, fmt, again);
  va_end(again);
  return out;
}

std::string thread_text(const uint3& t) { return format("(%u, %u, %u)", t.x, t.y, t.z); }

uint64_t global_requested_bytes(const emu::LaunchAudit& a) {
  return a.global_load.requested_bytes + a.global_store.requested_bytes + a.global_atomic.requested_bytes;
}

// Adds `finding` to the violations, or to the exempted findings when `op` has an exemption for `check`.
void report(GateResult& result, const std::string& op, Check check, const std::string& finding) {
  if (const Exemption* e = find_exemption(op, check)) {
    result.exempted.push_back(finding + " [exempt: " + e->reason + "]");
  } else {
    result.violations.push_back(finding);
  }
}

}  // namespace

const char* check_name(Check check) {
  switch (check) {
    case Check::efficiency: return "efficiency";
    case Check::dram_ratio: return "dram_ratio";
    case Check::dram_floor: return "dram_floor";
    case Check::bank_conflicts: return "bank_conflicts";
  }
  return "?";
}

emu::LaunchAudit sum_launches(const std::vector<emu::LaunchAudit>& launches, const std::string& name) {
  emu::LaunchAudit sum;
  sum.kernel = name;
  if (!launches.empty()) {
    sum.grid = launches.front().grid;
    sum.block = launches.front().block;
    sum.dynamic_shared_bytes = launches.front().dynamic_shared_bytes;
  }
  // Sites by source line: the instructions of one line (an unrolled loop's copies, several template
  // instances) are one site of the report, their figures added.
  std::map<std::tuple<std::string, emu::Space, emu::Kind>, size_t> site_index;
  std::map<std::tuple<std::string, std::string, std::string>, size_t> race_index;
  for (const emu::LaunchAudit& a : launches) {
    sum.global_load += a.global_load;
    sum.global_store += a.global_store;
    sum.global_atomic += a.global_atomic;
    sum.shared_load += a.shared_load;
    sum.shared_store += a.shared_store;
    sum.dram_read_bytes += a.dram_read_bytes;
    sum.dram_write_bytes += a.dram_write_bytes;
    for (const emu::SiteTotals& s : a.sites) {
      const std::string line = s.location == "?" ? "?@" + std::to_string(s.pc) : s.location;
      const auto [it, inserted] = site_index.emplace(std::make_tuple(line, s.space, s.kind), sum.sites.size());
      if (inserted) sum.sites.push_back(s);
      else sum.sites[it->second].totals += s.totals;
    }
    for (const emu::Race& r : a.races) {
      const auto [it, inserted] =
          race_index.emplace(std::make_tuple(r.hazard, r.first_location, r.second_location), sum.races.size());
      if (inserted) sum.races.push_back(r);
      else sum.races[it->second].count += r.count;
    }
  }
  std::stable_sort(sum.sites.begin(), sum.sites.end(), [](const emu::SiteTotals& a, const emu::SiteTotals& b) {
    return a.totals.requested_bytes > b.totals.requested_bytes;
  });
  return sum;
}

std::vector<const emu::SiteTotals*> main_sites(const emu::LaunchAudit& summed) {
  const double total = double(global_requested_bytes(summed));
  std::vector<const emu::SiteTotals*> out;
  for (const emu::SiteTotals& s : summed.sites) {
    if (s.space != emu::Space::global || s.kind == emu::Kind::atomic) continue;
    if (total > 0 && double(s.totals.requested_bytes) >= GateLimits::main_site_share * total) out.push_back(&s);
  }
  return out;
}

GateResult evaluate_gate(const emu::LaunchAudit& summed, const OpClaims& claims) {
  GateResult result;
  const std::string who = claims.op + " " + claims.dtype;

  for (const emu::SiteTotals* s : main_sites(summed)) {
    const double efficiency = s->totals.efficiency();
    if (efficiency >= GateLimits::min_efficiency) continue;
    report(result, claims.op, Check::efficiency,
           format("%s: global %s at %s: efficiency %.1f%% < %.0f%% (%llu bytes requested in %llu sectors = %llu "
                  "bytes fetched, %llu warp requests; the site carries %.0f%% of the op's global bytes)",
                  who.c_str(), emu::kind_name(s->kind), s->location.c_str(), 100.0 * efficiency,
                  100.0 * GateLimits::min_efficiency, (unsigned long long)s->totals.requested_bytes,
                  (unsigned long long)s->totals.sectors, (unsigned long long)(s->totals.sectors * 32),
                  (unsigned long long)s->totals.requests,
                  100.0 * double(s->totals.requested_bytes) / double(global_requested_bytes(summed))));
  }

  if (claims.min_dram_bytes > 0) {
    const double ratio = double(summed.dram_bytes()) / double(claims.min_dram_bytes);
    if (ratio > GateLimits::max_dram_ratio) {
      report(result, claims.op, Check::dram_ratio,
             format("%s: DRAM bytes %llu = %.2fx the op's minimum %llu > %.1fx (read %llu, written %llu)",
                    who.c_str(), (unsigned long long)summed.dram_bytes(), ratio,
                    (unsigned long long)claims.min_dram_bytes, GateLimits::max_dram_ratio,
                    (unsigned long long)summed.dram_read_bytes, (unsigned long long)summed.dram_write_bytes));
    }
    if (ratio < GateLimits::min_dram_ratio) {
      report(result, claims.op, Check::dram_floor,
             format("%s: DRAM bytes %llu = %.2fx the op's minimum %llu < %.2fx: outputs not written, or accesses "
                    "the recording missed (read %llu, written %llu; %llu bytes stored)",
                    who.c_str(), (unsigned long long)summed.dram_bytes(), ratio,
                    (unsigned long long)claims.min_dram_bytes, GateLimits::min_dram_ratio,
                    (unsigned long long)summed.dram_read_bytes, (unsigned long long)summed.dram_write_bytes,
                    (unsigned long long)summed.global_store.requested_bytes));
    }
  }

  if (claims.claims_no_bank_conflicts && summed.bank_conflicts() > 0) {
    const emu::SiteTotals* worst = nullptr;
    for (const emu::SiteTotals& s : summed.sites) {
      if (s.space == emu::Space::shared && (!worst || s.totals.bank_conflicts() > worst->totals.bank_conflicts())) {
        worst = &s;
      }
    }
    report(result, claims.op, Check::bank_conflicts,
           format("%s: %llu shared-memory bank conflicts (extra wavefronts) in a kernel that claims none; worst "
                  "site %s (shared %s: %llu extra wavefronts over %llu requests)",
                  who.c_str(), (unsigned long long)summed.bank_conflicts(), worst ? worst->location.c_str() : "?",
                  worst ? emu::kind_name(worst->kind) : "?",
                  worst ? (unsigned long long)worst->totals.bank_conflicts() : 0ULL,
                  worst ? (unsigned long long)worst->totals.requests : 0ULL));
  }

  for (const emu::Race& r : summed.races) {
    result.violations.push_back(format(
        "%s: %s race on %s memory at 0x%llx in block %s: thread %s at %s, then thread %s at %s (%llu such pairs)",
        who.c_str(), r.hazard.c_str(), emu::space_name(r.space), (unsigned long long)r.address,
        thread_text(r.block).c_str(), thread_text(r.first_thread).c_str(), r.first_location.c_str(),
        thread_text(r.second_thread).c_str(), r.second_location.c_str(), (unsigned long long)r.count));
  }
  return result;
}

}  // namespace hg::audit
