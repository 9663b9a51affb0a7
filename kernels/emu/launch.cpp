// Grid execution: launch checks, the shuffled block order, blocks over OpenMP threads (see launch.h).
#include "kernels/emu/launch.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <omp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "kernels/emu/audit_log.h"
#include "kernels/emu/block.h"
#include "kernels/emu/runtime_state.h"
#include "kernels/error.h"
#include "kernels/runtime_counters.h"

namespace hg::emu {
namespace {

constexpr uint64_t kDefaultSeed = 0x6861'6c66'6772'6164ull;  // "halfgrad"

uint64_t initial_seed() {
  if (const char* text = std::getenv("HG_EMU_SEED")) return std::strtoull(text, nullptr, 0);
  return kDefaultSeed;
}

std::atomic<uint64_t> g_seed{initial_seed()};
std::atomic<uint64_t> g_launch_counter{0};
std::atomic<int> g_num_threads{0};

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Serial mode (see config.h): one grid at a time in the whole process, because static __shared__
// variables are then shared by every OS thread.
std::mutex& serial_grid_mutex() {
  static std::mutex m;
  return m;
}

std::string demangle(const char* name) {
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> out(abi::__cxa_demangle(name, nullptr, nullptr, &status), &std::free);
  return status == 0 && out ? std::string(out.get()) : std::string(name);
}

// The name of the function symbol of `file` covering `address` (file-relative for shared objects and
// PIE, absolute for ET_EXEC), from its .symtab: kernels in anonymous namespaces are local symbols
// that dladdr does not see.
std::optional<std::string> symtab_lookup(const char* file, uintptr_t relative, uintptr_t absolute) {
  const int fd = open(file, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  void* map = fstat(fd, &st) == 0 ? mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
  close(fd);
  if (map == MAP_FAILED) return std::nullopt;
  std::optional<std::string> found;
  const auto* bytes = static_cast<const unsigned char*>(map);
  const size_t size = size_t(st.st_size);
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(bytes);
  if (size >= sizeof(Elf64_Ehdr) && std::memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 &&
      eh->e_ident[EI_CLASS] == ELFCLASS64 && eh->e_shoff + size_t(eh->e_shnum) * sizeof(Elf64_Shdr) <= size) {
    const uintptr_t address = eh->e_type == ET_EXEC ? absolute : relative;
    const auto* sections = reinterpret_cast<const Elf64_Shdr*>(bytes + eh->e_shoff);
    for (int s = 0; s < eh->e_shnum && !found; ++s) {
      if (sections[s].sh_type != SHT_SYMTAB || sections[s].sh_link >= eh->e_shnum) continue;
      const Elf64_Shdr& strtab = sections[sections[s].sh_link];
      if (sections[s].sh_offset + sections[s].sh_size > size || strtab.sh_offset + strtab.sh_size > size) continue;
      const auto* symbols = reinterpret_cast<const Elf64_Sym*>(bytes + sections[s].sh_offset);
      const size_t n = sections[s].sh_size / sizeof(Elf64_Sym);
      for (size_t i = 0; i < n; ++i) {
        const Elf64_Sym& sym = symbols[i];
        if (ELF64_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_name >= strtab.sh_size) continue;
        if (address >= sym.st_value && address < sym.st_value + std::max<uint64_t>(sym.st_size, 1)) {
          found = demangle(reinterpret_cast<const char*>(bytes + strtab.sh_offset + sym.st_name));
          break;
        }
      }
    }
  }
  munmap(map, size);
  return found;
}

}  // namespace

void set_seed(uint64_t seed) { g_seed = seed; }
void set_num_threads(int threads) { g_num_threads = threads; }

namespace detail {

std::string kernel_name(const void* kernel) {
  Dl_info info{};
  if (dladdr(kernel, &info) != 0) {
    if (info.dli_sname && info.dli_saddr == kernel) return demangle(info.dli_sname);
    if (info.dli_fname) {
      const uintptr_t absolute = reinterpret_cast<uintptr_t>(kernel);
      if (auto name = symtab_lookup(info.dli_fname, absolute - reinterpret_cast<uintptr_t>(info.dli_fbase), absolute)) {
        return *name;
      }
    }
  }
  return ::hg::detail::concat("kernel at ", kernel);
}

namespace {

void check_launch(const LaunchRequest& r) {
  auto fail = [&](auto&&... parts) {
    throw Error(::hg::detail::concat("[emu] launch of ", kernel_name(r.kernel), ": ", parts...));
  };
  const dim3 b = r.block, g = r.grid;
  if (b.x == 0 || b.y == 0 || b.z == 0) fail("block (", b.x, ", ", b.y, ", ", b.z, ") has a zero dimension");
  if (g.x == 0 || g.y == 0 || g.z == 0) fail("grid (", g.x, ", ", g.y, ", ", g.z, ") has a zero dimension");
  const uint64_t threads = uint64_t(b.x) * b.y * b.z;
  if (threads > uint64_t(kMaxThreadsPerBlock)) {
    fail("block (", b.x, ", ", b.y, ", ", b.z, ") has ", threads, " threads; the device allows at most ",
         kMaxThreadsPerBlock, " threads per block");
  }
  const unsigned bd[3] = {b.x, b.y, b.z}, gd[3] = {g.x, g.y, g.z};
  for (int i = 0; i < 3; ++i) {
    if (bd[i] > kMaxBlockDim[i]) {
      fail("block (", b.x, ", ", b.y, ", ", b.z, ") exceeds the device's block dimension limit (", kMaxBlockDim[0],
           ", ", kMaxBlockDim[1], ", ", kMaxBlockDim[2], ")");
    }
    if (gd[i] > kMaxGridDim[i]) {
      fail("grid (", g.x, ", ", g.y, ", ", g.z, ") exceeds the device's grid dimension limit (", kMaxGridDim[0], ", ",
           kMaxGridDim[1], ", ", kMaxGridDim[2], ")");
    }
  }
  if (r.shared_bytes > kSharedMemPerBlockOptin) {
    fail(r.shared_bytes, " bytes of dynamic shared memory exceed the device's limit of ", kSharedMemPerBlockOptin,
         " bytes per block");
  }
  const size_t kernel_limit = kernel_max_dynamic_shared(r.kernel);
  if (r.shared_bytes > kernel_limit) {
    fail(r.shared_bytes, " bytes of dynamic shared memory exceed the kernel's limit of ", kernel_limit,
         " bytes (raise it with cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), "
         "up to ",
         kSharedMemPerBlockOptin, ")");
  }
  if (r.argument_bytes > kMaxKernelArgumentBytes) {
    fail(r.argument_bytes, " bytes of kernel arguments exceed the limit of ", kMaxKernelArgumentBytes, " bytes");
  }
  if (!is_valid_stream(r.stream)) {
    fail("stream ", static_cast<const void*>(r.stream), " is not a live stream (never created, or destroyed)");
  }
}

uint3 block_index(uint64_t linear, dim3 grid) {
  return uint3{unsigned(linear % grid.x), unsigned(linear / grid.x % grid.y), unsigned(linear / grid.x / grid.y)};
}

}  // namespace

namespace {
void execute_grid(const LaunchRequest& request);
}  // namespace

void run_grid(const LaunchRequest& request) {
  count_runtime(RuntimeCounter::kernel_launches);
  check_launch(request);
  CUstream_st* capturing = nullptr;
  if (const cudaError_t e = internal::begin_enqueue(request.stream, &capturing); e != cudaSuccess) {
    throw Error(::hg::detail::concat("[emu] launch of ", kernel_name(request.kernel), " on stream ",
                                     static_cast<const void*>(request.stream), ": ", cudaGetErrorName(e), " (",
                                     cudaGetErrorString(e), ")"));
  }
  if (!capturing) {
    execute_grid(request);
    return;
  }
  // Recorded: the node owns a copy of the arguments and runs on the stream the graph is launched on.
  std::shared_ptr<const void> closure = request.clone(request.closure);
  LaunchRequest recorded = request;
  recorded.closure = nullptr;
  internal::record_node(capturing, cudaGraphNodeTypeKernel, [recorded, closure](cudaStream_t stream) {
    LaunchRequest r = recorded;
    r.closure = closure.get();
    r.stream = stream;
    execute_grid(r);
  });
}

namespace {
void execute_grid(const LaunchRequest& request) {
  GridJob job;
  job.kernel = request.kernel;
  job.invoke = request.invoke;
  job.closure = request.closure;
  job.grid = request.grid;
  job.block = request.block;
  job.shared_bytes = request.shared_bytes;
  job.seed = mix(g_seed.load() ^ mix(g_launch_counter.fetch_add(1)));

  const uint64_t n_blocks = uint64_t(job.grid.x) * job.grid.y * job.grid.z;
  HG_CHECK(n_blocks <= (uint64_t(1) << 32), "[emu] launch of ", kernel_name(job.kernel), ": grid (", job.grid.x, ", ",
           job.grid.y, ", ", job.grid.z, ") has ", n_blocks, " blocks, more than the emulator runs (2^32)");
  std::vector<uint32_t> order(n_blocks);
  std::iota(order.begin(), order.end(), 0u);
  uint64_t state = job.seed;
  for (size_t i = order.size(); i > 1; --i) {
    state = mix(state);
    std::swap(order[i - 1], order[state % i]);
  }

  if (!request.blocks_in_parallel) {
    std::lock_guard<std::mutex> lock(serial_grid_mutex());
    BlockRunner& runner = BlockRunner::this_thread();
    // The audit records serial grids only (its flavour runs every grid serially).
    // A launch that throws (a kernel's exception, a deadlock) is dropped, not reported half-recorded.
    struct AuditedLaunch {
      int exceptions = std::uncaught_exceptions();
      explicit AuditedLaunch(const GridJob& j) { audit::detail::begin_launch(j.kernel, j.grid, j.block, j.shared_bytes); }
      ~AuditedLaunch() {
        if (std::uncaught_exceptions() > exceptions) {
          audit::detail::abort_launch();
        } else {
          audit::detail::end_launch();
        }
      }
    } audited(job);
    for (uint32_t b : order) runner.run(job, block_index(b, job.grid));
    return;
  }
  const int max_threads = g_num_threads.load() > 0 ? g_num_threads.load() : omp_get_max_threads();
  const int threads = int(std::min<uint64_t>(uint64_t(std::max(max_threads, 1)), n_blocks));
  if (threads <= 1 || omp_in_parallel()) {
    BlockRunner& runner = BlockRunner::this_thread();
    for (uint32_t b : order) runner.run(job, block_index(b, job.grid));
    return;
  }
  std::atomic<bool> failed{false};
  std::exception_ptr first_error;
  std::mutex error_mutex;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t i = 0; i < int64_t(n_blocks); ++i) {
    if (failed.load(std::memory_order_relaxed)) continue;
    try {
      BlockRunner::this_thread().run(job, block_index(order[size_t(i)], job.grid));
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!first_error) first_error = std::current_exception();
      failed = true;
    }
  }
  if (first_error) std::rethrow_exception(first_error);
}
}  // namespace

}  // namespace detail
}  // namespace hg::emu
