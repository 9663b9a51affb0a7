#include "data/device_stager.h"

#include "engine/cuda/cuda_allocator.h"

namespace hg::data {

Tensor empty_pinned(const Shape& shape, DType dtype) {
  const size_t nbytes = size_t(shape_numel(shape)) * dtype_size(dtype);
  CpuCachingAllocator& pinned = cuda::pinned_allocator();
  void* data = pinned.allocate(nbytes);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage::wrap(data, nbytes, kCPU, [&pinned, data] { pinned.deallocate(data); });
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(impl);
}

DeviceStager::DeviceStager(const Device& device) : device_(device) {
  HG_CHECK(device.is_cuda(), "[DeviceStager] expected a CUDA device, got ", device.str());
}

DeviceStager::~DeviceStager() {
  try {
    discard();
    for (InFlight& f : retiring_) f.copied->synchronize();
  } catch (...) {
    // A failing device at exit: nothing left to order; the buffers are released below regardless.
  }
}

void DeviceStager::release_completed() {
  while (!retiring_.empty() && retiring_.front().copied->query()) retiring_.pop_front();
}

void DeviceStager::issue(Batch host) {
  HG_CHECK(!staged_, "[DeviceStager] a batch is already staged; take() it first");
  release_completed();
  const int index = device_.index;
  const cuda::Stream compute = cuda::compute_stream(index), copy = cuda::copy_stream(index);
  InFlight f;
  f.device.indices = host.indices;
  f.device.epoch = host.epoch;
  f.device.index_in_epoch = host.index_in_epoch;
  for (const Tensor& t : host.tensors) f.device.tensors.push_back(empty(t.shape(), t.dtype(), device_));
  cuda::Event compute_so_far;
  compute_so_far.record(compute);
  compute_so_far.block(copy);
  for (size_t i = 0; i < host.tensors.size(); ++i) {
    const Tensor& src = host.tensors[i];
    cuda::copy_to_device_async(f.device.tensors[i].data_ptr(), src.data_ptr(), size_t(src.numel()) * src.element_size(),
                               copy);
  }
  f.copied = std::make_unique<cuda::Event>();
  f.copied->record(copy);
  f.host = std::move(host);
  staged_ = std::move(f);
}

Batch DeviceStager::take() {
  HG_CHECK(staged_.has_value(), "[DeviceStager] no batch is staged; issue() one first");
  staged_->copied->block(cuda::compute_stream(device_.index));
  Batch out = staged_->device;
  retiring_.push_back(std::move(*staged_));
  retiring_.back().device = Batch{};  // the consumer owns the device tensors now
  staged_.reset();
  return out;
}

void DeviceStager::discard() {
  if (!staged_) return;
  staged_->copied->synchronize();
  staged_.reset();
}

}  // namespace hg::data
