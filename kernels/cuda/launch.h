#pragma once
// launch(kernel, grid, block, shared_bytes, stream, args...): the only way kernels are started, in
// both builds. nvcc: the <<<>>> launch, counted (RuntimeCounter::kernel_launches), then the launch error
// is checked. Emulator: the grid runs on the CPU (kernels/emu/launch.h), with launch limits checked; the
// emulator counts the launch itself. On a stream being captured into a CUDA graph, the launch is
// recorded in both builds (the emulator copies the arguments into the graph node).
#include "kernels/cuda/check.h"
#include "kernels/runtime_counters.h"

namespace hg::kernels::cuda {

template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
            Args&&... args) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;  // nothing to do (e.g. an empty tensor)
#if defined(HALFGRAD_EMULATED_CUDA)
  hg::emu::launch(kernel, grid, block, shared_bytes, stream, static_cast<Params>(args)...);
#else
  count_runtime(RuntimeCounter::kernel_launches);
  kernel<<<grid, block, shared_bytes, stream>>>(static_cast<Params>(args)...);
  HG_CUDA_CHECK(cudaGetLastError());
#endif
}

}  // namespace hg::kernels::cuda
