#include "engine/storage.h"

#include "engine/allocator.h"

namespace hg {

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, const Device& device) {
  Allocator& allocator = allocator_for(device);
  void* data = allocator.allocate(nbytes);
  return std::shared_ptr<Storage>(new Storage(data, nbytes, device, [&allocator, data] { allocator.deallocate(data); }));
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t nbytes, const Device& device, std::function<void()> release) {
  return std::shared_ptr<Storage>(new Storage(data, nbytes, device, std::move(release)));
}

Storage::~Storage() {
  if (release_) release_();
}

}  // namespace hg
