// The kernel audit's memory figures (see audit.h): a finished block's accesses grouped into warp
// requests, and each request's 32-byte sectors (global memory) or bank wavefronts (shared memory),
// folded into the launch's per-site and per-space totals and its set of distinct sectors.
//
// A request is the set of accesses with the same (barrier phase, warp, instruction, space, kind,
// occurrence), where the occurrence counts how many times this lane has executed that instruction since
// the last __syncthreads: the k-th execution of a load by each lane of a warp is one warp-wide load on a
// converged GPU warp.
#include <algorithm>
#include <array>
#include <cstring>

#include "kernels/emu/audit_log.h"

namespace hg::emu::audit {

double AccessTotals::efficiency() const {
  if (sectors == 0) return 1.0;
  return double(useful_bytes) / (32.0 * double(sectors));
}

AccessTotals& AccessTotals::operator+=(const AccessTotals& o) {
  requests += o.requests;
  accesses += o.accesses;
  requested_bytes += o.requested_bytes;
  sectors += o.sectors;
  useful_bytes += o.useful_bytes;
  wide_accesses += o.wide_accesses;
  wavefronts += o.wavefronts;
  phases += o.phases;
  return *this;
}

const char* space_name(Space space) { return space == Space::global ? "global" : "shared"; }
const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::load:
      return "load";
    case Kind::store:
      return "store";
    case Kind::atomic:
      return "atomic";
  }
  return "?";
}

namespace detail {
namespace {

struct Keyed {
  uint32_t phase;  // barriers passed
  uint32_t warp;
  uint32_t occurrence;
  uintptr_t pc;
  uint8_t space, kind;
  uint32_t lane;
  uint32_t index;  // into the log
  bool operator<(const Keyed& o) const {
    if (phase != o.phase) return phase < o.phase;
    if (warp != o.warp) return warp < o.warp;
    if (pc != o.pc) return pc < o.pc;
    if (space != o.space) return space < o.space;
    if (kind != o.kind) return kind < o.kind;
    if (occurrence != o.occurrence) return occurrence < o.occurrence;
    return lane < o.lane;
  }
  bool same_request(const Keyed& o) const {
    return phase == o.phase && warp == o.warp && pc == o.pc && space == o.space && kind == o.kind && occurrence == o.occurrence;
  }
};

struct PairHash {
  size_t operator()(const std::pair<uint32_t, uintptr_t>& p) const {
    return std::hash<uintptr_t>()(p.second * 1315423911u + p.first);
  }
};

// Distinct 32-byte sectors of the request's bytes.
uint64_t request_sectors(const std::vector<Entry>& entries, const Keyed* begin, const Keyed* end,
                         std::vector<uint64_t>& scratch) {
  scratch.clear();
  for (const Keyed* k = begin; k != end; ++k) {
    const Entry& e = entries[k->index];
    for (uint64_t s = e.address >> 5; s <= (e.address + e.size - 1) >> 5; ++s) scratch.push_back(s);
  }
  std::sort(scratch.begin(), scratch.end());
  return uint64_t(std::unique(scratch.begin(), scratch.end()) - scratch.begin());
}

// Shared memory: 32 banks of 4-byte words. A request whose widest access is w bytes is served in
// max(1, w / 4) phases of 32 / phases consecutive lanes; a phase takes as many wavefronts as the most
// distinct words any one bank must deliver. Returns (wavefronts, phases).
std::pair<uint64_t, uint64_t> request_wavefronts(const std::vector<Entry>& entries, const Keyed* begin,
                                                 const Keyed* end) {
  unsigned widest = 1;
  for (const Keyed* k = begin; k != end; ++k) widest = std::max<unsigned>(widest, entries[k->index].size);
  const unsigned phases = std::clamp(widest / 4u, 1u, 4u);
  const unsigned lanes_per_phase = 32 / phases;
  uint64_t wavefronts = 0;
  std::array<std::vector<uint64_t>, 32> words;
  for (unsigned phase = 0; phase < phases; ++phase) {
    for (auto& w : words) w.clear();
    bool any = false;
    for (const Keyed* k = begin; k != end; ++k) {
      if (k->lane / lanes_per_phase != phase) continue;
      const Entry& e = entries[k->index];
      for (uint64_t word = e.address >> 2; word <= (e.address + e.size - 1) >> 2; ++word) {
        words[word % 32].push_back(word);
      }
      any = true;
    }
    if (!any) continue;
    size_t most = 1;
    for (auto& w : words) {
      std::sort(w.begin(), w.end());
      most = std::max<size_t>(most, size_t(std::unique(w.begin(), w.end()) - w.begin()));
    }
    wavefronts += most;
  }
  // Phases no lane used cost nothing: count only those that ran.
  uint64_t used = 0;
  for (unsigned phase = 0; phase < phases; ++phase) {
    for (const Keyed* k = begin; k != end; ++k) {
      if (k->lane / lanes_per_phase == phase) {
        ++used;
        break;
      }
    }
  }
  return {wavefronts, used};
}

// One access of `sector` through the L2 model: counts the DRAM read (a load or an atomic, which reads
// before it writes, of a sector not cached) and write-back (the first write of a sector in a stay).
void through_l2(LaunchState& launch, uint64_t sector, bool write, bool reads) {
  auto [it, inserted] = launch.l2.try_emplace(sector);
  LaunchState::CachedSector& s = it->second;
  const bool evicted = !inserted && launch.l2_clock - s.touched >= launch.l2_capacity_sectors;
  if (inserted || evicted) {
    ++launch.l2_clock;
    if (reads) launch.audit.dram_read_bytes += 32;
    s.dirty = false;
  }
  if (write && !s.dirty) {
    launch.audit.dram_write_bytes += 32;
    s.dirty = true;
  }
  s.touched = launch.l2_clock;
}

// The block's global accesses through the L2 model in the order a GPU would roughly make them: the
// emulator runs a thread to its next barrier before the next thread starts, while on a GPU the threads
// of a block advance together. So between two barriers, the k-th global access of every thread comes
// before the (k+1)-th of any (then by thread): a lane's 64 loads of a strided loop do not evict its
// neighbours' sectors before they use them.
void through_l2_in_lockstep(const BlockLog& log, LaunchState& launch) {
  struct Ordered {
    uint32_t phase, ordinal, thread, index;
    bool operator<(const Ordered& o) const {
      if (phase != o.phase) return phase < o.phase;
      if (ordinal != o.ordinal) return ordinal < o.ordinal;
      if (thread != o.thread) return thread < o.thread;
      return index < o.index;
    }
  };
  std::vector<Ordered> order;
  std::unordered_map<uint32_t, uint32_t> ordinal;  // thread -> global accesses so far in this phase
  uint32_t phase = 0;
  for (uint32_t i = 0; i < log.entries.size(); ++i) {
    const Entry& e = log.entries[i];
    if (e.type == EntryType::barrier) {
      ++phase;
      ordinal.clear();
    } else if (e.type == EntryType::access && e.space == Space::global) {
      order.push_back(Ordered{phase, ordinal[e.thread]++, e.thread, i});
    }
  }
  std::sort(order.begin(), order.end());
  for (const Ordered& o : order) {
    const Entry& e = log.entries[o.index];
    for (uint64_t s = e.address >> 5; s <= (e.address + e.size - 1) >> 5; ++s) {
      through_l2(launch, s, e.kind != Kind::load, e.kind != Kind::store);
    }
  }
}

AccessTotals& space_totals(LaunchAudit& a, Space space, Kind kind) {
  if (space == Space::shared) return kind == Kind::load ? a.shared_load : a.shared_store;
  if (kind == Kind::atomic) return a.global_atomic;
  return kind == Kind::load ? a.global_load : a.global_store;
}

}  // namespace

void add_requests(const BlockLog& log, LaunchState& launch) {
  const std::vector<Entry>& entries = log.entries;
  std::vector<Keyed> keyed;
  keyed.reserve(entries.size());
  uint32_t phase = 0;
  // Occurrences restart at every barrier, so lanes that diverged realign there.
  std::unordered_map<std::pair<uint32_t, uintptr_t>, uint32_t, PairHash> occurrences;
  for (uint32_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (e.type == EntryType::barrier) {
      occurrences.clear();
      ++phase;
      continue;
    }
    if (e.type != EntryType::access) continue;
    const uint32_t occurrence = occurrences[{e.thread, e.pc}]++;
    keyed.push_back(Keyed{phase, e.thread / 32, occurrence, e.pc, uint8_t(e.space), uint8_t(e.kind), e.thread % 32, i});
  }
  through_l2_in_lockstep(log, launch);
  std::sort(keyed.begin(), keyed.end());
  std::vector<uint64_t> scratch;
  for (size_t first = 0; first < keyed.size();) {
    size_t last = first + 1;
    while (last < keyed.size() && keyed[last].same_request(keyed[first])) ++last;
    const Keyed* begin = keyed.data() + first;
    const Keyed* end = keyed.data() + last;
    AccessTotals request;
    request.requests = 1;
    for (const Keyed* k = begin; k != end; ++k) {
      const Entry& e = entries[k->index];
      ++request.accesses;
      request.requested_bytes += e.size;
      if (e.size >= 16) ++request.wide_accesses;
    }
    const Space space = Space(begin->space);
    const Kind kind = Kind(begin->kind);
    if (space == Space::global) {
      request.sectors = request_sectors(entries, begin, end, scratch);
      request.useful_bytes = std::min<uint64_t>(request.requested_bytes, 32 * request.sectors);
    } else {
      const auto [wavefronts, phases] = request_wavefronts(entries, begin, end);
      request.wavefronts = wavefronts;
      request.phases = phases;
    }
    launch.sites[SiteKey{begin->pc, space, kind}] += request;
    space_totals(launch.audit, space, kind) += request;
    first = last;
  }
}

}  // namespace detail
}  // namespace hg::emu::audit
