// memory_summary(): one readable table of every allocator's statistics, and the advice appended to
// out-of-memory errors.
#include <cstdio>
#include <string>
#include <vector>

#include "engine/allocator.h"
#include "engine/cuda/cuda_context.h"

namespace hg {

namespace {

std::string mib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", double(bytes) / (1024.0 * 1024.0));
  return text;
}

std::string row(const std::string& name, const MemoryStats& s) {
  char line[256];
  std::snprintf(line, sizeof line, "%-18s %12s %12s %12s %12s %9lld %9lld %7lld %5lld %12s\n", name.c_str(),
                mib(s.allocated_bytes).c_str(), mib(s.peak_allocated_bytes).c_str(), mib(s.reserved_bytes).c_str(),
                mib(s.peak_reserved_bytes).c_str(), (long long)s.allocation_count, (long long)s.cache_hits,
                (long long)s.alloc_retries, (long long)s.oom_count,
                s.limit_bytes > 0 ? mib(s.limit_bytes).c_str() : "none");
  return line;
}

}  // namespace

std::string memory_summary() {
  char header[256];
  std::snprintf(header, sizeof header, "%-18s %12s %12s %12s %12s %9s %9s %7s %5s %12s\n", "memory", "allocated",
                "peak alloc", "reserved", "peak reserved", "allocs", "hits", "retries", "OOMs", "limit");
  std::string table = header;
  table += row("cpu", memory_stats(kCPU));
  for (int i = 0; i < cuda::device_count(); ++i) table += row(Device::cuda(i).str(), memory_stats(Device::cuda(i)));
  if (cuda::device_count() > 0) table += row("pinned host", pinned_memory_stats());
  const MemoryStats offload = host_offload_allocator().stats();
  if (offload.allocation_count > 0) table += row("host offload pool", offload);
  return table;
}

std::string out_of_memory_advice() {
  return "ways to need less memory (train_gpt flags): a smaller --batch with gradient accumulation (--grad-accum N); "
         "half-precision activations and weights (--precision bf16); activation recompute "
         "(--recompute-every K, hg::recompute); activation offload to host memory (--offload-activations "
         "inputs|all, hg::ActivationOffload); sharded optimizer state (--zero); optimizer state in host memory "
         "(--offload-optimizer)";
}

}  // namespace hg
