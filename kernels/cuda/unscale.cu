// unscale_and_check: the loss scaler's fused pass over every gradient tensor in ONE launch (math in
// kernels/unscale_math.h): x *= inv_scale in place, and whether any element is inf or NaN.
//
// Multi-tensor apply (as apex/PyTorch's multi_tensor_apply, with the table in device memory): the
// host cuts every tensor into chunks of kChunk elements (a chunk never spans two tensors; the last
// one of a tensor is shorter) and uploads one table -- a found word followed by one entry per chunk
// (address, length, dtype, scalar head) -- with a single host-to-device copy. The kernel's blocks
// take chunks in a grid-stride loop over the table; within a chunk the block's threads take its
// 16-byte packs (thread t: packs t, t + blockDim, ...), the unaligned head and the tail one element
// per thread, and the dtype switch is uniform across the block. Each thread ORs an inf/NaN flag in
// a register; at the end of the block __syncthreads_or combines them and thread 0 of a block that
// saw one does atomicOr(found, 1) -- at most one atomic per block, and no plain racing stores. One
// device-to-host copy of the found word ends the call (and synchronises the stream).
// Every element is independent, so the stored values and the flag do not depend on block order.
//
// scale_gradients is the same pass with its multiplier read from device memory by every block, and its
// table cached on the device (DeviceTableCache: uploaded once per set of gradient buffers)
// (kernels/unscale_math.h gradient_multiplier: 1 / loss scale, or the clip coefficient from the
// device sum of squares), so nothing is read back: found_inf (f32, device) is zeroed with an async
// memset before the launch and a block that saw an inf/NaN ORs the bits of 1.0f into it (race-free:
// every writer ORs the same bits). The clip form writes round(coef * x + 0), the affine op's formula,
// and only when the norm is finite and over the bound.
#include <cstring>
#include <iterator>
#include <list>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/cuda/device_math.h"
#include "kernels/cuda/workspace.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/kernels_cuda.h"
#include "kernels/step_kernels.h"
#include "kernels/unscale_math.h"

namespace hg::kernels::cuda {
namespace {

constexpr int64_t kChunk = 65536;
constexpr int kThreads = 256;

struct UnscaleChunk {
  void* data;     // first element of the chunk
  int64_t n;      // elements in the chunk
  int32_t dtype;  // DType
  int32_t head;   // pack_head of the chunk, or -1 (element by element)
};

// The table's first 16 bytes: the found word (keeps the entries 16-byte aligned).
struct TableHeader {
  int found;
  int padding[3];
};

// kClip: x = round(factor * x + 0) and no check; else x = round(x * factor) (when write) and the check.
template <bool kClip, class T>
HG_DEVICE int unscale_span(T* __restrict__ x, int64_t n, int64_t head, double factor, bool write) {
  using A = acc_t<T>;
  const A inv = A(factor);
  int found = 0;
  for_packs<kPack<T>>(n, head, threadIdx.x, blockDim.x, [&](int64_t i, auto width) {
    constexpr int W = decltype(width)::value;
    Pack<T, W> p = load_pack<W>(x + i);
    HG_UNROLL
    for (int k = 0; k < W; ++k) {
      if constexpr (kClip) {
        p.v[k] = from_acc<T>(inv * to_acc(p.v[k]) + A(0));
      } else {
        if (write) p.v[k] = from_acc<T>(to_acc(p.v[k]) * inv);
        found |= int(is_nonfinite(to_acc(p.v[k])));
      }
    }
    if (write) store_pack<W>(x + i, p);
  });
  return found;
}

template <bool kClip>
HG_DEVICE int scale_chunks(const UnscaleChunk* __restrict__ chunks, int64_t count, double factor, bool write) {
  int local = 0;
  for (int64_t c = blockIdx.x; c < count; c += gridDim.x) {
    const UnscaleChunk chunk = chunks[c];
    switch (DType(chunk.dtype)) {
      case DType::f32:
        local |= unscale_span<kClip>(static_cast<float*>(chunk.data), chunk.n, chunk.head, factor, write);
        break;
      case DType::f64:
        local |= unscale_span<kClip>(static_cast<double*>(chunk.data), chunk.n, chunk.head, factor, write);
        break;
      case DType::f16:
        local |= unscale_span<kClip>(static_cast<__half*>(chunk.data), chunk.n, chunk.head, factor, write);
        break;
      case DType::bf16:
        local |= unscale_span<kClip>(static_cast<__nv_bfloat16*>(chunk.data), chunk.n, chunk.head, factor, write);
        break;
      default:
        break;  // unreachable: the host validated every dtype
    }
  }
  return local;
}

__global__ void unscale_and_check_kernel(const UnscaleChunk* __restrict__ chunks, int64_t count, double inv_scale,
                                         bool write, int* __restrict__ found) {
  const int local = scale_chunks<false>(chunks, count, inv_scale, write);
  if (__syncthreads_or(local) && threadIdx.x == 0) atomicOr(found, 1);
}

__global__ void scale_gradients_kernel(const UnscaleChunk* __restrict__ chunks, int64_t count, GradientMultiplier m,
                                       float* __restrict__ found_inf) {
  bool write = false;
  const double factor = gradient_multiplier(m, &write);
  if (m.kind == GradientMultiplier::clip) {
    if (write) scale_chunks<true>(chunks, count, factor, true);
    return;
  }
  const int local = scale_chunks<false>(chunks, count, factor, factor != 1.0);
  if (__syncthreads_or(local) && threadIdx.x == 0) atomicOr(reinterpret_cast<int*>(found_inf), __float_as_int(1.0f));
}

// The chunk table of `count` spans (validated; an hg::Error names the bad one and `op`).
std::vector<UnscaleChunk> chunk_table(const TensorSpan* tensors, int64_t count, const char* op) {
  std::vector<UnscaleChunk> chunks;
  for_each_checked_span(tensors, count, op, [&](const TensorSpan& s) {
    dispatch_floating_cuda(s.dtype, op, [&]<class T>() {
      for (int64_t begin = 0; begin < s.n; begin += kChunk) {
        T* data = static_cast<T*>(s.data) + begin;
        const int64_t n = s.n - begin < kChunk ? s.n - begin : kChunk;
        chunks.push_back({data, n, int32_t(s.dtype), int32_t(pack_head<T>(n, data))});
      }
    });
  });
  return chunks;
}

// Device copies of chunk tables, keyed by their bytes and the device. A training step passes the same
// gradient buffers every step, so from the second step on scale_gradients finds its table already on
// the device: no upload, no allocation, nothing a CUDA graph capture would refuse. A miss uploads once,
// from a pinned copy of the table the entry owns (so the asynchronous copy -- or the copy node of a
// captured graph, which every replay runs -- never reads freed or pageable memory). A miss during a
// capture (the graph's gradients live in its private pool, at new addresses) allocates with the
// thread's capture mode relaxed -- the memory is not part of the graph -- and its entry is never
// evicted, since the graph reads it on every replay. Otherwise at most kMaxTables entries; past that
// the least recently used is freed (cudaFree: a device-wide sync, which only a run that reallocates
// its gradients every step would pay).
class DeviceTableCache {
 public:
  const UnscaleChunk* find_or_upload(const std::vector<UnscaleChunk>& chunks, cudaStream_t stream) {
    int device = 0;
    HG_CUDA_CHECK(cudaGetDevice(&device));
    const size_t bytes = chunks.size() * sizeof(UnscaleChunk);
    std::string key(reinterpret_cast<const char*>(chunks.data()), bytes);
    key.append(reinterpret_cast<const char*>(&device), sizeof device);
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->key != key) continue;
      entries_.splice(entries_.begin(), entries_, it);  // most recently used first
      return static_cast<const UnscaleChunk*>(entries_.front().device);
    }
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    HG_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    const bool captured = capture != cudaStreamCaptureStatusNone;
    if (!captured) evict_one_if_full();
    Entry entry{std::move(key), nullptr, nullptr, captured};
    {
      cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;  // allocations are not graph nodes
      HG_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
      const cudaError_t device_status = cudaMalloc(&entry.device, bytes);
      const cudaError_t host_status =
          device_status == cudaSuccess ? cudaMallocHost(&entry.host, bytes) : cudaErrorMemoryAllocation;
      HG_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
      if (host_status != cudaSuccess && entry.device != nullptr) (void)cudaFree(entry.device);
      HG_CUDA_CHECK(device_status);
      HG_CUDA_CHECK(host_status);
    }
    std::memcpy(entry.host, chunks.data(), bytes);
    HG_CUDA_CHECK(cudaMemcpyAsync(entry.device, entry.host, bytes, cudaMemcpyHostToDevice, stream));
    entries_.push_front(std::move(entry));
    return static_cast<const UnscaleChunk*>(entries_.front().device);
  }

 private:
  static constexpr size_t kMaxTables = 16;
  struct Entry {
    std::string key;  // the table's bytes, then the device id
    void* device;
    void* host;       // pinned copy the upload reads
    bool kept;        // made during a capture: a graph reads it on every replay
  };
  void evict_one_if_full() {
    if (entries_.size() < kMaxTables) return;
    for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
      if (it->kept) continue;
      (void)cudaFree(it->device);
      (void)cudaFreeHost(it->host);
      entries_.erase(std::next(it).base());
      return;
    }
  }
  std::mutex mutex_;
  std::list<Entry> entries_;
};

DeviceTableCache& table_cache() {
  static DeviceTableCache* cache = new DeviceTableCache;  // never destroyed: the device may be gone at exit
  return *cache;
}

}  // namespace

bool unscale_and_check(const TensorSpan* tensors, int64_t count, double inv_scale, Stream stream) {
  HG_CHECK(count >= 0, "[unscale_and_check] expected count >= 0 tensors, got ", count);
  HG_CHECK(count == 0 || tensors != nullptr, "[unscale_and_check] null tensor list for count = ", count);
  HG_CHECK(std::isfinite(inv_scale) && inv_scale > 0.0, "[unscale_and_check] invalid inv_scale ", inv_scale,
           ": expected a finite value > 0 (1 / loss scale)");
  const std::vector<UnscaleChunk> chunks = chunk_table(tensors, count, "unscale_and_check");
  if (chunks.empty()) return false;

  const size_t table_bytes = sizeof(TableHeader) + chunks.size() * sizeof(UnscaleChunk);
  std::vector<unsigned char> table(table_bytes);
  const TableHeader header{0, {0, 0, 0}};
  std::memcpy(table.data(), &header, sizeof header);
  std::memcpy(table.data() + sizeof header, chunks.data(), chunks.size() * sizeof(UnscaleChunk));
  Workspace scratch(table_bytes, stream);
  HG_CUDA_CHECK(cudaMemcpyAsync(scratch.as<void>(), table.data(), table_bytes, cudaMemcpyHostToDevice, stream));
  int* found = scratch.as<int>();
  const auto* d_chunks = reinterpret_cast<const UnscaleChunk*>(scratch.as<unsigned char>() + sizeof header);
  const int64_t blocks = int64_t(chunks.size()) < kMaxFlatBlocks ? int64_t(chunks.size()) : kMaxFlatBlocks;
  launch(unscale_and_check_kernel, dim3(unsigned(blocks)), dim3(kThreads), 0, stream, d_chunks, int64_t(chunks.size()),
         inv_scale, inv_scale != 1.0, found);
  int host_found = 0;
  HG_CUDA_CHECK(cudaMemcpyAsync(&host_found, found, sizeof host_found, cudaMemcpyDeviceToHost, stream));
  HG_CUDA_CHECK(cudaStreamSynchronize(stream));
  return host_found != 0;
}

void scale_gradients(const TensorSpan* tensors, int64_t count, const GradientMultiplier& multiplier, float* found_inf,
                     Stream stream) {
  const bool unscale = multiplier.kind == GradientMultiplier::unscale;
  HG_CHECK(unscale ? multiplier.scale != nullptr && found_inf != nullptr : multiplier.sum_sq != nullptr,
           "[scale_gradients] ", unscale ? "unscale needs the loss scale and found_inf" : "clip needs the sum of squares");
  HG_CHECK(unscale || (std::isfinite(multiplier.max_norm) && multiplier.max_norm > 0.0),
           "[scale_gradients] invalid max_norm ", multiplier.max_norm, ": expected a finite max_norm > 0");
  const std::vector<UnscaleChunk> chunks = chunk_table(tensors, count, "scale_gradients");
  if (unscale) HG_CUDA_CHECK(cudaMemsetAsync(found_inf, 0, sizeof(float), stream));
  if (chunks.empty()) return;
  const UnscaleChunk* d_chunks = table_cache().find_or_upload(chunks, stream);
  const int64_t blocks = int64_t(chunks.size()) < kMaxFlatBlocks ? int64_t(chunks.size()) : kMaxFlatBlocks;
  launch(scale_gradients_kernel, dim3(unsigned(blocks)), dim3(kThreads), 0, stream, d_chunks, int64_t(chunks.size()),
         multiplier, found_inf);
}

}  // namespace hg::kernels::cuda
