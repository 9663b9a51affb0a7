// ZeRO-Offload (Ren et al. 2021) inside ZeroOptimizer (dist/zero_optimizer.h): where the offloaded
// state lives, and how gradients and parameters cross between a CUDA device and the host.
//
//   state     fp32 master + Adam moments (8-bit: codes and absmax) of this rank's partition in host memory: pinned (page-locked,
//             engine/cuda pinned allocator) for a CUDA device, so that copies to and from it are DMA
//             transfers that overlap compute; host_offload_allocator() for the CPU device (the same RAM,
//             kept apart from the device allocator's statistics and budget, as activation offload does).
//   backward  (CUDA) buckets are launched in order from the gradient hooks; at each hook, every launched
//             bucket whose collective is done — on a GPU (NCCL) every launched bucket, since the copy
//             stream is made to wait for the collective's event without a host wait — has this rank's part
//             [max(begin, owned begin), min(end, owned end)) (stage 3: its shard of the unit) copied device -> pinned host on the copy
//             stream. The last buckets are streamed by finish_gradient_sync(), which records one event
//             after the last copy and makes the compute stream wait for it (so that zero_grad() or the
//             next backward cannot overwrite gradients that are still being read).
//   step      waits for that event (the copies ran during backward), runs the CPU AdamW from the pinned
//             gradients into the pinned half parameters, and sends them back with one asynchronous
//             host -> device copy on the copy stream (after the compute work queued so far, which may
//             read the old parameters); the compute stream waits for it, so the stage's all-gather
//             (queued after the compute stream) and the next forward see the new values. The next
//             step waits for that copy before writing the pinned parameters again.
//   clipping  the gradients have already left for the host when clip_grad_norm() runs, so its factor
//             multiplies the CPU update's gradient scale (with the loss scaler's 1/S) instead of
//             rewriting device gradients and copying them again: one fp32 multiply per element, fused.
// From the CPU device nothing is copied: the CPU update reads the gradients and writes the parameters
// in place (the flat buffers are host memory already).
#include <algorithm>
#include <memory>

#include "dist/zero_optimizer.h"
#include "engine/allocator.h"
#include "engine/cuda/cuda_allocator.h"
#include "engine/cuda/cuda_context.h"

namespace hg::dist {
namespace {

// An uninitialised CPU tensor whose bytes come from `allocator` (and go back to it).
Tensor host_tensor(Allocator& allocator, int64_t count, DType dtype) {
  const size_t nbytes = size_t(count) * dtype_size(dtype);
  void* data = allocator.allocate(nbytes);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage::wrap(data, nbytes, kCPU, [&allocator, data] { allocator.deallocate(data); });
  impl->shape = {count};
  impl->strides = contiguous_strides(impl->shape);
  impl->dtype = dtype;
  return Tensor(impl);
}

Allocator& offload_allocator(const Device& device) {
  if (device.is_cpu()) return host_offload_allocator();
  return cuda::pinned_allocator();
}

}  // namespace

Tensor ZeroOptimizer::new_state(int64_t count, DType dtype) const {
  if (!options_.offload_optimizer()) return zeros({count}, dtype, device_);
  Tensor t = host_tensor(offload_allocator(device_), count, dtype);
  t.zero_();
  return t;
}

void ZeroOptimizer::allocate_offload_staging() {
  if (!streams_gradients()) return;
  CpuCachingAllocator& pinned = cuda::pinned_allocator();
  grads_host_ = host_tensor(pinned, opt_count_, dtype_);
  grads_host_.zero_();
  // The padding at the end is never written by the update: it goes back as it came.
  params_host_ = host_tensor(pinned, opt_count_, dtype_);
  params_host_.copy_(owned_params());
}

void ZeroOptimizer::stream_gradients_to_host(bool wait_for_collectives) {
  if (!streams_gradients()) return;
  const int d = device_.index;
  const cuda::Stream copy = cuda::copy_stream(d);
  // Real GPU: the collectives are NCCL work, and block() orders the copy stream after one without a
  // host wait. Emulated device: host work, which block() would wait for; during backward only the
  // completed ones are taken (in order), the rest at the end.
  const bool stream_ordered = !cuda::is_emulated();
  const size_t element = dtype_size(dtype_);
  const Tensor grads = owned_grads();
  while (next_streamed_ < in_flight_.size()) {
    Work& work = in_flight_[next_streamed_];  // in_flight_parts_[k]: what collective k delivers here
    if (!wait_for_collectives && !stream_ordered && !work.completed()) break;
    work.block(copy);
    const OwnedPart part = in_flight_parts_[next_streamed_];
    if (part.count > 0)
      cuda::copy_to_host_async(static_cast<char*>(grads_host_.data_ptr()) + part.local * element,
                               grads.narrow(0, part.local, part.count).data_ptr(), size_t(part.count) * element, copy);
    ++next_streamed_;
  }
  if (!wait_for_collectives) return;
  if (!grads_on_host_) grads_on_host_ = std::make_unique<cuda::Event>();
  grads_on_host_->record(copy);
  grads_on_host_->block(cuda::compute_stream(d));
  next_streamed_ = 0;
}

std::pair<Tensor, Tensor> ZeroOptimizer::offload_buffers() {
  if (!streams_gradients())
    return {owned_grads(), owned_params()};
  HG_CHECK(grads_on_host_ != nullptr, "[ZeroOptimizer] no gradients were streamed to the host (internal: "
           "finish_gradient_sync() streams them)");
  grads_on_host_->synchronize();
  if (params_on_device_) params_on_device_->synchronize();  // the last upload has read params_host_
  return {grads_host_, params_host_};
}

void ZeroOptimizer::upload_offloaded_params() {
  if (!streams_gradients()) return;
  const int d = device_.index;
  const cuda::Stream copy = cuda::copy_stream(d), compute = cuda::compute_stream(d);
  cuda::Event compute_so_far;
  compute_so_far.record(compute);
  compute_so_far.block(copy);
  cuda::copy_to_device_async(owned_params().data_ptr(), params_host_.data_ptr(),
                             size_t(opt_count_) * dtype_size(dtype_), copy);
  if (!params_on_device_) params_on_device_ = std::make_unique<cuda::Event>();
  params_on_device_->record(copy);
  params_on_device_->block(compute);
}

void ZeroOptimizer::drain_offload_copies() noexcept {
  if (!streams_gradients()) return;
  try {
    cuda::synchronize(cuda::copy_stream(device_.index));  // no copy may still read or write the pinned buffers
  } catch (...) {
    // A failing device at exit: the pinned buffers are released regardless.
  }
}

Tensor ZeroOptimizer::host_gradients() {
  HG_CHECK(options_.offload_optimizer(), "[ZeroOptimizer] host_gradients() needs offload_optimizer(true): without "
           "it the gradients stay on ", device_.str());
  finish_gradient_sync();
  return offload_buffers().first;
}

}  // namespace hg::dist
