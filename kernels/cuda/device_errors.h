#pragma once
// Errors that kernels find in their inputs (an index outside its range), reported by the host later,
// at a point where it waits for the device anyway -- the way CUDA reports its own asynchronous errors.
//
// Why: checking indices on the host would mean waiting for the stream after every cross-entropy or
// embedding launch (the targets live on the device), a host stall in every training step. Instead:
//   - each device has ONE error record in device memory (DeviceErrorRecord below), allocated and
//     zeroed once, on first use (never per call);
//   - a kernel that finds a bad index claims the record with an atomic compare-and-swap (the first
//     writer wins: a later error, in the same or a later launch, never overwrites it) and writes the
//     op, the position, the bad value and the valid range; the op's outputs are then garbage (the
//     kernels never read outside their inputs: a bad row is skipped), which is fine because the
//     error will be raised before anyone reads them;
//   - the host reads the record only where it already waits for the device: the engine's
//     copy_to_host (hence Tensor::item and .to(kCPU)) and hg::cuda::synchronize enqueue the record's
//     copy into pinned memory before their single stream synchronisation, then throw the recorded
//     hg::Error (the same message the CPU backend throws at once) and clear the record. Devices on
//     which no check ever ran copy nothing.
// Kernel callers outside the engine (the kernel tests) use synchronize_and_raise_device_errors.
//
// The device-side writer, record_device_error, lives in kernels/cuda/device_error_record.h (included
// by .cu files only); this header is plain host C++, for the engine.
#include <cstdint>

#include "kernels/cuda/platform.h"
#include "kernels/dtype.h"

namespace hg::kernels::cuda {

// Which check failed; selects the message (each is the CPU backend's message for that op).
enum class DeviceErrorOp : int {
  cross_entropy_forward = 1,  // a target outside [0, bound) that is not ignore_index
  embedding_forward = 2,      // an id outside [0, bound)
  embedding_backward = 3,     // an id outside [0, bound)
  gather = 4,                 // index_gather / index_scatter_add: an index outside [0, bound)
  index_select = 5,
  scatter_add = 6,
  index_add = 7,
};

// The record in device memory. state: 0 empty, 1 a kernel is writing it, 2 it holds an error.
struct DeviceErrorRecord {
  int state;
  int op;               // DeviceErrorOp
  long long position;   // the row / position of the bad index
  long long value;      // the bad index
  long long bound;      // expected 0 <= value < bound
  long long ignore_index;  // cross entropy: the value that is also accepted
};

// The current device's record, allocated (cudaMalloc) and zeroed on its first use (so the first
// checking op must run before a CUDA graph capture, e.g. in a warm-up step). Called by the host code
// of checking kernels, when they enqueue.
DeviceErrorRecord* device_error_record_for_check();

// Enqueues on `stream` a one-block kernel that finds the first i in [0, n) with indices[i] outside
// [0, bound) (and != ignore_index when has_ignore) and records it for `op`. No host wait.
void enqueue_index_check(DeviceErrorOp op, const void* indices, DType index_dtype, int64_t n, int64_t bound,
                         bool has_ignore, int64_t ignore_index, cudaStream_t stream);

// ---- read points (host) ------------------------------------------------------------------------
// Usage, with the caller's one host wait in the middle:
//   DeviceErrorReadback errors(device, stream);  // enqueues the record's copy (none if never checked)
//   cudaStreamSynchronize(stream);               // the wait the caller makes anyway
//   errors.raise("copy_to_host");                // throws the recorded hg::Error, if any
// `stream` must be the stream the checking kernels ran on (the device's compute stream). While a copy
// is in flight the object holds a per-device lock (one pinned mirror per device).
class DeviceErrorReadback {
 public:
  DeviceErrorReadback(int device, cudaStream_t stream);
  ~DeviceErrorReadback();
  DeviceErrorReadback(const DeviceErrorReadback&) = delete;
  DeviceErrorReadback& operator=(const DeviceErrorReadback&) = delete;
  // After the wait. Clears the record first (cudaMemsetAsync on the stream, no wait), so an error is
  // raised once; `where` names the read point in the message.
  void raise(const char* where);

 private:
  int device_ = -1;  // -1: nothing was enqueued
  cudaStream_t stream_ = nullptr;
};

// For callers that own their stream (kernel tests): the sequence above on the current device.
void synchronize_and_raise_device_errors(cudaStream_t stream);

}  // namespace hg::kernels::cuda
