// The CUDA runtime subset on the host (see runtime.h). Definitions take their C linkage and exact
// signatures from the toolkit's declarations in cuda_runtime_api.h. Every call is counted into the
// runtime counters (kernels/runtime_counters.h) when it is made, whatever it returns; stream capture
// and graphs are in graph.cpp, the state both share in runtime_state.h.
#include "kernels/emu/runtime.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "kernels/emu/runtime_state.h"
#include "kernels/runtime_counters.h"

namespace hg::emu {
namespace internal {

namespace {
size_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? size_t(pages) * size_t(page) : size_t(16) << 30;
}
}  // namespace

size_t State::total() const { return limit ? limit : physical_memory(); }

State& state() {
  static State* s = new State;  // never destroyed: streams may be released by static destructors
  return *s;
}

thread_local cudaError_t t_last_error = cudaSuccess;

cudaError_t fail(cudaError_t e) {
  t_last_error = e;
  return e;
}

}  // namespace internal

namespace {

using internal::fail;
using internal::State;
using internal::state;

constexpr size_t kDeviceAlignment = 256;  // cudaMalloc's guarantee
constexpr size_t kHostAlignment = 4096;

thread_local int t_device = 0;

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

// Counts a copy by its direction (cudaMemcpyDefault resolved by where the pointers point) and size.
void count_copy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  if (kind == cudaMemcpyDefault) {
    const bool d = is_device(dst, std::max<size_t>(count, 1)), s = is_device(src, std::max<size_t>(count, 1));
    kind = d && s ? cudaMemcpyDeviceToDevice : d ? cudaMemcpyHostToDevice : s ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost;
  }
  switch (kind) {
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

// The checks of a copy (pointers inside live allocations and matching the kind); cudaSuccess when it
// may run.
cudaError_t check_copy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
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
  return ok ? cudaSuccess : fail(cudaErrorInvalidValue);
}

cudaError_t check_set(void* dst, size_t count) {
  if (count == 0) return cudaSuccess;
  return is_device(dst, count) ? cudaSuccess : fail(cudaErrorInvalidValue);
}

// An operation on `stream`: run now, or recorded as a node of the capture the stream takes part in.
cudaError_t enqueue(cudaStream_t stream, cudaGraphNodeType type, std::function<void(cudaStream_t)> work) {
  CUstream_st* capturing = nullptr;
  if (const cudaError_t e = internal::begin_enqueue(stream, &capturing); e != cudaSuccess) return e;
  if (capturing) {
    internal::record_node(capturing, type, std::move(work));
  } else {
    work(stream);
  }
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

using hg::emu::internal::fail;
using hg::emu::internal::state;
using hg::RuntimeCounter;
using hg::count_runtime;

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
    HG_EMU_ERROR_NAME(cudaErrorIllegalState)
    HG_EMU_ERROR_NAME(cudaErrorStreamCaptureUnsupported)
    HG_EMU_ERROR_NAME(cudaErrorStreamCaptureInvalidated)
    HG_EMU_ERROR_NAME(cudaErrorStreamCaptureMerge)
    HG_EMU_ERROR_NAME(cudaErrorStreamCaptureUnmatched)
    HG_EMU_ERROR_NAME(cudaErrorStreamCaptureUnjoined)
    HG_EMU_ERROR_NAME(cudaErrorStreamCaptureIsolation)
    HG_EMU_ERROR_NAME(cudaErrorStreamCaptureImplicit)
    HG_EMU_ERROR_NAME(cudaErrorCapturedEvent)
    HG_EMU_ERROR_NAME(cudaErrorStreamCaptureWrongThread)
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
    case cudaErrorIllegalState:
      return "the operation cannot be performed in the present state";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureMerge:
      return "operation would result in a merge of separate capture sequences";
    case cudaErrorStreamCaptureUnmatched:
      return "capture was not ended in the same stream as it began";
    case cudaErrorStreamCaptureUnjoined:
      return "capturing stream has unjoined work";
    case cudaErrorStreamCaptureIsolation:
      return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorCapturedEvent:
      return "operation not permitted on an event last recorded in a capturing stream";
    case cudaErrorStreamCaptureWrongThread:
      return "attempt to terminate a thread-local capture sequence from another thread";
    default:
      return "unknown error";
  }
}

cudaError_t cudaGetLastError(void) { return std::exchange(hg::emu::internal::t_last_error, cudaSuccess); }
cudaError_t cudaPeekAtLastError(void) { return hg::emu::internal::t_last_error; }

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

cudaError_t cudaDeviceSynchronize(void) {
  count_runtime(RuntimeCounter::device_syncs);
  return hg::emu::internal::refuse_unsafe_call();
}
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
  count_runtime(RuntimeCounter::device_allocs);
  if (!devPtr) return fail(cudaErrorInvalidValue);
  *devPtr = nullptr;
  if (const cudaError_t e = hg::emu::internal::refuse_unsafe_call(); e != cudaSuccess) return e;
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

// cudaFree also synchronises the device (counted as a device sync too).
cudaError_t cudaFree(void* devPtr) {
  count_runtime(RuntimeCounter::device_frees);
  count_runtime(RuntimeCounter::device_syncs);
  if (const cudaError_t e = hg::emu::internal::refuse_unsafe_call(); e != cudaSuccess) return e;
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
  count_runtime(RuntimeCounter::pinned_allocs);
  if (!pHost) return fail(cudaErrorInvalidValue);
  *pHost = nullptr;
  if (const cudaError_t e = hg::emu::internal::refuse_unsafe_call(); e != cudaSuccess) return e;
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

cudaError_t cudaMallocHost(void** ptr, size_t size) { return cudaHostAlloc(ptr, size, cudaHostAllocDefault); }  // counted there

cudaError_t cudaFreeHost(void* ptr) {
  count_runtime(RuntimeCounter::pinned_frees);
  if (const cudaError_t e = hg::emu::internal::refuse_unsafe_call(); e != cudaSuccess) return e;
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

// Synchronous copies and sets wait for the device (device syncs) and run on the legacy stream.
cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  count_runtime(RuntimeCounter::device_syncs);
  hg::emu::count_copy(dst, src, count, kind);
  if (const cudaError_t e = hg::emu::internal::refuse_unsafe_call(); e != cudaSuccess) return e;
  if (const cudaError_t e = hg::emu::internal::refuse_implicit_legacy_use(nullptr); e != cudaSuccess) return e;
  if (const cudaError_t e = hg::emu::check_copy(dst, src, count, kind); e != cudaSuccess) return e;
  if (count) std::memmove(dst, src, count);
  return cudaSuccess;
}

// Captured: the node copies from and to the same pointers when the graph runs (as a CUDA memcpy node).
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  hg::emu::count_copy(dst, src, count, kind);
  if (!hg::emu::stream_ok(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = hg::emu::check_copy(dst, src, count, kind); e != cudaSuccess) return e;
  if (count == 0) return cudaSuccess;
  return hg::emu::enqueue(stream, cudaGraphNodeTypeMemcpy, [=](cudaStream_t) { std::memmove(dst, src, count); });
}

cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  count_runtime(RuntimeCounter::device_syncs);
  if (const cudaError_t e = hg::emu::internal::refuse_unsafe_call(); e != cudaSuccess) return e;
  if (const cudaError_t e = hg::emu::internal::refuse_implicit_legacy_use(nullptr); e != cudaSuccess) return e;
  if (const cudaError_t e = hg::emu::check_set(devPtr, count); e != cudaSuccess) return e;
  if (count) std::memset(devPtr, value, count);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  if (!hg::emu::stream_ok(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = hg::emu::check_set(devPtr, count); e != cudaSuccess) return e;
  if (count == 0) return cudaSuccess;
  return hg::emu::enqueue(stream, cudaGraphNodeTypeMemset, [=](cudaStream_t) { std::memset(devPtr, value, count); });
}

// ---- streams -----------------------------------------------------------------------------------------

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int flags, int priority) {
  if (!pStream) return fail(cudaErrorInvalidValue);
  auto* stream = new CUstream_st{};
  stream->flags = flags;
  stream->priority = std::clamp(priority, -5, 0);
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

// A stream that takes part in a capture is not destroyed (cudaErrorStreamCaptureUnsupported): end the
// capture first.
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  auto& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!stream || s.streams.count(stream) == 0) return fail(cudaErrorInvalidResourceHandle);
    if (stream->capture) return fail(cudaErrorStreamCaptureUnsupported);
    s.streams.erase(stream);
  }
  delete stream;
  return cudaSuccess;
}

namespace hg::emu {
namespace {
// Synchronising with or querying a stream that is being captured is illegal (and ends the capture's
// validity); the legacy stream falls under the implicit-synchronisation rule.
cudaError_t check_stream_wait(cudaStream_t stream) {
  if (!stream_ok(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = internal::refuse_implicit_legacy_use(stream); e != cudaSuccess) return e;
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (internal::Capture* capture = internal::capture_of(stream)) {
    internal::invalidate(*capture);
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  return cudaSuccess;
}

// Waiting for or querying an event last recorded in a capture that is still going on is illegal
// (cudaErrorCapturedEvent) and invalidates that capture.
cudaError_t check_event_wait(cudaEvent_t event) {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!event || s.events.count(event) == 0) return fail(cudaErrorInvalidResourceHandle);
  if (event->capture && event->capture->active) {
    internal::invalidate(*event->capture);
    return fail(cudaErrorCapturedEvent);
  }
  return cudaSuccess;
}
}  // namespace
}  // namespace hg::emu

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  count_runtime(RuntimeCounter::stream_syncs);
  return hg::emu::check_stream_wait(stream);
}

cudaError_t cudaStreamQuery(cudaStream_t stream) { return hg::emu::check_stream_wait(stream); }

// During capture: waiting on an event recorded in the same capture adds its dependencies; a stream that
// is not capturing joins the event's capture (a fork); an event recorded outside any capture may only be
// waited on with cudaEventWaitExternal (cudaErrorStreamCaptureIsolation otherwise), one recorded in
// another capture not at all (cudaErrorStreamCaptureMerge). Both refusals invalidate the capture.
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  count_runtime(RuntimeCounter::stream_waits);
  if (!hg::emu::stream_ok(stream) || !hg::emu::event_ok(event)) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = hg::emu::internal::refuse_implicit_legacy_use(stream); e != cudaSuccess) return e;
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  hg::emu::internal::Capture* mine = hg::emu::internal::capture_of(stream);
  hg::emu::internal::Capture* theirs = event->capture && event->capture->active ? event->capture.get() : nullptr;
  if (mine && mine->invalidated) return fail(cudaErrorStreamCaptureInvalidated);
  if (theirs) {
    if (theirs->invalidated) return fail(cudaErrorStreamCaptureInvalidated);
    if (mine && mine != theirs) {
      hg::emu::internal::invalidate(*mine);
      return fail(cudaErrorStreamCaptureMerge);
    }
    if (!mine) {
      if (hg::emu::internal::is_legacy(stream) || stream == cudaStreamPerThread) {
        hg::emu::internal::invalidate(*theirs);
        return fail(cudaErrorStreamCaptureImplicit);
      }
      stream->capture = event->capture;
      theirs->streams.insert(stream);
      stream->dependencies.clear();
    }
    for (CUgraphNode_st* node : event->dependencies)
      if (std::find(stream->dependencies.begin(), stream->dependencies.end(), node) == stream->dependencies.end())
        stream->dependencies.push_back(node);
    return cudaSuccess;
  }
  if (mine && !(flags & cudaEventWaitExternal)) {
    hg::emu::internal::invalidate(*mine);
    return fail(cudaErrorStreamCaptureIsolation);
  }
  return cudaSuccess;  // the event's work has finished: work runs when it is enqueued
}

namespace hg::emu {
cudaError_t enqueue_host_work(cudaStream_t stream, std::function<void()> work) {
  if (!stream_ok(stream)) return fail(cudaErrorInvalidResourceHandle);
  return enqueue(stream, cudaGraphNodeTypeHost, [work = std::move(work)](cudaStream_t) { work(); });
}
}  // namespace hg::emu

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  if (!hg::emu::stream_ok(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (!fn) return fail(cudaErrorInvalidValue);
  return hg::emu::enqueue(stream, cudaGraphNodeTypeHost, [fn, userData](cudaStream_t) { fn(userData); });
}

// ---- events ------------------------------------------------------------------------------------------

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  count_runtime(RuntimeCounter::events_created);
  if (!event) return fail(cudaErrorInvalidValue);
  auto* e = new CUevent_st{};
  e->flags = flags;
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

// Recorded in a capturing stream, the event takes the stream's dependency set (no node: it expresses
// a dependency for cudaStreamWaitEvent) and belongs to the capture until it is recorded again.
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  count_runtime(RuntimeCounter::event_records);
  if (!hg::emu::event_ok(event)) return fail(cudaErrorInvalidResourceHandle);
  CUstream_st* capturing = nullptr;
  if (const cudaError_t e = hg::emu::internal::begin_enqueue(stream, &capturing); e != cudaSuccess) return e;
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (capturing && capturing->capture) {
    event->capture = capturing->capture;
    event->dependencies = capturing->dependencies;
    return cudaSuccess;
  }
  event->capture.reset();
  event->dependencies.clear();
  event->recorded = true;
  event->time = std::chrono::steady_clock::now();
  return cudaSuccess;
}

// Work is done when it is enqueued, so every recorded event has completed (and, as in CUDA, so has an
// event that was never recorded).
cudaError_t cudaEventQuery(cudaEvent_t event) { return hg::emu::check_event_wait(event); }

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  count_runtime(RuntimeCounter::event_syncs);
  return hg::emu::check_event_wait(event);
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms) return fail(cudaErrorInvalidValue);
  if (!hg::emu::event_ok(start) || !hg::emu::event_ok(end)) return fail(cudaErrorInvalidResourceHandle);
  if ((start->flags | end->flags) & cudaEventDisableTiming) return fail(cudaErrorInvalidResourceHandle);
  if (!start->recorded || !end->recorded) return fail(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(end->time - start->time).count();
  return cudaSuccess;
}
