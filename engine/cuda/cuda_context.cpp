#include "engine/cuda/cuda_context.h"
#include "engine/cuda/cuda_allocator.h"

#include <array>
#include <cstring>
#include <mutex>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_errors.h"
#include "kernels/cuda/workspace.h"

namespace hg::cuda {

namespace {

constexpr int kMaxDevices = 16;

struct DeviceStreams {
  std::once_flag once;
  cudaStream_t compute = nullptr;
  cudaStream_t copy = nullptr;
};

std::array<DeviceStreams, kMaxDevices>& streams() {
  static std::array<DeviceStreams, kMaxDevices> all;
  return all;
}

struct Discovery {
  int count = 0;
  std::string reason;
};

const Discovery& discovery() {
  static const Discovery d = [] {
    Discovery result;
    const cudaError_t status = cudaGetDeviceCount(&result.count);
    if (status != cudaSuccess) {
      result.count = 0;
      result.reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(status);
      (void)cudaGetLastError();  // clear the sticky error
    } else if (result.count == 0) {
      result.reason = "no CUDA device is present";
    }
    return result;
  }();
  return d;
}

void check_device(int device) {
  HG_CHECK(
      device >= 0 && device < device_count(), "[cuda] device cuda:", device, " does not exist: ",
      device_count() == 0 ? unavailable_reason() : "this machine has " + std::to_string(device_count()) + " device(s)");
}

// Kernel workspaces (kernels/cuda/workspace.h) come from the caching allocator of the current device,
// on the kernel's stream.
void* allocate_workspace(size_t bytes, cudaStream_t stream) {
  int device = 0;
  HG_CUDA_CHECK(cudaGetDevice(&device));
  return device_allocator(device).allocate(bytes, stream);
}
void release_workspace(void* ptr) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return;  // called from destructors: never throws
  device_allocator(device).deallocate(ptr);
}

DeviceStreams& streams_of(int device) {
  check_device(device);
  static std::once_flag provider_once;
  std::call_once(provider_once,
                 [] { kernels::cuda::set_workspace_provider({&allocate_workspace, &release_workspace}); });
  DeviceStreams& s = streams()[size_t(device)];
  std::call_once(s.once, [&] {
    HG_CUDA_CHECK(cudaSetDevice(device));
    HG_CUDA_CHECK(cudaStreamCreateWithFlags(&s.compute, cudaStreamNonBlocking));
    HG_CUDA_CHECK(cudaStreamCreateWithFlags(&s.copy, cudaStreamNonBlocking));
  });
  return s;
}

}  // namespace

namespace {
// The compute stream of `device`, waited for, with its device errors raised.
void synchronize_compute(int device) {
  const Stream compute = compute_stream(device);
  kernels::cuda::DeviceErrorReadback errors(device, compute);
  HG_CUDA_CHECK(cudaStreamSynchronize(compute));
  errors.raise("hg::cuda::synchronize");
}
}  // namespace

int device_count() { return std::min(discovery().count, kMaxDevices); }
bool is_available() { return device_count() > 0; }
std::string unavailable_reason() { return discovery().reason; }

bool is_emulated() {
#if defined(HALFGRAD_EMULATED_CUDA)
  return true;
#else
  return false;
#endif
}

std::string device_name(int device) {
  check_device(device);
  cudaDeviceProp properties{};
  HG_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  return std::string(properties.name) + " (sm_" + std::to_string(properties.major) + std::to_string(properties.minor) +
         ", " + std::to_string(properties.totalGlobalMem >> 30) + " GiB)";
}

// Also makes `device` current for this thread, so kernels enqueued on its stream run on it.
Stream compute_stream(int device) {
  thread_local int current = -1;
  DeviceStreams& s = streams_of(device);
  if (current != device) {
    HG_CUDA_CHECK(cudaSetDevice(device));
    current = device;
  }
  return s.compute;
}
Stream copy_stream(int device) { return streams_of(device).copy; }
// Read points of the device error record (kernels/cuda/device_errors.h): index errors found by
// kernels on the compute stream are raised here, after the wait these calls make anyway (the record's
// copy is enqueued before it, so no extra wait).
void synchronize(int device) {
  const Stream compute = compute_stream(device);
  kernels::cuda::DeviceErrorReadback errors(device, compute);
  HG_CUDA_CHECK(cudaStreamSynchronize(compute));
  HG_CUDA_CHECK(cudaStreamSynchronize(copy_stream(device)));
  errors.raise("hg::cuda::synchronize");
}
void synchronize(Stream stream) {
  for (int device = 0; device < device_count(); ++device) {
    if (stream != nullptr && streams()[size_t(device)].compute == stream) return synchronize_compute(device);
  }
  HG_CUDA_CHECK(cudaStreamSynchronize(stream));
}

namespace {

// Pinned staging buffers of host-to-device copies still in flight, each released once its event
// (recorded on the copy stream after the copy) has completed.
struct StagingBuffer {
  void* pinned;
  cudaEvent_t done;
};
std::mutex g_staging_mutex;
std::vector<StagingBuffer> g_staging;

void release_finished_staging() {
  for (size_t i = 0; i < g_staging.size();) {
    const cudaError_t status = cudaEventQuery(g_staging[i].done);
    if (status == cudaErrorNotReady) {
      (void)cudaGetLastError();
      ++i;
      continue;
    }
    release_event(g_staging[i].done, /*timing=*/false);
    pinned_allocator().deallocate(g_staging[i].pinned);
    g_staging[i] = g_staging.back();
    g_staging.pop_back();
  }
}

}  // namespace

// Events are pooled: creating one is a driver call, and a step records several (staging copies, the
// allocator's cross-stream frees, profiler ranges, activation offload). A pooled event may be
// re-recorded at once: waits already enqueued on it keep what it captured when they were enqueued.
namespace {
struct EventPool {
  std::mutex mutex;
  std::vector<cudaEvent_t> free[2];  // [timing]
};
EventPool& event_pool() {
  static EventPool* pool = new EventPool;  // never destroyed: events are released by static destructors
  return *pool;
}
}  // namespace

CUevent_st* acquire_event(bool timing) {
  EventPool& pool = event_pool();
  {
    std::lock_guard<std::mutex> lock(pool.mutex);
    std::vector<cudaEvent_t>& free = pool.free[timing ? 1 : 0];
    if (!free.empty()) {
      cudaEvent_t event = free.back();
      free.pop_back();
      return event;
    }
  }
  cudaEvent_t event = nullptr;
  HG_CUDA_CHECK(cudaEventCreateWithFlags(&event, timing ? cudaEventDefault : cudaEventDisableTiming));
  return event;
}

void release_event(CUevent_st* event, bool timing) {
  if (event == nullptr) return;
  EventPool& pool = event_pool();
  std::lock_guard<std::mutex> lock(pool.mutex);
  pool.free[timing ? 1 : 0].push_back(event);
}

void copy_to_device(void* dst, const void* src, size_t nbytes, int device) {
  if (nbytes == 0) return;
  // Asynchronous: the bytes are staged in pinned memory (so the caller may reuse `src` at once), the
  // DMA runs on the copy stream, and the compute stream waits for it with an event, so every later
  // kernel on the compute stream sees the data while the host goes on. Before the copy, the copy
  // stream waits for the compute stream's work so far: `dst` may be a block the caching allocator
  // just handed back after compute-stream kernels that still read its previous contents were queued.
  // Both waits are device-side; the host never blocks.
  const Stream compute = compute_stream(device), copy = copy_stream(device);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  HG_CUDA_CHECK(cudaStreamIsCapturing(compute, &capture));
  if (capture != cudaStreamCaptureStatusNone) {
    // Being captured into a CUDA graph (engine/cuda/cuda_graph.h): the copy becomes a node that every
    // replay runs, reading the same host bytes. So they are staged in a pinned buffer the graph keeps:
    // never handed back (a captured step's host constants, e.g. position ids: bytes, not megabytes),
    // and copied on the compute stream itself (no event query on captured work, no fork to join).
    void* kept = pinned_allocator().allocate(nbytes);
    std::memcpy(kept, src, nbytes);
    HG_CUDA_CHECK(cudaMemcpyAsync(dst, kept, nbytes, cudaMemcpyHostToDevice, compute));
    return;
  }
  std::lock_guard<std::mutex> lock(g_staging_mutex);
  release_finished_staging();
  void* pinned = pinned_allocator().allocate(nbytes);
  std::memcpy(pinned, src, nbytes);
  cudaEvent_t compute_done = acquire_event(/*timing=*/false);
  HG_CUDA_CHECK(cudaEventRecord(compute_done, compute));
  HG_CUDA_CHECK(cudaStreamWaitEvent(copy, compute_done, 0));
  release_event(compute_done, /*timing=*/false);
  cudaEvent_t done = acquire_event(/*timing=*/false);
  g_staging.push_back({pinned, done});
  HG_CUDA_CHECK(cudaMemcpyAsync(dst, pinned, nbytes, cudaMemcpyHostToDevice, copy));
  HG_CUDA_CHECK(cudaEventRecord(done, copy));
  HG_CUDA_CHECK(cudaStreamWaitEvent(compute, done, 0));
}

// Also a read point of the device error record (see synchronize): Tensor::item and .to(kCPU) land here.
void copy_to_host(void* dst, const void* src, size_t nbytes, int device) {
  if (nbytes == 0) return;
  const Stream compute = compute_stream(device);
  // The record's copy first: a copy into pageable `dst` may itself make the host wait (CUDA stages
  // it), and that wait then covers both.
  kernels::cuda::DeviceErrorReadback errors(device, compute);
  HG_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, compute));
  HG_CUDA_CHECK(cudaStreamSynchronize(compute));
  errors.raise("copy to host");
}

void copy_device_to_device(void* dst, const void* src, size_t nbytes, int device) {
  if (nbytes == 0) return;
  HG_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, compute_stream(device)));
}

void copy_to_host_async(void* dst_host, const void* src_device, size_t nbytes, Stream stream) {
  if (nbytes == 0) return;
  HG_CUDA_CHECK(cudaMemcpyAsync(dst_host, src_device, nbytes, cudaMemcpyDeviceToHost, stream));
}

void copy_to_device_async(void* dst_device, const void* src_host, size_t nbytes, Stream stream) {
  if (nbytes == 0) return;
  HG_CUDA_CHECK(cudaMemcpyAsync(dst_device, src_host, nbytes, cudaMemcpyHostToDevice, stream));
}

Event::Event() : event_(acquire_event(/*timing=*/true)) {}
Event::~Event() { release_event(event_, /*timing=*/true); }
void Event::record(Stream stream) { HG_CUDA_CHECK(cudaEventRecord(event_, stream)); }
void Event::block(Stream stream) const { HG_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0)); }
void Event::synchronize() const { HG_CUDA_CHECK(cudaEventSynchronize(event_)); }
bool Event::query() const {
  const cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  HG_CUDA_CHECK(status);
  return true;
}
float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0;
  HG_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
  return ms;
}

}  // namespace hg::cuda
