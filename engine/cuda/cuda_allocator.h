#pragma once
// A caching allocator for CUDA device memory, in the spirit of PyTorch's.
//
// CONVENTION
//   - Sizes are rounded up to 512 B. Requests <= 1 MiB come from the small pool, carved out of 2 MiB
//     segments; larger ones from the large pool, whose segments are the request rounded up to 2 MiB.
//   - A block belongs to the stream it was allocated on. A freed block is reused only by requests
//     on that same stream (best fit: the smallest free block that is large enough), so work queued
//     on the stream before the free is ordered before the new owner's work with no synchronisation.
//   - record_stream(ptr, s): the block is also used on stream s. When it is freed, an event is
//     recorded on each such stream and the block returns to the pool only once all have completed.
//   - Free neighbours inside a segment are merged; a block is split when the remainder is worth
//     keeping (>= 512 B small, > 1 MiB large).
//   - When cudaMalloc fails, every cached (whole free) segment is released and the call retried
//     once (alloc_retries); if it fails again the allocation throws hg::Error with what is
//     allocated, reserved and requested and what the device reports free (oom_count).
//   - Memory is returned to the device only by empty_cache() (and the OOM retry).
//   - set_limit(bytes) caps reserved bytes (a budget, like PyTorch's per-process memory fraction): a
//     segment that would pass it fails like cudaMalloc, with the same retry and error. The error
//     carries memory_summary() and the ways to need less memory.
#include <cstddef>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "engine/allocator.h"
#include "engine/cuda/cuda_context.h"

namespace hg::cuda {

class CudaCachingAllocator final : public Allocator {
 public:
  explicit CudaCachingAllocator(int device) : device_(device) {}
  ~CudaCachingAllocator() override = default;  // process lifetime: the driver reclaims at exit

  // On the device's compute stream.
  void* allocate(size_t nbytes) override;
  void* allocate(size_t nbytes, Stream stream);
  void deallocate(void* ptr) override;
  void record_stream(void* ptr, Stream stream);
  MemoryStats stats() const override;
  void reset_peak() override;
  void empty_cache() override;
  void set_limit(int64_t bytes) override;

  static size_t round_size(size_t nbytes);

 private:
  struct Block;
  struct BlockOrder {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BlockOrder>;
  struct PendingFree {
    Block* block;
    std::vector<void*> events;  // cudaEvent_t, one per stream the block was used on
  };

  Block* find_free_block(Pool& pool, Stream stream, size_t size);
  // nullptr when the device (or the limit) refuses even after releasing the cache; *error says why.
  Block* allocate_segment(size_t segment_size, Stream stream, bool small, int* error);
  int device_malloc(void** ptr, size_t segment_size);  // cudaMalloc within the limit: a cudaError_t
  void free_block(Block* block);
  void process_pending_frees();
  size_t release_cached_segments();
  // Called without mutex_ held (the summary reads this allocator's statistics too).
  [[noreturn]] void throw_out_of_memory(size_t request, size_t segment_size, int error, const MemoryStats& at_failure);

  const int device_;
  mutable std::mutex mutex_;
  Pool small_pool_, large_pool_;
  std::unordered_map<void*, Block*> active_;
  std::vector<PendingFree> pending_;
  MemoryStats stats_;
};

// The caching allocator of CUDA device `device` (process-wide).
CudaCachingAllocator& device_allocator(int device);

// record_stream on `device`'s allocator (a free function so code outside engine/cuda/ links in every build).
void record_stream(void* ptr, int device, Stream stream);

// Page-locked host memory for asynchronous copies: the CPU caching allocator (size classes, free
// lists, statistics) over cudaMallocHost / cudaFreeHost.
CpuCachingAllocator& pinned_allocator();

}  // namespace hg::cuda
