#pragma once
// Resource usage of the sm_90 kernels: registers per thread, static shared memory, stack frame and spill
// traffic of every __global__ function of the nvcc build, parsed from the compiler's own reports.
//
// Two reports are understood:
//  - ptxas -v (what the nvcc build keeps: audit/resources.cmake compiles kernels/cuda/*.cu with
//    -Xptxas=-v and gathers the output into ${CMAKE_BINARY_DIR}/kernel_resources.txt). Per function:
//      ptxas info    : Compiling entry function '_Z...' for 'sm_90'
//      ptxas info    : Function properties for _Z...
//          0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//      ptxas info    : Used 10 registers, used 1 barriers, 1024 bytes smem[, N bytes cmem[0]][, N bytes cumulative stack size]
//    It is the one source that states spill stores and loads, so the no-spill gate reads it.
//  - cuobjdump --dump-resource-usage (for an object or fatbinary from elsewhere):
//      Function _Z...:
//        REG:10 STACK:0 SHARED:2048 LOCAL:0 CONSTANT[0]:548 TEXTURE:0 SURFACE:0 SAMPLER:0
//    It has no spill figures (STACK counts local arrays and spills together: spills_known is false), and
//    for sm_80 and later its SHARED includes the 1 KiB the driver reserves per block whenever the kernel
//    has static shared memory (cuobjdump 13.5 on sm_90: 1024 bytes of __shared__ print as SHARED:2048,
//    none as SHARED:0); shared_bytes here is the kernel's own static shared memory, that KiB taken off.
//
// Kernel names: `demangled` is abi::__cxa_demangle of the mangled name, as the emulator's
// hg::emu::detail::kernel_name demangles the host symbol of the same template instance; nvcc's anonymous
// namespaces (_GLOBAL__N__<hash>_<file>_cu_...) and GCC's (_GLOBAL__N_1) both demangle to
// "(anonymous namespace)". The parameter lists may still differ: nvcc and GCC mangle a dependent type
// such as std::conditional<is_same_v<T, double>, double, float>::type differently ("std::is_same_v" vs
// "is_same_v<__nv_bfloat16, double>"). normalize_kernel_name therefore keys a kernel by its qualified
// name and template arguments only (no return type, no parameters, no GCC " [clone .cold]" suffix), which
// name the instance in both builds; find_kernel matches an emulated launch's name to its sm_90 record.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hg::audit {

struct KernelResources {
  std::string mangled;    // as in the cubin
  std::string demangled;  // abi::__cxa_demangle (the mangled name when it does not demangle)
  std::string arch;       // "sm_90"
  std::string object;     // the object file it came from ("" when not known)
  bool entry = true;      // a __global__ function (false: a non-inlined device function ptxas reported)
  int registers = 0;      // per thread
  int barriers = 0;       // named barriers used (ptxas; 0 from cuobjdump)
  int64_t shared_bytes = 0;        // static __shared__ bytes per block (dynamic shared memory is per launch)
  int64_t constant_bytes = 0;      // cmem[0] / CONSTANT[0]: kernel parameters and constants (0 when not printed)
  int64_t stack_frame_bytes = 0;   // local memory per thread: local arrays, spill slots, call frames
  int64_t spill_store_bytes = 0;   // ptxas: bytes stored to local memory by register spills
  int64_t spill_load_bytes = 0;    // ptxas: bytes loaded back
  bool spills_known = false;       // true from ptxas -v; false from cuobjdump (no spill figures)

  bool spills() const { return spill_store_bytes > 0 || spill_load_bytes > 0; }
};

// The records of a ptxas -v log (several compiles may follow one another; lines that are not ptxas
// info lines are skipped). A line "# object: PATH" (as kernel_resources --gather writes) sets `object`
// for the records after it. Throws hg::Error naming the line when a function's report is malformed.
std::vector<KernelResources> parse_ptxas_log(std::string_view text);

// The records of cuobjdump --dump-resource-usage output (spills_known false).
std::vector<KernelResources> parse_cuobjdump_resource_usage(std::string_view text);

// Reads a file of either kind (a ptxas log when it has "ptxas info" lines, else cuobjdump output).
// Throws hg::Error when the file cannot be read or holds no function.
std::vector<KernelResources> load_kernel_resources(const std::string& path);

// abi::__cxa_demangle; the input unchanged when it is not a mangled name.
std::string demangle(std::string_view mangled);

// The comparable spelling of a demangled kernel name: the qualified name with its template arguments,
// e.g. "hg::kernels::cuda::(anonymous namespace)::softmax_forward_kernel<float, false>": a leading "void "
// (a template function's return type), the parameter list and GCC's " [clone ...]" suffixes removed, runs
// of spaces collapsed, ends trimmed.
std::string normalize_kernel_name(std::string_view demangled);

// The kernel's qualified name without template arguments and parameters, e.g.
// "hg::kernels::cuda::(anonymous namespace)::softmax_forward_kernel" (groups the instances of a template).
std::string kernel_base_name(std::string_view demangled);

// The record of the kernel named `name` (demangled, from either build) for `arch` (any arch when empty),
// or nullptr.
const KernelResources* find_kernel(const std::vector<KernelResources>& records, std::string_view name,
                                   std::string_view arch = {});

}  // namespace hg::audit
