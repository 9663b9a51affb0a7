#include "engine/storage.h"

#include "engine/allocator.h"
#include "kernels/error.h"

namespace hg {

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, const Device& device) {
  Allocator& allocator = allocator_for(device);
  std::shared_ptr<Storage> storage(new Storage(allocator.allocate(nbytes), nbytes, device, nullptr));
  storage->allocator_ = &allocator;
  return storage;
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t nbytes, const Device& device, std::function<void()> release) {
  return std::shared_ptr<Storage>(new Storage(data, nbytes, device, std::move(release)));
}

Storage::~Storage() {
  if (allocator_) {
    if (data_) allocator_->deallocate(data_);
  } else if (release_) {
    release_();
  }
}

void Storage::release_bytes() {
  HG_CHECK(allocator_ != nullptr, "[Storage] release_bytes: only a storage from the device allocator can give its "
           "bytes back (this one wraps memory owned elsewhere)");
  if (data_) allocator_->deallocate(data_);
  data_ = nullptr;
  ready_ = false;
}

void Storage::acquire_bytes() {
  HG_CHECK(allocator_ != nullptr, "[Storage] acquire_bytes: only a storage from the device allocator can take bytes back");
  if (!data_) data_ = allocator_->allocate(nbytes_);
  ready_ = false;
}

void Storage::run_on_demand() {
  HG_CHECK(on_demand_ != nullptr, "[Storage] a tensor's memory is not ready and no owner can bring it back");
  on_demand_();
  HG_CHECK(ready_, "[Storage] the owner's on-demand function left the storage not ready");
}

}  // namespace hg
