#include "engine/cuda/cuda_allocator.h"

#include <algorithm>
#include <array>
#include <tuple>

#include "kernels/cuda/check.h"

namespace hg::cuda {

namespace {
constexpr size_t kRound = 512;
constexpr size_t kSmallLimit = size_t(1) << 20;    // requests up to 1 MiB use the small pool
constexpr size_t kSmallSegment = size_t(2) << 20;  // carved from 2 MiB segments
constexpr size_t kLargeRound = size_t(2) << 20;    // large segments: the request rounded to 2 MiB
}  // namespace

// A piece of a segment. prev/next link the pieces of one segment in address order.
struct CudaCachingAllocator::Block {
  Block(void* ptr_, size_t size_, Stream stream_, bool small_)
      : ptr(ptr_), size(size_), stream(stream_), small(small_) {}
  void* ptr;
  size_t size;
  Stream stream;
  bool small;
  bool allocated = false;
  Block* prev = nullptr;
  Block* next = nullptr;
  std::vector<Stream> used_on;  // streams besides `stream` (record_stream)
  GraphPool* pool = nullptr;     // the graph's private pool it belongs to (null: the shared pools)
  bool pending = false;          // freed, waiting for events of other streams (pending_)
};

// A CUDA graph's private pool: its own free lists, the segments it allocated, the eager blocks freed
// during its capture (kept, never reused, until the pool is released).
struct CudaCachingAllocator::GraphPool {
  unsigned long long capture_id = 0;
  bool capturing = true;
  Pool small, large;
  std::vector<Block*> segments;  // the first block of each segment (never merged away)
  std::vector<Block*> adopted;
  size_t reserved = 0;
};

namespace {
// cudaMalloc for a graph's private pool during its capture: legal with the thread's capture mode
// relaxed (the allocation is not part of the graph; the pool keeps it for the graph's lifetime).
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { (void)cudaThreadExchangeStreamCaptureMode(&previous_); }
  ~RelaxedCaptureMode() { (void)cudaThreadExchangeStreamCaptureMode(&previous_); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode previous_ = cudaStreamCaptureModeRelaxed;
};
}  // namespace

bool CudaCachingAllocator::BlockOrder::operator()(const Block* a, const Block* b) const {
  return std::make_tuple(reinterpret_cast<uintptr_t>(a->stream), a->size, reinterpret_cast<uintptr_t>(a->ptr)) <
         std::make_tuple(reinterpret_cast<uintptr_t>(b->stream), b->size, reinterpret_cast<uintptr_t>(b->ptr));
}

size_t CudaCachingAllocator::round_size(size_t nbytes) {
  return std::max(kRound, (nbytes + kRound - 1) / kRound * kRound);
}

void* CudaCachingAllocator::allocate(size_t nbytes) { return allocate(nbytes, compute_stream(device_)); }

CudaCachingAllocator::Block* CudaCachingAllocator::find_free_block(Pool& pool, Stream stream, size_t size) {
  Block key{nullptr, size, stream, false};
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  pool.erase(it);
  return block;
}

int CudaCachingAllocator::device_malloc(void** ptr, size_t segment_size) {
  if (stats_.limit_bytes > 0 && stats_.reserved_bytes + int64_t(segment_size) > stats_.limit_bytes)
    return int(cudaErrorMemoryAllocation);
  const cudaError_t status = cudaMalloc(ptr, segment_size);
  if (status != cudaSuccess) (void)cudaGetLastError();
  return int(status);
}

CudaCachingAllocator::Block* CudaCachingAllocator::allocate_segment(size_t segment_size, Stream stream, bool small,
                                                                    int* error) {
  void* ptr = nullptr;
  int status = device_malloc(&ptr, segment_size);
  if (status != int(cudaSuccess) && capturing_pools_ > 0) {  // no release (cudaFree) during a capture
    ++stats_.oom_count;
    *error = status;
    return nullptr;
  }
  if (status != int(cudaSuccess)) {
    ++stats_.alloc_retries;
    release_cached_segments();
    status = device_malloc(&ptr, segment_size);
    if (status != int(cudaSuccess)) {
      ++stats_.oom_count;
      *error = status;
      return nullptr;
    }
  }
  stats_.reserved_bytes += int64_t(segment_size);
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  return new Block{ptr, segment_size, stream, small};
}

void CudaCachingAllocator::throw_out_of_memory(size_t request, size_t segment_size, int error,
                                               const MemoryStats& at_failure) {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) (void)cudaGetLastError();
  auto mib = [](double bytes) { return std::to_string(int64_t(bytes / (1024.0 * 1024.0))) + " MiB"; };
  HG_FAIL("[cuda] out of memory on cuda:", device_, ": tried to allocate ", mib(double(request)), " (segment ",
          mib(double(segment_size)), "); ", mib(double(at_failure.allocated_bytes)), " allocated by tensors, ",
          mib(double(at_failure.reserved_bytes)), " reserved by the caching allocator",
          at_failure.limit_bytes > 0 ? " (limit " + mib(double(at_failure.limit_bytes)) + ")" : "", ", device reports ",
          mib(double(free_bytes)), " free of ", mib(double(total_bytes)), " (", cudaGetErrorName(cudaError_t(error)),
          ")\n", memory_summary(), out_of_memory_advice());
}

CudaCachingAllocator::Pool& CudaCachingAllocator::pool_of(const Block* block) {
  if (block->pool) return block->small ? block->pool->small : block->pool->large;
  return block->small ? small_pool_ : large_pool_;
}

CudaCachingAllocator::GraphPool* CudaCachingAllocator::capturing_pool(Stream stream) {
  if (capturing_pools_ == 0) return nullptr;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  if (cudaStreamGetCaptureInfo(stream, &status, &id) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  if (status == cudaStreamCaptureStatusNone) return nullptr;
  for (auto& [handle, pool] : graph_pools_)
    if (pool->capturing && pool->capture_id == id) return pool;
  return nullptr;
}

void* CudaCachingAllocator::allocate(size_t nbytes, Stream stream) {
  const size_t size = round_size(nbytes);
  const bool small = size <= kSmallLimit;
  std::unique_lock<std::mutex> lock(mutex_);
  process_pending_frees();
  GraphPool* graph_pool = capturing_pool(stream);
  Pool& pool = graph_pool ? (small ? graph_pool->small : graph_pool->large) : (small ? small_pool_ : large_pool_);
  Block* block = find_free_block(pool, stream, size);
  if (block) {
    ++stats_.cache_hits;
  } else {
    const size_t segment = small ? kSmallSegment : (size + kLargeRound - 1) / kLargeRound * kLargeRound;
    int error = 0;
    if (graph_pool) {
      RelaxedCaptureMode relaxed;
      block = allocate_segment(segment, stream, small, &error);
      if (block) {
        block->pool = graph_pool;
        graph_pool->segments.push_back(block);
        graph_pool->reserved += segment;
      }
    } else {
      block = allocate_segment(segment, stream, small, &error);
    }
    if (block == nullptr) {
      const MemoryStats at_failure = stats_;
      lock.unlock();
      throw_out_of_memory(nbytes, segment, error, at_failure);
    }
  }
  // Split off the remainder when it is worth keeping.
  const size_t remainder = block->size - size;
  if ((small && remainder >= kRound) || (!small && remainder > kSmallLimit)) {
    Block* rest = new Block{static_cast<char*>(block->ptr) + size, remainder, stream, small};
    rest->pool = block->pool;
    rest->prev = block;
    rest->next = block->next;
    if (block->next) block->next->prev = rest;
    block->next = rest;
    block->size = size;
    pool.insert(rest);
  }
  block->allocated = true;
  active_[block->ptr] = block;
  ++stats_.allocation_count;
  stats_.allocated_bytes += int64_t(block->size);
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  return block->ptr;
}

void CudaCachingAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = active_.find(ptr);
  if (it == active_.end()) return;
  Block* block = it->second;
  active_.erase(it);
  stats_.allocated_bytes -= int64_t(block->size);
  if (capturing_pools_ > 0) {
    // Freed while a graph captures on a stream it was used on: the graph's replays may still use it.
    GraphPool* graph_pool = capturing_pool(block->stream);
    for (size_t i = 0; !graph_pool && i < block->used_on.size(); ++i) graph_pool = capturing_pool(block->used_on[i]);
    if (graph_pool && (block->pool != graph_pool || !block->used_on.empty())) {
      block->allocated = false;
      block->used_on.clear();
      if (!block->pool) graph_pool->adopted.push_back(block);  // else found again through its segment
      return;
    }
  }
  if (block->used_on.empty()) {
    free_block(block);
    return;
  }
  // Used on other streams: reusable once the work queued there so far has finished.
  PendingFree pending{block, {}};
  for (Stream s : block->used_on) {
    cudaEvent_t event = nullptr;
    try {
      event = acquire_event(/*timing=*/false);  // pooled: a steady-state step creates no event
    } catch (const Error&) {
      event = nullptr;
    }
    if (event != nullptr && cudaEventRecord(event, s) == cudaSuccess) {
      pending.events.push_back(event);
    } else {
      (void)cudaGetLastError();
      release_event(event, /*timing=*/false);
      (void)cudaStreamSynchronize(s);  // cannot track: wait instead (a destructor must not throw)
    }
  }
  block->used_on.clear();
  block->pending = true;
  pending_.push_back(std::move(pending));
}

void CudaCachingAllocator::record_stream(void* ptr, Stream stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = active_.find(ptr);
  HG_CHECK(it != active_.end(), "[cuda] record_stream: pointer is not an allocation of cuda:", device_);
  Block* block = it->second;
  if (stream != block->stream &&
      std::find(block->used_on.begin(), block->used_on.end(), stream) == block->used_on.end())
    block->used_on.push_back(stream);
}

void CudaCachingAllocator::process_pending_frees() {
  for (size_t i = 0; i < pending_.size();) {
    PendingFree& p = pending_[i];
    bool done = true;
    for (void* e : p.events) {
      const cudaError_t status = cudaEventQuery(static_cast<cudaEvent_t>(e));
      if (status == cudaErrorNotReady) {
        (void)cudaGetLastError();
        done = false;
        break;
      }
    }
    if (!done) {
      ++i;
      continue;
    }
    for (void* e : p.events) release_event(static_cast<cudaEvent_t>(e), /*timing=*/false);
    p.block->pending = false;
    free_block(p.block);
    pending_[i] = std::move(pending_.back());
    pending_.pop_back();
  }
}

void CudaCachingAllocator::free_block(Block* block) {
  block->allocated = false;
  Pool& pool = pool_of(block);
  // Merge with free neighbours of the same segment (never with a block still pending).
  auto is_free = [&](Block* b) { return b && !b->allocated && pool.count(b); };
  if (is_free(block->prev)) {
    Block* prev = block->prev;
    pool.erase(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (block->next) block->next->prev = prev;
    delete block;
    block = prev;
  }
  if (is_free(block->next)) {
    Block* next = block->next;
    pool.erase(next);
    block->size += next->size;
    block->next = next->next;
    if (next->next) next->next->prev = block;
    delete next;
  }
  pool.insert(block);
}

size_t CudaCachingAllocator::release_cached_segments() {
  size_t released = 0;
  for (Pool* pool : {&small_pool_, &large_pool_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      if (b->prev == nullptr && b->next == nullptr) {  // a whole free segment
        (void)cudaFree(b->ptr);
        stats_.reserved_bytes -= int64_t(b->size);
        released += b->size;
        delete b;
        it = pool->erase(it);
      } else {
        ++it;
      }
    }
  }
  return released;
}

MemoryStats CudaCachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CudaCachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

void CudaCachingAllocator::set_limit(int64_t bytes) {
  HG_CHECK(bytes >= 0, "[cuda] memory limit ", bytes, " for cuda:", device_,
           " is negative; expected bytes >= 0 (0: no limit)");
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.limit_bytes = bytes;
}

uint64_t CudaCachingAllocator::begin_graph_pool(unsigned long long capture_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto* pool = new GraphPool;
  pool->capture_id = capture_id;
  const uint64_t handle = next_graph_pool_++;
  graph_pools_[handle] = pool;
  ++capturing_pools_;
  return handle;
}

void CudaCachingAllocator::end_graph_capture(uint64_t handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = graph_pools_.find(handle);
  if (it == graph_pools_.end() || !it->second->capturing) return;
  it->second->capturing = false;
  --capturing_pools_;
}

void CudaCachingAllocator::release_graph_pool(uint64_t handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = graph_pools_.find(handle);
  if (it == graph_pools_.end()) return;
  GraphPool* graph_pool = it->second;
  graph_pools_.erase(it);
  if (graph_pool->capturing) --capturing_pools_;
  // Every block of the graph's segments now belongs to the shared pools: free ones move there (merging
  // with their neighbours), allocated or pending ones go there when freed.
  std::vector<Block*> to_free;
  for (Block* head : graph_pool->segments) {
    for (Block* b = head; b; b = b->next) {
      if (!b->allocated && !b->pending) {
        (b->small ? graph_pool->small : graph_pool->large).erase(b);
        to_free.push_back(b);
      }
      b->pool = nullptr;
    }
  }
  for (Block* b : graph_pool->adopted) to_free.push_back(b);
  for (Block* b : to_free) free_block(b);
  delete graph_pool;
}

size_t CudaCachingAllocator::graph_pool_reserved_bytes(uint64_t handle) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = graph_pools_.find(handle);
  return it == graph_pools_.end() ? 0 : it->second->reserved;
}

void CudaCachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  HG_CHECK(capturing_pools_ == 0, "[cuda] empty_cache on cuda:", device_,
           " during a CUDA graph capture: releasing memory synchronises the device, which a capture forbids; "
           "call it before capturing or after");
  for (auto& p : pending_)
    for (void* e : p.events) (void)cudaEventSynchronize(static_cast<cudaEvent_t>(e));
  process_pending_frees();
  release_cached_segments();
}

CudaCachingAllocator& device_allocator(int device) {
  HG_CHECK(
      device >= 0 && device < device_count(), "[cuda] device cuda:", device, " is not available: ",
      device_count() == 0 ? unavailable_reason() : "this machine has " + std::to_string(device_count()) + " device(s)");
  static std::array<CudaCachingAllocator*, 16> allocators{};
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (!allocators[size_t(device)]) allocators[size_t(device)] = new CudaCachingAllocator(device);  // process lifetime
  return *allocators[size_t(device)];
}

void record_stream(void* ptr, int device, Stream stream) { device_allocator(device).record_stream(ptr, stream); }

// ---- pinned host memory ----

namespace {
void* pinned_allocate(size_t bytes) {
  void* ptr = nullptr;
  // Host memory is never part of a graph: legal while this thread captures one (e.g. the staging of
  // a captured copy_to_device), with the capture mode relaxed around the call.
  RelaxedCaptureMode relaxed;
  if (cudaMallocHost(&ptr, bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return ptr;
}
void pinned_free(void* ptr) { (void)cudaFreeHost(ptr); }
}  // namespace

CpuCachingAllocator& pinned_allocator() {
  static auto* allocator = new CpuCachingAllocator("pinned host allocator", pinned_allocate, pinned_free);
  return *allocator;  // process lifetime
}

}  // namespace hg::cuda

namespace hg {
MemoryStats pinned_memory_stats() { return cuda::pinned_allocator().stats(); }
}  // namespace hg
