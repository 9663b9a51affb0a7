#include "engine/allocator.h"

#include <algorithm>
#include <bit>
#include <cstdlib>

#include "engine/cuda/cuda_allocator.h"
#include "kernels/error.h"

namespace hg {

namespace {
constexpr size_t kAlignment = 64;
constexpr size_t kSmallLimit = 4096;
}  // namespace

size_t CpuCachingAllocator::size_class(size_t nbytes) {
  if (nbytes <= kSmallLimit) return std::max<size_t>(kAlignment, (nbytes + kAlignment - 1) / kAlignment * kAlignment);
  // Eight classes per power of two: round up to a multiple of 2^(floor(log2 n) - 3).
  const size_t step = std::bit_floor(nbytes) >> 3;
  return (nbytes + step - 1) / step * step;
}

namespace {
void* aligned_host_allocate(size_t bytes) { return std::aligned_alloc(kAlignment, bytes); }
void host_free(void* ptr) { std::free(ptr); }
}  // namespace

CpuCachingAllocator::CpuCachingAllocator(const char* name, RawAllocate raw_allocate, RawFree raw_free)
    : name_(name),
      raw_allocate_(raw_allocate ? raw_allocate : aligned_host_allocate),
      raw_free_(raw_free ? raw_free : host_free) {}

CpuCachingAllocator::~CpuCachingAllocator() { empty_cache(); }

void CpuCachingAllocator::release_cached_blocks() {
  for (auto& [size, blocks] : free_blocks_) {
    for (void* block : blocks) raw_free_(block);
    stats_.reserved_bytes -= int64_t(size * blocks.size());
  }
  free_blocks_.clear();
}

void* CpuCachingAllocator::raw_allocate(size_t size) {
  if (stats_.limit_bytes > 0 && stats_.reserved_bytes + int64_t(size) > stats_.limit_bytes) return nullptr;
  return raw_allocate_(size);
}

void* CpuCachingAllocator::allocate(size_t nbytes) {
  const size_t size = size_class(nbytes);
  std::unique_lock<std::mutex> lock(mutex_);
  void* ptr = nullptr;
  auto& cached = free_blocks_[size];
  if (!cached.empty()) {
    ptr = cached.back();
    cached.pop_back();
    ++stats_.cache_hits;
  } else {
    ptr = raw_allocate(size);
    if (ptr == nullptr) {
      // Give the cache back and try once more before reporting.
      ++stats_.alloc_retries;
      release_cached_blocks();
      ptr = raw_allocate(size);
    }
    if (ptr == nullptr) {
      ++stats_.oom_count;
      const MemoryStats at_failure = stats_;
      lock.unlock();  // the summary reads every allocator's statistics, this one's too
      HG_FAIL("[", name_, "] out of host memory: requested ", size, " bytes with ", at_failure.allocated_bytes,
              " bytes allocated and ", at_failure.reserved_bytes, " reserved",
              at_failure.limit_bytes > 0 ? " (limit " + std::to_string(at_failure.limit_bytes) + " bytes)" : "", "\n",
              memory_summary(), out_of_memory_advice());
    }
    stats_.reserved_bytes += int64_t(size);
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  }
  block_size_[ptr] = size;
  ++stats_.allocation_count;
  stats_.allocated_bytes += int64_t(size);
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  return ptr;
}

void CpuCachingAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = block_size_.find(ptr);
  if (it == block_size_.end()) return;  // not ours: nothing sensible to do in a deleter
  const size_t size = it->second;
  block_size_.erase(it);
  stats_.allocated_bytes -= int64_t(size);
  free_blocks_[size].push_back(ptr);
}

MemoryStats CpuCachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CpuCachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

void CpuCachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_blocks();
}

void CpuCachingAllocator::set_limit(int64_t bytes) {
  HG_CHECK(bytes >= 0, "[", name_, "] memory limit ", bytes, " is negative; expected bytes >= 0 (0: no limit)");
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.limit_bytes = bytes;
}

Allocator& allocator_for(const Device& device) {
  if (device.is_cpu()) {
    // Leaked on purpose: tensors in static storage may be freed after main returns.
    static auto* cpu = new CpuCachingAllocator();
    return *cpu;
  }
  return cuda::device_allocator(device.index);
}

MemoryStats memory_stats(const Device& device) { return allocator_for(device).stats(); }
void reset_peak_memory(const Device& device) { allocator_for(device).reset_peak(); }
void empty_cache(const Device& device) { allocator_for(device).empty_cache(); }
void set_memory_limit(const Device& device, int64_t bytes) { allocator_for(device).set_limit(bytes); }

Allocator& host_offload_allocator() {
  static auto* pool = new CpuCachingAllocator("host offload pool");  // process lifetime, like the CPU's
  return *pool;
}

}  // namespace hg
