// Builds without real CUDA (CPU-only, emulated): no NVTX, the profiler's own ranges only.
#include "engine/profiler/nvtx.h"

namespace hg::profiler::nvtx {

bool enabled() { return false; }
void push(const char*) {}
void pop() {}

}  // namespace hg::profiler::nvtx
