// The kernel audit's results (see audit.h): finished launches with their sites and races named by
// source line, and their JSON form.
//
// Source lines come from the binary's own line table (the audit flavour compiles the instrumented
// sources with -g1), read by binutils' addr2line (-a -i), run once per take_launches for the new addresses.
// An access inlined from a helper is named by the innermost place outside kernels/emu (the helper's
// line) and, when that is not the outermost, by the outermost too ("helper.h:12 < kernel.cu:40").
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <sstream>

#include "kernels/emu/audit_log.h"

namespace hg::emu::audit {
namespace detail {

std::vector<LaunchState> take_finished();  // audit_trace.cpp

namespace {

std::string short_path(const std::string& path) {
  for (const char* root : {"/kernels/", "/tests/", "/bench/", "/engine/", "/layers/"}) {
    const size_t at = path.rfind(root);
    if (at != std::string::npos) return path.substr(at + 1);
  }
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool is_emulator(const std::string& location) {
  return location.find("kernels/emu/") != std::string::npos || location.find("include/c++") != std::string::npos ||
         location.rfind("/usr/", 0) == 0;
}

// Runs addr2line over the addresses of one object file; returns one chain of "file:line" per address
// (innermost first). `-a` prints each address before its chain, which is how chains are told apart.
std::vector<std::vector<std::string>> addr2line(const std::string& object, const std::vector<uintptr_t>& offsets) {
  std::vector<std::vector<std::string>> chains(offsets.size());
  if (offsets.empty() || object.find('\'') != std::string::npos) return chains;
  std::ostringstream command;
  command << "addr2line -a -i -e '" << object << "'";
  for (uintptr_t o : offsets) command << " 0x" << std::hex << o;
  command << " 2>/dev/null";
  FILE* pipe = popen(command.str().c_str(), "r");
  if (!pipe) return chains;
  char line[4096];
  long index = -1;
  while (std::fgets(line, sizeof line, pipe)) {
    std::string text(line);
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    if (text.rfind("0x", 0) == 0) {  // the next address
      ++index;
      continue;
    }
    if (index < 0 || size_t(index) >= chains.size()) break;
    if (text.rfind("??", 0) == 0) {
      chains[size_t(index)].push_back("?");
      continue;
    }
    const size_t space = text.find(" (discriminator");
    if (space != std::string::npos) text.resize(space);
    chains[size_t(index)].push_back(short_path(text));
  }
  pclose(pipe);
  return chains;
}

std::string describe(const std::vector<std::string>& chain) {
  if (chain.empty()) return "?";
  size_t inner = 0;
  while (inner < chain.size() && (is_emulator(chain[inner]) || chain[inner] == "?")) ++inner;
  if (inner == chain.size()) return chain.front();
  const std::string& outer = chain.back();
  if (inner + 1 == chain.size() || is_emulator(outer)) return chain[inner];
  return chain[inner] + " < " + outer;
}

}  // namespace

std::vector<std::string> locate(const std::vector<uintptr_t>& pcs) {
  // Never destroyed: HG_EMU_AUDIT_JSONL flushes from an atexit handler, after static destructors of
  // objects constructed later than its registration have run.
  static auto* mutex = new std::mutex;
  static auto* names = new std::map<uintptr_t, std::string>;
  std::map<uintptr_t, std::string>& cache = *names;
  std::lock_guard<std::mutex> lock(*mutex);
  std::map<std::string, std::vector<uintptr_t>> by_object;  // object file -> pcs
  std::map<uintptr_t, uintptr_t> offset_of;
  for (uintptr_t pc : pcs) {
    if (cache.count(pc) || offset_of.count(pc)) continue;
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(pc), &info) == 0 || !info.dli_fname) {
      cache.emplace(pc, std::string(1, '?'));
      continue;
    }
    // The callback returns to the instruction after the call: ask for the call itself.
    const uintptr_t offset = pc - 1 - reinterpret_cast<uintptr_t>(info.dli_fbase);
    by_object[info.dli_fname].push_back(pc);
    offset_of[pc] = offset;
  }
  for (auto& [object, object_pcs] : by_object) {
    std::vector<uintptr_t> offsets;
    for (uintptr_t pc : object_pcs) offsets.push_back(offset_of[pc]);
    // A PIE executable's path as dladdr gives it may be its name only: read our own image instead.
    const std::string path = object.find('/') == std::string::npos ? "/proc/self/exe" : object;
    const auto chains = addr2line(path, offsets);
    for (size_t i = 0; i < object_pcs.size(); ++i) cache[object_pcs[i]] = describe(chains[i]);
  }
  std::vector<std::string> out;
  out.reserve(pcs.size());
  for (uintptr_t pc : pcs) out.push_back(cache[pc]);
  return out;
}

}  // namespace detail

std::vector<LaunchAudit> take_launches() {
  std::vector<detail::LaunchState> finished = detail::take_finished();
  std::vector<uintptr_t> pcs;
  for (const auto& launch : finished) {
    for (const auto& [key, totals] : launch.sites) pcs.push_back(key.pc);
    for (const auto& race : launch.races) {
      pcs.push_back(race.first_pc);
      pcs.push_back(race.second_pc);
    }
  }
  const std::vector<std::string> names = detail::locate(pcs);
  std::map<uintptr_t, std::string> name_of;
  for (size_t i = 0; i < pcs.size(); ++i) name_of[pcs[i]] = names[i];

  std::vector<LaunchAudit> out;
  out.reserve(finished.size());
  for (auto& launch : finished) {
    LaunchAudit audit = std::move(launch.audit);
    for (const auto& [key, totals] : launch.sites) {
      audit.sites.push_back(SiteTotals{key.pc, name_of[key.pc], key.space, key.kind, totals});
    }
    std::sort(audit.sites.begin(), audit.sites.end(), [](const SiteTotals& a, const SiteTotals& b) {
      if (a.totals.requested_bytes != b.totals.requested_bytes) return a.totals.requested_bytes > b.totals.requested_bytes;
      return a.pc < b.pc;
    });
    for (const auto& r : launch.races) {
      audit.races.push_back(Race{r.hazard, r.space, r.address, r.block, r.first_thread, r.second_thread,
                                 name_of[r.first_pc], name_of[r.second_pc], r.count});
    }
    out.push_back(std::move(audit));
  }
  return out;
}

namespace {

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
      out += buffer;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string dims(dim3 d) {
  std::ostringstream s;
  s << "[" << d.x << "," << d.y << "," << d.z << "]";
  return s.str();
}

void totals_json(std::ostringstream& s, const char* name, const AccessTotals& t) {
  s << quoted(name) << ":{\"requests\":" << t.requests << ",\"accesses\":" << t.accesses
    << ",\"requested_bytes\":" << t.requested_bytes << ",\"sectors\":" << t.sectors << ",\"efficiency\":"
    << t.efficiency() << ",\"vector_share\":" << t.vector_share() << ",\"wavefronts\":" << t.wavefronts
    << ",\"bank_conflicts\":" << t.bank_conflicts() << "}";
}

}  // namespace

std::string to_json(const LaunchAudit& a) {
  std::ostringstream s;
  s << "{\"kernel\":" << quoted(a.kernel) << ",\"grid\":" << dims(a.grid) << ",\"block\":" << dims(a.block)
    << ",\"dynamic_shared_bytes\":" << a.dynamic_shared_bytes << ",";
  totals_json(s, "global_load", a.global_load);
  s << ",";
  totals_json(s, "global_store", a.global_store);
  s << ",";
  totals_json(s, "global_atomic", a.global_atomic);
  s << ",";
  totals_json(s, "shared_load", a.shared_load);
  s << ",";
  totals_json(s, "shared_store", a.shared_store);
  s << ",\"dram_read_bytes\":" << a.dram_read_bytes << ",\"dram_write_bytes\":" << a.dram_write_bytes
    << ",\"sites\":[";
  for (size_t i = 0; i < a.sites.size(); ++i) {
    const SiteTotals& site = a.sites[i];
    s << (i ? "," : "") << "{\"location\":" << quoted(site.location) << ",\"space\":\"" << space_name(site.space)
      << "\",\"kind\":\"" << kind_name(site.kind) << "\",\"requested_bytes\":" << site.totals.requested_bytes
      << ",\"efficiency\":" << site.totals.efficiency() << ",\"bank_conflicts\":" << site.totals.bank_conflicts()
      << ",\"vector_share\":" << site.totals.vector_share() << "}";
  }
  s << "],\"races\":[";
  for (size_t i = 0; i < a.races.size(); ++i) {
    const Race& r = a.races[i];
    s << (i ? "," : "") << "{\"hazard\":\"" << r.hazard << "\",\"space\":\"" << space_name(r.space)
      << "\",\"block\":[" << r.block.x << "," << r.block.y << "," << r.block.z << "],\"first_thread\":["
      << r.first_thread.x << "," << r.first_thread.y << "," << r.first_thread.z << "],\"second_thread\":["
      << r.second_thread.x << "," << r.second_thread.y << "," << r.second_thread.z
      << "],\"first\":" << quoted(r.first_location) << ",\"second\":" << quoted(r.second_location)
      << ",\"count\":" << r.count << "}";
  }
  s << "]}";
  return s.str();
}

}  // namespace hg::emu::audit
