#pragma once
// The CUDA device layer of the engine: device discovery, one compute stream and one copy stream per
// device, events. Compiled against the CUDA runtime (normal build) or the SIMT emulator's runtime
// (emulated build); without a CUDA backend, engine/cuda/no_cuda.cpp answers "unavailable".
#include <cstddef>
#include <cstdint>
#include <string>

struct CUstream_st;
struct CUevent_st;

namespace hg::cuda {

using Stream = CUstream_st*;

// Number of CUDA devices that answer (0 without a backend, a driver or a GPU).
int device_count();
bool is_available();
// Why no device answers (for skipped tests and error messages); "" when one does.
std::string unavailable_reason();
// "NVIDIA H200 (sm_90, 139 GiB)" or "halfgrad SIMT emulator (...)".
std::string device_name(int device);
bool is_emulated();

// The stream kernels of `device` run on (created on first use, never destroyed); makes `device` the
// calling thread's current CUDA device, so what is enqueued next runs there.
Stream compute_stream(int device);
// The stream for asynchronous host<->device copies that overlap compute.
Stream copy_stream(int device);
void synchronize(int device);
void synchronize(Stream stream);

// The caching allocator of `device` (engine/cuda/cuda_allocator.h).
class CudaCachingAllocator;
CudaCachingAllocator& device_allocator(int device);
// Copies between host memory and `device`'s memory. To the device is asynchronous: staged through
// pinned memory, run on the copy stream, and ordered before all later compute-stream work (the host
// buffer may be reused on return). To the host waits for the compute stream's work and the copy.
void copy_to_device(void* dst, const void* src, size_t nbytes, int device);
void copy_to_host(void* dst, const void* src, size_t nbytes, int device);
void copy_device_to_device(void* dst, const void* src, size_t nbytes, int device);
// Enqueues a copy on `stream` and returns at once: no staging, no host wait (activation offload).
// The host side must be pinned memory that stays untouched until the copy has completed (an Event).
void copy_to_host_async(void* dst_host, const void* src_device, size_t nbytes, Stream stream);
void copy_to_device_async(void* dst_device, const void* src_host, size_t nbytes, Stream stream);

// Events from a process-wide pool (creating an event is a driver call; a steady-state step creates
// none): acquire returns a fresh or recycled event, release hands it back (it may still be pending).
CUevent_st* acquire_event(bool timing);
void release_event(CUevent_st* event, bool timing);

// A CUDA event (timing enabled), taken from the pool and returned to it. Records on a stream; waits host-side or stream-side.
class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(Stream stream);
  // Makes `stream` wait for this event (no host block).
  void block(Stream stream) const;
  void synchronize() const;
  bool query() const;  // true when the recorded work has completed
  // Milliseconds between `start` and this event (both recorded and completed).
  float elapsed_ms_since(const Event& start) const;

 private:
  CUevent_st* event_ = nullptr;
};

}  // namespace hg::cuda
