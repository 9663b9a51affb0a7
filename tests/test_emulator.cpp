// kernels/emu: the SIMT emulator itself (built only when HALFGRAD_CUDA=EMULATED). Kernels written
// here, in CUDA, check what the emulator promises: thread/block indices, block barriers and shared
// memory, warp shuffles and votes, atomics across blocks, launch limits, that planted bugs (a missing
// __syncthreads, a divergent barrier, an out-of-bounds write) are caught rather than passing by
// luck, that exceptions leave a kernel, and the runtime API. fill/cast (kernels/cuda/fill.cu) are
// checked bit for bit against the CPU backend.
#include <doctest/doctest.h>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"
#include "kernels/emu/fiber.h"
#include "kernels/error.h"
#include "kernels/kernels.h"
#include "kernels/kernels_cuda.h"

extern char** environ;

namespace {

using hg::DType;
using hg::kernels::cuda::launch;

// ---- device buffers ------------------------------------------------------------------------------

template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) { HG_CUDA_CHECK(cudaMalloc(&p_, std::max<size_t>(n, 1) * sizeof(T))); }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  ~DeviceArray() { (void)cudaFree(p_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return static_cast<T*>(p_); }
  void upload(const std::vector<T>& host) {
    HG_CUDA_CHECK(cudaMemcpy(p_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    HG_CUDA_CHECK(cudaMemcpy(host.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  size_t n_;
  void* p_ = nullptr;
};

// ---- kernels ---------------------------------------------------------------------------------------

struct Indices {
  uint3 thread, block;
  dim3 block_dim, grid_dim;
  int writes;
};

__global__ void record_indices(Indices* out) {
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  Indices& r = out[block * blockDim.x * blockDim.y * blockDim.z + thread];
  r.thread = threadIdx;
  r.block = blockIdx;
  r.block_dim = blockDim;
  r.grid_dim = gridDim;
  atomicAdd(&r.writes, 1);
}

// One block per 256 elements: a tree reduction in static shared memory.
__global__ void block_sum(const float* x, float* out, int n) {
  __shared__ float partial[256];
  const int t = int(threadIdx.x);
  const int i = int(blockIdx.x * blockDim.x) + t;
  partial[t] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int half = int(blockDim.x) / 2; half > 0; half /= 2) {
    if (t < half) partial[t] += partial[t + half];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = partial[0];
}

// Reverses each block's slice through dynamic shared memory; reports whether the buffer started out
// as 0xff bytes (NaN).
__global__ void reverse_blocks(const float* x, float* y, int* started_nan) {
  HG_DYNAMIC_SHARED(float, buffer);
  const unsigned t = threadIdx.x, base = blockIdx.x * blockDim.x;
  if (buffer[t] != buffer[t]) atomicAdd(started_nan, 1);
  __syncthreads();
  buffer[t] = x[base + t];
  __syncthreads();
  y[base + t] = buffer[blockDim.x - 1 - t];
}

__global__ void large_dynamic_shared(float* out) {
  HG_DYNAMIC_SHARED(float, buffer);
  buffer[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = buffer[(threadIdx.x + 1) % blockDim.x];
}

struct WarpResults {
  int idx, idx_w8, xr, xr_w8, down, down_w8, up, up_w8;
  unsigned ballot;
  int any_zero, all_small, all_lanes;
  unsigned reduce_add;
  int reduce_max;
  double dbl;
  int64_t i64;
  float half_value, bf16_value;
  unsigned active;
};

__global__ void warp_ops(WarpResults* out) {
  const int lane = int(threadIdx.x) % 32;
  const int v = 100 + int(threadIdx.x);
  WarpResults& r = out[threadIdx.x];
  r.idx = __shfl_sync(0xffffffffu, v, 5);
  r.idx_w8 = __shfl_sync(0xffffffffu, v, 3, 8);
  r.xr = __shfl_xor_sync(0xffffffffu, v, 1);
  r.xr_w8 = __shfl_xor_sync(0xffffffffu, v, 12, 8);
  r.down = __shfl_down_sync(0xffffffffu, v, 3);
  r.down_w8 = __shfl_down_sync(0xffffffffu, v, 3, 8);
  r.up = __shfl_up_sync(0xffffffffu, v, 2);
  r.up_w8 = __shfl_up_sync(0xffffffffu, v, 2, 8);
  r.ballot = __ballot_sync(0xffffffffu, lane % 3 == 0);
  r.any_zero = __any_sync(0xffffffffu, lane == 0);
  r.all_small = __all_sync(0xffffffffu, lane < 31);
  r.all_lanes = __all_sync(0xffffffffu, 1);
  r.reduce_add = __reduce_add_sync(0xffffffffu, unsigned(lane));
  r.reduce_max = __reduce_max_sync(0xffffffffu, -lane);
  r.dbl = __shfl_xor_sync(0xffffffffu, 0.5 + lane, 16);
  r.i64 = __shfl_down_sync(0xffffffffu, (int64_t(1) << 40) + lane, 1);
  r.half_value = __half2float(__shfl_xor_sync(0xffffffffu, __float2half(float(lane)), 2));
  r.bf16_value = __bfloat162float(__shfl_up_sync(0xffffffffu, __float2bfloat16(float(lane)), 1));
  __syncwarp();
  r.active = __activemask();
}

// A warp-level sum with the usual xor butterfly, in a block whose last warp is partial: the lanes
// past the end of the block do not exist and do not take part.
__global__ void partial_warp_ballot(unsigned* ballots, float* sums) {
  const unsigned ballot = __ballot_sync(0xffffffffu, 1);
  float v = 1.0f;
  for (int m = 16; m > 0; m /= 2) v += __shfl_xor_sync(__activemask(), v, m);
  if (threadIdx.x % 32 == 0) {
    ballots[threadIdx.x / 32] = ballot;
    sums[threadIdx.x / 32] = v;
  }
}

__global__ void barrier_reductions(int* out) {
  const int t = int(threadIdx.x);
  const int count = __syncthreads_count(t % 4 == 0);
  const int all = __syncthreads_and(t < 1000);
  const int any = __syncthreads_or(t == 77);
  const int none = __syncthreads_or(0);
  if (t == 0) {
    out[0] = count;
    out[1] = all;
    out[2] = any;
    out[3] = none;
  }
}

struct AtomicTargets {
  int count;
  float fsum;
  double dsum;
  unsigned long long usum;
  int max, min;
  unsigned cas_count;
  unsigned wrapped;
};

__global__ void atomics(AtomicTargets* t) {
  const int id = int(blockIdx.x * blockDim.x + threadIdx.x);
  atomicAdd(&t->count, 1);
  atomicAdd(&t->fsum, 1.0f);
  atomicAdd(&t->dsum, 0.5);
  atomicAdd(&t->usum, 3ull);
  atomicMax(&t->max, id);
  atomicMin(&t->min, -id);
  unsigned old = t->cas_count, seen;
  while ((seen = atomicCAS(&t->cas_count, old, old + 1)) != old) old = seen;
  atomicInc(&t->wrapped, 9u);  // counts 0..9, then wraps to 0
}

// Each block's first thread takes a ticket: the order in which blocks ran.
__global__ void block_order(unsigned* counter, unsigned* order) {
  if (threadIdx.x == 0) order[atomicAdd(counter, 1u)] = blockIdx.x;
}

// out[t] = in[(t + 1) % n] through shared memory. Without the barrier, thread t may read its
// neighbour's slot before the neighbour wrote it.
template <bool kBarrier>
__global__ void rotate_through_shared(const int* in, int* out) {
  __shared__ int slots[128];
  const unsigned t = threadIdx.x, n = blockDim.x, base = blockIdx.x * n;
  slots[t] = in[base + t];
  if (kBarrier) __syncthreads();
  out[base + t] = slots[(t + 1) % n];
}

__global__ void barrier_after_early_return(int* out) {
  if (threadIdx.x >= 16) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void two_different_barriers(int* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

__global__ void shuffle_against_barrier(int* out) {
  if (threadIdx.x == 0) {
    __syncthreads();
  } else {
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, int(threadIdx.x), 1);
  }
}

__global__ void throws_in_one_thread(int* out) {
  if (blockIdx.x == 2 && threadIdx.x == 7) throw hg::Error("boom from thread 7 of block 2");
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = 1;
}

__global__ void bad_shuffle_mask(int* out) {
  out[threadIdx.x] = __shfl_sync(0x0000ffffu, int(threadIdx.x), 0);  // lanes 16-31 are not in the mask
}

__global__ void pingpong_shuffles(int iterations, int* sink) {
  int v = int(threadIdx.x);
  for (int i = 0; i < iterations; ++i) v = __shfl_xor_sync(0xffffffffu, v, 1);
  sink[threadIdx.x] = v;
}

__global__ void empty_kernel() {}

}  // namespace

// ---- indices, shared memory, barriers ---------------------------------------------------------------

TEST_CASE("emulator: thread and block indices over odd 3-D grids and blocks") {
  for (const auto& [grid, block] : {std::pair{dim3(3, 2, 2), dim3(5, 3, 2)}, std::pair{dim3(7), dim3(33)},
                                    std::pair{dim3(1, 1, 3), dim3(1, 1, 64)}, std::pair{dim3(2, 5), dim3(1024)}}) {
    const size_t threads = size_t(block.x) * block.y * block.z, blocks = size_t(grid.x) * grid.y * grid.z;
    std::vector<Indices> host(threads * blocks, Indices{{}, {}, dim3(0, 0, 0), dim3(0, 0, 0), 0});
    DeviceArray<Indices> d(host);
    launch(record_indices, grid, block, 0, nullptr, d.get());
    host = d.download();
    size_t bad = 0;
    for (size_t b = 0; b < blocks; ++b) {
      for (size_t t = 0; t < threads; ++t) {
        const Indices& r = host[b * threads + t];
        const bool ok = r.writes == 1 && r.thread.x == t % block.x && r.thread.y == t / block.x % block.y &&
                        r.thread.z == t / block.x / block.y && r.block.x == b % grid.x &&
                        r.block.y == b / grid.x % grid.y && r.block.z == b / grid.x / grid.y &&
                        r.block_dim.x == block.x && r.block_dim.y == block.y && r.block_dim.z == block.z &&
                        r.grid_dim.x == grid.x && r.grid_dim.y == grid.y && r.grid_dim.z == grid.z;
        bad += !ok;
      }
    }
    CHECK_MESSAGE(bad == 0, "grid (", grid.x, ",", grid.y, ",", grid.z, ") block (", block.x, ",", block.y, ",",
                  block.z, ")");
  }
}

TEST_CASE("emulator: block reduction in static shared memory with __syncthreads") {
  const int n = 1000, blocks = (n + 255) / 256;
  std::vector<float> x(n);
  std::iota(x.begin(), x.end(), 0.0f);
  DeviceArray<float> dx(x), dout{size_t(blocks)};
  launch(block_sum, dim3(blocks), dim3(256), 0, nullptr, dx.get(), dout.get(), n);
  const std::vector<float> out = dout.download();
  for (int b = 0; b < blocks; ++b) {
    double expected = 0;
    for (int i = b * 256; i < std::min(n, (b + 1) * 256); ++i) expected += i;
    CHECK(out[size_t(b)] == expected);
  }
}

TEST_CASE("emulator: __syncthreads_count, _and, _or") {
  DeviceArray<int> d(4);
  launch(barrier_reductions, dim3(1), dim3(200), 0, nullptr, d.get());
  const std::vector<int> out = d.download();
  CHECK(out[0] == 50);
  CHECK(out[1] == 1);
  CHECK(out[2] == 1);
  CHECK(out[3] == 0);
}

TEST_CASE("emulator: dynamic shared memory") {
  const int threads = 96, blocks = 5;
  std::vector<float> x(size_t(threads * blocks));
  std::iota(x.begin(), x.end(), 1.0f);
  DeviceArray<float> dx(x), dy(x.size());
  DeviceArray<int> started_nan(std::vector<int>{0});
  launch(reverse_blocks, dim3(blocks), dim3(threads), threads * sizeof(float), nullptr, dx.get(), dy.get(),
         started_nan.get());
  const std::vector<float> y = dy.download();
  for (int b = 0; b < blocks; ++b) {
    for (int t = 0; t < threads; ++t) CHECK(y[size_t(b * threads + t)] == x[size_t(b * threads + threads - 1 - t)]);
  }
  CHECK(started_nan.download()[0] == threads * blocks);  // every block's buffer starts as NaN bytes

  // More than 48 KiB needs the kernel's opt-in, as on a GPU.
  DeviceArray<float> out(128);
  const size_t big = 100 * 1024;
  CHECK_THROWS_WITH_AS(launch(large_dynamic_shared, dim3(1), dim3(128), big, nullptr, out.get()),
                       doctest::Contains("102400 bytes of dynamic shared memory exceed the kernel's limit of 49152"),
                       hg::Error);
  HG_CUDA_CHECK(cudaFuncSetAttribute(large_dynamic_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, int(big)));
  launch(large_dynamic_shared, dim3(1), dim3(128), big, nullptr, out.get());
  for (float v : out.download()) CHECK(v == 1.0f);
}

// ---- warps ----------------------------------------------------------------------------------------------

TEST_CASE("emulator: warp shuffles and votes against their definitions") {
  const int threads = 64;
  DeviceArray<WarpResults> d(threads);
  launch(warp_ops, dim3(1), dim3(threads), 0, nullptr, d.get());
  const std::vector<WarpResults> r = d.download();
  for (int t = 0; t < threads; ++t) {
    const int lane = t % 32, warp_base = t - lane;
    auto v = [&](int l) { return 100 + warp_base + l; };
    const WarpResults& x = r[size_t(t)];
    CAPTURE(t);
    CHECK(x.idx == v(5));
    CHECK(x.idx_w8 == v((lane & ~7) + 3));
    CHECK(x.xr == v(lane ^ 1));
    // xor 12 within 8-lane groups: groups above the caller's are out of reach (own value).
    const int x12 = lane ^ 12;
    CHECK(x.xr_w8 == ((x12 & ~7) > (lane & ~7) ? v(lane) : v(x12)));
    CHECK(x.down == (lane + 3 < 32 ? v(lane + 3) : v(lane)));
    CHECK(x.down_w8 == ((lane & 7) + 3 < 8 ? v(lane + 3) : v(lane)));
    CHECK(x.up == (lane >= 2 ? v(lane - 2) : v(lane)));
    CHECK(x.up_w8 == ((lane & 7) >= 2 ? v(lane - 2) : v(lane)));
    CHECK(x.ballot == 0x49249249u);  // lanes 0, 3, 6, ..., 30
    CHECK(x.any_zero == 1);
    CHECK(x.all_small == 0);
    CHECK(x.all_lanes == 1);
    CHECK(x.reduce_add == 496u);
    CHECK(x.reduce_max == 0);
    CHECK(x.dbl == 0.5 + (lane ^ 16));
    CHECK(x.i64 == (int64_t(1) << 40) + (lane < 31 ? lane + 1 : lane));
    CHECK(x.half_value == float(lane ^ 2));
    CHECK(x.bf16_value == float(lane >= 1 ? lane - 1 : lane));
    CHECK(x.active == 0xffffffffu);
  }
}

TEST_CASE("emulator: a partial last warp: absent lanes do not take part") {
  DeviceArray<unsigned> ballots(2);
  DeviceArray<float> sums(2);
  launch(partial_warp_ballot, dim3(1), dim3(48), 0, nullptr, ballots.get(), sums.get());
  CHECK(ballots.download() == std::vector<unsigned>{0xffffffffu, 0x0000ffffu});
  const std::vector<float> s = sums.download();
  CHECK(s[0] == 32.0f);
  CHECK(std::isnan(s[1]));  // the butterfly reads absent lanes 16-31: an undefined value, NaN here
}

TEST_CASE("emulator: a shuffle whose mask leaves out the calling lane is an error") {
  DeviceArray<int> out(32);
  CHECK_THROWS_WITH_AS(launch(bad_shuffle_mask, dim3(1), dim3(32), 0, nullptr, out.get()),
                       doctest::Contains("does not include the calling lane"), hg::Error);
}

// ---- atomics and block order -------------------------------------------------------------------------------

TEST_CASE("emulator: atomics from many blocks") {
  const int blocks = 64, threads = 128, n = blocks * threads;
  AtomicTargets init{};
  init.max = -1;
  init.min = 1;
  std::vector<AtomicTargets> host{init};
  DeviceArray<AtomicTargets> d(host);
  launch(atomics, dim3(blocks), dim3(threads), 0, nullptr, d.get());
  const AtomicTargets t = d.download()[0];
  CHECK(t.count == n);
  CHECK(t.fsum == float(n));  // integers below 2^24 add exactly in float
  CHECK(t.dsum == 0.5 * n);
  CHECK(t.usum == 3ull * n);
  CHECK(t.max == n - 1);
  CHECK(t.min == -(n - 1));
  CHECK(t.cas_count == unsigned(n));
  CHECK(t.wrapped == unsigned(n % 10));
}

TEST_CASE("emulator: blocks run in a shuffled, seeded order") {
  const unsigned blocks = 64;
  auto run = [&] {
    DeviceArray<unsigned> counter(std::vector<unsigned>{0}), order(blocks);
    launch(block_order, dim3(blocks), dim3(32), 0, nullptr, counter.get(), order.get());
    return order.download();
  };
  std::vector<unsigned> order = run();
  std::vector<unsigned> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  std::vector<unsigned> identity(blocks);
  std::iota(identity.begin(), identity.end(), 0u);
  CHECK(sorted == identity);  // every block ran once
  CHECK(order != identity);   // not in index order
  CHECK(run() != order);      // each launch draws its own order
}

// ---- launch limits -----------------------------------------------------------------------------------------

TEST_CASE("emulator: launch limits are checked") {
  CHECK_THROWS_WITH_AS(launch(empty_kernel, dim3(1), dim3(1025), 0, nullptr),
                       doctest::Contains("block (1025, 1, 1) has 1025 threads; the device allows at most 1024"),
                       hg::Error);
  CHECK_THROWS_WITH_AS(launch(empty_kernel, dim3(1), dim3(16, 16, 8), 0, nullptr),
                       doctest::Contains("has 2048 threads"), hg::Error);
  CHECK_THROWS_WITH_AS(launch(empty_kernel, dim3(1), dim3(1, 1, 65), 0, nullptr),
                       doctest::Contains("exceeds the device's block dimension limit (1024, 1024, 64)"), hg::Error);
  CHECK_THROWS_WITH_AS(launch(empty_kernel, dim3(1, 65536), dim3(32), 0, nullptr),
                       doctest::Contains("exceeds the device's grid dimension limit"), hg::Error);
  CHECK_THROWS_WITH_AS(launch(empty_kernel, dim3(1), dim3(32), 49153, nullptr),
                       doctest::Contains("49153 bytes of dynamic shared memory exceed the kernel's limit of 49152"),
                       hg::Error);
  CHECK_THROWS_WITH_AS(launch(empty_kernel, dim3(1), dim3(32), 300 * 1024, nullptr),
                       doctest::Contains("exceed the device's limit of 232448 bytes per block"), hg::Error);
  CHECK(cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 * 1024) ==
        cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  // The name of the kernel is in the message (from the symbol table, anonymous namespace or not).
  CHECK_THROWS_WITH_AS(launch(empty_kernel, dim3(1), dim3(2000), 0, nullptr), doctest::Contains("empty_kernel"),
                       hg::Error);
  cudaStream_t stream = nullptr;
  HG_CUDA_CHECK(cudaStreamCreate(&stream));
  HG_CUDA_CHECK(cudaStreamDestroy(stream));
  CHECK_THROWS_WITH_AS(launch(empty_kernel, dim3(1), dim3(32), 0, stream), doctest::Contains("not a live stream"),
                       hg::Error);
}

// ---- planted bugs ------------------------------------------------------------------------------------------

TEST_CASE("emulator: a missing __syncthreads gives wrong results; with it they are right") {
  const unsigned threads = 128, blocks = 6;
  std::vector<int> in(threads * blocks);
  std::iota(in.begin(), in.end(), 1);
  std::vector<int> expected(in.size());
  for (unsigned b = 0; b < blocks; ++b) {
    for (unsigned t = 0; t < threads; ++t) expected[b * threads + t] = in[b * threads + (t + 1) % threads];
  }
  DeviceArray<int> din(in), dout(in.size());
  launch(rotate_through_shared<true>, dim3(blocks), dim3(threads), 0, nullptr, din.get(), dout.get());
  CHECK(dout.download() == expected);
  // Without the barrier, forward-ordered blocks read neighbours that have not written yet. The
  // deterministic orders make this fail on every run (not only sometimes, as on a GPU).
  HG_CUDA_CHECK(cudaMemset(dout.get(), 0, in.size() * sizeof(int)));
  launch(rotate_through_shared<false>, dim3(blocks), dim3(threads), 0, nullptr, din.get(), dout.get());
  const std::vector<int> racy = dout.download();
  CHECK(racy != expected);
  size_t wrong = 0;
  for (size_t i = 0; i < racy.size(); ++i) wrong += racy[i] != expected[i];
  MESSAGE("missing __syncthreads: ", wrong, " of ", racy.size(), " outputs wrong");
}

TEST_CASE("emulator: a barrier not every thread reaches is reported, not a hang") {
  DeviceArray<int> out(64);
  CHECK_THROWS_WITH_AS(launch(barrier_after_early_return, dim3(2), dim3(64), 0, nullptr, out.get()),
                       doctest::Contains("exited without reaching it"), hg::Error);
  CHECK_THROWS_WITH_AS(launch(two_different_barriers, dim3(1), dim3(64), 0, nullptr, out.get()),
                       doctest::Contains("divergent barrier: threads wait at different barriers"), hg::Error);
  CHECK_THROWS_WITH_AS(launch(shuffle_against_barrier, dim3(1), dim3(32), 0, nullptr, out.get()),
                       doctest::Contains("deadlock, no thread can proceed"), hg::Error);
  try {
    launch(shuffle_against_barrier, dim3(1), dim3(32), 0, nullptr, out.get());
  } catch (const hg::Error& e) {
    MESSAGE(std::string(e.what()));
    CHECK(std::string(e.what()).find("shuffle_against_barrier") != std::string::npos);
    CHECK(std::string(e.what()).find("test_emulator.cpp:") != std::string::npos);
  }
  // The emulator is usable after abandoning those blocks (their fiber stacks are reused).
  std::vector<int> in(256, 3);
  DeviceArray<int> din(in), dout(in.size());
  launch(rotate_through_shared<true>, dim3(2), dim3(128), 0, nullptr, din.get(), dout.get());
  CHECK(dout.download() == in);
}

TEST_CASE("emulator: an exception thrown in a kernel leaves launch") {
  DeviceArray<int> out(4 * 64);
  CHECK_THROWS_WITH_AS(launch(throws_in_one_thread, dim3(4), dim3(64), 0, nullptr, out.get()),
                       "boom from thread 7 of block 2", hg::Error);
  HG_CUDA_CHECK(cudaMemset(out.get(), 0, 4 * 64 * sizeof(int)));
  launch(throws_in_one_thread, dim3(2), dim3(64), 0, nullptr, out.get());  // no block 2: no throw
  const std::vector<int> o = out.download();
  CHECK(std::count(o.begin(), o.begin() + 128, 1) == 128);
}

// Runs tests/test_emulator_oob_child `mode` and returns its exit status and stderr.
std::pair<int, std::string> run_child(const char* mode) {
  char path[] = "/tmp/hg_emu_oob_XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fd, 1);
  posix_spawn_file_actions_adddup2(&actions, fd, 2);
  char* argv[] = {const_cast<char*>(HG_EMU_OOB_CHILD), const_cast<char*>(mode), nullptr};
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, HG_EMU_OOB_CHILD, &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fd);
  REQUIRE_MESSAGE(spawned == 0, "cannot start ", HG_EMU_OOB_CHILD);
  int status = 0;
  waitpid(pid, &status, 0);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  unlink(path);
  return {status, text.str()};
}

TEST_CASE("emulator: an out-of-bounds write inside a kernel is caught by AddressSanitizer") {
#if HG_EMU_ASAN
  for (const auto& [mode, kind] :
       {std::pair{"global", "heap-buffer-overflow"}, std::pair{"dynamic-shared", "use-after-poison"},
        std::pair{"static-shared", "global-buffer-overflow"}, std::pair{"local", "stack-buffer-overflow"}}) {
    const std::string name = mode;
    CAPTURE(name);
    const auto [status, err] = run_child(mode);
    CHECK((WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)) != 0);
    CHECK(err.find("AddressSanitizer") != std::string::npos);
    CHECK_MESSAGE(err.find(kind) != std::string::npos, err.substr(0, 2000));
    CHECK(err.find("oob_kernel") != std::string::npos);  // the report's stack names the kernel
  }
  const auto [status, err] = run_child("none");  // the same child without the bad write is clean
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(err.find("AddressSanitizer") == std::string::npos);
#else
  MESSAGE(
      "SKIPPED: this build is not instrumented with AddressSanitizer (configure with "
      "-DHALFGRAD_SANITIZE=address, as make test-emu does)");
#endif
}

// ---- fill and cast: kernels/cuda/fill.cu against the CPU backend, bit for bit ----------------------------

namespace {

const DType kAllTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64};

// A device buffer of n elements of `dtype`, starting `offset` elements into the allocation (odd offsets
// make the vector paths peel a head), with one guard element on each side; everything starts as 0xff.
class GuardedBuffer {
 public:
  GuardedBuffer(DType dtype, int64_t n, int64_t offset) : size_(hg::dtype_size(dtype)), n_(n), offset_(offset) {
    bytes_ = size_t(n + offset + 2) * size_;
    HG_CUDA_CHECK(cudaMalloc(&base_, bytes_));
    HG_CUDA_CHECK(cudaMemset(base_, 0xff, bytes_));
  }
  ~GuardedBuffer() { (void)cudaFree(base_); }
  void* data() const { return static_cast<char*>(base_) + size_t(offset_ + 1) * size_; }
  std::vector<unsigned char> all_bytes() const {
    std::vector<unsigned char> out(bytes_);
    HG_CUDA_CHECK(cudaMemcpy(out.data(), base_, bytes_, cudaMemcpyDeviceToHost));
    return out;
  }
  // The bytes of the n elements; the guards and padding must still hold 0xff.
  std::vector<unsigned char> elements() const {
    const std::vector<unsigned char> all = all_bytes();
    const size_t begin = size_t(offset_ + 1) * size_, end = begin + size_t(n_) * size_;
    for (size_t i = 0; i < all.size(); ++i) {
      if (i < begin || i >= end) REQUIRE_MESSAGE(all[i] == 0xff, "byte ", i, " outside the elements was written");
    }
    return std::vector<unsigned char>(all.begin() + long(begin), all.begin() + long(end));
  }

 private:
  size_t size_;
  int64_t n_, offset_;
  size_t bytes_ = 0;
  void* base_ = nullptr;
};

// Values that probe every conversion rule: rounding ties, half overflow and subnormals, integer
// saturation, NaN and infinities, negative zero.
std::vector<double> probe_values(int64_t n, uint64_t seed) {
  const double special[] = {0.0,
                            -0.0,
                            1.0,
                            -1.5,
                            2.5,
                            65504.0,
                            65520.0,
                            -65536.0,
                            1e-8,
                            6e-8,
                            3e38,
                            1e39,
                            -1e300,
                            2147483647.0,
                            2147483648.5,
                            -2147483649.0,
                            9.3e18,
                            -9.3e18,
                            std::numeric_limits<double>::quiet_NaN(),
                            std::numeric_limits<double>::infinity(),
                            -std::numeric_limits<double>::infinity(),
                            1.0 + 1.0 / 2048,
                            1.0 + 3.0 / 4096,
                            0.1,
                            1.0 / 3};
  std::mt19937_64 rng(seed);
  std::vector<double> out;
  out.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t r = rng();
    if (r % 3 == 0) {
      out[size_t(i)] = special[(r >> 8) % std::size(special)];
    } else {
      out[size_t(i)] = std::ldexp(double(int64_t(rng() >> 11)) / double(1ull << 52) - 1.0, int((r >> 8) % 80) - 30);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("emulator: cuda::fill and cuda::cast match the CPU backend bit for bit") {
  const int64_t sizes[] = {0, 1, 7, 8, 9, 31, 33, 1000, 4097};
  const double fill_values[] = {1.5, -0.0, 1e-9, 65520.0, 3.0, -7.0, std::numeric_limits<double>::quiet_NaN()};
  for (const DType t : kAllTypes) {
    for (const int64_t n : sizes) {
      for (const int64_t offset : {0, 1}) {
        for (const double value : fill_values) {
          CAPTURE(hg::dtype_name(t));
          CAPTURE(n);
          CAPTURE(offset);
          CAPTURE(value);
          const bool integral = hg::is_integral(t);
          if (integral && (std::isnan(value) || value != std::trunc(value) || value == 0.0)) continue;
          std::vector<unsigned char> ref(size_t(n) * hg::dtype_size(t), 0xff);
          hg::kernels::cpu::fill(ref.data(), n, value, t);
          GuardedBuffer d(t, n, offset);
          hg::kernels::cuda::fill(d.data(), n, value, t, nullptr);
          CHECK(d.elements() == ref);
        }
      }
    }
    // An integer fill that is not a whole number fails as on the CPU.
    if (hg::is_integral(t)) {
      GuardedBuffer d(t, 4, 0);
      CHECK_THROWS_WITH_AS(hg::kernels::cuda::fill(d.data(), 4, 0.5, t, nullptr), doctest::Contains("[fill]"),
                           hg::Error);
    }
  }
  uint64_t seed = 1;
  for (const DType from : kAllTypes) {
    for (const DType to : kAllTypes) {
      for (const int64_t n : {int64_t(1), int64_t(9), int64_t(1000), int64_t(4099)}) {
        for (const int64_t offset : {0, 1}) {
          CAPTURE(hg::dtype_name(from));
          CAPTURE(hg::dtype_name(to));
          CAPTURE(n);
          CAPTURE(offset);
          // The source holds probe values converted to `from` by the CPU backend (f64 -> from).
          const std::vector<double> values = probe_values(n, seed++);
          std::vector<unsigned char> x(size_t(n) * hg::dtype_size(from));
          hg::kernels::cpu::cast(values.data(), DType::f64, x.data(), from, n);
          std::vector<unsigned char> ref(size_t(n) * hg::dtype_size(to), 0xff);
          hg::kernels::cpu::cast(x.data(), from, ref.data(), to, n);
          GuardedBuffer dx(from, n, offset), dy(to, n, 1 - offset);
          HG_CUDA_CHECK(cudaMemcpy(dx.data(), x.data(), x.size(), cudaMemcpyHostToDevice));
          hg::kernels::cuda::cast(dx.data(), from, dy.data(), to, n, nullptr);
          CHECK(dy.elements() == ref);
        }
      }
    }
  }
}

// ---- the runtime API ------------------------------------------------------------------------------------------

TEST_CASE("emulator: the CUDA runtime API subset") {
  int count = 0, device = -1;
  CHECK(cudaGetDeviceCount(&count) == cudaSuccess);
  CHECK(count == 1);
  CHECK(cudaSetDevice(0) == cudaSuccess);
  CHECK(cudaGetDevice(&device) == cudaSuccess);
  CHECK(device == 0);
  CHECK(cudaSetDevice(1) == cudaErrorInvalidDevice);
  CHECK(cudaPeekAtLastError() == cudaErrorInvalidDevice);
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice);
  CHECK(cudaGetLastError() == cudaSuccess);  // reading it reset it
  CHECK(std::string(cudaGetErrorName(cudaErrorMemoryAllocation)) == "cudaErrorMemoryAllocation");
  CHECK(std::string(cudaGetErrorString(cudaErrorMemoryAllocation)) == "out of memory");

  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0) == cudaSuccess);
  CHECK(std::string(prop.name) == "halfgrad SIMT emulator");
  CHECK(prop.major == 9);
  CHECK(prop.minor == 0);
  CHECK(prop.warpSize == 32);
  CHECK(prop.maxThreadsPerBlock == 1024);
  CHECK(prop.sharedMemPerBlock == 48 * 1024);
  CHECK(prop.sharedMemPerBlockOptin == 227 * 1024);
  int sms = 0, optin = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) == cudaSuccess);
  CHECK(sms == prop.multiProcessorCount);
  CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0) == cudaSuccess);
  CHECK(size_t(optin) == prop.sharedMemPerBlockOptin);

  // Copies of every kind, and the checks of their pointers.
  std::vector<float> host(100), back(100, 0.0f);
  std::iota(host.begin(), host.end(), 0.5f);
  float *a = nullptr, *b = nullptr;
  CHECK(cudaMalloc(&a, 100 * sizeof(float)) == cudaSuccess);
  CHECK(cudaMalloc(&b, 100 * sizeof(float)) == cudaSuccess);
  CHECK(reinterpret_cast<uintptr_t>(a) % 256 == 0);
  CHECK(std::isnan(*a));  // fresh device memory holds 0xff bytes
  CHECK(cudaMemcpy(a, host.data(), 400, cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(cudaMemcpy(b, a, 400, cudaMemcpyDeviceToDevice) == cudaSuccess);
  CHECK(cudaMemcpy(back.data(), b, 400, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(back == host);
  CHECK(cudaMemcpy(back.data(), a, 400, cudaMemcpyDefault) == cudaSuccess);
  CHECK(cudaMemcpy(a, back.data(), 400, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);  // swapped
  CHECK(cudaMemcpy(a, host.data(), 404, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);  // past the end
  CHECK(cudaMemcpy(a + 1, host.data(), 396, cudaMemcpyHostToDevice) == cudaSuccess);        // interior
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  CHECK(cudaMemset(a, 0, 400) == cudaSuccess);
  CHECK(cudaMemcpy(back.data(), a, 400, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(std::all_of(back.begin(), back.end(), [](float v) { return v == 0.0f; }));
  CHECK(cudaMemset(host.data(), 0, 4) == cudaErrorInvalidValue);  // not device memory

  cudaPointerAttributes attributes{};
  CHECK(cudaPointerGetAttributes(&attributes, a + 10) == cudaSuccess);
  CHECK(attributes.type == cudaMemoryTypeDevice);
  CHECK(cudaPointerGetAttributes(&attributes, host.data()) == cudaSuccess);
  CHECK(attributes.type == cudaMemoryTypeUnregistered);

  // Streams and events.
  cudaStream_t s = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr, untimed = nullptr;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  CHECK(cudaEventCreate(&start) == cudaSuccess);
  CHECK(cudaEventCreate(&stop) == cudaSuccess);
  CHECK(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming) == cudaSuccess);
  CHECK(cudaEventRecord(start, s) == cudaSuccess);
  CHECK(cudaMemcpyAsync(b, a, 400, cudaMemcpyDeviceToDevice, s) == cudaSuccess);
  CHECK(cudaMemsetAsync(b, 0xff, 4, s) == cudaSuccess);
  hg::kernels::cuda::fill(a, 100, 2.0, DType::f32, s);
  CHECK(cudaEventRecord(stop, s) == cudaSuccess);
  CHECK(cudaEventRecord(untimed, s) == cudaSuccess);
  CHECK(cudaStreamWaitEvent(nullptr, stop, 0) == cudaSuccess);
  CHECK(cudaEventSynchronize(stop) == cudaSuccess);
  CHECK(cudaEventQuery(stop) == cudaSuccess);
  CHECK(cudaStreamQuery(s) == cudaSuccess);
  CHECK(cudaStreamSynchronize(s) == cudaSuccess);
  float ms = -1.0f;
  CHECK(cudaEventElapsedTime(&ms, start, stop) == cudaSuccess);
  CHECK(ms >= 0.0f);
  CHECK(cudaEventElapsedTime(&ms, start, untimed) == cudaErrorInvalidResourceHandle);
  int called = 0;
  CHECK(cudaLaunchHostFunc(
            s, [](void* p) { ++*static_cast<int*>(p); }, &called) == cudaSuccess);
  CHECK(called == 1);
  CHECK(cudaMemcpy(back.data(), a, 400, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(std::all_of(back.begin(), back.end(), [](float v) { return v == 2.0f; }));
  CHECK(cudaEventDestroy(start) == cudaSuccess);
  CHECK(cudaEventDestroy(stop) == cudaSuccess);
  CHECK(cudaEventDestroy(untimed) == cudaSuccess);
  CHECK(cudaEventDestroy(untimed) == cudaErrorInvalidResourceHandle);
  CHECK(cudaStreamDestroy(s) == cudaSuccess);
  CHECK(cudaStreamDestroy(s) == cudaErrorInvalidResourceHandle);
  CHECK(cudaMemcpyAsync(b, a, 4, cudaMemcpyDeviceToDevice, s) == cudaErrorInvalidResourceHandle);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);

  // Pinned host memory.
  void* pinned = nullptr;
  CHECK(cudaMallocHost(&pinned, 4096) == cudaSuccess);
  CHECK(cudaMemcpy(a, pinned, 400, cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(cudaPointerGetAttributes(&attributes, pinned) == cudaSuccess);
  CHECK(attributes.type == cudaMemoryTypeHost);
  CHECK(cudaFreeHost(pinned) == cudaSuccess);
  CHECK(cudaFreeHost(host.data()) == cudaErrorInvalidValue);

  // The memory limit, for out-of-memory tests of allocators.
  size_t free_before = 0, total = 0;
  CHECK(cudaMemGetInfo(&free_before, &total) == cudaSuccess);
  CHECK(free_before <= total);
  const size_t used = hg::emu::device_bytes_in_use();
  CHECK(used >= 800);
  hg::emu::set_malloc_limit(used + 1000);
  void* c = nullptr;
  CHECK(cudaMalloc(&c, 2000) == cudaErrorMemoryAllocation);
  CHECK(c == nullptr);
  CHECK(cudaMalloc(&c, 1000) == cudaSuccess);
  size_t free_now = 1;
  CHECK(cudaMemGetInfo(&free_now, &total) == cudaSuccess);
  CHECK(free_now == 0);
  CHECK(total == used + 1000);
  CHECK(cudaFree(c) == cudaSuccess);
  hg::emu::set_malloc_limit(0);
  CHECK(cudaFree(a) == cudaSuccess);
  CHECK(cudaFree(b) == cudaSuccess);
  CHECK(cudaFree(b) == cudaErrorInvalidValue);  // twice
  CHECK(cudaFree(nullptr) == cudaSuccess);
  (void)cudaGetLastError();
}

// ---- speed (reported, never asserted) ------------------------------------------------------------------------

namespace {

namespace emu = hg::emu::detail;

struct PingPong {
  emu::Context main, fiber;
  long remaining = 0;
};

void ping_pong_entry(void* arg) {
  auto& p = *static_cast<PingPong*>(arg);
  emu::on_fiber_start(p.fiber);
  while (p.remaining-- > 0) emu::switch_context(p.fiber, p.main);
  emu::exit_to(p.fiber, p.main);
}

}  // namespace

TEST_CASE("emulator: speed of a fiber switch, a shuffle and a thread") {
  PingPong p;
  emu::init_thread_context(p.main);
  p.fiber.stack = emu::allocate_stack(64 * 1024);
  const long switches = 1'000'000;
  p.remaining = switches / 2;
  emu::prepare(p.fiber, &ping_pong_entry, &p);
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i <= switches / 2; ++i) emu::switch_context(p.main, p.fiber);
  const double switch_ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / double(switches + 2);
  emu::free_stack(p.fiber.stack);

  DeviceArray<int> sink(1024);
  const int iterations = 200;
  launch(pingpong_shuffles, dim3(1), dim3(1024), 0, nullptr, iterations, sink.get());  // warm the stacks
  const auto t1 = std::chrono::steady_clock::now();
  launch(pingpong_shuffles, dim3(1), dim3(1024), 0, nullptr, iterations, sink.get());
  const double shuffle_ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t1).count() / (1024.0 * iterations);
  launch(empty_kernel, dim3(256), dim3(256), 0, nullptr);
  const auto t2 = std::chrono::steady_clock::now();
  launch(empty_kernel, dim3(1024), dim3(256), 0, nullptr);
  const double thread_ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t2).count() / (1024.0 * 256);
  MESSAGE("fiber switch: ", switch_ns, " ns; one lane's __shfl_xor_sync: ", shuffle_ns,
          " ns; one CUDA thread of an empty kernel: ", thread_ns, " ns");
  CHECK(switch_ns > 0);
}
