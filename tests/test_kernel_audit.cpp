// kernels/emu/audit.h: the kernel audit measures what it claims to. Planted kernels with known access
// patterns (written here in CUDA, compiled with the audit's instrumentation) give known figures: a
// coalesced copy is 100% efficient and moves its minimum; a strided copy fetches a whole sector per
// 4 bytes; a stride-2 shared access is a 2-way bank conflict and the padded one is not; a warp
// reduction through shared memory without __syncwarp is a race (and with it, none); a block-wide
// exchange without __syncthreads is a race; atomics are not races; an op that reads its input twice
// moves twice its minimum. Built and run only in the audit flavour (label `audit`).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"
#include "kernels/emu/audit.h"
#include "kernels/emu/launch.h"

namespace {

namespace audit = hg::emu::audit;
using hg::kernels::cuda::launch;

constexpr int kN = 1 << 14;  // elements: 64 KiB of floats

// ---- planted kernels ------------------------------------------------------------------------------

__global__ void coalesced_copy(const float* in, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i];
}

// Lane i of a warp reads element i * 8 (mod n): every lane touches its own 32-byte sector.
__global__ void strided_copy(const float* in, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[(int64_t(i) * 8) % n];
}

__global__ void vector_copy(const float4* in, float4* out, int n4) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n4) out[i] = in[i];
}

// Each lane writes and reads shared word stride * lane: stride 2 puts lanes l and l + 16 in one bank.
template <int kStride>
__global__ void shared_stride(const float* in, float* out) {
  __shared__ float s[32 * kStride];
  const int lane = threadIdx.x;
  s[lane * kStride] = in[lane];
  __syncwarp();
  out[lane] = s[lane * kStride] * 2.0f;
}

// A warp's tree reduction through shared memory. kSynced: __syncwarp between the steps (correct on
// Volta and later); without it, lane i reads s[i + offset] while lane i + offset may not have written it.
template <bool kSynced>
__global__ void warp_sum(const float* in, float* out) {
  __shared__ float s[32];
  const int lane = threadIdx.x;
  s[lane] = in[lane];
  if (kSynced) __syncwarp();
  for (int offset = 16; offset > 0; offset /= 2) {
    float v = 0.0f;
    if (lane < offset) v = s[lane] + s[lane + offset];
    if (kSynced) __syncwarp();
    if (lane < offset) s[lane] = v;
    if (kSynced) __syncwarp();
  }
  if (lane == 0) out[0] = s[0];
}

// Lane i reads what lane i ^ 1 stored, with a shuffle between: the shuffle moves registers but does not
// order memory (only __syncwarp does), so this is a race as CUDA defines it.
__global__ void shuffle_is_not_a_fence(const float* in, float* out) {
  __shared__ float s[32];
  const int lane = threadIdx.x;
  s[lane] = in[lane];
  const float neighbour = __shfl_xor_sync(0xffffffffu, in[lane], 1);
  out[lane] = s[lane ^ 1] + neighbour;
}

// Warp 1 reads what warp 0 wrote. kSynced: a __syncthreads between.
template <bool kSynced>
__global__ void block_exchange(const float* in, float* out) {
  __shared__ float s[64];
  const int t = threadIdx.x;
  if (t < 32) s[t] = in[t];
  if (kSynced) __syncthreads();
  if (t >= 32) out[t - 32] = s[t - 32];
}

__global__ void atomic_count(const float* in, int* counter, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && in[i] > 0.0f) atomicAdd(counter, 1);
}

// Pass 1 of a two-pass op: the largest |x|. Pass 2 reads x again and scales it.
__global__ void absmax_pass(const float* in, int* bits, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicMax(bits, __float_as_int(fabsf(in[i])));
}
__global__ void scale_pass(const float* in, const int* bits, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] / __int_as_float(*bits);
}

// One block streams its input twice: pass 1 sums it, pass 2 writes x - mean. (Each pass reads every
// element once; on a GPU the second pass hits the L2 only while the input fits in it.)
__global__ void center_two_pass(const float* in, float* out, int n) {
  __shared__ float partial[256];
  float sum = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) sum += in[i];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  const float mean = partial[0] / float(n);
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = in[i] - mean;
}

// ---- helpers --------------------------------------------------------------------------------------

template <class T>
struct Device {
  explicit Device(size_t n, float lo = -1.0f, float hi = 1.0f) : n(n) {
    HG_CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
    std::vector<float> host(n * sizeof(T) / sizeof(float));
    std::mt19937 rng(std::random_device{}());
    std::uniform_real_distribution<float> dist(lo, hi);
    for (float& v : host) v = dist(rng);
    HG_CUDA_CHECK(cudaMemcpy(p, host.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~Device() { (void)cudaFree(p); }
  T* get() const { return static_cast<T*>(p); }
  void* p = nullptr;
  size_t n;
};

// Records the launches `work` makes.
template <class F>
std::vector<audit::LaunchAudit> audited(F&& work) {
  (void)audit::take_launches();
  audit::set_enabled(true);
  work();
  audit::set_enabled(false);
  return audit::take_launches();
}

audit::LaunchAudit audited_one(auto&& work) {
  auto launches = audited(work);
  REQUIRE(launches.size() == 1);
  return launches.front();
}

bool mentions(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

}  // namespace

TEST_CASE("the audit flavour records") {
  REQUIRE(audit::available());
  CHECK_FALSE(audit::enabled());
  Device<float> in(kN), out(kN);
  // Not enabled: nothing recorded.
  launch(coalesced_copy, dim3(kN / 256), dim3(256), 0, nullptr, in.get(), out.get(), kN);
  CHECK(audit::take_launches().empty());
}

TEST_CASE("a coalesced copy: every request 100% efficient, DRAM traffic equal to the minimum") {
  Device<float> in(kN), out(kN);
  const auto a = audited_one([&] { launch(coalesced_copy, dim3(kN / 256), dim3(256), 0, nullptr, in.get(), out.get(), kN); });
  CHECK(mentions(a.kernel, "coalesced_copy"));
  CHECK(a.grid.x == kN / 256);
  CHECK(a.block.x == 256);
  CHECK(a.global_load.requests == kN / 32);
  CHECK(a.global_load.accesses == kN);
  CHECK(a.global_load.requested_bytes == 4 * kN);
  CHECK(a.global_load.sectors == kN * 4 / 32);  // 4 sectors per 128-byte warp request
  CHECK(a.global_load.efficiency() == 1.0);
  CHECK(a.global_store.efficiency() == 1.0);
  CHECK(a.dram_read_bytes == 4 * kN);
  CHECK(a.dram_write_bytes == 4 * kN);
  CHECK(a.global_load.vector_share() == 0.0);
  CHECK(a.bank_conflicts() == 0);
  CHECK(a.races.empty());
  // Two sites (the load and the store), named by this file's lines.
  REQUIRE(a.sites.size() == 2);
  for (const auto& site : a.sites) CHECK(mentions(site.location, "test_kernel_audit.cpp:"));
  // The copy is correct under the instrumentation.
  std::vector<float> x(kN), y(kN);
  HG_CUDA_CHECK(cudaMemcpy(x.data(), in.get(), 4 * kN, cudaMemcpyDeviceToHost));
  HG_CUDA_CHECK(cudaMemcpy(y.data(), out.get(), 4 * kN, cudaMemcpyDeviceToHost));
  CHECK(x == y);
}

TEST_CASE("a strided (uncoalesced) copy: one 32-byte sector per 4-byte access, 12.5% efficient") {
  Device<float> in(kN), out(kN);
  const auto a = audited_one([&] { launch(strided_copy, dim3(kN / 256), dim3(256), 0, nullptr, in.get(), out.get(), kN); });
  CHECK(a.global_load.sectors == kN);  // 32 sectors per warp request
  CHECK(a.global_load.efficiency() == doctest::Approx(0.125));
  CHECK(a.global_store.efficiency() == 1.0);
  // The gather still reads each element once in the whole grid.
  CHECK(a.dram_read_bytes == 4 * kN);
  REQUIRE(!a.sites.empty());
  const auto worst = std::min_element(a.sites.begin(), a.sites.end(), [](const auto& x, const auto& y) {
    return x.totals.efficiency() < y.totals.efficiency();
  });
  CHECK(worst->kind == audit::Kind::load);
  CHECK(worst->totals.efficiency() == doctest::Approx(0.125));
}

TEST_CASE("a float4 copy: every access 16 bytes wide") {
  Device<float4> in(kN / 4), out(kN / 4);
  const auto a = audited_one([&] { launch(vector_copy, dim3(kN / 4 / 128), dim3(128), 0, nullptr, in.get(), out.get(), kN / 4); });
  CHECK(a.global_load.vector_share() == 1.0);
  CHECK(a.global_store.vector_share() == 1.0);
  CHECK(a.global_load.efficiency() == 1.0);
  CHECK(a.global_load.requests == kN / 4 / 32);
  CHECK(a.dram_bytes() == 8 * kN);
}

TEST_CASE("shared memory: stride 2 is a 2-way bank conflict, stride 1 and 33 are conflict-free") {
  Device<float> in(32), out(32);
  const auto two_way = audited_one([&] { launch(shared_stride<2>, dim3(1), dim3(32), 0, nullptr, in.get(), out.get()); });
  CHECK(two_way.shared_store.requests == 1);
  CHECK(two_way.shared_store.wavefronts == 2);
  CHECK(two_way.shared_store.bank_conflicts() == 1);
  CHECK(two_way.shared_load.bank_conflicts() == 1);
  CHECK(two_way.bank_conflicts() == 2);
  for (auto* kernel : {&shared_stride<1>, &shared_stride<33>}) {
    const auto a = audited_one([&] { launch(kernel, dim3(1), dim3(32), 0, nullptr, in.get(), out.get()); });
    CHECK(a.shared_store.wavefronts == 1);
    CHECK(a.bank_conflicts() == 0);
  }
  const auto thirty_two_way = audited_one([&] { launch(shared_stride<32>, dim3(1), dim3(32), 0, nullptr, in.get(), out.get()); });
  CHECK(thirty_two_way.shared_store.wavefronts == 32);  // 32 lanes, one bank, 32 distinct words
  CHECK(two_way.races.empty());
}

TEST_CASE("racecheck: a warp reduction in shared memory without __syncwarp races within one warp") {
  Device<float> in(32), out(1);
  const auto racy = audited_one([&] { launch(warp_sum<false>, dim3(1), dim3(32), 0, nullptr, in.get(), out.get()); });
  REQUIRE_FALSE(racy.races.empty());
  bool read_after_write = false;
  for (const auto& r : racy.races) {
    CHECK(r.space == audit::Space::shared);
    CHECK(mentions(r.first_location, "test_kernel_audit.cpp:"));
    CHECK(mentions(r.second_location, "test_kernel_audit.cpp:"));
    CHECK((r.first_thread.x != r.second_thread.x));
    CHECK(r.first_thread.x / 32 == r.second_thread.x / 32);  // lanes of one warp
    read_after_write |= r.hazard == std::string("read-after-write") || r.hazard == std::string("write-after-read");
  }
  CHECK(read_after_write);
  const auto synced = audited_one([&] { launch(warp_sum<true>, dim3(1), dim3(32), 0, nullptr, in.get(), out.get()); });
  CHECK(synced.races.empty());
  CHECK(synced.shared_load.requests > 0);
}

TEST_CASE("racecheck: a shuffle does not order shared memory between lanes") {
  Device<float> in(32), out(32);
  const auto racy = audited_one([&] { launch(shuffle_is_not_a_fence, dim3(1), dim3(32), 0, nullptr, in.get(), out.get()); });
  REQUIRE_FALSE(racy.races.empty());
  CHECK(racy.races.front().hazard == std::string("read-after-write"));
  CHECK(racy.races.front().space == audit::Space::shared);
}

TEST_CASE("racecheck: warps exchanging through shared memory without __syncthreads race") {
  Device<float> in(32), out(32);
  const auto racy = audited_one([&] { launch(block_exchange<false>, dim3(2), dim3(64), 0, nullptr, in.get(), out.get()); });
  REQUIRE_FALSE(racy.races.empty());
  CHECK(racy.races.front().first_thread.x / 32 != racy.races.front().second_thread.x / 32);
  const auto synced = audited_one([&] { launch(block_exchange<true>, dim3(2), dim3(64), 0, nullptr, in.get(), out.get()); });
  CHECK(synced.races.empty());
}

TEST_CASE("atomics are counted as atomics, not races") {
  Device<float> in(kN);
  Device<int> counter(1);
  HG_CUDA_CHECK(cudaMemset(counter.get(), 0, sizeof(int)));
  const auto a = audited_one([&] { launch(atomic_count, dim3(kN / 256), dim3(256), 0, nullptr, in.get(), counter.get(), kN); });
  CHECK_MESSAGE(a.races.empty(), audit::to_json(a));
  CHECK(a.global_atomic.accesses > 0);
  CHECK(a.global_atomic.accesses < uint64_t(kN));
  CHECK(a.dram_write_bytes == 32);  // one sector
}

TEST_CASE("an op that reads its input twice moves twice its minimum") {
  Device<float> in(kN), out(kN);
  Device<int> bits(1);
  HG_CUDA_CHECK(cudaMemset(bits.get(), 0, sizeof(int)));
  const auto launches = audited([&] {
    launch(absmax_pass, dim3(kN / 256), dim3(256), 0, nullptr, in.get(), bits.get(), kN);
    launch(scale_pass, dim3(kN / 256), dim3(256), 0, nullptr, in.get(), bits.get(), out.get(), kN);
  });
  REQUIRE(launches.size() == 2);
  uint64_t dram = 0;
  for (const auto& a : launches) dram += a.dram_bytes();
  const uint64_t minimum = 2 * 4 * kN + 4;  // read x once, write y once, the scalar
  CHECK(double(dram) / double(minimum) > 1.4);
  CHECK(launches[0].dram_read_bytes == 4 * kN + 32);  // x, and the atomic's sector (read before written)
  CHECK(launches[1].dram_read_bytes == 4 * kN + 32);  // x again, and the scalar
}

TEST_CASE("a kernel that streams its input twice: once from DRAM while it fits in the L2, twice when not") {
  // Under every run order of the emulator (forward, reversed, shuffled threads, by seed): the L2 model
  // sees the block's threads in lockstep, as a GPU runs them.
  Device<float> in(kN), out(kN);
  auto run = [&] { return audited_one([&] { launch(center_two_pass, dim3(1), dim3(256), 0, nullptr, in.get(), out.get(), kN); }); };
  REQUIRE(audit::l2_bytes() == audit::kH200L2Bytes);
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    CAPTURE(seed);
    hg::emu::set_seed(seed);
    const auto fits = run();
    CHECK(fits.dram_read_bytes == 4 * kN);
    CHECK(fits.dram_write_bytes == 4 * kN);
    CHECK(fits.races.empty());
    CHECK(fits.bank_conflicts() == 0);
    // An L2 of a quarter of the input (the input's sectors are evicted before pass 2 comes back).
    audit::set_l2_bytes(4 * kN / 4);
    const auto streams = run();
    CHECK(streams.dram_read_bytes == 2 * 4 * kN);
    CHECK(streams.dram_write_bytes == 4 * kN);
    // An L2 larger than the input and output together: one read again.
    audit::set_l2_bytes(3 * 4 * kN);
    const auto large = run();
    CHECK(large.dram_read_bytes == 4 * kN);
    audit::set_l2_bytes(audit::kH200L2Bytes);
  }
  const char* env = std::getenv("HG_EMU_SEED");
  hg::emu::set_seed(env ? std::strtoull(env, nullptr, 0) : 0x68616c6667726164ull);  // back to the run's seed
}

TEST_CASE("the JSON form carries the figures") {
  Device<float> in(32), out(1);
  const auto racy = audited_one([&] { launch(warp_sum<false>, dim3(1), dim3(32), 0, nullptr, in.get(), out.get()); });
  const std::string json = audit::to_json(racy);
  CHECK(mentions(json, "\"kernel\":"));
  CHECK(mentions(json, "warp_sum"));
  CHECK(mentions(json, "\"races\":[{\"hazard\":"));
  CHECK(mentions(json, "\"shared_load\":{"));
}
