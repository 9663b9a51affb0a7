// Stream capture and CUDA graphs for the emulator's runtime (see runtime.h for the API subset and
// runtime_state.h for the model).
//
// While a stream is captured, the work enqueued on it (kernel launches, cudaMemcpyAsync,
// cudaMemsetAsync, cudaLaunchHostFunc, hg::emu::enqueue_host_work, cudaGraphLaunch) becomes a node of the
// capture's graph instead of running. cudaGraphInstantiate copies the nodes' operations; cudaGraphLaunch
// runs them, in capture order (a topological order of the graph), when it is called -- as every emulated
// operation runs when it is enqueued. What CUDA forbids during capture is answered with CUDA's error and
// invalidates the capture, so that cudaStreamEndCapture then fails with
// cudaErrorStreamCaptureInvalidated; the checks live where those calls are (runtime.cpp) and here.
#include <algorithm>
#include <unordered_set>

#include "kernels/emu/runtime_state.h"
#include "kernels/runtime_counters.h"

namespace hg::emu::internal {

namespace {
thread_local cudaStreamCaptureMode t_interaction_mode = cudaStreamCaptureModeGlobal;

bool is_blocking(const CUstream_st* s) { return (s->flags & cudaStreamNonBlocking) == 0; }

// Leaves the capture: every stream it holds stops capturing. Caller holds the mutex.
void finish(State& s, Capture& capture) {
  capture.active = false;
  for (CUstream_st* stream : capture.streams) {
    stream->capture.reset();
    stream->dependencies.clear();
  }
  capture.streams.clear();
  s.captures.erase(std::remove_if(s.captures.begin(), s.captures.end(),
                                  [&](const std::shared_ptr<Capture>& c) { return c.get() == &capture; }),
                   s.captures.end());
}

// Whether every stream that joined `capture` has had its work joined back into the origin stream: each
// node another stream would depend on next is the origin's dependency or one of its ancestors.
bool all_joined(const Capture& capture) {
  std::unordered_set<const CUgraphNode_st*> ancestors;
  std::vector<const CUgraphNode_st*> todo(capture.origin->dependencies.begin(), capture.origin->dependencies.end());
  while (!todo.empty()) {
    const CUgraphNode_st* node = todo.back();
    todo.pop_back();
    if (!ancestors.insert(node).second) continue;
    todo.insert(todo.end(), node->dependencies.begin(), node->dependencies.end());
  }
  for (const CUstream_st* stream : capture.streams) {
    if (stream == capture.origin) continue;
    for (const CUgraphNode_st* node : stream->dependencies)
      if (!ancestors.count(node)) return false;
  }
  return true;
}
}  // namespace

bool is_legacy(cudaStream_t stream) { return stream == nullptr || stream == cudaStreamLegacy; }

Capture* capture_of(cudaStream_t stream) {
  if (is_legacy(stream) || stream == cudaStreamPerThread) return nullptr;
  return stream->capture.get();
}

void invalidate(Capture& capture) { capture.invalidated = true; }

cudaError_t refuse_unsafe_call() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.captures.empty() || t_interaction_mode == cudaStreamCaptureModeRelaxed) return cudaSuccess;
  const std::thread::id me = std::this_thread::get_id();
  bool refused = false;
  for (const auto& capture : s.captures) {
    const bool own = capture->thread == me && capture->mode != cudaStreamCaptureModeRelaxed;
    const bool other_global = capture->thread != me && capture->mode == cudaStreamCaptureModeGlobal &&
                              t_interaction_mode == cudaStreamCaptureModeGlobal;
    if (own || other_global) {
      invalidate(*capture);
      refused = true;
    }
  }
  return refused ? fail(cudaErrorStreamCaptureUnsupported) : cudaSuccess;
}

cudaError_t refuse_implicit_legacy_use(cudaStream_t stream) {
  if (!is_legacy(stream)) return cudaSuccess;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  bool refused = false;
  for (const auto& capture : s.captures) {
    if (std::any_of(capture->streams.begin(), capture->streams.end(), is_blocking)) {
      invalidate(*capture);
      refused = true;
    }
  }
  return refused ? fail(cudaErrorStreamCaptureImplicit) : cudaSuccess;
}

cudaError_t begin_enqueue(cudaStream_t stream, CUstream_st** capturing) {
  *capturing = nullptr;
  if (!detail::is_valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = refuse_implicit_legacy_use(stream); e != cudaSuccess) return e;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (Capture* capture = capture_of(stream)) {
    if (capture->invalidated) return fail(cudaErrorStreamCaptureInvalidated);
    *capturing = stream;
  }
  return cudaSuccess;
}

bool record_node(CUstream_st* stream, cudaGraphNodeType type, std::function<void(cudaStream_t)> run) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  Capture* capture = stream->capture.get();
  if (!capture || !capture->active) return false;
  auto node = std::make_unique<CUgraphNode_st>();
  node->type = type;
  node->run = std::move(run);
  node->dependencies = stream->dependencies;
  stream->dependencies = {node.get()};
  capture->graph->nodes.push_back(std::move(node));
  return true;
}

}  // namespace hg::emu::internal

using hg::emu::internal::Capture;
using hg::emu::internal::fail;
using hg::emu::internal::state;

// ---- capture -----------------------------------------------------------------------------------------

// Only streams the application created can be captured (not the legacy stream; the per-thread default
// stream is not emulated as a capture origin): cudaErrorStreamCaptureUnsupported. A stream already in a
// capture: cudaErrorIllegalState.
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  if (!hg::emu::detail::is_valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (hg::emu::internal::is_legacy(stream) || stream == cudaStreamPerThread)
    return fail(cudaErrorStreamCaptureUnsupported);
  if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
      mode != cudaStreamCaptureModeRelaxed)
    return fail(cudaErrorInvalidValue);
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (stream->capture) return fail(cudaErrorIllegalState);
  auto capture = std::make_shared<Capture>();
  capture->id = s.next_capture_id++;
  capture->mode = mode;
  capture->thread = std::this_thread::get_id();
  capture->origin = stream;
  capture->streams.insert(stream);
  capture->graph = std::make_unique<CUgraph_st>();
  stream->capture = capture;
  stream->dependencies.clear();
  s.captures.push_back(std::move(capture));
  return cudaSuccess;
}

// Ends the capture begun on `stream` and hands out its graph. Every stream that joined leaves the
// capture, whatever the outcome. Refused: a stream that is not capturing (cudaErrorIllegalState), one that
// joined but did not begin it (cudaErrorStreamCaptureUnmatched, and the capture is invalidated), a Global/ThreadLocal capture ended by
// another thread (cudaErrorStreamCaptureWrongThread); failed, with *pGraph null: a capture that was
// invalidated (cudaErrorStreamCaptureInvalidated) or a fork not joined back (cudaErrorStreamCaptureUnjoined).
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph) {
  if (!pGraph) return fail(cudaErrorInvalidValue);
  *pGraph = nullptr;
  if (!hg::emu::detail::is_valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  Capture* capture = hg::emu::internal::capture_of(stream);
  if (!capture) return fail(cudaErrorIllegalState);
  if (capture->origin != stream) {
    hg::emu::internal::invalidate(*capture);
    return fail(cudaErrorStreamCaptureUnmatched);
  }
  if (capture->mode != cudaStreamCaptureModeRelaxed && capture->thread != std::this_thread::get_id())
    return fail(cudaErrorStreamCaptureWrongThread);
  const std::shared_ptr<Capture> keep = stream->capture;
  const bool joined = capture->invalidated || hg::emu::internal::all_joined(*capture);
  hg::emu::internal::finish(s, *capture);
  if (capture->invalidated) return fail(cudaErrorStreamCaptureInvalidated);
  if (!joined) return fail(cudaErrorStreamCaptureUnjoined);
  CUgraph_st* graph = capture->graph.release();
  s.graphs.insert(graph);
  *pGraph = graph;
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* pCaptureStatus) {
  if (!pCaptureStatus) return fail(cudaErrorInvalidValue);
  if (!hg::emu::detail::is_valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = hg::emu::internal::refuse_implicit_legacy_use(stream); e != cudaSuccess) return e;
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const Capture* capture = hg::emu::internal::capture_of(stream);
  *pCaptureStatus = !capture                ? cudaStreamCaptureStatusNone
                    : capture->invalidated ? cudaStreamCaptureStatusInvalidated
                                           : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

// The status, the capture's unique id, its graph (still being built), and the stream's dependency set.
// Edge data are never set (*edgeData_out = null: every edge is a default one).
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* captureStatus_out,
                                     unsigned long long* id_out, cudaGraph_t* graph_out,
                                     const cudaGraphNode_t** dependencies_out, const cudaGraphEdgeData** edgeData_out,
                                     size_t* numDependencies_out) {
  if (!captureStatus_out) return fail(cudaErrorInvalidValue);
  if (!hg::emu::detail::is_valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = hg::emu::internal::refuse_implicit_legacy_use(stream); e != cudaSuccess) return e;
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const Capture* capture = hg::emu::internal::capture_of(stream);
  *captureStatus_out = !capture                ? cudaStreamCaptureStatusNone
                       : capture->invalidated ? cudaStreamCaptureStatusInvalidated
                                              : cudaStreamCaptureStatusActive;
  const bool active = capture && !capture->invalidated;
  if (id_out && capture) *id_out = capture->id;
  if (graph_out) *graph_out = active ? capture->graph.get() : nullptr;
  if (dependencies_out) *dependencies_out = active ? stream->dependencies.data() : nullptr;
  if (edgeData_out) *edgeData_out = nullptr;
  if (numDependencies_out) *numDependencies_out = active ? stream->dependencies.size() : 0;
  return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  if (!mode) return fail(cudaErrorInvalidValue);
  if (*mode != cudaStreamCaptureModeGlobal && *mode != cudaStreamCaptureModeThreadLocal &&
      *mode != cudaStreamCaptureModeRelaxed)
    return fail(cudaErrorInvalidValue);
  std::swap(*mode, hg::emu::internal::t_interaction_mode);
  return cudaSuccess;
}

// ---- graphs ------------------------------------------------------------------------------------------

// The graph's nodes in capture order; with nodes null, only their number.
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* numNodes) {
  if (!numNodes) return fail(cudaErrorInvalidValue);
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!graph || s.graphs.count(graph) == 0) return fail(cudaErrorInvalidValue);
  if (nodes) {
    const size_t n = std::min(*numNodes, graph->nodes.size());
    for (size_t i = 0; i < n; ++i) nodes[i] = graph->nodes[i].get();
  }
  *numNodes = graph->nodes.size();
  return cudaSuccess;
}

cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* pType) {
  if (!node || !pType) return fail(cudaErrorInvalidValue);
  *pType = node->type;
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  auto& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!graph || s.graphs.erase(graph) == 0) return fail(cudaErrorInvalidValue);
  }
  delete graph;
  return cudaSuccess;
}

// The executable graph copies the nodes' operations (the graph may be destroyed afterwards). Flags other
// than 0 are not emulated (cudaErrorInvalidValue).
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* pGraphExec, cudaGraph_t graph, unsigned long long flags) {
  if (!pGraphExec) return fail(cudaErrorInvalidValue);
  *pGraphExec = nullptr;
  if (flags != 0) return fail(cudaErrorInvalidValue);
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!graph || s.graphs.count(graph) == 0) return fail(cudaErrorInvalidValue);
  auto* exec = new CUgraphExec_st;
  exec->steps.reserve(graph->nodes.size());
  for (const auto& node : graph->nodes) exec->steps.push_back(node->run);
  s.execs.insert(exec);
  *pGraphExec = exec;
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  auto& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!graphExec || s.execs.erase(graphExec) == 0) return fail(cudaErrorInvalidResourceHandle);
  }
  delete graphExec;
  return cudaSuccess;
}

// Runs the graph's operations in capture order on `stream` (or, on a capturing stream, records the whole
// graph as one child-graph node). Counted as one graph launch; the replayed operations count nothing, as
// on a GPU, where the runtime calls were made once, at capture.
cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  hg::count_runtime(hg::RuntimeCounter::graph_launches);
  std::vector<std::function<void(cudaStream_t)>> steps;
  {
    auto& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!graphExec || s.execs.count(graphExec) == 0) return fail(cudaErrorInvalidResourceHandle);
    steps = graphExec->steps;  // a copy: the exec may be destroyed while it runs (by a host node)
  }
  CUstream_st* capturing = nullptr;
  if (const cudaError_t e = hg::emu::internal::begin_enqueue(stream, &capturing); e != cudaSuccess) return e;
  auto run = [steps = std::move(steps)](cudaStream_t on) {
    for (const auto& step : steps) step(on);
  };
  if (capturing) {
    hg::emu::internal::record_node(capturing, cudaGraphNodeTypeGraph, std::move(run));
  } else {
    run(stream);
  }
  return cudaSuccess;
}
