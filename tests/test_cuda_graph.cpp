// CUDA stream capture and graphs, on the emulated device (every CI run) or a GPU; skipped visibly
// without either.
//
// The runtime: a captured sequence of kernels, async copies, a memset and a fork/join through events
// records without running, and N launches of the graph equal N eager runs bit for bit; each call CUDA
// forbids during capture answers CUDA's error and invalidates the capture (EndCapture then fails with
// cudaErrorStreamCaptureInvalidated); capture modes decide which threads' cudaMalloc is refused; an
// unjoined fork fails. The engine: hg::cuda::Graph captures engine ops after a warm-up, replays them
// bit for bit against eager runs with one graph launch and no allocation, and a step that synchronises
// fails with a clear error naming CUDA's.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/cuda/cuda_allocator.h"
#include "engine/cuda/cuda_context.h"
#include "engine/cuda/cuda_graph.h"
#include "engine/ops.h"
#include "engine/tensor.h"
#include "kernels/cuda/check.h"
#include "kernels/kernels_cuda.h"
#include "kernels/runtime_counters.h"

using namespace hg;

namespace {

bool skip_without_cuda() {
  if (cuda::is_available()) return false;
  static bool said = false;
  if (!said) std::printf("SKIPPED (CUDA graph tests): no CUDA device: %s\n", cuda::unavailable_reason().c_str());
  said = true;
  return true;
}

std::vector<float> random_floats(size_t n, std::mt19937& rng) {
  std::vector<float> v(n);
  for (float& x : v) x = std::uniform_real_distribution<float>(-3.0f, 3.0f)(rng);
  return v;
}

// The buffers of the captured sequence: inputs read from pinned memory, outputs written to it.
struct Sequence {
  size_t n;
  float *x = nullptr, *y = nullptr, *w = nullptr, *acc = nullptr;  // device
  float *in = nullptr, *out_y = nullptr, *out_w = nullptr, *out_acc = nullptr;  // pinned host
  cudaStream_t s = nullptr, side = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;

  explicit Sequence(size_t n_) : n(n_) {
    for (float** p : {&x, &y, &w, &acc}) HG_CUDA_CHECK(cudaMalloc(p, n * sizeof(float)));
    for (float** p : {&in, &out_y, &out_w, &out_acc}) HG_CUDA_CHECK(cudaMallocHost(p, n * sizeof(float)));
    HG_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    HG_CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    HG_CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    HG_CUDA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  }
  ~Sequence() {
    for (float* p : {x, y, w, acc}) (void)cudaFree(p);
    for (float* p : {in, out_y, out_w, out_acc}) (void)cudaFreeHost(p);
    (void)cudaStreamDestroy(s);
    (void)cudaStreamDestroy(side);
    (void)cudaEventDestroy(fork);
    (void)cudaEventDestroy(join);
  }

  // x <- in; y = 1.5 x + 0.25; acc = 0.5 acc + 1 (state carried from run to run); fork: on the side
  // stream w = 3 - 2 y, joined back; y[0..3] = 0; y, w, acc -> pinned outputs.
  void enqueue() const {
    const size_t bytes = n * sizeof(float);
    HG_CUDA_CHECK(cudaMemcpyAsync(x, in, bytes, cudaMemcpyHostToDevice, s));
    kernels::cuda::affine(x, y, int64_t(n), 1.5, 0.25, DType::f32, s);
    kernels::cuda::affine(acc, acc, int64_t(n), 0.5, 1.0, DType::f32, s);
    HG_CUDA_CHECK(cudaEventRecord(fork, s));
    HG_CUDA_CHECK(cudaStreamWaitEvent(side, fork, 0));
    kernels::cuda::affine(y, w, int64_t(n), -2.0, 3.0, DType::f32, side);
    HG_CUDA_CHECK(cudaEventRecord(join, side));
    HG_CUDA_CHECK(cudaStreamWaitEvent(s, join, 0));
    HG_CUDA_CHECK(cudaMemsetAsync(y, 0, 4 * sizeof(float), s));
    HG_CUDA_CHECK(cudaMemcpyAsync(out_y, y, bytes, cudaMemcpyDeviceToHost, s));
    HG_CUDA_CHECK(cudaMemcpyAsync(out_w, w, bytes, cudaMemcpyDeviceToHost, s));
    HG_CUDA_CHECK(cudaMemcpyAsync(out_acc, acc, bytes, cudaMemcpyDeviceToHost, s));
  }
  std::vector<float> outputs() const {
    std::vector<float> all(out_y, out_y + n);
    all.insert(all.end(), out_w, out_w + n);
    all.insert(all.end(), out_acc, out_acc + n);
    return all;
  }
  void poison_outputs() const {
    for (float* p : {out_y, out_w, out_acc}) std::memset(p, 0xff, n * sizeof(float));
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A stream being captured, with a kernel already recorded; end() ends the capture.
struct Capturing {
  cudaStream_t stream = nullptr;
  float* buffer = nullptr;
  bool ended = false;

  Capturing(unsigned flags, cudaStreamCaptureMode mode) {
    HG_CUDA_CHECK(cudaMalloc(&buffer, 256 * sizeof(float)));
    HG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, flags));
    HG_CUDA_CHECK(cudaStreamBeginCapture(stream, mode));
    kernels::cuda::affine(buffer, buffer, 256, 2.0, 1.0, DType::f32, stream);
  }
  // cudaStreamEndCapture's status; a graph it hands out is destroyed, and a failure hands out none.
  cudaError_t end() {
    ended = true;
    cudaGraph_t graph = nullptr;
    const cudaError_t e = cudaStreamEndCapture(stream, &graph);
    if (e != cudaSuccess) CHECK(graph == nullptr);
    if (graph) CHECK(cudaGraphDestroy(graph) == cudaSuccess);
    (void)cudaGetLastError();
    return e;
  }
  ~Capturing() {
    if (!ended) (void)end();
    // The stream works eagerly again.
    kernels::cuda::affine(buffer, buffer, 256, 1.0, 0.0, DType::f32, stream);
    CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
    (void)cudaStreamDestroy(stream);
    (void)cudaFree(buffer);
    (void)cudaGetLastError();
  }
};

}  // namespace

TEST_CASE("capture: a recorded sequence replayed N times equals N eager runs bit for bit") {
  if (skip_without_cuda()) return;
  std::mt19937 rng(std::random_device{}());
  const size_t n = 1000 + rng() % 3000;
  const int runs = 4;
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < runs; ++r) inputs.push_back(random_floats(n, rng));
  const std::vector<float> acc0 = random_floats(n, rng);
  Sequence seq(n);

  std::vector<std::vector<float>> eager;
  HG_CUDA_CHECK(cudaMemcpy(seq.acc, acc0.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  for (int r = 0; r < runs; ++r) {
    std::memcpy(seq.in, inputs[size_t(r)].data(), n * sizeof(float));
    seq.poison_outputs();
    seq.enqueue();
    HG_CUDA_CHECK(cudaStreamSynchronize(seq.s));
    eager.push_back(seq.outputs());
  }
  CHECK(eager[0][5] == doctest::Approx(1.5f * inputs[0][5] + 0.25f).epsilon(1e-6));  // it computed something
  CHECK_FALSE(same_bits(eager[0], eager[1]));

  // Capture: nothing runs.
  HG_CUDA_CHECK(cudaMemcpy(seq.acc, acc0.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  seq.poison_outputs();
  const std::vector<float> poisoned = seq.outputs();
  const auto before_capture = runtime_counters();
  HG_CUDA_CHECK(cudaStreamBeginCapture(seq.s, cudaStreamCaptureModeGlobal));
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CHECK(cudaStreamIsCapturing(seq.s, &status) == cudaSuccess);
  CHECK(status == cudaStreamCaptureStatusActive);
  seq.enqueue();
  CHECK(cudaStreamIsCapturing(seq.side, &status) == cudaSuccess);  // joined through the fork event
  CHECK(status == cudaStreamCaptureStatusActive);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(seq.s, &graph) == cudaSuccess);
  REQUIRE(graph != nullptr);
  CHECK(cudaStreamIsCapturing(seq.side, &status) == cudaSuccess);
  CHECK(status == cudaStreamCaptureStatusNone);
  CHECK(same_bits(seq.outputs(), poisoned));
  CHECK((runtime_counters() - before_capture)[RuntimeCounter::kernel_launches] == 3);  // counted at the call
  size_t nodes = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &nodes) == cudaSuccess);
  CHECK(nodes == 8);  // 1 H2D + 3 kernels + 1 memset + 3 D2H copies
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  CHECK(cudaGraphDestroy(graph) == cudaSuccess);  // the executable graph does not need it

  for (int r = 0; r < runs; ++r) {
    std::memcpy(seq.in, inputs[size_t(r)].data(), n * sizeof(float));
    seq.poison_outputs();
    const auto before = runtime_counters();
    REQUIRE(cudaGraphLaunch(exec, seq.s) == cudaSuccess);
    const RuntimeCounters launch = runtime_counters() - before;
    CHECK(launch[RuntimeCounter::graph_launches] == 1);
    CHECK(launch[RuntimeCounter::kernel_launches] == 0);
    CHECK(launch[RuntimeCounter::h2d_copies] + launch[RuntimeCounter::d2h_copies] == 0);
    HG_CUDA_CHECK(cudaStreamSynchronize(seq.s));
    INFO("run ", r);
    CHECK(same_bits(seq.outputs(), eager[size_t(r)]));
  }
  CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);
  CHECK(cudaGraphExecDestroy(exec) == cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
}

TEST_CASE("capture: each call CUDA forbids answers CUDA's error and invalidates the capture") {
  if (skip_without_cuda()) return;
  cudaEvent_t event = nullptr;
  HG_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  void* p = nullptr;
  std::vector<float> host(256);

  SUBCASE("synchronising or querying the capturing stream") {
    Capturing c(cudaStreamNonBlocking, cudaStreamCaptureModeGlobal);
    CHECK(cudaStreamSynchronize(c.stream) == cudaErrorStreamCaptureUnsupported);
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    CHECK(cudaStreamIsCapturing(c.stream, &status) == cudaSuccess);
    CHECK(status == cudaStreamCaptureStatusInvalidated);
    CHECK(c.end() == cudaErrorStreamCaptureInvalidated);
  }
  SUBCASE("querying the capturing stream") {
    Capturing c(cudaStreamNonBlocking, cudaStreamCaptureModeRelaxed);  // forbidden in every mode
    CHECK(cudaStreamQuery(c.stream) == cudaErrorStreamCaptureUnsupported);
    CHECK(c.end() == cudaErrorStreamCaptureInvalidated);
  }
  SUBCASE("cudaDeviceSynchronize") {
    Capturing c(cudaStreamNonBlocking, cudaStreamCaptureModeGlobal);
    CHECK(cudaDeviceSynchronize() == cudaErrorStreamCaptureUnsupported);
    CHECK(c.end() == cudaErrorStreamCaptureInvalidated);
  }
  SUBCASE("a synchronous cudaMemcpy and cudaMemset") {
    {
      Capturing c(cudaStreamNonBlocking, cudaStreamCaptureModeGlobal);
      CHECK(cudaMemcpy(host.data(), c.buffer, 64, cudaMemcpyDeviceToHost) == cudaErrorStreamCaptureUnsupported);
      CHECK(c.end() == cudaErrorStreamCaptureInvalidated);
    }
    Capturing c(cudaStreamNonBlocking, cudaStreamCaptureModeThreadLocal);
    CHECK(cudaMemset(c.buffer, 0, 64) == cudaErrorStreamCaptureUnsupported);
    CHECK(c.end() == cudaErrorStreamCaptureInvalidated);
  }
  SUBCASE("cudaMalloc, cudaFree and cudaMallocHost from the capturing thread (Global, ThreadLocal)") {
    for (cudaStreamCaptureMode mode : {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal}) {
      {
        Capturing c(cudaStreamNonBlocking, mode);
        CHECK(cudaMalloc(&p, 1024) == cudaErrorStreamCaptureUnsupported);
        CHECK(c.end() == cudaErrorStreamCaptureInvalidated);
      }
      {
        Capturing c(cudaStreamNonBlocking, mode);
        CHECK(cudaMallocHost(&p, 1024) == cudaErrorStreamCaptureUnsupported);
        CHECK(c.end() == cudaErrorStreamCaptureInvalidated);
      }
      void* q = nullptr;
      HG_CUDA_CHECK(cudaMalloc(&q, 1024));
      {
        Capturing c(cudaStreamNonBlocking, mode);
        CHECK(cudaFree(q) == cudaErrorStreamCaptureUnsupported);
        CHECK(c.end() == cudaErrorStreamCaptureInvalidated);
      }
      CHECK(cudaFree(q) == cudaSuccess);
    }
  }
  SUBCASE("cudaMalloc from another thread: refused under a Global capture, allowed under ThreadLocal") {
    cudaError_t other = cudaErrorUnknown;
    void* q = nullptr;
    {
      Capturing c(cudaStreamNonBlocking, cudaStreamCaptureModeThreadLocal);
      std::thread([&] { other = cudaMalloc(&q, 1024); }).join();
      CHECK(other == cudaSuccess);
      CHECK(c.end() == cudaSuccess);
    }
    CHECK(cudaFree(q) == cudaSuccess);
    {
      Capturing c(cudaStreamNonBlocking, cudaStreamCaptureModeGlobal);
      std::thread([&] { other = cudaMalloc(&q, 1024); }).join();
      CHECK(other == cudaErrorStreamCaptureUnsupported);
      CHECK(c.end() == cudaErrorStreamCaptureInvalidated);
    }
  }
  SUBCASE("cudaMalloc under a Relaxed capture, or with the thread's mode relaxed, is allowed") {
    {
      Capturing c(cudaStreamNonBlocking, cudaStreamCaptureModeRelaxed);
      CHECK(cudaMalloc(&p, 1024) == cudaSuccess);
      CHECK(c.end() == cudaSuccess);
    }
    CHECK(cudaFree(p) == cudaSuccess);
    Capturing c(cudaStreamNonBlocking, cudaStreamCaptureModeGlobal);
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    CHECK(cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess);
    CHECK(mode == cudaStreamCaptureModeGlobal);
    CHECK(cudaMalloc(&p, 1024) == cudaSuccess);
    CHECK(cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess);
    CHECK(c.end() == cudaSuccess);
    CHECK(cudaFree(p) == cudaSuccess);
  }
  SUBCASE("the legacy stream while a blocking stream captures") {
    Capturing c(cudaStreamDefault, cudaStreamCaptureModeRelaxed);
    CHECK(cudaMemsetAsync(c.buffer, 0, 64, nullptr) == cudaErrorStreamCaptureImplicit);
    CHECK(c.end() == cudaErrorStreamCaptureInvalidated);
  }
  SUBCASE("the legacy stream while a non-blocking stream captures is independent of it") {
    Capturing c(cudaStreamNonBlocking, cudaStreamCaptureModeRelaxed);
    CHECK(cudaMemsetAsync(c.buffer, 0, 64, nullptr) == cudaSuccess);
    CHECK(c.end() == cudaSuccess);
  }
  SUBCASE("waiting for or querying an event recorded in the capture") {
    {
      Capturing c(cudaStreamNonBlocking, cudaStreamCaptureModeRelaxed);
      CHECK(cudaEventRecord(event, c.stream) == cudaSuccess);
      CHECK(cudaEventSynchronize(event) == cudaErrorCapturedEvent);
      CHECK(c.end() == cudaErrorStreamCaptureInvalidated);
    }
    Capturing c(cudaStreamNonBlocking, cudaStreamCaptureModeRelaxed);
    CHECK(cudaEventRecord(event, c.stream) == cudaSuccess);
    CHECK(cudaEventQuery(event) == cudaErrorCapturedEvent);
    CHECK(c.end() == cudaErrorStreamCaptureInvalidated);
  }
  SUBCASE("waiting on an event recorded outside the capture") {
    cudaStream_t other = nullptr;
    HG_CUDA_CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    HG_CUDA_CHECK(cudaEventRecord(event, other));
    {
      Capturing c(cudaStreamNonBlocking, cudaStreamCaptureModeGlobal);
      CHECK(cudaStreamWaitEvent(c.stream, event, 0) == cudaErrorStreamCaptureIsolation);
      CHECK(c.end() == cudaErrorStreamCaptureInvalidated);
    }
    HG_CUDA_CHECK(cudaStreamDestroy(other));
  }
  SUBCASE("work enqueued after the capture was invalidated is refused") {
    Capturing c(cudaStreamNonBlocking, cudaStreamCaptureModeGlobal);
    CHECK(cudaStreamSynchronize(c.stream) == cudaErrorStreamCaptureUnsupported);
    CHECK(cudaMemsetAsync(c.buffer, 0, 64, c.stream) == cudaErrorStreamCaptureInvalidated);
    CHECK(c.end() == cudaErrorStreamCaptureInvalidated);
  }
  (void)cudaGetLastError();
  CHECK(cudaEventDestroy(event) == cudaSuccess);
}

TEST_CASE("capture: a fork that does not join back fails EndCapture; only the origin ends it") {
  if (skip_without_cuda()) return;
  cudaEvent_t fork = nullptr;
  cudaStream_t side = nullptr;
  HG_CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  HG_CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  {
    Capturing c(cudaStreamNonBlocking, cudaStreamCaptureModeGlobal);
    CHECK(cudaEventRecord(fork, c.stream) == cudaSuccess);
    CHECK(cudaStreamWaitEvent(side, fork, 0) == cudaSuccess);
    kernels::cuda::affine(c.buffer, c.buffer, 256, 1.0, 1.0, DType::f32, side);
    CHECK(c.end() == cudaErrorStreamCaptureUnjoined);
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
    CHECK(cudaStreamIsCapturing(side, &status) == cudaSuccess);
    CHECK(status == cudaStreamCaptureStatusNone);  // the failed end released every stream
  }
  {
    // Ending from a stream that joined but did not begin the capture is refused (and spoils it).
    Capturing c(cudaStreamNonBlocking, cudaStreamCaptureModeGlobal);
    CHECK(cudaEventRecord(fork, c.stream) == cudaSuccess);
    CHECK(cudaStreamWaitEvent(side, fork, 0) == cudaSuccess);
    cudaGraph_t graph = nullptr;
    CHECK(cudaStreamEndCapture(side, &graph) == cudaErrorStreamCaptureUnmatched);
    CHECK(graph == nullptr);
    CHECK(c.end() == cudaErrorStreamCaptureInvalidated);
  }
  HG_CUDA_CHECK(cudaStreamSynchronize(side));
  HG_CUDA_CHECK(cudaStreamDestroy(side));
  HG_CUDA_CHECK(cudaEventDestroy(fork));
  (void)cudaGetLastError();
}

#if defined(HALFGRAD_EMULATED_CUDA)
TEST_CASE("capture: emulated library work (enqueue_host_work) and host functions are recorded, not run") {
  Capturing c(cudaStreamNonBlocking, cudaStreamCaptureModeGlobal);
  int library_calls = 0, host_calls = 0;
  CHECK(emu::enqueue_host_work(c.stream, [&] { ++library_calls; }) == cudaSuccess);
  CHECK(cudaLaunchHostFunc(c.stream, [](void* n) { ++*static_cast<int*>(n); }, &host_calls) == cudaSuccess);
  CHECK(library_calls == 0);
  CHECK(host_calls == 0);
  cudaGraph_t graph = nullptr;
  c.ended = true;
  REQUIRE(cudaStreamEndCapture(c.stream, &graph) == cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  CHECK(cudaGraphDestroy(graph) == cudaSuccess);
  for (int i = 0; i < 3; ++i) CHECK(cudaGraphLaunch(exec, c.stream) == cudaSuccess);
  CHECK(library_calls == 3);
  CHECK(host_calls == 3);
  CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);
}
#endif

// ---- hg::cuda::Graph ------------------------------------------------------------------------------------

TEST_CASE("Graph: engine ops captured after a warm-up replay bit for bit, with one launch and no allocation") {
  if (skip_without_cuda()) return;
  std::mt19937 rng(std::random_device{}());
  const int64_t n = 500 + int64_t(rng() % 1500);
  const Device dev = Device::cuda(0);
  const Tensor a = from_vector(random_floats(size_t(n), rng), {n}).to(dev);
  const Tensor b = from_vector(random_floats(size_t(n), rng), {n}).to(dev);
  Tensor out, total;
  auto step = [&] {
    const Tensor t = a * b + a;
    out = exp(t * 0.25);
    total = sum(out);
  };
  step();  // warm-up

  const int runs = 3;
  std::vector<std::vector<float>> xs, ys, eager_out, eager_total;
  for (int r = 0; r < runs; ++r) {
    xs.push_back(random_floats(size_t(n), rng));
    ys.push_back(random_floats(size_t(n), rng));
    a.copy_(from_vector(xs.back(), {n}));
    b.copy_(from_vector(ys.back(), {n}));
    step();
    eager_out.push_back(out.to(kCPU).to_vector<float>());
    eager_total.push_back(total.to(kCPU).to_vector<float>());
  }

  cuda::Graph graph;
  CHECK_FALSE(graph.captured());
  CHECK_THROWS_WITH_AS(graph.replay(), doctest::Contains("nothing was captured"), Error);
  const int64_t allocations_before = cuda::device_allocator(0).stats().allocation_count;
  graph.capture(cuda::compute_stream(0), step);
  CHECK(graph.captured());
  CHECK(graph.node_count() >= 5);  // mul, add, scale, exp, sum (at least)
  CHECK(cuda::device_allocator(0).stats().allocation_count > allocations_before);  // from the graph's pool

  for (int r = 0; r < runs; ++r) {
    a.copy_(from_vector(xs[size_t(r)], {n}));
    b.copy_(from_vector(ys[size_t(r)], {n}));
    const auto stats_before = cuda::device_allocator(0).stats();
    const auto before = runtime_counters();
    graph.replay();
    const RuntimeCounters replay = runtime_counters() - before;
    CHECK(replay[RuntimeCounter::graph_launches] == 1);
    CHECK(replay[RuntimeCounter::device_allocs] == 0);
    CHECK(replay[RuntimeCounter::device_frees] == 0);
    CHECK(replay[RuntimeCounter::kernel_launches] == 0);
    CHECK(replay.host_waits() == 0);
    CHECK(cuda::device_allocator(0).stats().allocation_count == stats_before.allocation_count);
    INFO("run ", r, ": ", replay.json());
    const std::vector<float> got = out.to(kCPU).to_vector<float>(), got_total = total.to(kCPU).to_vector<float>();
    CHECK(same_bits(got, eager_out[size_t(r)]));
    CHECK(same_bits(got_total, eager_total[size_t(r)]));
  }
}

TEST_CASE("Graph: the graph's private pool is not handed to eager work until the graph is destroyed") {
  if (skip_without_cuda()) return;
  auto& allocator = cuda::device_allocator(0);
  (void)cuda::compute_stream(0);  // the device is current
  cudaStream_t stream = nullptr;   // a stream of its own: its free blocks are this test's only
  HG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  void* eager = allocator.allocate(4096, stream);
  void* inside = nullptr;
  auto graph = std::make_unique<cuda::Graph>();
  graph->capture(stream, [&] {
    allocator.deallocate(eager);  // freed during capture: the graph keeps it
    inside = allocator.allocate(8192, stream);
    kernels::cuda::fill(inside, 2048, 1.0, DType::f32, stream);
    allocator.deallocate(inside);  // back to the graph's own pool
  });
  CHECK(graph->pool_reserved_bytes() > 0);
  void* after = allocator.allocate(4096, stream);
  void* after_large = allocator.allocate(8192, stream);
  CHECK(after != eager);
  CHECK(after != inside);
  CHECK(after_large != inside);
  graph->replay();
  graph.reset();  // released: the blocks return to the shared pools
  void* again = allocator.allocate(4096, stream);
  CHECK(again == eager);  // the best fit on this stream: the adopted block, back in the shared pool
  for (void* p : {again, after, after_large}) allocator.deallocate(p);
  HG_CUDA_CHECK(cudaStreamSynchronize(stream));
  HG_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST_CASE("Graph: a captured step that synchronises fails with CUDA's error and leaves the stream usable") {
  if (skip_without_cuda()) return;
  const Device dev = Device::cuda(0);
  const Tensor a = from_vector(std::vector<float>{1.0f, 2.0f, 3.0f}, {3}).to(dev);
  cuda::Graph graph;
  try {
    graph.capture(cuda::compute_stream(0), [&] {
      const Tensor b = a * 2.0;
      (void)b.to(kCPU);  // a host read: synchronises the capturing stream
    });
    FAIL("the capture should have failed");
  } catch (const Error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("cudaErrorStreamCaptureUnsupported") != std::string::npos);
    CHECK(what.find("cudaErrorStreamCaptureInvalidated") != std::string::npos);
    CHECK(what.find("Warm up") != std::string::npos);
  }
  CHECK_FALSE(graph.captured());
  CHECK((a * 2.0).to(kCPU).to_vector<float>() == std::vector<float>{2.0f, 4.0f, 6.0f});  // eager again

  try {
    graph.capture(cuda::compute_stream(0), [] { throw std::runtime_error("planted failure"); });
    FAIL("the capture should have failed");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("planted failure") != std::string::npos);
  }
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
  CHECK(cudaStreamIsCapturing(cuda::compute_stream(0), &status) == cudaSuccess);
  CHECK(status == cudaStreamCaptureStatusNone);
}
