#pragma once
// hg::cuda::Graph: capture the device work a piece of host code enqueues on one stream once, then
// replay it with a single cudaGraphLaunch -- no per-kernel launch cost, no host work, no allocation.
//
//   cuda::Graph step;
//   run_step();                                    // warm up eagerly first (lazy initialisation,
//                                                  // plan caches, the allocator's shared pools)
//   step.capture(cuda::compute_stream(0), [&] { run_step(); });
//   for (...) step.replay();                       // 1 graph launch, 0 allocations, 0 host waits
//
// What a captured function may do is what CUDA stream capture allows: enqueue kernels, async copies
// and memsets, host functions and event record/wait (other streams may fork from the capture stream
// and must join back). It must not synchronise the host (stream, event or device synchronisation, a
// synchronous cudaMemcpy, reading a tensor on the host), cudaMalloc/cudaFree outside the allocator, or
// wait on an event recorded before the capture. The runtime answers such a call with a CUDA error and
// invalidates the capture; capture() then throws.
//
// Memory (engine/cuda/cuda_allocator.h): blocks allocated during the capture come from the graph's
// private pool and stay reserved for the graph until it is destroyed; tensors created inside the
// captured function are the graph's static buffers: each replay rewrites them in place (keep a handle
// on an output to read it after a replay). Inputs are read from the addresses captured: change an
// input by writing into the same tensor's memory, not by making a new tensor.
//
// Replays are ordered on the capture stream like any other work on it. A Graph is movable, not copyable.
#include <cstddef>
#include <cstdint>
#include <functional>

#include "engine/cuda/cuda_context.h"

struct CUgraphExec_st;

namespace hg::cuda {

// How strictly the runtime refuses unsafe calls during the capture (cudaStreamCaptureMode):
// this_thread (ThreadLocal): only calls from the capturing thread; global: calls from any thread whose
// own mode is global (e.g. another thread's cudaMalloc) also fail and invalidate the capture.
enum class CaptureMode { this_thread, global };

class Graph {
 public:
  Graph() = default;
  ~Graph();
  Graph(Graph&& other) noexcept;
  Graph& operator=(Graph&& other) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Begins capturing `stream` (a stream created by the engine, e.g. compute_stream(d); never the legacy
  // stream), runs fn, ends the capture and instantiates the graph. A graph captured before is released
  // first. If fn throws, or a CUDA call inside it fails, or the capture is invalidated or left with an
  // unjoined fork, the capture is ended and discarded and an hg::Error names the CUDA error and what
  // fn threw.
  void capture(Stream stream, const std::function<void()>& fn, CaptureMode mode = CaptureMode::this_thread);
  // Launches the captured work on the capture stream (asynchronously, as any enqueued work).
  void replay() const;

  bool captured() const { return exec_ != nullptr; }
  Stream stream() const { return stream_; }
  // Nodes of the captured graph (kernels, copies, memsets, host functions, ...).
  size_t node_count() const { return nodes_; }
  // Device memory the graph's private pool reserved during capture.
  size_t pool_reserved_bytes() const;

 private:
  void reset() noexcept;

  Stream stream_ = nullptr;
  int device_ = 0;
  CUgraphExec_st* exec_ = nullptr;
  uint64_t pool_ = 0;  // the allocator's graph pool (0: none)
  size_t nodes_ = 0;
};

}  // namespace hg::cuda
