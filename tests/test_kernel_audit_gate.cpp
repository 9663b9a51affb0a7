// The kernel audit's gate and roofline (audit/gate.h, audit/h200_roofline.h) on hand-built launch
// records: each rule fires on the figures it judges, names the op, the site and the figures, and stays
// quiet below its limit; exemptions move a finding aside, never a race; sum_launches adds launches.
// (The records come from the emulator in bench_kernels --audit; here they are planted, so every rule is
// exercised whatever the kernels do today.)
#include <doctest/doctest.h>

#include <algorithm>

#include "audit/exemptions.h"
#include "audit/gate.h"
#include "audit/h200_roofline.h"

using namespace hg;
namespace rec = hg::emu::audit;

namespace {

// A global load site requesting `bytes` bytes spread over `sectors` 32-byte sectors.
rec::SiteTotals load_site(uintptr_t pc, const char* location, uint64_t bytes, uint64_t sectors) {
  rec::SiteTotals s;
  s.pc = pc;
  s.location = location;
  s.space = rec::Space::global;
  s.kind = rec::Kind::load;
  s.totals.requests = bytes / 128;
  s.totals.accesses = bytes / 4;
  s.totals.requested_bytes = bytes;
  s.totals.sectors = sectors;
  s.totals.useful_bytes = std::min(bytes, 32 * sectors);  // every request alike
  return s;
}

// One launch that reads `bytes` coalesced (site a.cu:10) and stores them (b.cu:20), touching each sector once.
rec::LaunchAudit clean_launch(uint64_t bytes) {
  rec::LaunchAudit l;
  l.kernel = std::string(1, 'k');
  l.sites.push_back(load_site(0x10, "a.cu:10", bytes, bytes / 32));
  rec::SiteTotals store = load_site(0x20, "b.cu:20", bytes, bytes / 32);
  store.kind = rec::Kind::store;
  l.sites.push_back(store);
  l.global_load = l.sites[0].totals;
  l.global_store = l.sites[1].totals;
  l.dram_read_bytes = bytes;
  l.dram_write_bytes = bytes;
  return l;
}

audit::OpClaims claims(const char* op, uint64_t min_bytes) {
  audit::OpClaims c;
  c.op = op;
  c.dtype = "f32";
  c.min_dram_bytes = min_bytes;
  return c;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("kernel audit gate: a clean op passes, each rule fires above its limit with the site and figures") {
  const uint64_t n = 4096;
  const rec::LaunchAudit clean = clean_launch(n);
  CHECK(audit::evaluate_gate(clean, claims("planted_copy", 2 * n)).passed());

  SUBCASE("a strided main load: efficiency 12.5%") {
    rec::LaunchAudit l = clean;
    l.sites[0] = load_site(0x10, "a.cu:10", n, n / 4);  // one 4-byte element per sector
    l.global_load = l.sites[0].totals;
    const audit::GateResult r = audit::evaluate_gate(l, claims("planted_copy", 2 * n));
    REQUIRE(r.violations.size() == 1);
    CHECK(contains(r.violations[0], "planted_copy f32"));
    CHECK(contains(r.violations[0], "a.cu:10"));
    CHECK(contains(r.violations[0], "12.5%"));
  }
  SUBCASE("an inefficient site under 10% of the bytes is not a main site") {
    rec::LaunchAudit l = clean;
    l.sites.push_back(load_site(0x30, "c.cu:30", 256, 256 / 4));  // 256 of 8448 bytes: 3%
    l.global_load += l.sites.back().totals;
    CHECK(audit::main_sites(l).size() == 2);
    CHECK(audit::evaluate_gate(l, claims("planted_copy", 2 * n)).passed());
  }
  SUBCASE("reading the input twice: DRAM 1.5x the minimum") {
    rec::LaunchAudit l = clean;
    l.dram_read_bytes = 2 * n;
    const audit::GateResult r = audit::evaluate_gate(l, claims("planted_copy", 2 * n));
    REQUIRE(r.violations.size() == 1);
    CHECK(contains(r.violations[0], "1.50x"));
    // 1.25x is within the 1.3x limit.
    l.dram_read_bytes = n + n / 2;
    CHECK(audit::evaluate_gate(l, claims("planted_copy", 2 * n)).passed());
  }
  SUBCASE("an output never written (or a store not recorded): DRAM 0.50x the minimum") {
    rec::LaunchAudit l = clean;
    l.dram_write_bytes = 0;
    const audit::GateResult r = audit::evaluate_gate(l, claims("planted_copy", 2 * n));
    REQUIRE(r.violations.size() == 1);
    CHECK(contains(r.violations[0], "0.50x"));
    CHECK(contains(r.violations[0], "not written"));
  }
  SUBCASE("bank conflicts, unless the op does not claim none") {
    rec::LaunchAudit l = clean;
    rec::SiteTotals shared = load_site(0x40, "s.cu:40", 1024, 0);
    shared.space = rec::Space::shared;
    shared.totals.wavefronts = 16;
    shared.totals.phases = 8;  // a 2-way conflict on every request
    l.sites.push_back(shared);
    l.shared_load = shared.totals;
    const audit::GateResult r = audit::evaluate_gate(l, claims("planted_copy", 2 * n));
    REQUIRE(r.violations.size() == 1);
    CHECK(contains(r.violations[0], "8 shared-memory bank conflicts"));
    CHECK(contains(r.violations[0], "s.cu:40"));
    audit::OpClaims allowed = claims("planted_copy", 2 * n);
    allowed.claims_no_bank_conflicts = false;
    CHECK(audit::evaluate_gate(l, allowed).passed());
  }
  SUBCASE("a race: both threads and both lines, never exempt") {
    rec::LaunchAudit l = clean;
    rec::Race race;
    race.hazard = "read-after-write";
    race.first_thread = {3, 0, 0};
    race.second_thread = {7, 0, 0};
    race.first_location = "r.cu:5";
    race.second_location = "r.cu:9";
    l.races.push_back(race);
    const audit::GateResult r = audit::evaluate_gate(l, claims("conv2d_forward_im2col", 2 * n));
    REQUIRE(r.violations.size() == 1);
    CHECK(contains(r.violations[0], "read-after-write"));
    CHECK(contains(r.violations[0], "(3, 0, 0) at r.cu:5"));
    CHECK(contains(r.violations[0], "(7, 0, 0) at r.cu:9"));
    CHECK(r.exempted.empty());  // conv2d_forward_im2col's DRAM exemption does not reach its races
  }
}

TEST_CASE("kernel audit gate: an exemption moves its finding aside with the written reason") {
  rec::LaunchAudit l = clean_launch(4096);
  l.dram_read_bytes = 9 * 4096;  // the patch matrix
  const audit::Exemption* e = audit::find_exemption("conv2d_forward_im2col", audit::Check::dram_ratio);
  REQUIRE(e != nullptr);
  const audit::GateResult r = audit::evaluate_gate(l, claims("conv2d_forward_im2col", 2 * 4096));
  CHECK(r.passed());
  REQUIRE(r.exempted.size() == 1);
  CHECK(contains(r.exempted[0], e->reason));
  // The exemption covers that check only: the same figures fail another op.
  CHECK_FALSE(audit::evaluate_gate(l, claims("softmax_forward", 2 * 4096)).passed());
  CHECK(audit::find_exemption("conv2d_forward_im2col", audit::Check::efficiency) == nullptr);
  for (const audit::Exemption& x : audit::exemptions()) CHECK(std::string(x.reason).size() > 20);
}

TEST_CASE("kernel audit gate: sum_launches adds figures and merges sites by source line") {
  const rec::LaunchAudit a = clean_launch(4096), b = clean_launch(1024);
  const rec::LaunchAudit sum = audit::sum_launches({a, b}, "planted_op");
  CHECK(sum.kernel == "planted_op");
  CHECK(sum.dram_read_bytes == 4096 + 1024);
  CHECK(sum.global_load.requested_bytes == 4096 + 1024);
  REQUIRE(sum.sites.size() == 2);
  CHECK(sum.sites[0].totals.requested_bytes == 4096 + 1024);
  CHECK(sum.sites[0].totals.sectors == (4096 + 1024) / 32);
  // Two instructions of one line (an unrolled loop) are one site.
  rec::LaunchAudit unrolled = clean_launch(4096);
  unrolled.sites.push_back(load_site(0x11, "a.cu:10", 4096, 512));
  const rec::LaunchAudit merged = audit::sum_launches({unrolled}, "planted_op");
  REQUIRE(merged.sites.size() == 2);
  CHECK(merged.sites[0].location == "a.cu:10");
  CHECK(merged.sites[0].totals.requested_bytes == 8192);
  CHECK(merged.sites[0].totals.sectors == 128 + 512);
}

TEST_CASE("H200 roofline: memory- and compute-bound predictions from the stated constants") {
  // 4.8 MB at 4.8 TB/s is 1 us, plus one launch.
  CHECK(audit::memory_us(4.8e6) == doctest::Approx(1.0));
  CHECK(audit::predicted_us(4.8e6, 0, audit::FlopKind::none) ==
        doctest::Approx(1.0 + audit::H200::launch_overhead_us));
  // 989.5 GFLOP of BF16 tensor work is 1 ms; it bounds the time over 48 MB (10 us) of traffic.
  CHECK(audit::predicted_us(48e6, 989.5e9, audit::FlopKind::bf16_tensor, 2) ==
        doctest::Approx(1000.0 + 2 * audit::H200::launch_overhead_us));
  CHECK(audit::compute_us(67e12, audit::FlopKind::fp32_fma) == doctest::Approx(1e6));
  CHECK(audit::compute_us(1e12, audit::FlopKind::none) == 0.0);
}
