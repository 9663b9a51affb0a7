// Started by test_emulator (AddressSanitizer builds) as a separate process: a kernel writes one
// element out of bounds, and AddressSanitizer must stop the process with a report. The mode names
// the memory: global (one past a cudaMalloc'ed buffer), dynamic-shared (one past the launch's dynamic
// shared memory), static-shared (one past a __shared__ array), local (one past a thread's local
// array); `none` runs the same kernels in bounds and must exit cleanly.
#include <cstdio>
#include <cstring>

#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"

namespace {

enum Mode { kNone, kGlobal, kDynamicShared, kStaticShared, kLocal };

__global__ void oob_kernel(float* y, int n, int mode, int past) {
  HG_DYNAMIC_SHARED(float, dynamic);
  __shared__ float fixed[64];
  volatile float local[8];
  // Through pointers, so that AddressSanitizer's redzones (not UBSan's array bounds) catch the write.
  float* shared_array = fixed;
  volatile float* local_array = local;
  const int t = int(threadIdx.x);
  const int bad = t == 5 ? past : 0;  // one thread goes one element too far
  switch (mode) {
    case kGlobal:
      y[t + (t == 5 ? n - 5 + past - 1 : 0)] = 1.0f;
      break;
    case kDynamicShared:
      dynamic[t + (t == 5 ? 64 - 5 + past - 1 : 0)] = 1.0f;
      break;
    case kStaticShared:
      shared_array[t + (t == 5 ? 64 - 5 + past - 1 : 0)] = 1.0f;
      break;
    case kLocal:
      local_array[(t % 8) + bad * (8 - t % 8)] = 1.0f;
      break;
    default:
      y[t] = 1.0f;
      break;
  }
  __syncthreads();
  if (t == 0) y[0] = fixed[0] + dynamic[0] + local[0];
}

}  // namespace

int main(int argc, char** argv) {
  const char* m = argc > 1 ? argv[1] : "none";
  const int mode = std::strcmp(m, "global") == 0           ? kGlobal
                   : std::strcmp(m, "dynamic-shared") == 0 ? kDynamicShared
                   : std::strcmp(m, "static-shared") == 0  ? kStaticShared
                   : std::strcmp(m, "local") == 0          ? kLocal
                                                           : kNone;
  const int n = 64;
  float* y = nullptr;
  HG_CUDA_CHECK(cudaMalloc(&y, n * sizeof(float)));
  // past = 1 makes thread 5 write index n (global, shared) or 8 (local); past = 0 stays in bounds.
  const int past = mode == kNone ? 0 : 1;
  hg::kernels::cuda::launch(oob_kernel, dim3(2), dim3(32), 64 * sizeof(float), nullptr, y, n, mode, past);
  HG_CUDA_CHECK(cudaFree(y));
  std::puts("in bounds");
  return 0;
}
