// hg::cuda::Graph (see cuda_graph.h): stream capture with the caching allocator's private graph pool,
// instantiation, replay, and a clear error when the captured code does something capture forbids.
#include "engine/cuda/cuda_graph.h"

#include <exception>
#include <string>
#include <utility>

#include "engine/cuda/cuda_allocator.h"
#include "kernels/cuda/check.h"

namespace hg::cuda {

namespace {

constexpr const char* kCaptureAdvice =
    "work captured into a CUDA graph must only enqueue device work on the capture stream (or on streams "
    "that fork from it with events and join back): no stream/event/device synchronisation or host read "
    "of a tensor, no synchronous cudaMemcpy/cudaMemset, no cudaMalloc/cudaFree outside the caching "
    "allocator, no legacy-stream work, no wait on an event recorded before the capture. Warm up: run the "
    "work once eagerly before capturing, so that lazy initialisation happens outside the capture";

std::string message_of(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

std::string cuda_error(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}

}  // namespace

Graph::~Graph() { reset(); }

Graph::Graph(Graph&& other) noexcept
    : stream_(std::exchange(other.stream_, nullptr)),
      device_(other.device_),
      exec_(std::exchange(other.exec_, nullptr)),
      pool_(std::exchange(other.pool_, 0)),
      nodes_(std::exchange(other.nodes_, 0)) {}

Graph& Graph::operator=(Graph&& other) noexcept {
  if (this != &other) {
    reset();
    stream_ = std::exchange(other.stream_, nullptr);
    device_ = other.device_;
    exec_ = std::exchange(other.exec_, nullptr);
    pool_ = std::exchange(other.pool_, 0);
    nodes_ = std::exchange(other.nodes_, 0);
  }
  return *this;
}

void Graph::reset() noexcept {
  if (exec_) (void)cudaGraphExecDestroy(exec_);
  exec_ = nullptr;
  if (pool_) device_allocator(device_).release_graph_pool(pool_);
  pool_ = 0;
  nodes_ = 0;
  stream_ = nullptr;
}

void Graph::capture(Stream stream, const std::function<void()>& fn, CaptureMode mode) {
  HG_CHECK(stream != nullptr, "[cuda] Graph::capture: the stream is null (the legacy stream cannot be captured); "
                              "expected a stream created by the engine, e.g. cuda::compute_stream(device)");
  HG_CHECK(fn != nullptr, "[cuda] Graph::capture: no function to capture");
  reset();
  int device = 0;
  HG_CUDA_CHECK(cudaGetDevice(&device));
  CudaCachingAllocator& allocator = device_allocator(device);

  const cudaStreamCaptureMode cuda_mode =
      mode == CaptureMode::global ? cudaStreamCaptureModeGlobal : cudaStreamCaptureModeThreadLocal;
  const cudaError_t begun = cudaStreamBeginCapture(stream, cuda_mode);
  if (begun != cudaSuccess) {
    (void)cudaGetLastError();
    HG_FAIL("[cuda] Graph::capture: cudaStreamBeginCapture failed: ", cuda_error(begun));
  }
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long capture_id = 0;
  const cudaError_t info = cudaStreamGetCaptureInfo(stream, &status, &capture_id);
  const uint64_t pool = info == cudaSuccess ? allocator.begin_graph_pool(capture_id) : 0;

  std::exception_ptr failure;
  if (info == cudaSuccess) {
    try {
      fn();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (pool) allocator.end_graph_capture(pool);

  if (info != cudaSuccess || failure || ended != cudaSuccess) {
    (void)cudaGetLastError();
    if (graph) (void)cudaGraphDestroy(graph);
    if (pool) allocator.release_graph_pool(pool);
    std::string what = "[cuda] CUDA graph capture failed and was discarded: ";
    if (info != cudaSuccess) what += "cudaStreamGetCaptureInfo: " + cuda_error(info);
    if (failure) what += "the captured function threw: " + message_of(failure);
    if (ended != cudaSuccess) what += std::string(failure ? "; then " : "") + "cudaStreamEndCapture: " + cuda_error(ended);
    HG_FAIL(what, ".\n", kCaptureAdvice);
  }

  size_t nodes = 0;
  if (cudaGraphGetNodes(graph, nullptr, &nodes) != cudaSuccess) {
    (void)cudaGetLastError();
    nodes = 0;
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  if (instantiated != cudaSuccess) {
    (void)cudaGetLastError();
    allocator.release_graph_pool(pool);
    HG_FAIL("[cuda] Graph::capture: cudaGraphInstantiate failed: ", cuda_error(instantiated));
  }
  stream_ = stream;
  device_ = device;
  exec_ = exec;
  pool_ = pool;
  nodes_ = nodes;
}

void Graph::replay() const {
  HG_CHECK(exec_ != nullptr, "[cuda] Graph::replay: nothing was captured (call capture first)");
  HG_CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
}

size_t Graph::pool_reserved_bytes() const {
  return pool_ ? device_allocator(device_).graph_pool_reserved_bytes(pool_) : 0;
}

}  // namespace hg::cuda
