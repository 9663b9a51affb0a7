// The CUDA backend's library calls: kernels/cuda/gemm.cpp through cuBLASLt (the emulator's cuBLASLt in
// the emulated build, the real one on a GPU), its plan cache, and its errors.
//
// GEMM parity: every transpose combination, with and without the bias epilogue, alpha/beta, in f32,
// f16, bf16 and f64, on sub-matrix views (row strides larger than the rows, pointers offset into a
// larger buffer, so neither the leading dimensions nor the 256-byte alignment cuBLASLt assumes by
// default are the tight ones). Inputs are fresh seeded uniform values in [-1, 1) rounded to the
// dtype; the output view is poisoned with NaN when beta = 0 (proving C is not read) and the gaps
// around it hold a sentinel that must survive (proving ldc is honoured). The oracle is a double
// triple loop on the host; tolerance per element (as tests/test_gemm.cpp):
//     tol = 4 eps(acc) sqrt(k + 1) bound + 2 eps(dtype) |ref| + tiny,
//     bound = |alpha| sum_p |op(A)[i, p] op(B)[p, j]| + |beta C[i, j]| + |bias[j]|.
// The shapes have m, n and k distinct (a swapped dimension or transpose is an invalid cuBLASLt
// problem) and one square case (where a swapped transpose is valid and gives wrong numbers).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/kernels_cuda.h"
#include "kernels/runtime_counters.h"
#include "support/check_error.h"
#include "support/cuda_device.h"
#include "support/host_buffer.h"

namespace {

using hg::DType;
using hg::RuntimeCounter;
using hg::testing::HostBuffer;
namespace gpu = hg::kernels::cuda;

constexpr double kSentinel = 768.0;  // exact in every dtype

bool skip_without_device() { return hg::testing::skip_without_cuda_device("CUDA library calls"); }

gpu::Stream stream() { return hg::testing::cuda_test_stream(); }

double eps(DType t) {
  switch (t) {
    case DType::f64: return 0x1p-53;
    case DType::f16: return 0x1p-11;
    case DType::bf16: return 0x1p-8;
    default: return 0x1p-24;
  }
}

// A rows x cols row-major view with row stride ld, `offset` elements into a buffer (host and device
// copies) whose other elements hold the sentinel.
struct View {
  DType dtype;
  int64_t rows, cols, ld, offset;
  HostBuffer host;
  void* device = nullptr;

  View(DType t, int64_t r, int64_t c, int64_t ld_, int64_t off)
      : dtype(t), rows(r), cols(c), ld(ld_), offset(off), host(t, off + r * ld_ + 3) {
    for (int64_t i = 0; i < host.size(); ++i) host.set(i, kSentinel);
    HG_CUDA_CHECK(cudaMalloc(&device, host.bytes()));
  }
  ~View() { (void)cudaFree(device); }
  View(const View&) = delete;
  View& operator=(const View&) = delete;

  int64_t at(int64_t r, int64_t c) const { return offset + r * ld + c; }
  double get(int64_t r, int64_t c) const { return host.get(at(r, c)); }
  void fill(std::mt19937_64& rng) {
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) host.set(at(r, c), u(rng));
  }
  void poison() {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) host.set(at(r, c), NAN);
  }
  void upload() { HG_CUDA_CHECK(cudaMemcpy(device, host.data(), host.bytes(), cudaMemcpyHostToDevice)); }
  HostBuffer download() const {
    HG_CUDA_CHECK(cudaStreamSynchronize(stream()));
    HostBuffer out(dtype, host.size());
    HG_CUDA_CHECK(cudaMemcpy(out.data(), device, out.bytes(), cudaMemcpyDeviceToHost));
    return out;
  }
  void* ptr() const { return static_cast<char*>(device) + size_t(offset) * hg::dtype_size(dtype); }
};

struct GemmCase {
  bool ta, tb;
  int64_t m, n, k;
  double alpha, beta;
  bool bias;
  int64_t pad, offset;  // ld = cols + pad; views start `offset` elements into their buffers
};

// Runs one GEMM through gpu::gemm / gpu::gemm_bias and compares it with the double oracle. Returns
// the first mismatch ("" when all agree).
std::string run_gemm(const GemmCase& g, DType dtype, std::mt19937_64& rng) {
  const int64_t a_rows = g.ta ? g.k : g.m, a_cols = g.ta ? g.m : g.k;
  const int64_t b_rows = g.tb ? g.n : g.k, b_cols = g.tb ? g.k : g.n;
  View a(dtype, a_rows, a_cols, a_cols + g.pad, g.offset), b(dtype, b_rows, b_cols, b_cols + g.pad, g.offset + 1);
  View c(dtype, g.m, g.n, g.n + g.pad, g.offset + 2), bias(dtype, 1, g.n, g.n, g.offset);
  a.fill(rng), b.fill(rng), bias.fill(rng);
  const bool reads_c = !g.bias && g.beta != 0.0;
  if (reads_c) c.fill(rng); else c.poison();
  const HostBuffer c_before = c.host;
  a.upload(), b.upload(), c.upload(), bias.upload();

  if (g.bias) {
    gpu::gemm_bias(g.ta, g.tb, g.m, g.n, g.k, g.alpha, a.ptr(), a.ld, b.ptr(), b.ld, bias.ptr(), c.ptr(), c.ld, dtype,
                   stream());
  } else {
    gpu::gemm(g.ta, g.tb, g.m, g.n, g.k, g.alpha, a.ptr(), a.ld, b.ptr(), b.ld, g.beta, c.ptr(), c.ld, dtype, stream());
  }
  const HostBuffer got = c.download();

  const double acc_eps = dtype == DType::f64 ? 0x1p-53 : 0x1p-24;
  for (int64_t i = 0; i < got.size(); ++i) {  // the gaps and the rest of the buffer: untouched
    const int64_t r = (i - c.offset) / c.ld, col = (i - c.offset) % c.ld;
    const bool inside = i >= c.offset && r < c.rows && col < c.cols;
    if (!inside && got.get(i) != c_before.get(i))
      return "element " + std::to_string(i) + " outside the output view changed to " + std::to_string(got.get(i));
  }
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t j = 0; j < g.n; ++j) {
      double sum = 0, bound = 0;
      for (int64_t p = 0; p < g.k; ++p) {
        const double term = (g.ta ? a.get(p, i) : a.get(i, p)) * (g.tb ? b.get(j, p) : b.get(p, j));
        sum += term, bound += std::abs(term);
      }
      double ref = g.alpha * sum;
      bound = std::abs(g.alpha) * bound;
      if (reads_c) ref += g.beta * c_before.get(c.at(i, j)), bound += std::abs(g.beta * c_before.get(c.at(i, j)));
      if (g.bias) ref += bias.get(0, j), bound += std::abs(bias.get(0, j));
      const double tol = 4 * acc_eps * std::sqrt(double(g.k + 1)) * bound + 2 * eps(dtype) * std::abs(ref) + 1e-30;
      const double value = got.get(c.at(i, j));
      if (!(std::abs(value - ref) <= tol))
        return "C[" + std::to_string(i) + ", " + std::to_string(j) + "] = " + std::to_string(value) + ", expected " +
               std::to_string(ref);
    }
  }
  return "";
}

std::string describe(const GemmCase& g, DType dtype) {
  return std::string(hg::dtype_name(dtype)) + (g.ta ? " A^T" : " A") + (g.tb ? " B^T" : " B") +
         (g.bias ? " +bias" : "") + " m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) +
         " k=" + std::to_string(g.k) + " beta=" + std::to_string(g.beta) + " pad=" + std::to_string(g.pad) +
         " offset=" + std::to_string(g.offset);
}

}  // namespace

TEST_CASE("cuBLASLt GEMM equals the oracle for every transpose, epilogue, dtype and leading dimension") {
  if (skip_without_device()) return;
  std::mt19937_64 rng(151);
  int cases = 0;
  for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const GemmCase shapes[] = {
          {ta, tb, 5, 7, 9, 1.0, 0.0, false, 0, 0},     // tight, aligned
          {ta, tb, 5, 7, 9, 0.75, 0.0, true, 3, 5},     // bias, padded, offset view
          {ta, tb, 13, 6, 11, -1.5, 0.5, false, 2, 3},  // beta != 0 reads C
          {ta, tb, 6, 6, 6, 1.0, 0.0, false, 1, 1},     // square: a swapped transpose stays valid
          {ta, tb, 6, 6, 6, 1.0, 0.0, true, 0, 0},
      };
      for (const GemmCase& g : shapes) {
        const std::string failure = run_gemm(g, dtype, rng);
        CHECK_MESSAGE(failure.empty(), describe(g, dtype), ": ", failure);
        ++cases;
      }
    }
  }
  CHECK(cases == 80);
}

TEST_CASE("a second identical GEMM reuses its cuBLASLt plan: no heuristic query, a new bias honoured") {
  if (skip_without_device()) return;
  std::mt19937_64 rng(152);
  // A shape no other case uses, so the first call is a cache miss.
  const GemmCase g{true, false, 17, 3, 29, 1.0, 0.0, true, 4, 0};
  auto before = hg::runtime_counters();
  CHECK(run_gemm(g, DType::f32, rng).empty());
  auto delta = hg::runtime_counters() - before;
  CHECK(delta[RuntimeCounter::blas_calls] == 1);
  CHECK(delta[RuntimeCounter::blas_heuristic_queries] == 1);

  // Same shapes, strides and pointer alignments (views 64 elements = 256 bytes further into their
  // buffers), so other addresses, the bias's included, and fresh values: the plan is reused and the
  // new bias pointer is honoured.
  GemmCase moved = g;
  moved.offset = 64;
  before = hg::runtime_counters();
  const std::string failure = run_gemm(moved, DType::f32, rng);
  CHECK_MESSAGE(failure.empty(), failure);
  delta = hg::runtime_counters() - before;
  CHECK(delta[RuntimeCounter::blas_calls] == 1);
  CHECK(delta[RuntimeCounter::blas_heuristic_queries] == 0);

  // Another leading dimension is another plan.
  GemmCase wider = g;
  wider.pad = 6;
  before = hg::runtime_counters();
  CHECK(run_gemm(wider, DType::f32, rng).empty());
  delta = hg::runtime_counters() - before;
  CHECK(delta[RuntimeCounter::blas_heuristic_queries] == 1);

  // The same GEMM on a view less aligned than the plan's pointers (cuBLASLt's algorithms assume the
  // alignment they were chosen for): another plan, and the right numbers.
  GemmCase shifted = g;
  shifted.offset = 1;
  before = hg::runtime_counters();
  const std::string shifted_failure = run_gemm(shifted, DType::f32, rng);
  CHECK_MESSAGE(shifted_failure.empty(), shifted_failure);
  delta = hg::runtime_counters() - before;
  CHECK(delta[RuntimeCounter::blas_heuristic_queries] == 1);
  CHECK(delta[RuntimeCounter::blas_calls] == 1);
}

TEST_CASE("a GEMM with a leading dimension smaller than its rows fails with cuBLAS's status") {
  if (skip_without_device()) return;
  View a(DType::f32, 4, 6, 6, 0), b(DType::f32, 6, 5, 5, 0), c(DType::f32, 4, 5, 5, 0);
  const auto before = hg::runtime_counters();
  // lda = 5 < k = 6 (row-major A is 4 x 6): cuBLASLt's A' layout is 6 x 4 with ld 5.
  CHECK_ERROR(gpu::gemm(false, false, 4, 5, 6, 1.0, a.ptr(), 5, b.ptr(), 5, 0.0, c.ptr(), 5, DType::f32, stream()),
              "[gemm]", "cuBLAS status 7");
  // ldc = 4 < n = 5.
  CHECK_ERROR(gpu::gemm(false, false, 4, 5, 6, 1.0, a.ptr(), 6, b.ptr(), 5, 0.0, c.ptr(), 4, DType::f32, stream()),
              "[gemm]", "cuBLAS status 7");
  CHECK((hg::runtime_counters() - before)[RuntimeCounter::blas_calls] == 0);
}

TEST_CASE("a bf16 GEMM keeps bf16 subnormal inputs, as tensor cores do (the emulator must not flush them)") {
  if (skip_without_device()) return;
  // A holds only bf16 subnormals (k * 2^-133 for small k), B normal values near 2^8, so every product
  // is a normal fp32 near 2^-122 and so is D. A path that reads bf16 subnormals as zero (the CPU's
  // AMX and vdpbf16ps GEMMs) would give D = 0 (or the bias alone). 24 x 20 is large enough that the
  // CPU GEMM would take AMX; plain and bias epilogue, every transpose.
  for (int t = 0; t < 4; ++t)
    for (bool with_bias : {false, true}) {
      const bool ta = t & 1, tb = t & 2;
      const int64_t m = 24, n = 20, k = 17;
      View a(DType::bf16, ta ? k : m, ta ? m : k, (ta ? m : k) + 1, 0), b(DType::bf16, tb ? n : k, tb ? k : n,
                                                                           (tb ? k : n) + 2, 1);
      View c(DType::bf16, m, n, n + 1, 2), bias(DType::bf16, 1, n, n, 0);
      const auto a_value = [](int64_t i, int64_t p) { return ((i + p) % 2 ? -1.0 : 1.0) * double(1 + (i + 2 * p) % 7) * 0x1p-133; };
      const auto b_value = [](int64_t p, int64_t j) { return double(1 + (p + j) % 5) * 0x1p8; };
      for (int64_t i = 0; i < m; ++i)
        for (int64_t p = 0; p < k; ++p) a.host.set(ta ? a.at(p, i) : a.at(i, p), a_value(i, p));
      for (int64_t p = 0; p < k; ++p)
        for (int64_t j = 0; j < n; ++j) b.host.set(tb ? b.at(j, p) : b.at(p, j), b_value(p, j));
      for (int64_t j = 0; j < n; ++j) bias.host.set(bias.at(0, j), double(j % 3) * 0x1p-124);
      c.poison();
      a.upload(), b.upload(), c.upload(), bias.upload();
      if (with_bias)
        gpu::gemm_bias(ta, tb, m, n, k, 1.0, a.ptr(), a.ld, b.ptr(), b.ld, bias.ptr(), c.ptr(), c.ld, DType::bf16,
                       stream());
      else
        gpu::gemm(ta, tb, m, n, k, 1.0, a.ptr(), a.ld, b.ptr(), b.ld, 0.0, c.ptr(), c.ld, DType::bf16, stream());
      const HostBuffer got = c.download();
      int64_t failures = 0, nonzero_sums = 0;
      std::string first;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double ref = with_bias ? bias.get(0, j) : 0.0;
          double sum = 0;
          for (int64_t p = 0; p < k; ++p) sum += a_value(i, p) * b_value(p, j);
          ref += sum;
          if (sum != 0.0) ++nonzero_sums;
          const double value = got.get(c.at(i, j));
          if (!(std::abs(value - ref) <= 0x1p-8 * std::abs(ref)) && failures++ == 0)
            first = "C[" + std::to_string(i) + ", " + std::to_string(j) + "] = " + std::to_string(value * 0x1p124) +
                    " * 2^-124, expected " + std::to_string(ref * 0x1p124) + " * 2^-124";
        }
      CHECK(a.get(0, 0) != 0.0);  // the inputs really are bf16 subnormals, not flushed on upload
      CHECK(std::abs(a.get(0, 0)) < 0x1p-126);
      CHECK(nonzero_sums > m * n / 2);
      const std::string where = std::string(ta ? "A^T " : "A ") + (tb ? "B^T " : "B ") + (with_bias ? "+bias: " : ": ");
      const std::string message = where + first;
      CHECK_MESSAGE(failures == 0, message);
    }
}
