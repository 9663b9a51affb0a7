// Parsers of ptxas -v and cuobjdump --dump-resource-usage reports, and kernel-name normalisation
// (resource_usage.h). Line-oriented: each report line is recognised by its fixed prefix, and a figure is
// read as the integer before (ptxas: "N bytes smem") or after (cuobjdump: "REG:N") its label.
#include "audit/resource_usage.h"

#include <cxxabi.h>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include "kernels/error.h"

namespace hg::audit {
namespace {

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    start = end + 1;
  }
  return lines;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// The integer just before " <label>" in a comma-separated ptxas list ("0 bytes spill stores"), if any.
std::optional<int64_t> figure_before(std::string_view text, std::string_view label) {
  size_t at = text.find(label);
  while (at != std::string_view::npos) {
    size_t end = at;
    while (end > 0 && text[end - 1] == ' ') --end;
    size_t begin = end;
    while (begin > 0 && std::isdigit(static_cast<unsigned char>(text[begin - 1]))) --begin;
    if (begin < end) return std::strtoll(std::string(text.substr(begin, end - begin)).c_str(), nullptr, 10);
    at = text.find(label, at + 1);
  }
  return std::nullopt;
}

// The integer just after "<label>:" in a cuobjdump line ("REG:10"), if any.
std::optional<int64_t> figure_after(std::string_view text, std::string_view label) {
  const std::string key = std::string(label) + ":";
  size_t at = text.find(key);
  if (at == std::string_view::npos) return std::nullopt;
  size_t begin = at + key.size(), end = begin;
  while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
  if (end == begin) return std::nullopt;
  return std::strtoll(std::string(text.substr(begin, end - begin)).c_str(), nullptr, 10);
}

// The text between the first pair of single quotes after `from`.
std::string_view quoted(std::string_view line, size_t from = 0) {
  size_t open = line.find('\'', from);
  if (open == std::string_view::npos) return {};
  size_t close = line.find('\'', open + 1);
  if (close == std::string_view::npos) return {};
  return line.substr(open + 1, close - open - 1);
}

KernelResources new_record(std::string_view mangled, std::string_view arch, const std::string& object, bool entry) {
  KernelResources r;
  r.mangled = std::string(mangled);
  r.demangled = demangle(mangled);
  r.arch = std::string(arch);
  r.object = object;
  r.entry = entry;
  return r;
}

}  // namespace

std::string demangle(std::string_view mangled) {
  const std::string name(mangled);
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status), std::free);
  return status == 0 && out ? std::string(out.get()) : name;
}

std::vector<KernelResources> parse_ptxas_log(std::string_view text) {
  constexpr std::string_view kInfo = "ptxas info";
  std::vector<KernelResources> records;
  std::string object;
  std::string arch;
  // The record the next "Used ..." line belongs to (the last entry function), and the one the next
  // "N bytes stack frame" line belongs to (the function of the last "Function properties for").
  constexpr size_t kNone = SIZE_MAX;
  size_t entry_index = kNone, properties_index = kNone;
  const auto lines = split_lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string_view line = lines[i];
    if (starts_with(line, "# object:")) {
      object = std::string(trim(line.substr(9)));
      entry_index = properties_index = kNone;
      continue;
    }
    if (!starts_with(line, kInfo)) {
      std::string_view t = trim(line);
      if (properties_index != kNone && t.find("bytes stack frame") != std::string_view::npos) {
        KernelResources& r = records[properties_index];
        auto frame = figure_before(t, "bytes stack frame");
        auto stores = figure_before(t, "bytes spill stores");
        auto loads = figure_before(t, "bytes spill loads");
        HG_CHECK(frame && stores && loads, "[kernel_resources] ptxas log line ", i + 1, " (\"", t,
                 "\"): expected \"N bytes stack frame, N bytes spill stores, N bytes spill loads\"");
        r.stack_frame_bytes = *frame;
        r.spill_store_bytes = *stores;
        r.spill_load_bytes = *loads;
        r.spills_known = true;
        properties_index = kNone;
      }
      continue;
    }
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view body = trim(line.substr(colon + 1));
    if (starts_with(body, "Compiling entry function")) {
      std::string_view name = quoted(body);
      HG_CHECK(!name.empty(), "[kernel_resources] ptxas log line ", i + 1, ": no quoted function name in \"", body, "\"");
      size_t for_at = body.find(" for ", body.find('\'', body.find('\'') + 1));
      std::string_view a = for_at == std::string_view::npos ? std::string_view{} : quoted(body, for_at);
      arch = std::string(a);
      records.push_back(new_record(name, arch, object, true));
      entry_index = records.size() - 1;
    } else if (starts_with(body, "Function properties for")) {
      std::string_view name = trim(body.substr(std::string_view("Function properties for").size()));
      if (entry_index != kNone && records[entry_index].mangled == name) {
        properties_index = entry_index;
      } else {
        // A non-inlined device function (e.g. libdevice's __internal_accurate_pow): one record per
        // object and arch, whose spills count as much as a kernel's.
        size_t found = kNone;
        for (size_t k = 0; k < records.size(); ++k) {
          if (!records[k].entry && records[k].mangled == name && records[k].object == object && records[k].arch == arch) found = k;
        }
        if (found == kNone) {
          records.push_back(new_record(name, arch, object, false));
          found = records.size() - 1;
        }
        properties_index = found;
      }
    } else if (starts_with(body, "Used ") && body.find("registers") != std::string_view::npos) {
      HG_CHECK(entry_index != kNone, "[kernel_resources] ptxas log line ", i + 1,
               ": a \"Used N registers\" line before any \"Compiling entry function\" line");
      KernelResources& r = records[entry_index];
      r.registers = int(figure_before(body, "registers").value_or(0));
      r.barriers = int(figure_before(body, "barriers").value_or(0));
      r.shared_bytes = figure_before(body, "bytes smem").value_or(0);
      r.constant_bytes = figure_before(body, "bytes cmem[0]").value_or(0);
    }
  }
  return records;
}

std::vector<KernelResources> parse_cuobjdump_resource_usage(std::string_view text) {
  std::vector<KernelResources> records;
  std::string arch;
  std::string object;
  const auto lines = split_lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string_view t = trim(lines[i]);
    if (starts_with(t, "# object:")) {
      object = std::string(trim(t.substr(9)));
    } else if (starts_with(t, "arch =")) {
      arch = std::string(trim(t.substr(6)));
    } else if (starts_with(t, "Function ") && !t.empty() && t.back() == ':') {
      std::string_view name = t.substr(9, t.size() - 10);
      HG_CHECK(i + 1 < lines.size(), "[kernel_resources] cuobjdump output ends after \"", t, "\"");
      std::string_view figures = trim(lines[i + 1]);
      auto reg = figure_after(figures, "REG");
      auto stack = figure_after(figures, "STACK");
      auto shared = figure_after(figures, "SHARED");
      HG_CHECK(reg && stack && shared, "[kernel_resources] cuobjdump output line ", i + 2, " (\"", figures,
               "\"): expected \"REG:N STACK:N SHARED:N LOCAL:N ...\" after \"", t, "\"");
      KernelResources r = new_record(name, arch, object, true);
      r.registers = int(*reg);
      r.stack_frame_bytes = *stack + figure_after(figures, "LOCAL").value_or(0);
      // sm_80+: SHARED counts the 1 KiB reserved per block when the kernel has static shared memory.
      const int sm = starts_with(arch, "sm_") ? std::atoi(arch.c_str() + 3) : 0;
      r.shared_bytes = (sm >= 80 && *shared >= 1024) ? *shared - 1024 : *shared;
      r.constant_bytes = figure_after(figures, "CONSTANT[0]").value_or(0);
      r.spills_known = false;
      records.push_back(std::move(r));
      ++i;
    }
  }
  return records;
}

std::vector<KernelResources> load_kernel_resources(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  HG_CHECK(in.good(), "[kernel_resources] cannot read ", path,
           ": expected a ptxas -v log (the nvcc build's kernel_resources.txt) or cuobjdump --dump-resource-usage output");
  std::ostringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  auto records = s.find("ptxas info") != std::string::npos ? parse_ptxas_log(s) : parse_cuobjdump_resource_usage(s);
  HG_CHECK(!records.empty(), "[kernel_resources] ", path,
           " holds no function: expected \"ptxas info    : Compiling entry function\" lines or cuobjdump's \"Function NAME:\" lines");
  return records;
}

std::string normalize_kernel_name(std::string_view demangled) {
  std::string s;
  s.reserve(demangled.size());
  // GCC's clone suffixes: " [clone .cold]", " [clone .constprop.0]", ...
  std::string_view rest = demangled;
  while (true) {
    size_t at = rest.find(" [clone ");
    if (at == std::string_view::npos) {
      s.append(rest);
      break;
    }
    s.append(rest.substr(0, at));
    size_t close = rest.find(']', at);
    if (close == std::string_view::npos) break;
    rest = rest.substr(close + 1);
  }
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      if (!out.empty() && out.back() != ' ') out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  if (starts_with(out, "void ")) out.erase(0, 5);
  // The parameter list: the last top-level parenthesised group.
  if (!out.empty() && out.back() == ')') {
    int depth = 0;
    for (size_t i = out.size(); i-- > 0;) {
      if (out[i] == ')') ++depth;
      if (out[i] == '(' && --depth == 0) {
        out.erase(i);
        break;
      }
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
  }
  return out;
}

std::string kernel_base_name(std::string_view demangled) {
  const std::string name = normalize_kernel_name(demangled);
  // Cut at the first '<' or '(' that is not part of "(anonymous namespace)".
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    if (name.compare(i, 21, "(anonymous namespace)") == 0) {
      out.append("(anonymous namespace)");
      i += 20;
      continue;
    }
    if (name[i] == '<' || name[i] == '(') break;
    out.push_back(name[i]);
  }
  return out;
}

const KernelResources* find_kernel(const std::vector<KernelResources>& records, std::string_view name, std::string_view arch) {
  const std::string key = normalize_kernel_name(name);
  for (const KernelResources& r : records) {
    if (!arch.empty() && r.arch != arch) continue;
    if (normalize_kernel_name(r.demangled) == key) return &r;
  }
  return nullptr;
}

}  // namespace hg::audit
