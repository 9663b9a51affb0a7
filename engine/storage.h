#pragma once
// Storage: one reference-counted block of bytes on one device. Tensors are views over it (shape,
// strides, offset); several tensors may share one Storage. The block is released through the
// function given at creation (the device allocator, or munmap for a memory-mapped file).
#include <cstddef>
#include <functional>
#include <memory>

#include "engine/device.h"

namespace hg {

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

 private:
  Storage(void* data, size_t nbytes, Device device, std::function<void()> release)
      : data_(data), nbytes_(nbytes), device_(device), release_(std::move(release)) {}
  void* data_;
  size_t nbytes_;
  Device device_;
  std::function<void()> release_;
};

}  // namespace hg
