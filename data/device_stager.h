#pragma once
// DeviceStager: moves batches that sit in pinned host memory to a CUDA device without blocking the
// host or the compute stream (the last hop of the DataLoader).
//
//   issue(host)  allocates the device tensors, makes the copy stream wait for the compute stream's
//                work queued so far (the caching allocator may hand out a block that in-flight
//                compute kernels still read), enqueues cudaMemcpyAsync on the copy stream and records
//                an event after it. Returns at once.
//   take()       makes the compute stream wait for that event (a device-side wait; the host goes
//                on) and hands out the device batch. Kernels enqueued afterwards see the data.
// The pinned host batch stays alive until its copy's event has completed; then its memory goes
// back to the pinned allocator's cache for the next batch.
#include <deque>
#include <memory>
#include <optional>

#include "data/dataset.h"
#include "engine/cuda/cuda_context.h"

namespace hg::data {

class DeviceStager {
 public:
  explicit DeviceStager(const Device& device);
  ~DeviceStager();  // waits for copies in flight before their host buffers are released
  DeviceStager(const DeviceStager&) = delete;
  DeviceStager& operator=(const DeviceStager&) = delete;

  void issue(Batch host);
  bool has_staged() const { return staged_.has_value(); }
  Batch take();
  // Drops the staged batch (load_state): waits for its copy.
  void discard();

 private:
  struct InFlight {
    Batch host, device;
    std::unique_ptr<cuda::Event> copied;
  };
  void release_completed();
  Device device_;
  std::optional<InFlight> staged_;
  std::deque<InFlight> retiring_;  // handed out, host buffer kept until the copy completed
};

// A CPU tensor of `shape` in pinned (page-locked) host memory from engine/cuda's pinned allocator.
Tensor empty_pinned(const Shape& shape, DType dtype);

}  // namespace hg::data
