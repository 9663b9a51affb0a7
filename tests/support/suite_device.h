#pragma once
// For a suite built twice from one source: on the CPU, and with HG_SUITE_ON_CUDA defined with its tensors
// on the CUDA device (a halfgrad_cuda_test, labelled cuda: the emulator in CI). suite_device() is where
// its tensors go, SUITE_PREFIX starts its case names ("cuda: " or ""), and skip_without_suite_device()
// skips a case of the CUDA build visibly when no device answers (never on the CPU build).
#include "engine/device.h"

#if defined(HG_SUITE_ON_CUDA)
#include "support/skip_cuda.h"
#define SUITE_PREFIX "cuda: "
#else
#define SUITE_PREFIX ""
#endif

namespace hg::testing {

inline Device suite_device() {
#if defined(HG_SUITE_ON_CUDA)
  return Device::cuda(0);
#else
  return kCPU;
#endif
}

inline bool skip_without_suite_device([[maybe_unused]] const char* suite) {
#if defined(HG_SUITE_ON_CUDA)
  return skip_without_cuda(suite);
#else
  return false;
#endif
}

}  // namespace hg::testing
