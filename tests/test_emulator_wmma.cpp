// nvcuda::wmma, as kernels/cuda/platform.h provides it: in the emulated build kernels/emu/wmma.h (warp
// collectives with a scrambled element-to-lane mapping), under nvcc <mma.h> (this file is compiled as
// CUDA there; without a GPU every case prints SKIPPED). Checked here:
//   * a real WMMA GEMM (several warps per block, accumulation over K tiles, A and B row- or
//     column-major, leading dimensions wider than the matrices, C loaded or filled, stored with either
//     layout, f16 and bf16 inputs, float and half accumulators, the three shapes) against a double
//     reference, with the tolerance stated at the check;
//   * emulator only: a kernel that writes x[i] assuming a row-major lane layout gets the matrix wrong
//     (the scrambling is real), while elementwise ops on every x[i] stay right; misaligned pointers,
//     bad ldm, lanes that exit, lanes that diverge and lanes with different arguments are hg::Errors;
//   * audit flavour only: the wmma loads and stores are recorded as accesses of the kernel in a GPU's
//     order (operands as ldmatrix moves them, accumulators in the mma.sync fragment order), so padded
//     shared tiles audit free of bank conflicts and tiles with 128-byte rows conflict by the expected
//     count; a fragment stored to shared memory and read back after __syncwarp is not a race (without
//     the __syncwarp it is).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/check.h"
#include "support/cuda_device.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/platform.h"
#include "kernels/error.h"
#include "support/check_error.h"

#if HG_EMU_AUDIT
#include "kernels/emu/audit.h"
#endif

namespace {

using hg::kernels::cuda::launch;
namespace wmma = nvcuda::wmma;

constexpr bool kEmulated =
#if defined(HALFGRAD_EMULATED_CUDA)
    true;
#else
    false;
#endif

bool skip_without_device() { return hg::testing::skip_without_cuda_device("WMMA"); }

// The cases that check the emulator's own promises (scrambling, error reports) mean nothing on a GPU.
bool skip_unless_emulated() {
  if (skip_without_device()) return true;
  if (kEmulated) return false;
  std::printf("SKIPPED (WMMA emulator checks): on a real GPU\n");
  MESSAGE("skipped: emulator-only check on a real GPU");
  return true;
}

template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    HG_CUDA_CHECK(cudaMalloc(&p_, n * sizeof(T)));
    HG_CUDA_CHECK(cudaMemset(p_, 0xff, n * sizeof(T)));  // NaN in every float type: poison
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    HG_CUDA_CHECK(cudaMemcpy(p_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~DeviceArray() { (void)cudaFree(p_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return static_cast<T*>(p_); }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    HG_CUDA_CHECK(cudaMemcpy(host.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  size_t n_;
  void* p_ = nullptr;
};

template <class T>
__host__ __device__ T from_float(float v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(v);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(v);
  } else {
    return v;
  }
}
template <class T>
double to_double(T v) {
  if constexpr (std::is_same_v<T, __half>) {
    return double(__half2float(v));
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return double(__bfloat162float(v));
  } else {
    return double(v);
  }
}

template <class T>
std::vector<T> random_values(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<T> out(n);
  for (T& v : out) v = from_float<T>(dist(rng));
  return out;
}

// ---- the GEMM kernel ------------------------------------------------------------------------------

// C (m x n) = A (m x k) * B (k x n) [+ C], one TM x TN tile of C per warp, warps numbered across the
// grid, the k loop in steps of 16. A is row-major (element (r, c) at a[r * lda + c]) or col-major
// (a[c * lda + r]) as LayoutA says; B likewise; C row- or column-major as c_col_major says.
struct GemmArgs {
  int m, n, k, lda, ldb, ldc;
  bool load_c, c_col_major;
};

template <int TM, int TN, class T, class LayoutA, class LayoutB, class TC>
__global__ void wmma_gemm(const T* a, const T* b, TC* c, GemmArgs g) {
  const int warp = int(threadIdx.x / 32 + blockIdx.x * (blockDim.x / 32));
  const int tiles_n = g.n / TN;
  const int tm = warp / tiles_n, tn = warp % tiles_n;
  if (tm >= g.m / TM) return;  // whole warps only
  constexpr bool a_col = std::is_same_v<LayoutA, wmma::col_major>;
  constexpr bool b_col = std::is_same_v<LayoutB, wmma::col_major>;
  const wmma::layout_t c_layout = g.c_col_major ? wmma::mem_col_major : wmma::mem_row_major;
  TC* c_tile = c + (g.c_col_major ? size_t(tn * TN) * g.ldc + tm * TM : size_t(tm * TM) * g.ldc + tn * TN);

  wmma::fragment<wmma::accumulator, TM, TN, 16, TC> acc;
  if (g.load_c) {
    wmma::load_matrix_sync(acc, c_tile, g.ldc, c_layout);
  } else {
    wmma::fill_fragment(acc, from_float<TC>(0.0f));
  }
  wmma::fragment<wmma::matrix_a, TM, TN, 16, T, LayoutA> fa;
  wmma::fragment<wmma::matrix_b, TM, TN, 16, T, LayoutB> fb;
  for (int kt = 0; kt < g.k; kt += 16) {
    wmma::load_matrix_sync(fa, a + (a_col ? size_t(kt) * g.lda + tm * TM : size_t(tm * TM) * g.lda + kt), g.lda);
    wmma::load_matrix_sync(fb, b + (b_col ? size_t(tn * TN) * g.ldb + kt : size_t(kt) * g.ldb + tn * TN), g.ldb);
    wmma::mma_sync(acc, fa, fb, acc);
  }
  wmma::store_matrix_sync(c_tile, acc, g.ldc, c_layout);
}

struct GemmCase {
  int m, n, k;
  int pad = 8;  // leading dimensions = stored extent + pad
  bool load_c = false, c_col_major = false;
};

template <int TM, int TN, class T, class LayoutA, class LayoutB, class TC>
void check_gemm(const GemmCase& gc, uint32_t seed) {
  constexpr bool a_col = std::is_same_v<LayoutA, wmma::col_major>;
  constexpr bool b_col = std::is_same_v<LayoutB, wmma::col_major>;
  GemmArgs g{gc.m, gc.n, gc.k, 0, 0, 0, gc.load_c, gc.c_col_major};
  g.lda = (a_col ? gc.m : gc.k) + gc.pad;
  g.ldb = (b_col ? gc.k : gc.n) + gc.pad;
  g.ldc = (gc.c_col_major ? gc.m : gc.n) + gc.pad;
  std::mt19937 rng(seed);
  const std::vector<T> a = random_values<T>(size_t(a_col ? gc.k : gc.m) * g.lda, rng);
  const std::vector<T> b = random_values<T>(size_t(b_col ? gc.n : gc.k) * g.ldb, rng);
  const std::vector<TC> c0 = random_values<TC>(size_t(gc.c_col_major ? gc.n : gc.m) * g.ldc, rng);
  auto at = [&](int r, int col) { return to_double(a[a_col ? size_t(col) * g.lda + r : size_t(r) * g.lda + col]); };
  auto bt = [&](int r, int col) { return to_double(b[b_col ? size_t(col) * g.ldb + r : size_t(r) * g.ldb + col]); };
  auto c_index = [&](int r, int col) { return gc.c_col_major ? size_t(col) * g.ldc + r : size_t(r) * g.ldc + col; };

  DeviceArray<T> da(a), db(b);
  DeviceArray<TC> dc = gc.load_c ? DeviceArray<TC>(c0) : DeviceArray<TC>(c0.size());  // else NaN-poisoned
  const int warps = (gc.m / TM) * (gc.n / TN);
  const int warps_per_block = std::min(warps, 4);
  launch(wmma_gemm<TM, TN, T, LayoutA, LayoutB, TC>, dim3((warps + warps_per_block - 1) / warps_per_block),
         dim3(32 * warps_per_block), 0, nullptr, da.get(), db.get(), dc.get(), g);
  HG_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<TC> c = dc.download();

  // Products of 16-bit inputs are exact in float; a float sum of k + 1 terms errs by at most
  // k * 2^-24 * sum |terms|; a __half accumulator also rounds once per k tile, 2^-11 relative each.
  const double per_term = std::is_same_v<TC, float> ? gc.k * 0x1p-24 : gc.k * 0x1p-24 + (gc.k / 16) * 0x1p-11;
  int bad = 0;
  for (int r = 0; r < gc.m; ++r) {
    for (int col = 0; col < gc.n; ++col) {
      double exact = gc.load_c ? to_double(c0[c_index(r, col)]) : 0.0;
      double magnitude = std::fabs(exact);
      for (int kk = 0; kk < gc.k; ++kk) {
        exact += at(r, kk) * bt(kk, col);
        magnitude += std::fabs(at(r, kk) * bt(kk, col));
      }
      const double got = to_double(c[c_index(r, col)]);
      const double tolerance = per_term * magnitude + 1e-30;
      if (!(std::fabs(got - exact) <= tolerance)) {
        if (++bad <= 5) MESSAGE("C(", r, ", ", col, ") = ", got, ", expected ", exact, " +- ", tolerance);
      }
    }
  }
  CHECK(bad == 0);
  // The padding between the rows (columns) of C is untouched.
  for (int line = 0; line < (gc.c_col_major ? gc.n : gc.m); ++line) {
    for (int j = gc.c_col_major ? gc.m : gc.n; j < g.ldc; ++j) {
      const size_t i = size_t(line) * g.ldc + j;
      if (gc.load_c) {
        CHECK(to_double(c[i]) == to_double(c0[i]));
      } else {
        CHECK(std::isnan(to_double(c[i])));
      }
    }
  }
}

TEST_CASE("wmma GEMM 64x48x32, f16 and bf16, every A/B layout, several warps, float accumulator") {
  if (skip_without_device()) return;
  const GemmCase fill{64, 48, 32};
  const GemmCase load_col{64, 48, 32, 16, true, true};
  SUBCASE("f16") {
    check_gemm<16, 16, __half, wmma::row_major, wmma::row_major, float>(fill, 1);
    check_gemm<16, 16, __half, wmma::row_major, wmma::col_major, float>(load_col, 2);
    check_gemm<16, 16, __half, wmma::col_major, wmma::row_major, float>(load_col, 3);
    check_gemm<16, 16, __half, wmma::col_major, wmma::col_major, float>(fill, 4);
  }
  SUBCASE("bf16") {
    check_gemm<16, 16, __nv_bfloat16, wmma::row_major, wmma::row_major, float>(load_col, 5);
    check_gemm<16, 16, __nv_bfloat16, wmma::row_major, wmma::col_major, float>(fill, 6);
    check_gemm<16, 16, __nv_bfloat16, wmma::col_major, wmma::row_major, float>(fill, 7);
    check_gemm<16, 16, __nv_bfloat16, wmma::col_major, wmma::col_major, float>(load_col, 8);
  }
  SUBCASE("C loaded and stored row-major, ldm = width") {
    check_gemm<16, 16, __half, wmma::row_major, wmma::col_major, float>(GemmCase{64, 48, 32, 0, true, false}, 9);
  }
}

TEST_CASE("wmma GEMM with a half accumulator") {
  if (skip_without_device()) return;
  check_gemm<16, 16, __half, wmma::row_major, wmma::col_major, __half>(GemmCase{32, 32, 48}, 10);
  check_gemm<16, 16, __half, wmma::col_major, wmma::row_major, __half>(GemmCase{32, 48, 32, 8, true, true}, 11);
}

TEST_CASE("wmma GEMM with the 32x8x16 and 8x32x16 shapes") {
  if (skip_without_device()) return;
  check_gemm<32, 8, __half, wmma::row_major, wmma::col_major, float>(GemmCase{32, 8, 48, 8, true, false}, 12);
  check_gemm<32, 8, __nv_bfloat16, wmma::col_major, wmma::row_major, float>(GemmCase{32, 8, 32, 8, false, true}, 13);
  check_gemm<8, 32, __half, wmma::col_major, wmma::row_major, float>(GemmCase{8, 32, 48, 8, false, false}, 14);
  check_gemm<8, 32, __nv_bfloat16, wmma::row_major, wmma::col_major, float>(GemmCase{8, 32, 32, 8, true, true}, 15);
}

// ---- the mapping is scrambled, elementwise ops are not affected -------------------------------------

// Loads a 16x16 float tile and stores it back, scaled: legal whatever the mapping.
__global__ void scale_tile(const float* in, float* out, float scale) {
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> f;
  wmma::load_matrix_sync(f, in, 16, wmma::mem_row_major);
  for (int i = 0; i < f.num_elements; ++i) f.x[i] *= scale;
  wmma::store_matrix_sync(out, f, 16, wmma::mem_col_major);
}

// Fills the fragment as if lane l held row l / 2, columns (l % 2) * 8 + i (a plausible guess, and
// wrong): only right if the mapping were that one.
__global__ void assume_row_major_lanes(const float* in, float* out) {
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> f;
  const int lane = int(threadIdx.x % 32);
  for (int i = 0; i < f.num_elements; ++i) f.x[i] = in[(lane / 2) * 16 + (lane % 2) * 8 + i];
  wmma::store_matrix_sync(out, f, 16, wmma::mem_row_major);
}

TEST_CASE("wmma: elementwise ops on every x[i] are legal, a kernel assuming a lane layout is wrong") {
  if (skip_unless_emulated()) return;
  std::mt19937 rng(20);
  const std::vector<float> in = random_values<float>(256, rng);
  DeviceArray<float> din(in), dout(256);

  launch(scale_tile, dim3(1), dim3(32), 0, nullptr, din.get(), dout.get(), 2.0f);
  std::vector<float> out = dout.download();
  for (int r = 0; r < 16; ++r) {
    for (int col = 0; col < 16; ++col) CHECK(out[size_t(col) * 16 + r] == 2.0f * in[size_t(r) * 16 + col]);
  }

  DeviceArray<float> dwrong(256);
  launch(assume_row_major_lanes, dim3(1), dim3(32), 0, nullptr, din.get(), dwrong.get());
  out = dwrong.download();
  int misplaced = 0;
  for (int i = 0; i < 256; ++i) misplaced += out[size_t(i)] != in[size_t(i)];
  // A random permutation of 256 positions keeps ~1 in place; the guess must lose nearly all of them.
  CHECK(misplaced > 240);
  // ... yet it is a permutation of the same values: nothing was lost, only scattered.
  std::vector<float> sorted_in = in, sorted_out = out;
  std::sort(sorted_in.begin(), sorted_in.end());
  std::sort(sorted_out.begin(), sorted_out.end());
  CHECK(sorted_in == sorted_out);
}

// ---- errors ------------------------------------------------------------------------------------------

__global__ void load_at(const __half* p, unsigned ldm) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> f;
  wmma::load_matrix_sync(f, p, ldm);
}

__global__ void store_at(float* p, unsigned ldm) {
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> f;
  wmma::fill_fragment(f, 1.0f);
  wmma::store_matrix_sync(p, f, ldm, wmma::mem_row_major);
}

__global__ void one_lane_exits(const __half* p) {
  if (threadIdx.x == 5) return;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> f;
  wmma::load_matrix_sync(f, p, 16);
}

__global__ void one_lane_diverges(const __half* p) {
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> f;
  if (threadIdx.x != 7) wmma::load_matrix_sync(f, p, 16);
  __syncthreads();
}

__global__ void lanes_disagree(const __half* p) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> f;
  wmma::load_matrix_sync(f, p + (threadIdx.x == 9 ? 256 : 0), 16);
}

__global__ void mma_in_a_partial_warp(float* p) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
  wmma::fill_fragment(a, __float2bfloat16_rn(1.0f));
  wmma::fill_fragment(b, __float2bfloat16_rn(1.0f));
  wmma::fill_fragment(c, 0.0f);
  wmma::mma_sync(c, a, b, c);
  p[threadIdx.x] = c.x[0];
}

TEST_CASE("wmma: misaligned pointers, bad ldm, missing, diverging and disagreeing lanes are hg::Errors") {
  if (skip_unless_emulated()) return;
  DeviceArray<__half> tile(16 * 32 + 64);
  DeviceArray<float> out(16 * 32 + 64);
  // Well-formed calls pass (so the failures below are the arguments' fault).
  launch(load_at, dim3(1), dim3(32), 0, nullptr, tile.get() + 16, 24u);
  launch(store_at, dim3(1), dim3(32), 0, nullptr, out.get() + 8, 20u);

  CHECK_ERROR(launch(load_at, dim3(1), dim3(32), 0, nullptr, tile.get() + 8, 16u), "wmma::load_matrix_sync at",
              "test_emulator_wmma.cpp:", "is not 256-bit (32-byte) aligned");
  CHECK_ERROR(launch(store_at, dim3(1), dim3(32), 0, nullptr, out.get() + 4, 16u), "wmma::store_matrix_sync at",
              "is not 256-bit (32-byte) aligned");
  CHECK_ERROR(launch(load_at, dim3(1), dim3(32), 0, nullptr, tile.get(), 12u), "wmma::load_matrix_sync at",
              "ldm = 12 must be a positive multiple of 8 for 16-bit elements");
  CHECK_ERROR(launch(store_at, dim3(1), dim3(32), 0, nullptr, out.get(), 18u), "wmma::store_matrix_sync at",
              "ldm = 18 must be a positive multiple of 4 for 32-bit elements");
  CHECK_ERROR(launch(one_lane_exits, dim3(1), dim3(64), 0, nullptr, tile.get()), "wmma::load_matrix_sync at",
              "lanes 5 of the warp do not take part");
  CHECK_ERROR(launch(one_lane_diverges, dim3(1), dim3(32), 0, nullptr, tile.get()), "deadlock",
              "wait in wmma::load_matrix_sync at test_emulator_wmma.cpp:", "__syncthreads");
  CHECK_ERROR(launch(lanes_disagree, dim3(1), dim3(32), 0, nullptr, tile.get()), "wmma::load_matrix_sync at",
              "lane 9 passes pointer", "the lanes of a warp must pass the same arguments");
  CHECK_ERROR(launch(mma_in_a_partial_warp, dim3(1), dim3(48), 0, nullptr, out.get()), "wmma::mma_sync at",
              "lanes 16, 17", "all 32 lanes must call it together");
}

// ---- the kernel audit sees the tile traffic, racecheck sees no false race ----------------------------

#if HG_EMU_AUDIT
namespace audit = hg::emu::audit;

constexpr int kTileStoreLine = __LINE__ + 14;  // the store_matrix_sync of tile_through_shared

// Each warp computes a 16x16 tile into shared memory and reads it back, row by row, lane by lane.
template <bool kSyncwarp>
__global__ void tile_through_shared(const __half* a, const __half* b, float* out) {
  __shared__ __align__(32) float tile[2][16 * 16];  // WMMA needs 32-byte aligned tiles
  const int warp = int(threadIdx.x / 32), lane = int(threadIdx.x % 32);
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::store_matrix_sync(tile[warp], acc, 16, wmma::mem_row_major);
  if (kSyncwarp) __syncwarp();
  static_assert(kTileStoreLine == __LINE__ - 2);
  for (int i = lane; i < 256; i += 32) out[warp * 256 + i] = tile[warp][i];
}

template <class F>
audit::LaunchAudit audited_one(F&& work) {
  (void)audit::take_launches();
  audit::set_enabled(true);
  work();
  audit::set_enabled(false);
  std::vector<audit::LaunchAudit> launches = audit::take_launches();
  REQUIRE(launches.size() == 1);
  return launches.front();
}

TEST_CASE("wmma under the kernel audit: 16-byte tile accesses, and no false race through shared memory") {
  std::mt19937 rng(30);
  DeviceArray<__half> a(random_values<__half>(256, rng)), b(random_values<__half>(256, rng));
  DeviceArray<float> out(512);
  const audit::LaunchAudit synced = audited_one(
      [&] { launch(tile_through_shared<true>, dim3(1), dim3(64), 0, nullptr, a.get(), b.get(), out.get()); });
  CHECK_MESSAGE(synced.races.empty(), audit::to_json(synced));
  // Two warps load A and B (512 bytes each): one 16-byte access per lane, one request per warp and
  // operand, 16 sectors each.
  CHECK(synced.global_load.requested_bytes == 2 * 2 * 512);
  CHECK(synced.global_load.requests == 2 * 2);
  CHECK(synced.global_load.sectors == 2 * 2 * 16);
  // The stores to shared memory: 1024 bytes per warp, four 8-byte accesses per lane (a float
  // accumulator in the mma.sync fragment order: one 8 x 8 block per access).
  CHECK(synced.shared_store.requested_bytes == 2 * 1024);
  CHECK(synced.shared_store.requests == 2 * 4);

  const audit::LaunchAudit racy = audited_one(
      [&] { launch(tile_through_shared<false>, dim3(1), dim3(64), 0, nullptr, a.get(), b.get(), out.get()); });
  // The tile's stores (wmma.h's accesses, inlined: named by the store_matrix_sync line) against the
  // lanes' reads: read-after-write or write-after-read, depending on which lane the emulator ran first.
  REQUIRE_FALSE(racy.races.empty());
  const std::string store_line = "test_emulator_wmma.cpp:" + std::to_string(kTileStoreLine);
  bool store_against_read = false;
  for (const audit::Race& race : racy.races) {
    store_against_read |= race.space == audit::Space::shared && (race.first_location.find(store_line) != std::string::npos ||
                                                                 race.second_location.find(store_line) != std::string::npos);
  }
  CHECK_MESSAGE(store_against_read, audit::to_json(racy));
}

// One warp: a [16, 64] __half tile staged in shared memory with row length kLd, A = its columns 0..15
// (row_major), B = columns 16..31 read col_major (B(k, n) = tile[n][16 + k]), C = A B stored to a float
// tile of row length kLdC, copied out row by row. The staging and the copy-out are conflict-free for
// any row length (a warp's lanes touch consecutive words of one row); only the wmma calls can conflict.
template <int kLd, int kLdC>
__global__ void padded_or_not(const __half* a, float* out) {
  // Raw bytes: a static __shared__ of a class type (__half) would be a lazily constructed thread-local
  // in the emulator, its guard a shared access of its own.
  __shared__ __align__(32) unsigned char tile_bytes[16 * kLd * sizeof(__half)];
  __shared__ __align__(32) float c_tile[16 * kLdC];
  __half* tile = reinterpret_cast<__half*>(tile_bytes);
  const int lane = int(threadIdx.x);
  for (int i = lane; i < 16 * 64; i += 32) tile[(i / 64) * kLd + i % 64] = a[i];
  __syncwarp();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  wmma::load_matrix_sync(fa, tile, kLd);
  wmma::load_matrix_sync(fb, tile + 16, kLd);
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::store_matrix_sync(c_tile, acc, kLdC, wmma::mem_row_major);
  __syncwarp();
  if (lane < 16) {
    for (int r = 0; r < 16; ++r) out[r * 16 + lane] = c_tile[r * kLdC + lane];
  }
}

TEST_CASE("wmma under the kernel audit: a GPU's access order, padded tiles conflict-free, 128-byte rows conflict") {
  std::mt19937 rng(31);
  const std::vector<__half> host = random_values<__half>(16 * 64, rng);
  DeviceArray<__half> a(host);
  auto check_product = [&](const DeviceArray<float>& out) {
    const std::vector<float> c = out.download();
    int bad = 0;
    for (int m = 0; m < 16; ++m) {
      for (int n = 0; n < 16; ++n) {
        double exact = 0, magnitude = 0;
        for (int k = 0; k < 16; ++k) {
          const double term = to_double(host[size_t(m * 64 + k)]) * to_double(host[size_t(n * 64 + 16 + k)]);
          exact += term;
          magnitude += std::fabs(term);
        }
        // Exact products, a float sum of 16 terms: within 16 * 2^-24 of their magnitude.
        if (!(std::fabs(double(c[size_t(m * 16 + n)]) - exact) <= 16 * 0x1p-24 * magnitude + 1e-30)) ++bad;
      }
    }
    CHECK(bad == 0);
  };

  // Rows of 64 + 8 halves (144 bytes: 16 bytes apart mod 128) and of 64 + 8 floats (8 words apart mod
  // 32), the attention kernels' pads: an operand load's phases (8 rows x 16 bytes, as ldmatrix) fall
  // on 32 distinct banks, so do the accumulator store's (half-warps of 8-byte pairs: 4 rows x 32 bytes).
  DeviceArray<float> padded_out(256);
  const audit::LaunchAudit padded = audited_one(
      [&] { launch(padded_or_not<72, 72>, dim3(1), dim3(32), 0, nullptr, a.get(), padded_out.get()); });
  check_product(padded_out);
  CHECK_MESSAGE(padded.bank_conflicts() == 0, audit::to_json(padded));
  CHECK_MESSAGE(padded.races.empty(), audit::to_json(padded));

  // Rows of 128 and 256 bytes: every row starts in bank 0. Each load has 4 phases of 8 rows in the same
  // 4 banks (8-way: 7 extra wavefronts each), two loads: 56; the store has 4 accesses of 2 half-warp
  // phases of 4 rows in the same 8 banks (4-way: 3 extra each): 24.
  DeviceArray<float> unpadded_out(256);
  const audit::LaunchAudit unpadded = audited_one(
      [&] { launch(padded_or_not<64, 64>, dim3(1), dim3(32), 0, nullptr, a.get(), unpadded_out.get()); });
  check_product(unpadded_out);
  CHECK_MESSAGE(unpadded.shared_load.bank_conflicts() == 2 * 4 * 7, audit::to_json(unpadded));
  CHECK_MESSAGE(unpadded.shared_store.bank_conflicts() == 4 * 2 * 3, audit::to_json(unpadded));
}
#endif

}  // namespace
