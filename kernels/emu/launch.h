#pragma once
// hg::emu::launch(kernel, grid, block, shared_bytes, stream, args...): runs a kernel on the CPU.
// kernels/cuda/launch.h calls it in the emulated build; nothing else should.
//
// Before running, the launch is checked as a GPU checks it, and a violation is an hg::Error naming the
// kernel, the limit and the values: threads per block <= 1024, block dimensions <= (1024, 1024, 64),
// grid dimensions <= (2^31 - 1, 65535, 65535), none zero; dynamic shared memory <= the kernel's
// limit (48 KiB unless raised with cudaFuncSetAttribute(kernel,
// cudaFuncAttributeMaxDynamicSharedMemorySize, n), at most 227 KiB); kernel arguments <= 32764 bytes;
// the stream is live. Static shared memory is not measured here (nvcc rejects more than 48 KiB when
// the normal build compiles the same file).
//
// Then every block runs, in a shuffled order (seeded: see set_seed), on OpenMP threads, each block's
// threads as fibers (block.h). The call returns when the grid has finished; an exception thrown by
// kernel code, a deadlock or a divergent barrier is rethrown here (the first one, if several blocks
// fail; the remaining blocks are skipped).
//
// Every launch is counted (RuntimeCounter::kernel_launches) when it is made. On a stream that is being
// captured (cudaStreamBeginCapture) the grid does not run: the kernel and a copy of its argument tuple
// become a node of the capture's graph, which runs each time the graph is launched. A launch the runtime
// refuses (a capture that was invalidated, the legacy stream during a capture of a blocking stream)
// sets the thread's last CUDA error and throws hg::Error naming it.
#include <cstddef>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "kernels/emu/config.h"
#include "kernels/emu/runtime.h"

namespace hg::emu {
namespace detail {

struct LaunchRequest {
  const void* kernel = nullptr;
  void (*invoke)(const void* closure) = nullptr;
  const void* closure = nullptr;
  std::shared_ptr<const void> (*clone)(const void* closure) = nullptr;  // a heap copy, for a graph node
  size_t argument_bytes = 0;
  dim3 grid, block;
  size_t shared_bytes = 0;
  cudaStream_t stream = nullptr;
  bool blocks_in_parallel = true;
};

void run_grid(const LaunchRequest& request);

// The kernel's demangled name, for messages (from the symbol tables: anonymous-namespace kernels too).
std::string kernel_name(const void* kernel);

}  // namespace detail

template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
            Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "launch: the kernel takes a different number of arguments");
  // Each CUDA thread receives its own copy of the arguments, as on a GPU.
  struct Closure {
    void (*kernel)(Params...);
    std::tuple<std::decay_t<Params>...> args;
  };
  const Closure closure{kernel, std::tuple<std::decay_t<Params>...>(std::forward<Args>(args)...)};
  detail::LaunchRequest request;
  request.kernel = reinterpret_cast<const void*>(kernel);
  request.invoke = [](const void* p) {
    const Closure& c = *static_cast<const Closure*>(p);
    std::apply(c.kernel, c.args);
  };
  request.closure = &closure;
  request.clone = [](const void* p) -> std::shared_ptr<const void> {
    return std::make_shared<Closure>(*static_cast<const Closure*>(p));
  };
  request.argument_bytes = (size_t(0) + ... + sizeof(std::decay_t<Params>));
  request.grid = grid;
  request.block = block;
  request.shared_bytes = shared_bytes;
  request.stream = stream;
  // Decided where the kernel is compiled, because that is where __shared__ got its meaning.
  request.blocks_in_parallel = HG_EMU_BLOCKS_IN_PARALLEL != 0;
  detail::run_grid(request);
}

}  // namespace hg::emu
