#pragma once
// Device workspace for kernels that need scratch memory (two-stage reductions, status words), taken
// from the engine's caching allocator on the kernel's stream and handed back when the object dies.
//
// Why not cudaMalloc/cudaFree: cudaFree synchronises the whole device, and both cost a round trip to
// the driver on every call. The caching allocator hands out a cached block with no runtime call, and
// a block freed on a stream is reused only by later work on that same stream, so handing the
// workspace back right after enqueueing the kernels that use it is safe without any wait.
//
// kernels/ never includes engine/: the engine installs the provider (set_workspace_provider) when
// its CUDA context starts (engine/cuda/cuda_context.cpp). Without one -- kernels called directly, as
// some kernel tests do -- the workspace falls back to cudaMalloc/cudaFree, which the runtime counters
// show.
#include <cstddef>

#include "kernels/cuda/check.h"

namespace hg::kernels::cuda {

struct WorkspaceProvider {
  void* (*allocate)(size_t bytes, cudaStream_t stream) = nullptr;  // throws hg::Error on failure
  void (*release)(void* ptr) = nullptr;
};

// Process-wide; set once by the engine before any kernel runs.
inline WorkspaceProvider& workspace_provider() {
  static WorkspaceProvider provider;
  return provider;
}
inline void set_workspace_provider(WorkspaceProvider provider) { workspace_provider() = provider; }

class Workspace {
 public:
  Workspace(size_t bytes, cudaStream_t stream) {
    if (bytes == 0) return;
    const WorkspaceProvider& p = workspace_provider();
    if (p.allocate != nullptr) {
      ptr_ = p.allocate(bytes, stream);
      release_ = p.release;
    } else {
      HG_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
    }
  }
  ~Workspace() {
    if (ptr_ == nullptr) return;
    if (release_ != nullptr)
      release_(ptr_);
    else
      (void)cudaFree(ptr_);  // never throws from a destructor
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  template <class U>
  U* as() const {
    return static_cast<U*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  void (*release_)(void*) = nullptr;
};

}  // namespace hg::kernels::cuda
