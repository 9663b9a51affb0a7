#pragma once
// Per-device allocators with statistics. Storage gets its bytes here and gives them back here.
//
// CONVENTION (CpuCachingAllocator)
//   - Requests are rounded up to a size class: multiples of 64 B up to 4 KiB, then 8 classes per
//     power of two (at most 12.5% waste). Blocks are 64-byte aligned (one cache line; AVX-512).
//   - A freed block goes to the free list of its class and is handed out again for the next
//     request of that class; memory is returned to the OS only by empty_cache(). Why: on these
//     VMs the first touch of a fresh 4 KiB page costs ~17 us, and allocators that give memory back
//     to the OS make training steps 2-20x slower.
//   - allocated = bytes of blocks in use (rounded sizes); reserved = allocated + cached.
//   - Thread-safe (one mutex): data-loader threads allocate too.
//   - An optional limit caps reserved bytes (a memory budget, like a smaller device); past it the
//     cache is released and the request retried once, then it fails like the system would.
//   - Out of memory throws hg::Error with the figures, memory_summary() and the ways to need less.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/device.h"

namespace hg {

struct MemoryStats {
  int64_t allocated_bytes = 0;       // in use now
  int64_t peak_allocated_bytes = 0;  // max of allocated_bytes since the last reset_peak()
  int64_t reserved_bytes = 0;        // held from the system: in use + cached
  int64_t peak_reserved_bytes = 0;
  int64_t allocation_count = 0;      // allocate() calls since start
  int64_t cache_hits = 0;            // allocate() calls served from the cache
  int64_t alloc_retries = 0;         // device allocations retried after freeing the cache
  int64_t oom_count = 0;             // allocations that failed even after the retry
  int64_t limit_bytes = 0;           // cap on reserved_bytes (0: none), see set_memory_limit()
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns at least `nbytes` bytes (nbytes may be 0: returns a valid unique pointer).
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr) = 0;
  virtual MemoryStats stats() const = 0;
  virtual void reset_peak() = 0;
  // Gives every cached (free) block back to the system.
  virtual void empty_cache() = 0;
  // Caps the bytes held from the system (0: no cap); blocks already held stay.
  virtual void set_limit(int64_t bytes) = 0;
};

class CpuCachingAllocator final : public Allocator {
 public:
  // Where blocks come from and go back to: aligned host memory by default; pinned (page-locked)
  // memory for the CUDA pinned allocator. raw_allocate returns nullptr on failure.
  using RawAllocate = void* (*)(size_t bytes);
  using RawFree = void (*)(void* ptr);
  CpuCachingAllocator(const char* name = "CpuCachingAllocator", RawAllocate raw_allocate = nullptr,
                      RawFree raw_free = nullptr);
  ~CpuCachingAllocator() override;
  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr) override;
  MemoryStats stats() const override;
  void reset_peak() override;
  void empty_cache() override;
  void set_limit(int64_t bytes) override;

  static size_t size_class(size_t nbytes);

 private:
  void release_cached_blocks();     // with mutex_ held
  void* raw_allocate(size_t size);  // with mutex_ held; nullptr past the limit or on failure

  const char* name_;
  RawAllocate raw_allocate_;
  RawFree raw_free_;
  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_blocks_;  // size class -> cached blocks
  std::unordered_map<void*, size_t> block_size_;                // live block -> its size class
  MemoryStats stats_;
};

// The allocator that owns memory of `device` (process-wide, lives until exit).
Allocator& allocator_for(const Device& device);
MemoryStats memory_stats(const Device& device = kCPU);
void reset_peak_memory(const Device& device = kCPU);
void empty_cache(const Device& device = kCPU);
// Caps what `device`'s allocator may reserve (0: no cap): a fixed memory budget for benchmarks and
// tests on the CPU and the emulated device, or a share of a real GPU.
void set_memory_limit(const Device& device, int64_t bytes);

// Host memory that holds activations offloaded from the CPU device (engine/activation_offload.h) and
// the optimizer state of ZeRO-Offload on the CPU device (dist/zero_offload.cpp), kept apart from the
// CPU device's allocator so that the split shows in the statistics (and a device memory limit does
// not cover it). Offload from a CUDA device goes to pinned memory instead.
Allocator& host_offload_allocator();
// Statistics of pinned (page-locked) host memory; zeros in a build without a CUDA backend.
MemoryStats pinned_memory_stats();

// A table of every allocator's statistics: the CPU, each CUDA device in use, pinned host memory and
// the host offload pool -- allocated and reserved (current / peak), allocation count, cache hits,
// retries, out-of-memory count, limit.
std::string memory_summary();
// The ways to need less memory (appended to out-of-memory errors).
std::string out_of_memory_advice();

}  // namespace hg
