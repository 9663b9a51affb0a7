#pragma once
// launch(kernel, grid, block, shared_bytes, stream, args...): the only way kernels are started, in
// both builds. nvcc: the <<<>>> launch, then the launch error is checked. Emulator: the grid runs
// on the CPU (kernels/emu/launch.h), with launch limits checked.
#include "kernels/cuda/check.h"

namespace hg::kernels::cuda {

template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
            Args&&... args) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;  // nothing to do (e.g. an empty tensor)
#if defined(HALFGRAD_EMULATED_CUDA)
  hg::emu::launch(kernel, grid, block, shared_bytes, stream, static_cast<Params>(args)...);
#else
  kernel<<<grid, block, shared_bytes, stream>>>(static_cast<Params>(args)...);
  HG_CUDA_CHECK(cudaGetLastError());
#endif
}

}  // namespace hg::kernels::cuda
