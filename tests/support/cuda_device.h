#pragma once
// Shared by the suites that call kernels::cuda::* directly (no engine tensors): whether a CUDA device
// answers, a skip that ctest lists as skipped (the output says "SKIPPED"), and one non-default stream
// for every launch, so nothing relies on the legacy default stream. On the emulated build the
// emulator is the device.
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "kernels/cuda/check.h"
#include "kernels/declare_kernel.h"

namespace hg::testing {

// Empty when a device answers, else why not.
inline const std::string& no_cuda_device_reason() {
  static const std::string reason = [] {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) return std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(status);
    return count == 0 ? std::string("cudaGetDeviceCount found 0 devices") : std::string();
  }();
  return reason;
}

// True (after printing "SKIPPED (suite): no CUDA device: why") when there is no device.
inline bool skip_without_cuda_device(const char* suite) {
  if (no_cuda_device_reason().empty()) return false;
  std::printf("SKIPPED (%s): no CUDA device: %s\n", suite, no_cuda_device_reason().c_str());
  MESSAGE("skipped: no CUDA device: ", no_cuda_device_reason());
  return true;
}

inline kernels::cuda::Stream cuda_test_stream() {
  static cudaStream_t s = [] {
    cudaStream_t created = nullptr;
    HG_CUDA_CHECK(cudaStreamCreate(&created));
    return created;
  }();
  return s;
}

}  // namespace hg::testing
