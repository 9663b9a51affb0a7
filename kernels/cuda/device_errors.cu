// Index checks on the device and their deferred report (the contract: kernels/cuda/device_errors.h).
//
// index_check_kernel: ONE block of kCheckThreads threads scans the indices (thread t reads t,
// t + blockDim, ... -- coalesced), each thread stops at its first bad index, a block reduction takes
// the smallest position, and thread 0 records it (device_error_record.h). One block keeps "the first
// bad position" exact without a second pass; the scan costs n / kCheckThreads coalesced loads per
// thread, a few microseconds for the token counts of a training step.
//
// Host side, per device: the record (cudaMalloc'd and zeroed once, on the first check), a pinned
// mirror it is copied into at read points (cudaMallocHost, once), and a mutex that guards the mirror
// while a copy is in flight. Once a device has a record, every read point copies it back (40 bytes,
// enqueued before the wait the read point makes anyway): a host-side "check enqueued" flag would
// miss the checks of a replayed CUDA graph, which the host never sees being enqueued.
#include <array>
#include <atomic>
#include <mutex>
#include <string>

#include "kernels/cuda/device_error_record.h"
#include "kernels/cuda/device_errors.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/cuda/launch.h"

namespace hg::kernels::cuda {
namespace {

constexpr int kCheckThreads = 1024;
constexpr int kMaxDevices = 16;

template <class I>
__global__ void __launch_bounds__(kCheckThreads)
    index_check_kernel(const I* __restrict__ indices, int64_t n, int64_t bound, bool has_ignore,
                       int64_t ignore_index, DeviceErrorOp op, DeviceErrorRecord* __restrict__ record) {
  __shared__ long long shared[32];
  const long long first = block_first_bad(
      n,
      [&](long long i) {
        const int64_t v = int64_t(indices[i]);
        return !(has_ignore && v == ignore_index) && (v < 0 || v >= bound);
      },
      shared);
  if (threadIdx.x == 0 && first < n) {
    record_device_error(record, op, first, (long long)indices[first], bound, ignore_index);
  }
}

struct DeviceErrorState {
  std::once_flag once;
  std::atomic<DeviceErrorRecord*> record{nullptr};  // device memory; published after it is zeroed
  DeviceErrorRecord* mirror = nullptr;               // pinned host memory
  std::mutex mutex;
};

DeviceErrorState& state_of(int device) {
  static std::array<DeviceErrorState, kMaxDevices> states;
  HG_CHECK(device >= 0 && device < kMaxDevices, "[cuda] device ", device, " is beyond the ", kMaxDevices,
           " devices the error records support");
  return states[size_t(device)];
}

int current_device() {
  int device = 0;
  HG_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

std::string describe(const DeviceErrorRecord& r) {
  const std::string value = std::to_string(r.value), position = std::to_string(r.position),
                    bound = std::to_string(r.bound);
  switch (DeviceErrorOp(r.op)) {
    case DeviceErrorOp::cross_entropy_forward:
      return "[cross_entropy_forward] target " + value + " at row " + position +
             " is out of range, expected 0 <= target < " + bound + " (or ignore_index = " +
             std::to_string(r.ignore_index) + ")";
    case DeviceErrorOp::embedding_forward:
    case DeviceErrorOp::embedding_backward:
      return std::string(DeviceErrorOp(r.op) == DeviceErrorOp::embedding_forward ? "[embedding_forward]"
                                                                                 : "[embedding_backward]") +
             " id " + value + " at position " + position + " is out of range, expected 0 <= id < " + bound;
    case DeviceErrorOp::gather:
    case DeviceErrorOp::index_select:
    case DeviceErrorOp::scatter_add:
    case DeviceErrorOp::index_add: {
      const DeviceErrorOp op = DeviceErrorOp(r.op);
      const char* name = op == DeviceErrorOp::gather         ? "gather"
                         : op == DeviceErrorOp::index_select ? "index_select"
                         : op == DeviceErrorOp::scatter_add  ? "scatter_add"
                                                             : "index_add";
      return std::string("[") + name + "] index " + value + " at position " + position +
             " is out of range, expected 0 <= index < " + bound;
    }
  }
  return "[cuda] a kernel recorded an error of unknown kind " + std::to_string(r.op) + " at position " + position;
}

}  // namespace

DeviceErrorRecord* device_error_record_for_check() {
  const int device = current_device();
  DeviceErrorState& s = state_of(device);
  std::call_once(s.once, [&] {
    // Once per device, before its first check: synchronous zeroing, so no stream can see the record
    // before it is zero (this one device-wide wait happens in a warm-up, never in a steady step).
    DeviceErrorRecord* record = nullptr;
    HG_CUDA_CHECK(cudaMalloc(&record, sizeof(DeviceErrorRecord)));
    HG_CUDA_CHECK(cudaMemset(record, 0, sizeof(DeviceErrorRecord)));
    HG_CUDA_CHECK(cudaDeviceSynchronize());
    HG_CUDA_CHECK(cudaMallocHost(&s.mirror, sizeof(DeviceErrorRecord)));
    *s.mirror = DeviceErrorRecord{};
    s.record.store(record, std::memory_order_release);
  });
  return s.record.load(std::memory_order_acquire);
}

void enqueue_index_check(DeviceErrorOp op, const void* indices, DType index_dtype, int64_t n, int64_t bound,
                         bool has_ignore, int64_t ignore_index, cudaStream_t stream) {
  if (n == 0) return;
  DeviceErrorRecord* record = device_error_record_for_check();
  dispatch_index_cuda(index_dtype, "index check", [&]<class I>() {
    launch(index_check_kernel<I>, dim3(1), dim3(kCheckThreads), 0, stream, static_cast<const I*>(indices), n, bound,
           has_ignore, ignore_index, op, record);
  });
}

DeviceErrorReadback::DeviceErrorReadback(int device, cudaStream_t stream) {
  DeviceErrorState& s = state_of(device);
  DeviceErrorRecord* record = s.record.load(std::memory_order_acquire);
  if (record == nullptr) return;  // no check ever ran on this device
  s.mutex.lock();
  const cudaError_t status =
      cudaMemcpyAsync(s.mirror, record, sizeof(DeviceErrorRecord), cudaMemcpyDeviceToHost, stream);
  if (status != cudaSuccess) {
    s.mutex.unlock();
    HG_CUDA_CHECK(status);
  }
  device_ = device;
  stream_ = stream;
}

DeviceErrorReadback::~DeviceErrorReadback() {
  if (device_ < 0) return;
  // The wait failed or raise() was never called: the record stays as it is, read again next time.
  state_of(device_).mutex.unlock();
}

void DeviceErrorReadback::raise(const char* where) {
  if (device_ < 0) return;
  DeviceErrorState& s = state_of(device_);
  const int device = device_;
  const DeviceErrorRecord seen = *s.mirror;
  device_ = -1;
  if (seen.state != 2) {  // none; or a kernel on another stream is writing it: seen at the next read
    s.mutex.unlock();
    return;
  }
  *s.mirror = DeviceErrorRecord{};
  const cudaError_t status = cudaMemsetAsync(s.record.load(), 0, sizeof(DeviceErrorRecord), stream_);
  s.mutex.unlock();
  HG_CUDA_CHECK(status);
  HG_FAIL(describe(seen), " (found on cuda:", device,
          " by a kernel enqueued earlier; as with CUDA's own asynchronous errors, it is raised at the next host read: ",
          where, ")");
}

void synchronize_and_raise_device_errors(cudaStream_t stream) {
  DeviceErrorReadback errors(current_device(), stream);
  HG_CUDA_CHECK(cudaStreamSynchronize(stream));
  errors.raise("synchronize");
}

}  // namespace hg::kernels::cuda
