// kernel_resources: the sm_90 resource usage of every kernel (registers, static shared memory, stack
// frame, spill stores and loads) as one JSON line per function, optionally with the theoretical occupancy
// at a block size; and the nvcc build's step that gathers the per-object ptxas reports into
// kernel_resources.txt (audit/resources.cmake). See docs/kernel_audit.md, "Resource usage and occupancy".
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "audit/occupancy.h"
#include "audit/resource_usage.h"
#include "kernels/error.h"

namespace {

constexpr const char* kUsage =
    "usage: kernel_resources [--file PATH] [--block THREADS [--dynamic-shared BYTES]] [--kernel TEXT] [--check-spills]\n"
    "       kernel_resources --gather OUT OBJECT...\n"
    "\n"
    "Prints one JSON line per function of the sm_90 build: registers per thread, barriers, static shared\n"
    "memory, stack frame and spill stores/loads (from ptxas -v), with the theoretical occupancy on an sm_90\n"
    "SM when --block is given.\n"
    "  --file PATH             a ptxas -v log or cuobjdump --dump-resource-usage output (default: the\n"
    "                          build's kernel_resources.txt" 
#ifdef HG_KERNEL_RESOURCES_FILE
    ", " HG_KERNEL_RESOURCES_FILE
#endif
    ")\n"
    "  --block THREADS         add \"occupancy\" at this block size (1..1024)\n"
    "  --dynamic-shared BYTES  dynamic shared memory per block for the occupancy (default 0)\n"
    "  --kernel TEXT           only functions whose demangled name contains TEXT\n"
    "  --check-spills          exit 1, naming them on stderr, when any function spills registers\n"
    "  --gather OUT OBJECT...  the nvcc build's step: concatenate OBJECT.ptxas of every OBJECT (ptxas -v\n"
    "                          output kept by audit/capture_ptxas.sh) into OUT; fails when a .cu object\n"
    "                          has no report\n";

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out.push_back(c);
    }
  }
  return out + "\"";
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int gather(const std::string& out_path, const std::vector<std::string>& objects) {
  std::ostringstream all;
  int reports = 0;
  for (const std::string& object : objects) {
    std::ifstream in(object + ".ptxas", std::ios::binary);
    if (!in) {
      HG_CHECK(!ends_with(object, ".cu.o"), "[kernel_resources --gather] no ptxas report ", object,
               ".ptxas: expected audit/capture_ptxas.sh to write it when compiling the object (rebuild hg_kernels_cuda)");
      continue;
    }
    all << "# object: " << object << "\n" << in.rdbuf() << "\n";
    ++reports;
  }
  const std::string text = all.str();
  const auto records = hg::audit::parse_ptxas_log(text);
  HG_CHECK(!records.empty(), "[kernel_resources --gather] ", reports, " reports hold no function: expected ptxas -v output");
  std::ofstream out(out_path, std::ios::binary | std::ios::trunc);
  out << text;
  HG_CHECK(out.good(), "[kernel_resources --gather] cannot write ", out_path);
  return 0;
}

std::string record_json(const hg::audit::KernelResources& r, int block, int64_t dynamic_shared) {
  std::ostringstream o;
  o << "{\"kernel\":" << json_string(hg::audit::kernel_base_name(r.demangled))
    << ",\"name\":" << json_string(hg::audit::normalize_kernel_name(r.demangled)) << ",\"mangled\":" << json_string(r.mangled)
    << ",\"arch\":" << json_string(r.arch) << ",\"object\":" << json_string(r.object) << ",\"entry\":" << (r.entry ? "true" : "false")
    << ",\"registers\":" << r.registers << ",\"barriers\":" << r.barriers << ",\"static_shared_bytes\":" << r.shared_bytes
    << ",\"constant_bytes\":" << r.constant_bytes << ",\"stack_frame_bytes\":" << r.stack_frame_bytes;
  if (r.spills_known) {
    o << ",\"spill_store_bytes\":" << r.spill_store_bytes << ",\"spill_load_bytes\":" << r.spill_load_bytes;
  } else {
    o << ",\"spill_store_bytes\":null,\"spill_load_bytes\":null";
  }
  if (block > 0 && r.entry) {
    const auto occ = hg::audit::theoretical_occupancy(
        {.block_threads = block, .registers_per_thread = r.registers, .static_shared_bytes = r.shared_bytes,
         .dynamic_shared_bytes = dynamic_shared, .barriers = r.barriers});
    o << ",\"occupancy\":{\"block_threads\":" << block << ",\"dynamic_shared_bytes\":" << dynamic_shared
      << ",\"blocks_per_sm\":" << occ.blocks_per_sm << ",\"warps_per_sm\":" << occ.warps_per_sm << ",\"fraction\":" << occ.fraction
      << ",\"limited_by\":[";
    for (size_t i = 0; i < occ.limited_by.size(); ++i) o << (i ? "," : "") << json_string(hg::audit::limiter_name(occ.limited_by[i]));
    o << "]";
    if (!occ.why.empty()) o << ",\"why\":" << json_string(occ.why);
    o << "}";
  }
  o << "}";
  return o.str();
}

long parse_number(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  HG_CHECK(!text.empty() && *end == '\0' && value >= 0, "[kernel_resources] ", flag, " ", text, ": expected a non-negative integer");
  return value;
}

int run(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string file;
#ifdef HG_KERNEL_RESOURCES_FILE
  file = HG_KERNEL_RESOURCES_FILE;
#endif
  int block = 0;
  int64_t dynamic_shared = 0;
  std::string filter;
  bool check_spills = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      HG_CHECK(i + 1 < args.size(), "[kernel_resources] ", a, " needs a value (see --help)");
      return args[++i];
    };
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (a == "--gather") {
      HG_CHECK(i + 1 < args.size(), "[kernel_resources] --gather needs OUT and the objects (see --help)");
      return gather(args[i + 1], std::vector<std::string>(args.begin() + long(i) + 2, args.end()));
    } else if (a == "--file") {
      file = value();
    } else if (a == "--block") {
      block = int(parse_number(a, value()));
      HG_CHECK(block >= 1 && block <= 1024, "[kernel_resources] --block ", block, ": expected 1..1024 threads");
    } else if (a == "--dynamic-shared") {
      dynamic_shared = parse_number(a, value());
    } else if (a == "--kernel") {
      filter = value();
    } else if (a == "--check-spills") {
      check_spills = true;
    } else {
      HG_FAIL("[kernel_resources] unknown argument ", a, " (see --help)");
    }
  }
  HG_CHECK(!file.empty(), "[kernel_resources] no --file given and this build has no kernel_resources.txt (it is made by the nvcc build)");
  const auto records = hg::audit::load_kernel_resources(file);
  int spilling = 0;
  for (const auto& r : records) {
    if (!filter.empty() && r.demangled.find(filter) == std::string::npos) continue;
    std::cout << record_json(r, block, dynamic_shared) << "\n";
    if (r.spills()) {
      ++spilling;
      if (check_spills) {
        std::cerr << "kernel_resources: " << r.demangled << " (" << r.arch << ", " << r.object << ") spills: "
                  << r.spill_store_bytes << " bytes of spill stores, " << r.spill_load_bytes << " bytes of spill loads\n";
      }
    }
  }
  return check_spills && spilling > 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
}
