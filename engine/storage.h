#pragma once
// Storage: one reference-counted block of bytes on one device. Tensors are views over it (shape,
// strides, offset); several tensors may share one Storage. The block is released through the
// function given at creation (the device allocator, or munmap for a memory-mapped file).
//
// A storage from allocate() can also lend its bytes out and take them back while every tensor and
// view over it stays valid: ZeRO stage 3 (dist/zero_optimizer.h) keeps each module's parameters in
// one such storage, gives the block back to the allocator after the module has run and fills a new
// one (an all-gather of the shards) before it runs again -- FSDP's "resize the storage to 0".
//   release_bytes()   the block goes back to the allocator; data() is nullptr; not ready.
//   acquire_bytes()   a new block of nbytes() (contents undefined); not ready until the owner,
//                     having filled it, calls set_ready(true).
//   ensure_ready()    runs the owner's on-demand function when the storage is not ready (it must
//                     make it ready or throw). SavedTensor::unpack calls it, so a backward that needs
//                     a released parameter brings it back.
// Tensor::data_ptr() on a released storage, or on one not ready (being filled), is an error that says so.
#include <cstddef>
#include <functional>
#include <memory>

#include "engine/device.h"

namespace hg {

class Allocator;

class Storage {
 public:
  // nbytes from the device's caching allocator.
  static std::shared_ptr<Storage> allocate(size_t nbytes, const Device& device);
  // Memory owned elsewhere (e.g. an mmap); `release` runs when the last tensor lets go.
  static std::shared_ptr<Storage> wrap(void* data, size_t nbytes, const Device& device,
                                       std::function<void()> release);

  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage();

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  const Device& device() const { return device_; }

  // ---- lending the bytes out (storages from allocate() only) ----
  void release_bytes();
  void acquire_bytes();
  bool released() const { return data_ == nullptr && nbytes_ > 0; }
  bool from_allocator() const { return allocator_ != nullptr; }
  bool ready() const { return ready_; }
  void set_ready(bool ready) { ready_ = ready; }
  void set_on_demand(std::function<void()> make_ready) { on_demand_ = std::move(make_ready); }
  void ensure_ready() {
    if (!ready_) run_on_demand();
  }

 private:
  Storage(void* data, size_t nbytes, Device device, std::function<void()> release)
      : data_(data), nbytes_(nbytes), device_(device), release_(std::move(release)) {}
  void run_on_demand();
  void* data_;
  size_t nbytes_;
  Device device_;
  std::function<void()> release_;
  Allocator* allocator_ = nullptr;  // set for storages from allocate()
  bool ready_ = true;
  std::function<void()> on_demand_;
};

}  // namespace hg
