#pragma once
// Internal to the emulator's runtime (runtime.cpp, graph.cpp; nothing else includes it): the handle
// types behind cudaStream_t / cudaEvent_t / cudaGraph_t / cudaGraphExec_t, the state the runtime
// tracks, and the stream-capture bookkeeping both files share.
//
// Stream capture, as the runtime models it: a Capture is one capture sequence (cudaStreamBeginCapture on
// its origin stream up to cudaStreamEndCapture). Every stream that belongs to it (the origin, and each
// stream that waited on an event recorded in it) points to it; work enqueued on such a stream becomes a
// node of the capture's graph instead of running. Each capturing stream keeps its dependency set (the
// nodes the next node on it depends on), and an event recorded in the capture keeps the recording
// stream's set, so fork/join through events builds the graph's edges as CUDA does, and EndCapture can
// tell a fork that was never joined back.
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kernels/emu/runtime.h"

struct CUgraphNode_st {
  cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
  std::function<void(cudaStream_t)> run;  // replays the operation (the graph's launch stream)
  std::vector<CUgraphNode_st*> dependencies;
};

struct CUgraph_st {
  std::vector<std::unique_ptr<CUgraphNode_st>> nodes;  // in capture order: a topological order
};

struct CUgraphExec_st {
  std::vector<std::function<void(cudaStream_t)>> steps;  // the nodes' operations, in capture order
};

namespace hg::emu::internal {

struct Capture {
  uint64_t id = 0;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;          // the thread that began it
  CUstream_st* origin = nullptr;
  std::set<CUstream_st*> streams;  // the origin and every stream that joined
  std::unique_ptr<CUgraph_st> graph;
  bool active = true;              // false once ended
  bool invalidated = false;
};

}  // namespace hg::emu::internal

struct CUstream_st {
  unsigned flags = 0;
  int priority = 0;
  std::shared_ptr<hg::emu::internal::Capture> capture;  // set while the stream takes part in a capture
  std::vector<CUgraphNode_st*> dependencies;            // while capturing: what the next node depends on
};

struct CUevent_st {
  unsigned flags = 0;
  bool recorded = false;
  std::chrono::steady_clock::time_point time;
  std::shared_ptr<hg::emu::internal::Capture> capture;  // set when last recorded in a capturing stream
  std::vector<CUgraphNode_st*> dependencies;            // the recording stream's set at that point
};

namespace hg::emu::internal {

// Everything the runtime tracks, under one mutex (runtime calls are not on any hot path).
struct State {
  std::mutex mutex;
  std::map<uintptr_t, size_t> device;  // cudaMalloc'ed ranges: start -> bytes
  std::map<uintptr_t, size_t> host;    // cudaMallocHost'ed ranges
  std::set<const CUstream_st*> streams;
  std::set<const CUevent_st*> events;
  std::set<const CUgraph_st*> graphs;
  std::set<const CUgraphExec_st*> execs;
  std::vector<std::shared_ptr<Capture>> captures;  // the active ones
  uint64_t next_capture_id = 1;
  std::unordered_map<const void*, size_t> max_dynamic_shared;
  size_t device_bytes = 0;
  size_t limit = 0;  // 0: physical memory
  size_t total() const;
};

State& state();

// Records a failure as the thread's last error (as the runtime does) and returns it.
cudaError_t fail(cudaError_t e);

bool is_legacy(cudaStream_t stream);  // 0 or cudaStreamLegacy
// The capture `stream` takes part in (null when none, and for 0 / the special streams). Caller holds
// the mutex.
Capture* capture_of(cudaStream_t stream);

// A "potentially unsafe" call (cudaMalloc, cudaFree, cudaMallocHost, cudaFreeHost, cudaDeviceSynchronize,
// synchronous cudaMemcpy/cudaMemset) while the calling thread may not make one: when this thread has a
// capture begun in Global or ThreadLocal mode, or (this thread's interaction mode being Global, see
// cudaThreadExchangeStreamCaptureMode) another thread has one begun in Global mode. Invalidates those
// captures and returns cudaErrorStreamCaptureUnsupported; else cudaSuccess.
cudaError_t refuse_unsafe_call();
// Use of the legacy stream while a capture that contains a blocking stream (one created without
// cudaStreamNonBlocking, which the legacy stream synchronises with) is active: invalidates it and
// returns cudaErrorStreamCaptureImplicit. cudaSuccess for any other stream.
cudaError_t refuse_implicit_legacy_use(cudaStream_t stream);
// Marks `capture` invalidated. Caller holds the mutex.
void invalidate(Capture& capture);

// Enqueueing work on `stream`: checks the stream (cudaErrorInvalidResourceHandle), the legacy-stream
// rule, and a capture that was invalidated (cudaErrorStreamCaptureInvalidated). On success *capturing is
// the stream when it is being captured (record the work with record_node), else null (run it now).
cudaError_t begin_enqueue(cudaStream_t stream, CUstream_st** capturing);
// Appends a node to the capture `stream` takes part in: it depends on the stream's dependency set and
// becomes that set. A no-op (returns false) when the capture has ended meanwhile.
bool record_node(CUstream_st* stream, cudaGraphNodeType type, std::function<void(cudaStream_t)> run);

}  // namespace hg::emu::internal
