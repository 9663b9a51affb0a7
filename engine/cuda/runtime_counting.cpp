// Runtime accounting in the nvcc build (kernels/runtime_counters.h): every call the project's code
// makes to one of the CUDA runtime functions below is counted, then passed on unchanged.
//
// How: the link step of every target that links hg_kernels gets `-Wl,--wrap=<fn>` for each function
// of HALFGRAD_COUNTED_CUDA_CALLS (engine/CMakeLists.txt; an INTERFACE link option of hg_kernels, so it
// reaches every executable and the installed package). GNU ld then resolves the linked objects'
// references to <fn> to __wrap_<fn> (defined here) and __real_<fn> to the runtime's <fn>. Calls made
// inside libcudart, cuBLASLt, cuDNN or NCCL themselves are not seen: those libraries count their own
// calls where halfgrad makes them (kernels/cuda/gemm.cpp and the others).
//
// Symbol names: CUDA 13's cuda_runtime_api.h maps none of these functions to a versioned `_v2`
// symbol. With CUDA_API_PER_THREAD_DEFAULT_STREAM it maps several to `_ptds` / `_ptsz` symbols, which
// this list does not wrap: the build refuses that define below instead of silently counting nothing.
// Each wrapper counts when called, whatever the call returns (a machine without a GPU still counts).
// The list here and the CMake list must name the same functions (a wrapper missing from the CMake list
// is never called; a CMake entry without a wrapper fails to link).
#include <cuda_runtime_api.h>

#include "kernels/runtime_counters.h"

#if defined(CUDA_API_PER_THREAD_DEFAULT_STREAM)
#error "runtime_counting.cpp wraps the legacy-default-stream symbols; per-thread default stream builds need the _ptds/_ptsz names"
#endif

using hg::count_runtime;
using hg::RuntimeCounter;

namespace {

// The direction of a copy; cudaMemcpyDefault resolved from where the pointers live (unified addressing).
cudaMemcpyKind resolve(const void* dst, const void* src, cudaMemcpyKind kind) {
  if (kind != cudaMemcpyDefault) return kind;
  auto on_device = [](const void* p) {
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
  };
  const bool d = on_device(dst), s = on_device(src);
  return d && s ? cudaMemcpyDeviceToDevice : d ? cudaMemcpyHostToDevice : s ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost;
}

void count_copy(const void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  switch (resolve(dst, src, kind)) {
    case cudaMemcpyHostToDevice:
      count_runtime(RuntimeCounter::h2d_copies);
      count_runtime(RuntimeCounter::h2d_bytes, int64_t(count));
      break;
    case cudaMemcpyDeviceToHost:
      count_runtime(RuntimeCounter::d2h_copies);
      count_runtime(RuntimeCounter::d2h_bytes, int64_t(count));
      break;
    case cudaMemcpyDeviceToDevice:
      count_runtime(RuntimeCounter::d2d_copies);
      count_runtime(RuntimeCounter::d2d_bytes, int64_t(count));
      break;
    default:
      break;
  }
}

}  // namespace

extern "C" {

cudaError_t CUDARTAPI __real_cudaMalloc(void** devPtr, size_t size);
cudaError_t CUDARTAPI __real_cudaMallocAsync(void** devPtr, size_t size, cudaStream_t stream);
cudaError_t CUDARTAPI __real_cudaFree(void* devPtr);
cudaError_t CUDARTAPI __real_cudaFreeAsync(void* devPtr, cudaStream_t stream);
cudaError_t CUDARTAPI __real_cudaMallocHost(void** ptr, size_t size);
cudaError_t CUDARTAPI __real_cudaHostAlloc(void** pHost, size_t size, unsigned int flags);
cudaError_t CUDARTAPI __real_cudaFreeHost(void* ptr);
cudaError_t CUDARTAPI __real_cudaDeviceSynchronize(void);
cudaError_t CUDARTAPI __real_cudaStreamSynchronize(cudaStream_t stream);
cudaError_t CUDARTAPI __real_cudaEventSynchronize(cudaEvent_t event);
cudaError_t CUDARTAPI __real_cudaEventCreate(cudaEvent_t* event);
cudaError_t CUDARTAPI __real_cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags);
cudaError_t CUDARTAPI __real_cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t CUDARTAPI __real_cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags);
cudaError_t CUDARTAPI __real_cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind);
cudaError_t CUDARTAPI __real_cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                                             cudaStream_t stream);
cudaError_t CUDARTAPI __real_cudaMemset(void* devPtr, int value, size_t count);
cudaError_t CUDARTAPI __real_cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream);

cudaError_t CUDARTAPI __wrap_cudaMalloc(void** devPtr, size_t size) {
  count_runtime(RuntimeCounter::device_allocs);
  return __real_cudaMalloc(devPtr, size);
}

cudaError_t CUDARTAPI __wrap_cudaMallocAsync(void** devPtr, size_t size, cudaStream_t stream) {
  count_runtime(RuntimeCounter::device_allocs);
  return __real_cudaMallocAsync(devPtr, size, stream);
}

// cudaFree synchronises the device.
cudaError_t CUDARTAPI __wrap_cudaFree(void* devPtr) {
  count_runtime(RuntimeCounter::device_frees);
  count_runtime(RuntimeCounter::device_syncs);
  return __real_cudaFree(devPtr);
}

cudaError_t CUDARTAPI __wrap_cudaFreeAsync(void* devPtr, cudaStream_t stream) {
  count_runtime(RuntimeCounter::device_frees);
  return __real_cudaFreeAsync(devPtr, stream);
}

cudaError_t CUDARTAPI __wrap_cudaMallocHost(void** ptr, size_t size) {
  count_runtime(RuntimeCounter::pinned_allocs);
  return __real_cudaMallocHost(ptr, size);
}

cudaError_t CUDARTAPI __wrap_cudaHostAlloc(void** pHost, size_t size, unsigned int flags) {
  count_runtime(RuntimeCounter::pinned_allocs);
  return __real_cudaHostAlloc(pHost, size, flags);
}

cudaError_t CUDARTAPI __wrap_cudaFreeHost(void* ptr) {
  count_runtime(RuntimeCounter::pinned_frees);
  return __real_cudaFreeHost(ptr);
}

cudaError_t CUDARTAPI __wrap_cudaDeviceSynchronize(void) {
  count_runtime(RuntimeCounter::device_syncs);
  return __real_cudaDeviceSynchronize();
}

cudaError_t CUDARTAPI __wrap_cudaStreamSynchronize(cudaStream_t stream) {
  count_runtime(RuntimeCounter::stream_syncs);
  return __real_cudaStreamSynchronize(stream);
}

cudaError_t CUDARTAPI __wrap_cudaEventSynchronize(cudaEvent_t event) {
  count_runtime(RuntimeCounter::event_syncs);
  return __real_cudaEventSynchronize(event);
}

cudaError_t CUDARTAPI __wrap_cudaEventCreate(cudaEvent_t* event) {
  count_runtime(RuntimeCounter::events_created);
  return __real_cudaEventCreate(event);
}

cudaError_t CUDARTAPI __wrap_cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  count_runtime(RuntimeCounter::events_created);
  return __real_cudaEventCreateWithFlags(event, flags);
}

cudaError_t CUDARTAPI __wrap_cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  count_runtime(RuntimeCounter::event_records);
  return __real_cudaEventRecord(event, stream);
}

cudaError_t CUDARTAPI __wrap_cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  count_runtime(RuntimeCounter::stream_waits);
  return __real_cudaStreamWaitEvent(stream, event, flags);
}

// A synchronous copy or set waits for the device: a device sync besides the copy.
cudaError_t CUDARTAPI __wrap_cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  count_runtime(RuntimeCounter::device_syncs);
  count_copy(dst, src, count, kind);
  return __real_cudaMemcpy(dst, src, count, kind);
}

cudaError_t CUDARTAPI __wrap_cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                                             cudaStream_t stream) {
  count_copy(dst, src, count, kind);
  return __real_cudaMemcpyAsync(dst, src, count, kind, stream);
}

cudaError_t CUDARTAPI __wrap_cudaMemset(void* devPtr, int value, size_t count) {
  count_runtime(RuntimeCounter::device_syncs);
  return __real_cudaMemset(devPtr, value, count);
}

cudaError_t CUDARTAPI __wrap_cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  count_runtime(RuntimeCounter::graph_launches);
  return __real_cudaGraphLaunch(graphExec, stream);
}

}  // extern "C"
