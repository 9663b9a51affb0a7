#pragma once
// NVTX ranges for the profiler: with real CUDA (nvcc build) every profiler range is also pushed to
// NVTX, so Nsight Systems shows it; other builds compile engine/profiler/no_nvtx.cpp instead.
namespace hg::profiler::nvtx {

// Whether this build emits NVTX ranges.
bool enabled();
void push(const char* name);
void pop();

}  // namespace hg::profiler::nvtx
