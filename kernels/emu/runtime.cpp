// The CUDA runtime subset on the host (see runtime.h). Definitions take their C linkage and exact
// signatures from the toolkit's declarations in cuda_runtime_api.h.
#include "kernels/emu/runtime.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

struct CUstream_st {
  unsigned flags = 0;
  int priority = 0;
};

struct CUevent_st {
  unsigned flags = 0;
  bool recorded = false;
  std::chrono::steady_clock::time_point time;
};

namespace hg::emu {
namespace {

constexpr size_t kDeviceAlignment = 256;  // cudaMalloc's guarantee
constexpr size_t kHostAlignment = 4096;

size_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? size_t(pages) * size_t(page) : size_t(16) << 30;
}

// Everything the runtime tracks, under one mutex (runtime calls are not on any hot path).
struct State {
  std::mutex mutex;
  std::map<uintptr_t, size_t> device;  // cudaMalloc'ed ranges: start -> bytes
  std::map<uintptr_t, size_t> host;    // cudaMallocHost'ed ranges
  std::set<const CUstream_st*> streams;
  std::set<const CUevent_st*> events;
  std::unordered_map<const void*, size_t> max_dynamic_shared;
  size_t device_bytes = 0;
  size_t limit = 0;  // 0: physical memory
  size_t total() const { return limit ? limit : physical_memory(); }
};

State& state() {
  static State* s = new State;  // never destroyed: streams may be released by static destructors
  return *s;
}

thread_local cudaError_t t_last_error = cudaSuccess;
thread_local int t_device = 0;

// Records a failure as the thread's last error (as the runtime does) and returns it.
cudaError_t fail(cudaError_t e) {
  t_last_error = e;
  return e;
}

// The allocation of `ranges` containing [p, p + bytes), if any. Caller holds the mutex.
bool contains(const std::map<uintptr_t, size_t>& ranges, const void* p, size_t bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = ranges.upper_bound(a);
  if (it == ranges.begin()) return false;
  --it;
  return a - it->first <= it->second && bytes <= it->second - (a - it->first);
}

bool is_device(const void* p, size_t bytes) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return contains(s.device, p, bytes);
}

bool stream_ok(cudaStream_t stream) { return detail::is_valid_stream(stream); }

bool event_ok(cudaEvent_t event) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return event && s.events.count(event) != 0;
}

cudaError_t copy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  if (count == 0) return cudaSuccess;
  if (!dst || !src) return fail(cudaErrorInvalidValue);
  const bool dst_device = is_device(dst, count), src_device = is_device(src, count);
  bool ok = true;
  switch (kind) {
    case cudaMemcpyHostToHost:
      ok = !dst_device && !src_device;
      break;
    case cudaMemcpyHostToDevice:
      ok = dst_device && !src_device;
      break;
    case cudaMemcpyDeviceToHost:
      ok = !dst_device && src_device;
      break;
    case cudaMemcpyDeviceToDevice:
      ok = dst_device && src_device;
      break;
    case cudaMemcpyDefault:
      ok = true;
      break;
    default:
      return fail(cudaErrorInvalidMemcpyDirection);
  }
  if (!ok) return fail(cudaErrorInvalidValue);
  std::memmove(dst, src, count);
  return cudaSuccess;
}

cudaError_t set(void* dst, int value, size_t count) {
  if (count == 0) return cudaSuccess;
  if (!is_device(dst, count)) return fail(cudaErrorInvalidValue);
  std::memset(dst, value, count);
  return cudaSuccess;
}

}  // namespace

void set_malloc_limit(size_t bytes) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.limit = bytes;
}

size_t device_bytes_in_use() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.device_bytes;
}

namespace detail {

size_t kernel_max_dynamic_shared(const void* kernel) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.max_dynamic_shared.find(kernel);
  return it == s.max_dynamic_shared.end() ? kSharedMemPerBlock : it->second;
}

bool is_valid_stream(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) return true;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.streams.count(stream) != 0;
}

}  // namespace detail
}  // namespace hg::emu

using hg::emu::fail;
using hg::emu::state;

// ---- errors ------------------------------------------------------------------------------------------

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
#define HG_EMU_ERROR_NAME(e) \
  case e:                    \
    return #e;
    HG_EMU_ERROR_NAME(cudaSuccess)
    HG_EMU_ERROR_NAME(cudaErrorInvalidValue)
    HG_EMU_ERROR_NAME(cudaErrorMemoryAllocation)
    HG_EMU_ERROR_NAME(cudaErrorInitializationError)
    HG_EMU_ERROR_NAME(cudaErrorInvalidConfiguration)
    HG_EMU_ERROR_NAME(cudaErrorInvalidDeviceFunction)
    HG_EMU_ERROR_NAME(cudaErrorInvalidDevicePointer)
    HG_EMU_ERROR_NAME(cudaErrorInvalidMemcpyDirection)
    HG_EMU_ERROR_NAME(cudaErrorInsufficientDriver)
    HG_EMU_ERROR_NAME(cudaErrorNoDevice)
    HG_EMU_ERROR_NAME(cudaErrorInvalidDevice)
    HG_EMU_ERROR_NAME(cudaErrorInvalidResourceHandle)
    HG_EMU_ERROR_NAME(cudaErrorNotReady)
    HG_EMU_ERROR_NAME(cudaErrorIllegalAddress)
    HG_EMU_ERROR_NAME(cudaErrorLaunchFailure)
    HG_EMU_ERROR_NAME(cudaErrorNotSupported)
    HG_EMU_ERROR_NAME(cudaErrorUnknown)
#undef HG_EMU_ERROR_NAME
    default:
      return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInitializationError:
      return "initialization error";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDeviceFunction:
      return "invalid device function";
    case cudaErrorInvalidDevicePointer:
      return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection:
      return "invalid copy direction for memcpy";
    case cudaErrorInsufficientDriver:
      return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorIllegalAddress:
      return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
    case cudaErrorNotSupported:
      return "operation not supported";
    default:
      return "unknown error";
  }
}

cudaError_t cudaGetLastError(void) { return std::exchange(hg::emu::t_last_error, cudaSuccess); }
cudaError_t cudaPeekAtLastError(void) { return hg::emu::t_last_error; }

// ---- device ------------------------------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return fail(cudaErrorInvalidValue);
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice);
  hg::emu::t_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (!device) return fail(cudaErrorInvalidValue);
  *device = hg::emu::t_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!prop) return fail(cudaErrorInvalidValue);
  if (device != 0) return fail(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof *prop);
  std::strncpy(prop->name, "halfgrad SIMT emulator", sizeof prop->name - 1);
  prop->totalGlobalMem = state().total();
  prop->sharedMemPerBlock = hg::emu::kSharedMemPerBlock;
  prop->sharedMemPerBlockOptin = hg::emu::kSharedMemPerBlockOptin;
  prop->sharedMemPerMultiprocessor = 228 * 1024;
  prop->regsPerBlock = 65536;
  prop->regsPerMultiprocessor = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = hg::emu::kMaxThreadsPerBlock;
  for (int i = 0; i < 3; ++i) {
    prop->maxThreadsDim[i] = int(hg::emu::kMaxBlockDim[i]);
    prop->maxGridSize[i] = int(hg::emu::kMaxGridDim[i]);
  }
  prop->totalConstMem = 64 * 1024;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = hg::emu::kMultiProcessorCount;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->maxBlocksPerMultiProcessor = 32;
  prop->l2CacheSize = 50 * 1024 * 1024;
  prop->concurrentKernels = 1;
  prop->unifiedAddressing = 1;
  prop->streamPrioritiesSupported = 1;
  prop->canMapHostMemory = 1;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!value) return fail(cudaErrorInvalidValue);
  if (device != 0) return fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock:
      *value = hg::emu::kMaxThreadsPerBlock;
      break;
    case cudaDevAttrMaxBlockDimX:
      *value = int(hg::emu::kMaxBlockDim[0]);
      break;
    case cudaDevAttrMaxBlockDimY:
      *value = int(hg::emu::kMaxBlockDim[1]);
      break;
    case cudaDevAttrMaxBlockDimZ:
      *value = int(hg::emu::kMaxBlockDim[2]);
      break;
    case cudaDevAttrMaxGridDimX:
      *value = int(hg::emu::kMaxGridDim[0]);
      break;
    case cudaDevAttrMaxGridDimY:
      *value = int(hg::emu::kMaxGridDim[1]);
      break;
    case cudaDevAttrMaxGridDimZ:
      *value = int(hg::emu::kMaxGridDim[2]);
      break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *value = int(hg::emu::kSharedMemPerBlock);
      break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = int(hg::emu::kSharedMemPerBlockOptin);
      break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
      *value = 228 * 1024;
      break;
    case cudaDevAttrWarpSize:
      *value = 32;
      break;
    case cudaDevAttrMultiProcessorCount:
      *value = hg::emu::kMultiProcessorCount;
      break;
    case cudaDevAttrComputeCapabilityMajor:
      *value = 9;
      break;
    case cudaDevAttrComputeCapabilityMinor:
      *value = 0;
      break;
    case cudaDevAttrMaxThreadsPerMultiProcessor:
      *value = 2048;
      break;
    case cudaDevAttrMaxRegistersPerBlock:
      *value = 65536;
      break;
    case cudaDevAttrL2CacheSize:
      *value = 50 * 1024 * 1024;
      break;
    case cudaDevAttrUnifiedAddressing:
      *value = 1;
      break;
    default:
      return fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaDeviceReset(void) { return cudaSuccess; }

cudaError_t cudaDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  if (leastPriority) *leastPriority = 0;
  if (greatestPriority) *greatestPriority = -5;
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (!func) return fail(cudaErrorInvalidDeviceFunction);
  switch (attr) {
    case cudaFuncAttributeMaxDynamicSharedMemorySize: {
      if (value < 0 || size_t(value) > hg::emu::kSharedMemPerBlockOptin) return fail(cudaErrorInvalidValue);
      auto& s = state();
      std::lock_guard<std::mutex> lock(s.mutex);
      s.max_dynamic_shared[func] = size_t(value);
      return cudaSuccess;
    }
    case cudaFuncAttributePreferredSharedMemoryCarveout:
      return value >= -1 && value <= 100 ? cudaSuccess : fail(cudaErrorInvalidValue);
    default:
      return fail(cudaErrorInvalidValue);
  }
}

// ---- memory ------------------------------------------------------------------------------------------

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const size_t t = s.total();
  if (total) *total = t;
  if (free) *free = t > s.device_bytes ? t - s.device_bytes : 0;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** devPtr, size_t size) {
  if (!devPtr) return fail(cudaErrorInvalidValue);
  *devPtr = nullptr;
  if (size == 0) return cudaSuccess;
  auto& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (size > s.total() || s.device_bytes > s.total() - size) return fail(cudaErrorMemoryAllocation);
    s.device_bytes += size;  // reserved before allocating, so concurrent callers respect the limit
  }
  // The exact size (not rounded up to the alignment), so AddressSanitizer catches an access one past
  // the end of a device buffer.
  void* p = nullptr;
  if (posix_memalign(&p, hg::emu::kDeviceAlignment, size) != 0) p = nullptr;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!p) {
    s.device_bytes -= size;
    return fail(cudaErrorMemoryAllocation);
  }
  std::memset(p, 0xff, size);
  s.device[reinterpret_cast<uintptr_t>(p)] = size;
  *devPtr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* devPtr) {
  if (!devPtr) return cudaSuccess;
  auto& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = s.device.find(reinterpret_cast<uintptr_t>(devPtr));
    if (it == s.device.end()) return fail(cudaErrorInvalidValue);
    s.device_bytes -= it->second;
    s.device.erase(it);
  }
  std::free(devPtr);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags) {
  (void)flags;
  if (!pHost) return fail(cudaErrorInvalidValue);
  *pHost = nullptr;
  if (size == 0) return cudaSuccess;
  void* p = nullptr;
  if (posix_memalign(&p, hg::emu::kHostAlignment, size) != 0 || !p) return fail(cudaErrorMemoryAllocation);
  std::memset(p, 0xff, size);
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.host[reinterpret_cast<uintptr_t>(p)] = size;
  *pHost = p;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t size) { return cudaHostAlloc(ptr, size, cudaHostAllocDefault); }

cudaError_t cudaFreeHost(void* ptr) {
  if (!ptr) return cudaSuccess;
  auto& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.host.erase(reinterpret_cast<uintptr_t>(ptr)) == 0) return fail(cudaErrorInvalidValue);
  }
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  if (!attributes) return fail(cudaErrorInvalidValue);
  std::memset(attributes, 0, sizeof *attributes);
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (hg::emu::contains(s.device, ptr, 1)) {
    attributes->type = cudaMemoryTypeDevice;
    attributes->devicePointer = const_cast<void*>(ptr);
  } else if (hg::emu::contains(s.host, ptr, 1)) {
    attributes->type = cudaMemoryTypeHost;
    attributes->devicePointer = const_cast<void*>(ptr);
    attributes->hostPointer = const_cast<void*>(ptr);
  } else {
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = -2;
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return hg::emu::copy(dst, src, count, kind);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  if (!hg::emu::stream_ok(stream)) return fail(cudaErrorInvalidResourceHandle);
  return hg::emu::copy(dst, src, count, kind);
}

cudaError_t cudaMemset(void* devPtr, int value, size_t count) { return hg::emu::set(devPtr, value, count); }

cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  if (!hg::emu::stream_ok(stream)) return fail(cudaErrorInvalidResourceHandle);
  return hg::emu::set(devPtr, value, count);
}

// ---- streams -----------------------------------------------------------------------------------------

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int flags, int priority) {
  if (!pStream) return fail(cudaErrorInvalidValue);
  auto* stream = new CUstream_st{flags, std::clamp(priority, -5, 0)};
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.streams.insert(stream);
  *pStream = stream;
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  return cudaStreamCreateWithPriority(pStream, flags, 0);
}

cudaError_t cudaStreamCreate(cudaStream_t* pStream) { return cudaStreamCreateWithPriority(pStream, 0, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  auto& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!stream || s.streams.erase(stream) == 0) return fail(cudaErrorInvalidResourceHandle);
  }
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  return hg::emu::stream_ok(stream) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  return hg::emu::stream_ok(stream) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  (void)flags;
  if (!hg::emu::stream_ok(stream) || !hg::emu::event_ok(event)) return fail(cudaErrorInvalidResourceHandle);
  return cudaSuccess;
}

namespace hg::emu {
cudaError_t enqueue_host_work(cudaStream_t stream, std::function<void()> work) {
  if (!stream_ok(stream)) return fail(cudaErrorInvalidResourceHandle);
  work();
  return cudaSuccess;
}
}  // namespace hg::emu

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  if (!hg::emu::stream_ok(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (!fn) return fail(cudaErrorInvalidValue);
  fn(userData);
  return cudaSuccess;
}

// ---- events ------------------------------------------------------------------------------------------

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (!event) return fail(cudaErrorInvalidValue);
  auto* e = new CUevent_st{flags, false, {}};
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.events.insert(e);
  *event = e;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  auto& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!event || s.events.erase(event) == 0) return fail(cudaErrorInvalidResourceHandle);
  }
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!hg::emu::event_ok(event) || !hg::emu::stream_ok(stream)) return fail(cudaErrorInvalidResourceHandle);
  event->recorded = true;
  event->time = std::chrono::steady_clock::now();
  return cudaSuccess;
}

// Work is done when it is enqueued, so every recorded event has completed (and, as in CUDA, so has an
// event that was never recorded).
cudaError_t cudaEventQuery(cudaEvent_t event) {
  return hg::emu::event_ok(event) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return hg::emu::event_ok(event) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms) return fail(cudaErrorInvalidValue);
  if (!hg::emu::event_ok(start) || !hg::emu::event_ok(end)) return fail(cudaErrorInvalidResourceHandle);
  if ((start->flags | end->flags) & cudaEventDisableTiming) return fail(cudaErrorInvalidResourceHandle);
  if (!start->recorded || !end->recorded) return fail(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(end->time - start->time).count();
  return cudaSuccess;
}
