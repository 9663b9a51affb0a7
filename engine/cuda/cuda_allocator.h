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
//   - CUDA graphs (engine/cuda/cuda_graph.h), as PyTorch's graph pools: while a graph is captured, a
//     block allocated on a stream taking part in the capture comes from the graph's private pool, and
//     an eager block freed on such a stream is adopted by the graph. Neither is ever handed to work
//     outside the graph, because replays write them again; they go back to the shared pools when the
//     graph is destroyed (release_graph_pool). The private pool grows by new segments during capture:
//     cudaMalloc is not stream-ordered, so the allocator makes it with the thread's capture mode relaxed
//     (cudaThreadExchangeStreamCaptureMode), and the segment belongs to the graph for its lifetime. The
//     out-of-memory retry does not release cached segments during a capture (cudaFree would be illegal).
#include <cstddef>
#include <cstdint>
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

  // Graph pools. begin_graph_pool(capture_id) after cudaStreamBeginCapture (the id from
  // cudaStreamGetCaptureInfo) routes that capture's allocations to a new private pool and returns its
  // handle; end_graph_capture(pool) after cudaStreamEndCapture stops the routing (blocks still allocated
  // return to the private pool when freed); release_graph_pool(pool) when the graph is destroyed gives
  // every block back to the shared pools (those still allocated when they are freed).
  uint64_t begin_graph_pool(unsigned long long capture_id);
  void end_graph_capture(uint64_t pool);
  void release_graph_pool(uint64_t pool);
  // Bytes of the segments the private pool holds (0 for an unknown or released pool).
  size_t graph_pool_reserved_bytes(uint64_t pool) const;

 private:
  struct Block;
  struct GraphPool;
  struct BlockOrder {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BlockOrder>;
  struct PendingFree {
    Block* block;
    std::vector<void*> events;  // cudaEvent_t, one per stream the block was used on
  };

  Block* find_free_block(Pool& pool, Stream stream, size_t size);
  Pool& pool_of(const Block* block);
  // The graph pool whose capture `stream` takes part in, or null. Caller holds mutex_.
  GraphPool* capturing_pool(Stream stream);
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
  std::unordered_map<uint64_t, GraphPool*> graph_pools_;
  uint64_t next_graph_pool_ = 1;
  int capturing_pools_ = 0;
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
