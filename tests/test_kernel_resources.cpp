// Resource usage and theoretical occupancy of the sm_90 build (audit/resource_usage.h, audit/occupancy.h):
// the ptxas -v and cuobjdump parsers on real reports of this toolkit (CUDA 13.0 ptxas, cuobjdump 13.5),
// the name key shared by the emulated and nvcc builds, the occupancy rules against figures worked out by
// hand, and, in the nvcc build, the build's kernel_resources.txt: every __global__ kernel of kernels/cuda
// is listed, and no kernel spills registers (the gate of docs/kernel_audit.md).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "audit/occupancy.h"
#include "audit/resource_usage.h"
#include "kernels/error.h"

using namespace hg::audit;

namespace {

// Two objects' ptxas -v reports as kernel_resources --gather writes them: the first from this build's
// adamw.cu (an entry and a non-inlined libdevice callee) and cross_entropy.cu (static shared memory, a
// barrier), the second from a planted kernel file whose `press` spills (nvcc -Xptxas=-v, sm_90).
constexpr const char* kPtxasLog = R"(# object: /b/kernels/CMakeFiles/hg_kernels_cuda.dir/cuda/adamw.cu.o
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_ZN2hg7kernels4cuda40_GLOBAL__N__cd139f0a_8_adamw_cu_dd47014419adamw_device_kernelI13__nv_bfloat16Lb0EEEvPT_PNSt11conditionalIL_ZSt9is_same_vEdfE4typeEPKS5_SA_SA_lNS0_16AdamWStepScalarsENS2_10AdamWHyperEb' for 'sm_90'
ptxas info    : Function properties for _ZN2hg7kernels4cuda40_GLOBAL__N__cd139f0a_8_adamw_cu_dd47014419adamw_device_kernelI13__nv_bfloat16Lb0EEEvPT_PNSt11conditionalIL_ZSt9is_same_vEdfE4typeEPKS5_SA_SA_lNS0_16AdamWStepScalarsENS2_10AdamWHyperEb
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 45 registers, used 0 barriers
ptxas info    : Compile time = 349.206 ms
ptxas info    : Function properties for __internal_accurate_pow
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function '_ZN2hg7kernels4cuda49_GLOBAL__N__1b0028bb_16_cross_entropy_cu_03f7cd5d28cross_entropy_forward_kernelI13__nv_bfloat16lLb0EEEvPKT_PKT0_PNSt11conditionalIL_ZSt9is_same_vEdfE4typeESE_lll' for 'sm_90'
ptxas info    : Function properties for _ZN2hg7kernels4cuda49_GLOBAL__N__1b0028bb_16_cross_entropy_cu_03f7cd5d28cross_entropy_forward_kernelI13__nv_bfloat16lLb0EEEvPKT_PKT0_PNSt11conditionalIL_ZSt9is_same_vEdfE4typeESE_lll
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 23 registers, used 1 barriers, 256 bytes smem
ptxas info    : Compile time = 74.964 ms

# object: /tmp/planted.cu.o
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z5pressPfi' for 'sm_90'
ptxas info    : Function properties for _Z5pressPfi
    6936 bytes stack frame, 6988 bytes spill stores, 9044 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 6936 bytes cumulative stack size
ptxas info    : Compile time = 4226.644 ms
ptxas info    : Compiling entry function '_Z5spillPfi' for 'sm_90'
ptxas info    : Function properties for _Z5spillPfi
    1024 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 0 barriers, 1024 bytes cumulative stack size
ptxas info    : Compile time = 257.759 ms
ptxas info    : Compiling entry function '_Z3s4kPf' for 'sm_90'
ptxas info    : Function properties for _Z3s4kPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers, 4096 bytes smem
ptxas info    : Compile time = 17.676 ms
)";

// cuobjdump --dump-resource-usage of the planted object above (same kernels).
constexpr const char* kCuobjdump = R"(
Fatbin elf code:
================
arch = sm_90
code version = [1,8]
host = linux
compile_size = 64bit

Resource usage:
 Common:
  GLOBAL:0
 Function _Z5pressPfi:
  REG:32 STACK:6936 SHARED:0 LOCAL:0 CONSTANT[0]:540 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function _Z5spillPfi:
  REG:40 STACK:1024 SHARED:0 LOCAL:0 CONSTANT[0]:540 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function _Z3s4kPf:
  REG:10 STACK:0 SHARED:5120 LOCAL:0 CONSTANT[0]:536 TEXTURE:0 SURFACE:0 SAMPLER:0
)";

const KernelResources& by_mangled(const std::vector<KernelResources>& records, const std::string& mangled) {
  for (const auto& r : records) {
    if (r.mangled == mangled) return r;
  }
  FAIL("no record for ", mangled);
  throw 0;
}

}  // namespace

TEST_CASE("kernel_resources: ptxas -v log") {
  const auto records = parse_ptxas_log(kPtxasLog);
  REQUIRE(records.size() == 6);  // 5 entries + the callee

  const auto& adamw = records[0];
  CHECK(adamw.entry);
  CHECK(adamw.arch == "sm_90");
  CHECK(adamw.object == "/b/kernels/CMakeFiles/hg_kernels_cuda.dir/cuda/adamw.cu.o");
  CHECK(adamw.registers == 45);
  CHECK(adamw.barriers == 0);
  CHECK(adamw.shared_bytes == 0);
  CHECK(adamw.spills_known);
  CHECK(!adamw.spills());
  CHECK(kernel_base_name(adamw.demangled) == "hg::kernels::cuda::(anonymous namespace)::adamw_device_kernel");
  CHECK(normalize_kernel_name(adamw.demangled) == "hg::kernels::cuda::(anonymous namespace)::adamw_device_kernel<__nv_bfloat16, false>");

  const auto& pow = by_mangled(records, "__internal_accurate_pow");
  CHECK(!pow.entry);
  CHECK(pow.spills_known);
  CHECK(pow.stack_frame_bytes == 0);

  const auto& ce = records[2];
  CHECK(ce.registers == 23);
  CHECK(ce.barriers == 1);
  CHECK(ce.shared_bytes == 256);
  CHECK(ce.demangled.find("cross_entropy_forward_kernel<__nv_bfloat16, long, false>") != std::string::npos);

  const auto& press = by_mangled(records, "_Z5pressPfi");
  CHECK(press.object == "/tmp/planted.cu.o");
  CHECK(press.registers == 32);
  CHECK(press.stack_frame_bytes == 6936);
  CHECK(press.spill_store_bytes == 6988);
  CHECK(press.spill_load_bytes == 9044);
  CHECK(press.spills());
  CHECK(press.demangled == "press(float*, int)");

  // A local array is stack frame, not a spill.
  const auto& local_array = by_mangled(records, "_Z5spillPfi");
  CHECK(local_array.stack_frame_bytes == 1024);
  CHECK(!local_array.spills());

  const auto& s4k = by_mangled(records, "_Z3s4kPf");
  CHECK(s4k.shared_bytes == 4096);
  CHECK(s4k.barriers == 1);
  CHECK(s4k.registers == 10);
}

TEST_CASE("kernel_resources: malformed ptxas reports are refused") {
  CHECK_THROWS_WITH_AS(parse_ptxas_log("ptxas info    : Used 10 registers, used 0 barriers\n"),
                       doctest::Contains("before any \"Compiling entry function\""), hg::Error);
  CHECK_THROWS_WITH_AS(parse_ptxas_log("ptxas info    : Compiling entry function '_Z1kv' for 'sm_90'\n"
                                       "ptxas info    : Function properties for _Z1kv\n"
                                       "    12 bytes stack frame, lots of spill stores\n"),
                       doctest::Contains("expected \"N bytes stack frame, N bytes spill stores, N bytes spill loads\""), hg::Error);
  CHECK(parse_ptxas_log("nvcc warning : something unrelated\n").empty());
}

TEST_CASE("kernel_resources: cuobjdump --dump-resource-usage") {
  const auto records = parse_cuobjdump_resource_usage(kCuobjdump);
  REQUIRE(records.size() == 3);
  const auto& press = by_mangled(records, "_Z5pressPfi");
  CHECK(press.arch == "sm_90");
  CHECK(press.registers == 32);
  CHECK(press.stack_frame_bytes == 6936);
  CHECK(!press.spills_known);  // cuobjdump cannot tell the spill from a local array: ptxas -v can
  CHECK(press.constant_bytes == 540);
  // SHARED counts the KiB the driver reserves per block: the kernel's own 4096 bytes print as 5120.
  CHECK(by_mangled(records, "_Z3s4kPf").shared_bytes == 4096);
  CHECK(by_mangled(records, "_Z5spillPfi").shared_bytes == 0);
  CHECK_THROWS_WITH_AS(parse_cuobjdump_resource_usage(" Function _Z1kv:\n  TEXTURE:0\n"), doctest::Contains("REG:N STACK:N SHARED:N"),
                       hg::Error);
}

TEST_CASE("kernel_resources: the emulator's kernel names find their sm_90 records") {
  const auto records = parse_ptxas_log(kPtxasLog);
  // hg::emu::detail::kernel_name of the emulated build's host symbol (GCC; nm -C on cross_entropy.cu.o):
  // GCC spells the dependent parameter type is_same_v<__nv_bfloat16, double>, nvcc std::is_same_v.
  const std::string emulated =
      "void hg::kernels::cuda::(anonymous namespace)::cross_entropy_forward_kernel<__nv_bfloat16, long, false>(__nv_bfloat16 "
      "const*, long const*, std::conditional<is_same_v<__nv_bfloat16, double>, double, float>::type*, "
      "std::conditional<is_same_v<__nv_bfloat16, double>, double, float>::type*, long, long, long)";
  const KernelResources* found = find_kernel(records, emulated, "sm_90");
  REQUIRE(found != nullptr);
  CHECK(found->registers == 23);
  CHECK(find_kernel(records, emulated + " [clone .cold]") == found);
  CHECK(find_kernel(records, emulated, "sm_100") == nullptr);
  // Another instance of the same template is another kernel.
  std::string other = emulated;
  other.replace(other.find("long, false>"), 12, "int, false>");
  CHECK(find_kernel(records, other) == nullptr);
  CHECK(normalize_kernel_name("void  a::b<(hg::kernels::UnaryOp)0, float> (float*,  int)") == "a::b<(hg::kernels::UnaryOp)0, float>");
  CHECK(kernel_base_name("void a::(anonymous namespace)::k<int>((anonymous namespace)::P)") == "a::(anonymous namespace)::k");
}

TEST_CASE("kernel_resources: sm_90 occupancy against figures worked out by hand") {
  SUBCASE("256 threads x 32 registers: 8 blocks, 64 warps, 100%") {
    // 32 regs x 32 lanes = 1024 per warp; 16384 / 1024 = 16 warps per sub-partition, 64 per SM = 8 blocks;
    // 64 warps / 8 per block = 8 blocks: warps and registers both stop the ninth.
    const auto o = theoretical_occupancy({.block_threads = 256, .registers_per_thread = 32});
    CHECK(o.blocks_per_sm == 8);
    CHECK(o.warps_per_sm == 64);
    CHECK(o.fraction == doctest::Approx(1.0));
    CHECK(o.limited_by == std::vector<Limiter>{Limiter::warps, Limiter::registers});
  }
  SUBCASE("1024 threads x 64 registers: 1 block, 50%, register-limited") {
    // 2048 registers per warp: 8 warps per sub-partition, 32 per SM, one block of 32 warps.
    const auto o = theoretical_occupancy({.block_threads = 1024, .registers_per_thread = 64});
    CHECK(o.blocks_per_sm == 1);
    CHECK(o.warps_per_sm == 32);
    CHECK(o.fraction == doctest::Approx(0.5));
    CHECK(o.limited_by == std::vector<Limiter>{Limiter::registers});
    CHECK(o.registers_per_block == 65536);
  }
  SUBCASE("100 KiB of dynamic shared memory: 2 blocks, shared-limited") {
    // 102400 + 1024 reserved = 103424 (a multiple of 128); 233472 / 103424 = 2.
    const auto o = theoretical_occupancy({.block_threads = 128, .registers_per_thread = 32, .dynamic_shared_bytes = 100 * 1024});
    CHECK(o.blocks_per_sm == 2);
    CHECK(o.shared_per_block == 103424);
    CHECK(o.warps_per_sm == 8);
    CHECK(o.fraction == doctest::Approx(0.125));
    CHECK(o.limited_by == std::vector<Limiter>{Limiter::shared_memory});
  }
  SUBCASE("blocks of 32 threads: 32 blocks, 50%, block-limited") {
    const auto o = theoretical_occupancy({.block_threads = 32, .registers_per_thread = 16});
    CHECK(o.blocks_per_sm == 32);
    CHECK(o.warps_per_sm == 32);
    CHECK(o.fraction == doctest::Approx(0.5));
    CHECK(o.limited_by == std::vector<Limiter>{Limiter::blocks});
  }
  SUBCASE("register rounding: 33 registers allocate as 40 per thread") {
    // 33 x 32 = 1056, rounded up to 1280 per warp; 16384 / 1280 = 12 warps per sub-partition, 48 per
    // SM; blocks of 256 threads (8 warps): 6 blocks, 48 warps, 75%.
    const auto o = theoretical_occupancy({.block_threads = 256, .registers_per_thread = 33});
    CHECK(o.blocks_per_sm == 6);
    CHECK(o.fraction == doctest::Approx(0.75));
    CHECK(o.limited_by == std::vector<Limiter>{Limiter::registers});
  }
  SUBCASE("a partial warp occupies a whole warp slot") {
    // 100 threads = 4 warps; 64 / 4 = 16 blocks by warp slots.
    const auto o = theoretical_occupancy({.block_threads = 100, .registers_per_thread = 16});
    CHECK(o.warps_per_block == 4);
    CHECK(o.blocks_per_sm == 16);
    CHECK(o.limited_by == std::vector<Limiter>{Limiter::warps});
  }
  SUBCASE("static shared memory counts with the reserved KiB: 48 KiB static -> 4 blocks") {
    // 49152 + 1024 = 50176; 233472 / 50176 = 4 (4.65).
    const auto o = theoretical_occupancy({.block_threads = 128, .registers_per_thread = 32, .static_shared_bytes = 48 * 1024});
    CHECK(o.blocks_per_sm == 4);
    CHECK(o.limited_by == std::vector<Limiter>{Limiter::shared_memory});
  }
  SUBCASE("blocks that cannot launch") {
    const auto regs = theoretical_occupancy({.block_threads = 1024, .registers_per_thread = 72});
    CHECK(regs.blocks_per_sm == 0);
    CHECK(regs.why.find("registers per block") != std::string::npos);
    const auto smem = theoretical_occupancy({.block_threads = 64, .registers_per_thread = 32, .dynamic_shared_bytes = 228 * 1024});
    CHECK(smem.blocks_per_sm == 0);
    CHECK(smem.why.find("shared memory") != std::string::npos);
  }
  CHECK_THROWS_WITH_AS(theoretical_occupancy({.block_threads = 2048, .registers_per_thread = 32}),
                       doctest::Contains("expected 1..1024"), hg::Error);
  CHECK_THROWS_AS(theoretical_occupancy({.block_threads = 0}), hg::Error);
}

#ifdef HG_KERNEL_RESOURCES_FILE
std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

#endif

// The nvcc build's report of its own kernels (audit/resources.cmake). Elsewhere (the emulated build, a
// build without nvcc) there is no sm_90 code to report.
TEST_CASE("kernel_resources: the sm_90 build lists every kernel and none spills") {
#ifndef HG_KERNEL_RESOURCES_FILE
  MESSAGE("SKIPPED: no kernel_resources.txt in this build (made by the nvcc build only)");
#else
  const auto records = load_kernel_resources(HG_KERNEL_RESOURCES_FILE);

  // The __global__ functions of kernels/cuda, by name, from the sources.
  const std::regex global_fn(R"(__global__\s+(?:void\s+)?(?:__launch_bounds__\s*\([^)]*\)\s*)?(?:void\s+)?(\w+)\s*\()");
  std::set<std::string> source_kernels;
  int definitions = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(HG_SOURCE_DIR) / "kernels" / "cuda")) {
    const auto ext = entry.path().extension();
    if (ext != ".cu" && ext != ".h") continue;
    const std::string text = read_file(entry.path());
    for (std::sregex_iterator it(text.begin(), text.end(), global_fn), end; it != end; ++it) {
      source_kernels.insert((*it)[1].str());
      ++definitions;
    }
  }
  REQUIRE(definitions >= 30);  // the regex still finds the kernels

  std::map<std::string, int> instances;  // base name -> sm_90 instances
  for (const auto& r : records) {
    if (r.entry) ++instances[kernel_base_name(r.demangled)];
  }
  MESSAGE(definitions, " __global__ definitions in kernels/cuda (", source_kernels.size(), " names); ", instances.size(),
          " kernels, ", records.size(), " functions in ", HG_KERNEL_RESOURCES_FILE);
  CHECK(instances.size() >= source_kernels.size());
  for (const std::string& name : source_kernels) {
    bool listed = false;
    for (const auto& [base, count] : instances) {
      listed = listed || base == name || (base.size() > name.size() + 2 && base.compare(base.size() - name.size() - 2, std::string::npos, "::" + name) == 0);
    }
    CHECK_MESSAGE(listed, "__global__ ", name, " of kernels/cuda has no sm_90 record in ", HG_KERNEL_RESOURCES_FILE);
  }

  // The gate: no function of the sm_90 build spills registers to local memory. (The four fp64 row
  // kernel instances that spilled when the gate was added got a stated register budget:
  // kernels/cuda/row_launch_bounds.h.)
  for (const auto& r : records) {
    CHECK_MESSAGE(r.spills_known, r.demangled, ": no spill figures (expected a ptxas -v report)");
    CHECK_MESSAGE(!r.spills(), r.demangled, " (", r.arch, ", ", r.object, ") spills: ", r.spill_store_bytes,
                  " bytes of spill stores, ", r.spill_load_bytes, " bytes of spill loads");
    CHECK_MESSAGE((r.registers > 0 || !r.entry), r.demangled, ": 0 registers (its \"Used N registers\" line was not read)");
  }
#endif
}
