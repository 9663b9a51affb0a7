// Runtime accounting (kernels/runtime_counters.h): each counted CUDA runtime call moves its counter.
//
// The first case runs in every build with a CUDA backend, with or without a GPU: in the nvcc build it
// proves that the link-time wrappers (engine/cuda/runtime_counting.cpp, -Wl,--wrap) reach this
// executable and count every call, including calls that fail because no device answers; in the
// emulated build it proves the emulator's runtime counts the same calls the same way. The second case
// (a device: the emulator or a GPU) checks the values a working device gives: bytes by direction, a
// synchronous copy counted as a device synchronisation, cudaMemcpyDefault resolved by the pointers.
#include <doctest/doctest.h>

#include <cstdio>
#include <random>
#include <vector>

#include "engine/cuda/cuda_context.h"
#include "kernels/cuda/platform.h"
#include "kernels/kernels_cuda.h"
#include "kernels/runtime_counters.h"

using hg::RuntimeCounter;
using hg::RuntimeCounters;

namespace {

RuntimeCounters since(const RuntimeCounters& before) { return hg::runtime_counters() - before; }

// Every counter of `delta` is zero except those listed with their expected values.
void check_only(const RuntimeCounters& delta, std::initializer_list<std::pair<RuntimeCounter, int64_t>> expected) {
  for (int i = 0; i < hg::kRuntimeCounterCount; ++i) {
    const auto c = RuntimeCounter(i);
    int64_t want = 0;
    for (const auto& [which, value] : expected)
      if (which == c) want = value;
    INFO("counter ", hg::runtime_counter_name(c));
    CHECK(delta[c] == want);
  }
}

}  // namespace

TEST_CASE("runtime counters: every counted runtime call is counted once, whatever it returns") {
  void* device = nullptr;
  void* pinned = nullptr;
  void* pinned2 = nullptr;
  std::vector<unsigned char> host(4096, 0x5a);
  cudaStream_t stream = nullptr;
  cudaEvent_t event = nullptr, untimed = nullptr;

  auto before = hg::runtime_counters();
  (void)cudaMalloc(&device, 4096);
  check_only(since(before), {{RuntimeCounter::device_allocs, 1}});

  before = hg::runtime_counters();
  (void)cudaMallocHost(&pinned, 4096);
  (void)cudaHostAlloc(&pinned2, 4096, cudaHostAllocDefault);
  check_only(since(before), {{RuntimeCounter::pinned_allocs, 2}});

  before = hg::runtime_counters();
  (void)cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  (void)cudaEventCreate(&event);
  (void)cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming);
  check_only(since(before), {{RuntimeCounter::events_created, 2}});

  before = hg::runtime_counters();
  (void)cudaMemcpy(device, host.data(), 1000, cudaMemcpyHostToDevice);
  check_only(since(before), {{RuntimeCounter::device_syncs, 1},
                             {RuntimeCounter::h2d_copies, 1},
                             {RuntimeCounter::h2d_bytes, 1000}});

  before = hg::runtime_counters();
  (void)cudaMemcpyAsync(host.data(), device, 300, cudaMemcpyDeviceToHost, stream);
  (void)cudaMemcpyAsync(device, device, 200, cudaMemcpyDeviceToDevice, stream);
  check_only(since(before), {{RuntimeCounter::d2h_copies, 1},
                             {RuntimeCounter::d2h_bytes, 300},
                             {RuntimeCounter::d2d_copies, 1},
                             {RuntimeCounter::d2d_bytes, 200}});

  before = hg::runtime_counters();
  (void)cudaMemset(device, 0, 64);
  (void)cudaMemsetAsync(device, 0, 64, stream);  // asynchronous: no counter
  check_only(since(before), {{RuntimeCounter::device_syncs, 1}});

  before = hg::runtime_counters();
  (void)cudaEventRecord(event, stream);
  (void)cudaStreamWaitEvent(stream, event, 0);
  (void)cudaEventSynchronize(event);
  (void)cudaStreamSynchronize(stream);
  (void)cudaDeviceSynchronize();
  check_only(since(before), {{RuntimeCounter::event_records, 1},
                             {RuntimeCounter::stream_waits, 1},
                             {RuntimeCounter::event_syncs, 1},
                             {RuntimeCounter::stream_syncs, 1},
                             {RuntimeCounter::device_syncs, 1}});

  // A kernel launch through kernels/cuda/launch.h (without a device it fails after being counted).
  before = hg::runtime_counters();
  try {
    hg::kernels::cuda::fill(device, 16, 1.0, hg::DType::f32, stream);
  } catch (const hg::Error&) {
    CHECK_FALSE(hg::cuda::is_available());
  }
  check_only(since(before), {{RuntimeCounter::kernel_launches, 1}});

  before = hg::runtime_counters();
  (void)cudaGraphLaunch(nullptr, stream);  // an invalid graph: refused, still counted
  check_only(since(before), {{RuntimeCounter::graph_launches, 1}});

  before = hg::runtime_counters();
  (void)cudaFree(device);
  (void)cudaFreeHost(pinned);
  (void)cudaFreeHost(pinned2);
  check_only(since(before), {{RuntimeCounter::device_frees, 1},
                             {RuntimeCounter::device_syncs, 1},
                             {RuntimeCounter::pinned_frees, 2}});
  (void)cudaEventDestroy(event);
  (void)cudaEventDestroy(untimed);
  (void)cudaStreamDestroy(stream);
  (void)cudaGetLastError();
}

TEST_CASE("runtime counters: a working device's copies, syncs and launches") {
  if (!hg::cuda::is_available()) {
    std::printf("SKIPPED (runtime counters on a device): no CUDA device: %s\n", hg::cuda::unavailable_reason().c_str());
    return;
  }
  std::mt19937 rng(std::random_device{}());
  const size_t n = 1000 + rng() % 1000;
  std::vector<float> in(n), out(n, -1.0f);
  for (float& v : in) v = std::uniform_real_distribution<float>(-4.0f, 4.0f)(rng);
  float *a = nullptr, *b = nullptr;
  REQUIRE(cudaMalloc(&a, n * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMalloc(&b, n * sizeof(float)) == cudaSuccess);
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);

  // cudaMemcpyDefault resolved by where the pointers point: H2D, D2D, D2H.
  auto before = hg::runtime_counters();
  REQUIRE(cudaMemcpyAsync(a, in.data(), n * sizeof(float), cudaMemcpyDefault, stream) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(b, a, n * sizeof(float), cudaMemcpyDefault, stream) == cudaSuccess);
  hg::kernels::cuda::affine(b, b, int64_t(n), 2.0, 0.5, hg::DType::f32, stream);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  check_only(since(before), {{RuntimeCounter::h2d_copies, 1},
                             {RuntimeCounter::h2d_bytes, int64_t(n * sizeof(float))},
                             {RuntimeCounter::d2d_copies, 1},
                             {RuntimeCounter::d2d_bytes, int64_t(n * sizeof(float))},
                             {RuntimeCounter::kernel_launches, 1},
                             {RuntimeCounter::stream_syncs, 1}});

  // A synchronous D2H copy: a device synchronisation and its bytes, and the data arrived.
  before = hg::runtime_counters();
  REQUIRE(cudaMemcpy(out.data(), b, n * sizeof(float), cudaMemcpyDefault) == cudaSuccess);
  const RuntimeCounters d2h = since(before);
  check_only(d2h, {{RuntimeCounter::device_syncs, 1},
                   {RuntimeCounter::d2h_copies, 1},
                   {RuntimeCounter::d2h_bytes, int64_t(n * sizeof(float))}});
  CHECK(d2h.host_waits() == 1);
  for (size_t i = 0; i < n; ++i) CHECK(out[i] == 2.0f * in[i] + 0.5f);

  before = hg::runtime_counters();
  CHECK(cudaFree(a) == cudaSuccess);
  CHECK(cudaFree(b) == cudaSuccess);
  check_only(since(before), {{RuntimeCounter::device_frees, 2}, {RuntimeCounter::device_syncs, 2}});
  CHECK(cudaStreamDestroy(stream) == cudaSuccess);
}
