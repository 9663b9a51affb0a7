#pragma once
// For suites of engine tensors on the CUDA device: true (after printing "SKIPPED (suite): no CUDA
// device: why", which ctest lists as skipped) when no device answers; the emulated build's emulator is
// a device. (Kernel-level suites use support/cuda_device.h.)
#include <doctest/doctest.h>

#include <cstdio>

#include "engine/cuda/cuda_context.h"

namespace hg::testing {

inline bool skip_without_cuda(const char* suite) {
  if (cuda::is_available()) return false;
  std::printf("SKIPPED (%s): no CUDA device: %s\n", suite, cuda::unavailable_reason().c_str());
  MESSAGE("skipped: no CUDA device: ", cuda::unavailable_reason());
  return true;
}

}  // namespace hg::testing
