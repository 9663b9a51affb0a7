#pragma once
// Runtime accounting: how many CUDA runtime calls that cost the GPU (or the host) time a piece of
// work made -- allocations and frees, synchronisations (explicit and implicit), kernel launches,
// library calls, copies and their bytes. A steady-state training step should make no allocation, no
// free, no device-wide synchronisation and at most one host wait (the loss readback of a logging
// step); these counters are how that is asserted, in CI on the emulated device and on a real GPU.
//
// Who counts:
//   - the emulated build: the SIMT emulator's runtime (kernels/emu/runtime.cpp) and launch helper count
//     every call it serves, whoever makes it;
//   - the nvcc build: the project's calls into the CUDA runtime are linked through counting wrappers
//     (engine/cuda/runtime_counting.cpp, `-Wl,--wrap`), and kernels/cuda/launch.h counts launches;
//   - the library wrappers (kernels/cuda/gemm.cpp, the cuDNN and NCCL code) count their own calls.
// The storage is inline in this header so every library (including the emulator's) shares it.
//
// Snapshot before and after the work and subtract: `auto before = runtime_counters(); ...;
// RuntimeCounters step = runtime_counters() - before;`. Counters are process-wide and thread-safe
// (relaxed atomics: a snapshot taken while other threads count may mix their calls).
#include <array>
#include <atomic>
#include <cstdint>
#include <string>

namespace hg {

enum class RuntimeCounter : int {
  device_allocs,       // cudaMalloc (and cudaMallocAsync)
  device_frees,        // cudaFree (and cudaFreeAsync); cudaFree also synchronises the device
  pinned_allocs,       // cudaMallocHost / cudaHostAlloc
  pinned_frees,        // cudaFreeHost
  device_syncs,        // device-wide: cudaDeviceSynchronize, cudaFree, synchronous cudaMemcpy/cudaMemset
  stream_syncs,        // cudaStreamSynchronize: the host waits for one stream
  event_syncs,         // cudaEventSynchronize: the host waits for one event
  kernel_launches,     // hand-written kernels
  blas_calls,          // cublasLtMatmul
  blas_heuristic_queries,  // cublasLtMatmulAlgoGetHeuristic (a plan cache miss)
  dnn_calls,           // cuDNN convolution calls
  collective_calls,    // NCCL collectives
  events_created,      // cudaEventCreate(WithFlags)
  event_records,       // cudaEventRecord
  stream_waits,        // cudaStreamWaitEvent (device-side, no host wait)
  h2d_copies,
  d2h_copies,
  d2d_copies,
  h2d_bytes,
  d2h_bytes,
  d2d_bytes,
  graph_launches,      // cudaGraphLaunch
  count_
};

inline constexpr int kRuntimeCounterCount = int(RuntimeCounter::count_);

inline const char* runtime_counter_name(RuntimeCounter c) {
  static constexpr const char* names[kRuntimeCounterCount] = {
      "device_allocs", "device_frees",     "pinned_allocs",    "pinned_frees",   "device_syncs",
      "stream_syncs",  "event_syncs",      "kernel_launches",  "blas_calls",     "blas_heuristic_queries",
      "dnn_calls",     "collective_calls", "events_created",   "event_records",  "stream_waits",
      "h2d_copies",    "d2h_copies",       "d2d_copies",       "h2d_bytes",      "d2h_bytes",
      "d2d_bytes",     "graph_launches"};
  return names[int(c)];
}

// A snapshot (or a difference of two).
struct RuntimeCounters {
  std::array<int64_t, kRuntimeCounterCount> value{};

  int64_t operator[](RuntimeCounter c) const { return value[size_t(c)]; }
  // Host waits: every call that blocks the host until the device has done something.
  int64_t host_waits() const {
    return (*this)[RuntimeCounter::device_syncs] + (*this)[RuntimeCounter::stream_syncs] +
           (*this)[RuntimeCounter::event_syncs];
  }
  RuntimeCounters operator-(const RuntimeCounters& o) const {
    RuntimeCounters d;
    for (size_t i = 0; i < value.size(); ++i) d.value[i] = value[i] - o.value[i];
    return d;
  }
  RuntimeCounters& operator+=(const RuntimeCounters& o) {
    for (size_t i = 0; i < value.size(); ++i) value[i] += o.value[i];
    return *this;
  }
  // {"device_allocs": 0, ...} (every counter, in enum order).
  std::string json() const {
    std::string out = "{";
    for (int i = 0; i < kRuntimeCounterCount; ++i) {
      if (i) out += ", ";
      out += '"';
      out += runtime_counter_name(RuntimeCounter(i));
      out += "\": ";
      out += std::to_string(value[size_t(i)]);
    }
    return out + "}";
  }
};

namespace detail {
inline std::array<std::atomic<int64_t>, kRuntimeCounterCount> g_runtime_counters{};
}  // namespace detail

inline void count_runtime(RuntimeCounter c, int64_t n = 1) {
  detail::g_runtime_counters[size_t(c)].fetch_add(n, std::memory_order_relaxed);
}

inline RuntimeCounters runtime_counters() {
  RuntimeCounters s;
  for (size_t i = 0; i < s.value.size(); ++i) s.value[i] = detail::g_runtime_counters[i].load(std::memory_order_relaxed);
  return s;
}

}  // namespace hg
