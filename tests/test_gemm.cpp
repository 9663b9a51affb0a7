// kernels/cpu/gemm*: gemm() and each f32 path (AVX-512 packed, Eigen) against gemm_reference; each
// half-precision path (bf16 vdpbf16ps, f16/bf16 widened while packing) against gemm_reference in
// float64 on the same rounded inputs (see "half-precision paths" below for their tolerance).
//
// Every case draws fresh seeded random inputs in [-1, 1) rounded to the dtype, lays A, B and C out
// with row strides larger than their rows (the gap holds a sentinel that must survive), and fills
// C with NaN when beta == 0 (proving C is not read) or with random values otherwise. The tolerance
// per element is
//     tol = 4 * u(accumulate) * sqrt(k + 1) * bound + 2 * u(dtype) * |ref| + tiny,
//     bound = |alpha| * sum_p |op(A)[i, p] op(B)[p, j]| + |beta * C[i, j]|,
// i.e. the usual error of a k-term float sum relative to the size of its terms (a cancelled sum
// is not held to a relative error), plus one ulp of the dtype: both sides round their fp32 sum to
// the dtype once, and two sums a hair apart may round to neighbouring values.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <omp.h>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/gemm_avx512.h"
#include "kernels/cpu/gemm_avx512_blocking.h"
#include "kernels/dispatch.h"
#include "kernels/error.h"
#include "kernels/kernels.h"
#include "support/roundoff.h"

namespace {

using hg::DType;
namespace cpu = hg::kernels::cpu;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kSentinel = 768.0;  // written into the gaps between rows, exact in every dtype
using hg::testing::accumulate_roundoff;
using hg::testing::kFloatingTypes;
using hg::testing::unit_roundoff;

// A row-major matrix of any floating dtype with a row stride, read and written as double.
class Matrix {
 public:
  Matrix(DType dtype, int64_t rows, int64_t cols, int64_t ld)
      : dtype_(dtype),
        rows_(rows),
        cols_(cols),
        ld_(ld),
        bytes_(size_t(std::max<int64_t>(rows * ld, 1)) * hg::dtype_size(dtype)) {
    for (int64_t i = 0; i < rows * ld; ++i) set_flat(i, kSentinel);
  }
  double get(int64_t r, int64_t c) const { return get_flat(r * ld_ + c); }
  void set(int64_t r, int64_t c, double v) { set_flat(r * ld_ + c, v); }
  void fill(double value) {
    for (int64_t r = 0; r < rows_; ++r)
      for (int64_t c = 0; c < cols_; ++c) set(r, c, value);
  }
  void fill_random(std::mt19937& rng) {
    std::uniform_real_distribution<double> uniform(-1.0, 1.0);
    for (int64_t r = 0; r < rows_; ++r)
      for (int64_t c = 0; c < cols_; ++c) set(r, c, uniform(rng));
  }
  // True when every element between the end of a row and the next row still holds the sentinel.
  bool gaps_untouched() const {
    for (int64_t r = 0; r < rows_; ++r)
      for (int64_t c = cols_; c < ld_; ++c)
        if (get(r, c) != kSentinel) return false;
    return true;
  }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  int64_t ld() const { return ld_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  DType dtype() const { return dtype_; }
  // The same values (exactly representable, or NaN) in another dtype, same layout and gaps.
  Matrix as(DType dtype) const {
    Matrix out(dtype, rows_, cols_, ld_);
    for (int64_t i = 0; i < rows_ * ld_; ++i) out.set_flat(i, get_flat(i));
    return out;
  }
  bool same_bytes(const Matrix& other) const { return bytes_ == other.bytes_; }

 private:
  double get_flat(int64_t i) const {
    return hg::kernels::dispatch_floating(dtype_, "test", [&]<class T>() {
      return double(hg::kernels::acc_t<T>(reinterpret_cast<const T*>(bytes_.data())[i]));
    });
  }
  void set_flat(int64_t i, double v) {
    hg::kernels::dispatch_floating(
        dtype_, "test", [&]<class T>() { reinterpret_cast<T*>(bytes_.data())[i] = T(hg::kernels::acc_t<T>(v)); });
  }
  DType dtype_;
  int64_t rows_, cols_, ld_;
  std::vector<unsigned char> bytes_;
};

struct Shape {
  int64_t m, n, k;
};

struct GemmCase {
  DType dtype;
  bool trans_a, trans_b;
  Shape shape;
  double alpha, beta;
  int64_t pad = 3;  // extra elements at the end of every row of A, B and C
};

std::string describe(const GemmCase& g) {
  return std::string(hg::dtype_name(g.dtype)) + " trans_a=" + std::to_string(g.trans_a) +
         " trans_b=" + std::to_string(g.trans_b) + " m=" + std::to_string(g.shape.m) +
         " n=" + std::to_string(g.shape.n) + " k=" + std::to_string(g.shape.k) + " alpha=" + std::to_string(g.alpha) +
         " beta=" + std::to_string(g.beta) + " pad=" + std::to_string(g.pad);
}

// The inputs of one case: op(A) is [m, k] stored [k, m] when trans_a, likewise B. |op(A)| and
// |op(B)| are also kept as dense doubles for the error bound.
struct Operands {
  Matrix a, b, c_initial;
  std::vector<double> abs_op_a, abs_op_b;  // [m, k] and [k, n]
  Operands(const GemmCase& g, uint32_t seed)
      : a(g.dtype, g.trans_a ? g.shape.k : g.shape.m, g.trans_a ? g.shape.m : g.shape.k,
          (g.trans_a ? g.shape.m : g.shape.k) + g.pad),
        b(g.dtype, g.trans_b ? g.shape.n : g.shape.k, g.trans_b ? g.shape.k : g.shape.n,
          (g.trans_b ? g.shape.k : g.shape.n) + g.pad),
        c_initial(g.dtype, g.shape.m, g.shape.n, g.shape.n + g.pad) {
    std::mt19937 rng(seed);
    a.fill_random(rng);
    b.fill_random(rng);
    if (g.beta == 0.0)
      c_initial.fill(kNaN);
    else
      c_initial.fill_random(rng);
    const auto [m, n, k] = g.shape;
    abs_op_a.resize(size_t(m * k));
    abs_op_b.resize(size_t(k * n));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p) abs_op_a[i * k + p] = std::abs(g.trans_a ? a.get(p, i) : a.get(i, p));
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j) abs_op_b[p * n + j] = std::abs(g.trans_b ? b.get(j, p) : b.get(p, j));
  }
  // |alpha| * sum_p |op(A)[i, p] op(B)[p, j]| + |beta * C[i, j]|: the size of the terms summed.
  double bound(const GemmCase& g, int64_t i, int64_t j) const {
    const int64_t n = g.shape.n, k = g.shape.k;
    double sum = 0;
    for (int64_t p = 0; p < k; ++p) sum += abs_op_a[i * k + p] * abs_op_b[p * n + j];
    return std::abs(g.alpha) * sum + (g.beta == 0.0 ? 0.0 : std::abs(g.beta * c_initial.get(i, j)));
  }
};

// Any GEMM with gemm()'s signature: gemm itself, or one of the f32 paths wrapped to look like it.
using GemmFunction = void (*)(bool, bool, int64_t, int64_t, int64_t, double, const void*, int64_t, const void*, int64_t,
                              double, void*, int64_t, DType);

void avx512_as_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const void* a, int64_t lda,
                    const void* b, int64_t ldb, double beta, void* c, int64_t ldc, DType) {
  cpu::detail::gemm_f32_avx512(ta, tb, m, n, k, float(alpha), static_cast<const float*>(a), lda,
                               static_cast<const float*>(b), ldb, float(beta), static_cast<float*>(c), ldc);
}
void eigen_as_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const void* a, int64_t lda,
                   const void* b, int64_t ldb, double beta, void* c, int64_t ldc, DType) {
  cpu::detail::gemm_f32_eigen(ta, tb, m, n, k, float(alpha), static_cast<const float*>(a), lda,
                              static_cast<const float*>(b), ldb, float(beta), static_cast<float*>(c), ldc);
}

// Runs `gemm_under_test` and gemm_reference on the same inputs; checks every element and the gaps.
void check_against_reference(const GemmCase& g, GemmFunction gemm_under_test, uint32_t seed) {
  INFO(describe(g));
  const auto [m, n, k] = g.shape;
  const Operands in(g, seed);
  Matrix c = in.c_initial, c_ref = in.c_initial;
  gemm_under_test(g.trans_a, g.trans_b, m, n, k, g.alpha, in.a.data(), in.a.ld(), in.b.data(), in.b.ld(), g.beta,
                  c.data(), c.ld(), g.dtype);
  cpu::gemm_reference(g.trans_a, g.trans_b, m, n, k, g.alpha, in.a.data(), in.a.ld(), in.b.data(), in.b.ld(), g.beta,
                      c_ref.data(), c_ref.ld(), g.dtype);

  int64_t failures = 0;
  std::string first_failure;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const double ref = c_ref.get(i, j), got = c.get(i, j);
      const double tol = 4.0 * accumulate_roundoff(g.dtype) * std::sqrt(double(k + 1)) * in.bound(g, i, j) +
                         2.0 * unit_roundoff(g.dtype) * std::abs(ref) + 1e-30;
      if (!(std::abs(got - ref) <= tol) && failures++ == 0)
        first_failure = "C[" + std::to_string(i) + ", " + std::to_string(j) + "] = " + std::to_string(got) +
                        ", reference " + std::to_string(ref) + ", tolerance " + std::to_string(tol);
    }
  INFO(first_failure);
  CHECK(failures == 0);
  CHECK(c.gaps_untouched());
}

const bool kTransposes[] = {false, true};

// Shapes around the edges that matter: 1, odd sizes, k = 1, and more than one 14 x 32 tile.
const Shape kOddShapes[] = {{1, 1, 1},     {7, 13, 5},     {13, 7, 31}, {31, 33, 65}, {33, 65, 1},
                            {65, 100, 13}, {100, 31, 257}, {1, 65, 33}, {257, 1, 7},  {130, 140, 150}};

}  // namespace

TEST_CASE("gemm matches gemm_reference for every dtype, transpose and odd shape") {
  uint32_t seed = 1;
  for (DType dtype : kFloatingTypes)
    for (bool trans_a : kTransposes)
      for (bool trans_b : kTransposes)
        for (const Shape& shape : kOddShapes) {
          check_against_reference({dtype, trans_a, trans_b, shape, 1.0, 0.0}, cpu::gemm, seed++);
          check_against_reference({dtype, trans_a, trans_b, shape, -0.75, 1.5, 5}, cpu::gemm, seed++);
        }
}

// Shapes that cross the AVX-512 path's blocking: MR = 14 rows, NR = 32 columns, MC = 224 rows,
// KC = 512, NC = 2048, and sizes large enough to run on every OpenMP thread.
const Shape kBlockingShapes[] = {{14, 32, 16}, {15, 33, 17},    {29, 64, 511},  {28, 95, 513},  {225, 47, 9},
                                 {9, 9, 9},    {225, 33, 1025}, {13, 2081, 40}, {150, 70, 600}, {8, 1000, 300}};

TEST_CASE("each f32 GEMM path matches gemm_reference across its blocking edges") {
  struct Path {
    const char* name;
    GemmFunction run;
  };
  std::vector<Path> paths = {{"eigen", eigen_as_gemm}};
  if (cpu::detail::cpu_has_avx512_gemm())
    paths.push_back({"avx512", avx512_as_gemm});
  else
    MESSAGE("this CPU has no AVX-512: the avx512 GEMM path is not tested here, only the eigen path");

  uint32_t seed = 1000;
  for (const Path& path : paths) {
    INFO("path ", path.name);
    for (bool trans_a : kTransposes)
      for (bool trans_b : kTransposes)
        for (const Shape& shape : kBlockingShapes) {
          check_against_reference({DType::f32, trans_a, trans_b, shape, 1.0, 0.0, 1}, path.run, seed++);
          check_against_reference({DType::f32, trans_a, trans_b, shape, 0.5, -2.0, 17}, path.run, seed++);
        }
  }
}

TEST_CASE("gemm_f32_path names the path gemm takes for f32") {
  const std::string expected = cpu::detail::cpu_has_avx512_gemm() ? "avx512" : "eigen";
  CHECK(std::string(cpu::gemm_f32_path()) == expected);
}

TEST_CASE("gemm with k == 0 or alpha == 0 scales C by beta without reading A, B or C when beta == 0") {
  for (DType dtype : kFloatingTypes) {
    INFO(hg::dtype_name(dtype));
    Matrix poison_a(dtype, 4, 3, 3), poison_b(dtype, 3, 5, 5);
    poison_a.fill(kNaN);
    poison_b.fill(kNaN);

    Matrix c(dtype, 4, 5, 6);
    c.fill(kNaN);
    cpu::gemm(false, false, 4, 5, 0, 1.0, poison_a.data(), 0, poison_b.data(), 5, 0.0, c.data(), c.ld(), dtype);
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 5; ++j) CHECK(c.get(i, j) == 0.0);

    c.fill(2.0);
    cpu::gemm(false, false, 4, 5, 0, 1.0, poison_a.data(), 0, poison_b.data(), 5, -0.5, c.data(), c.ld(), dtype);
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 5; ++j) CHECK(c.get(i, j) == -1.0);

    c.fill(2.0);
    cpu::gemm(false, false, 4, 5, 3, 0.0, poison_a.data(), 3, poison_b.data(), 5, 0.25, c.data(), c.ld(), dtype);
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 5; ++j) CHECK(c.get(i, j) == 0.5);
    CHECK(c.gaps_untouched());
  }
}

TEST_CASE("gemm with m == 0 or n == 0 writes nothing") {
  Matrix a(DType::f32, 3, 3, 3), b(DType::f32, 3, 3, 3), c(DType::f32, 3, 3, 3);
  c.fill(7.0);
  cpu::gemm(false, false, 0, 3, 3, 1.0, a.data(), 3, b.data(), 3, 0.0, c.data(), 3, DType::f32);
  cpu::gemm(false, false, 3, 0, 3, 1.0, a.data(), 3, b.data(), 3, 0.0, c.data(), 3, DType::f32);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 3; ++j) CHECK(c.get(i, j) == 7.0);
}

TEST_CASE("gemm rejects integer dtypes, negative sizes and short strides with a clear message") {
  std::vector<int64_t> buffer(64);
  void* p = buffer.data();
  CHECK_THROWS_WITH_AS(cpu::gemm(false, false, 2, 2, 2, 1.0, p, 2, p, 2, 0.0, p, 2, DType::i32),
                       doctest::Contains("[gemm] expected a floating dtype (f32, f64, f16, bf16), got i32"), hg::Error);
  CHECK_THROWS_WITH_AS(cpu::gemm(false, false, 2, 2, 2, 1.0, p, 2, p, 2, 0.0, p, 2, DType::i64),
                       doctest::Contains("got i64"), hg::Error);
  CHECK_THROWS_WITH_AS(cpu::gemm_reference(false, false, 2, 2, 2, 1.0, p, 2, p, 2, 0.0, p, 2, DType::i32),
                       doctest::Contains("[gemm_reference] expected a floating dtype"), hg::Error);
  CHECK_THROWS_WITH_AS(cpu::gemm(false, false, -1, 2, 2, 1.0, p, 2, p, 2, 0.0, p, 2, DType::f32),
                       doctest::Contains("[gemm] expected non-negative sizes, got m=-1, n=2, k=2"), hg::Error);
  CHECK_THROWS_WITH_AS(cpu::gemm(true, false, 3, 2, 2, 1.0, p, 2, p, 2, 0.0, p, 2, DType::f32),
                       doctest::Contains("[gemm] expected lda >= 3 for A stored [2, 3] (trans_a=1), got lda=2"),
                       hg::Error);
  CHECK_THROWS_WITH_AS(cpu::gemm(false, true, 2, 4, 3, 1.0, p, 3, p, 2, 0.0, p, 4, DType::f32),
                       doctest::Contains("[gemm] expected ldb >= 3"), hg::Error);
  CHECK_THROWS_WITH_AS(cpu::gemm(false, false, 2, 4, 3, 1.0, p, 3, p, 4, 0.0, p, 3, DType::f32),
                       doctest::Contains("[gemm] expected ldc >= 4"), hg::Error);
}

// ---- half-precision paths ------------------------------------------------------------------------
//
// Each path of gemm_avx512.h that takes f16/bf16 A and B is called directly, with C f32 and C in the
// inputs' half type, and compared with gemm_reference run in float64 on the same rounded values
// (A, B and the initial C converted exactly to f64). Tolerance per element:
//     tol = (k + 3) * eps_f32 * bound * (1 + eps_out) + eps_out * |ref| + tiny,
// the worst case of an fp32 sum of k products (exact in fp32 for half inputs) plus alpha and beta,
// then one rounding to the output type (relative, or half a subnormal step). Inputs are uniform in [-1, 1): normal values, since the
// vdpbf16ps path reads bf16 subnormals as zero (gemm_avx512.h).

namespace {

using HalfGemm = void (*)(bool, bool, int64_t, int64_t, int64_t, float, const void*, int64_t, const void*, int64_t,
                          float, void*, int64_t, bool);

void bf16_vdpbf16ps(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const void* a, int64_t lda,
                    const void* b, int64_t ldb, float beta, void* c, int64_t ldc, bool c_half) {
  cpu::detail::gemm_bf16_avx512(ta, tb, m, n, k, alpha, static_cast<const hg::bfloat16*>(a), lda,
                                static_cast<const hg::bfloat16*>(b), ldb, beta, c, ldc, c_half);
}
void bf16_via_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const void* a, int64_t lda,
                  const void* b, int64_t ldb, float beta, void* c, int64_t ldc, bool c_half) {
  cpu::detail::gemm_half_via_f32_avx512(ta, tb, m, n, k, alpha, static_cast<const hg::bfloat16*>(a), lda,
                                        static_cast<const hg::bfloat16*>(b), ldb, beta, c, ldc, c_half);
}
void f16_via_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const void* a, int64_t lda,
                 const void* b, int64_t ldb, float beta, void* c, int64_t ldc, bool c_half) {
  cpu::detail::gemm_half_via_f32_avx512(ta, tb, m, n, k, alpha, static_cast<const hg::half*>(a), lda,
                                        static_cast<const hg::half*>(b), ldb, beta, c, ldc, c_half);
}

struct HalfPath {
  const char* name;
  DType input;
  HalfGemm run;
};

// The half paths this CPU can run; a MESSAGE names each one it cannot.
std::vector<HalfPath> available_half_paths() {
  std::vector<HalfPath> paths;
  if (cpu::detail::cpu_has_avx512_bf16_gemm())
    paths.push_back({"bf16 vdpbf16ps", DType::bf16, bf16_vdpbf16ps});
  else
    MESSAGE("this CPU has no AVX512_BF16: gemm_bf16_avx512 (vdpbf16ps) is not tested here");
  if (cpu::detail::cpu_has_avx512_gemm()) {
    paths.push_back({"bf16 via f32 packing", DType::bf16, bf16_via_f32});
    paths.push_back({"f16 via f32 packing", DType::f16, f16_via_f32});
  } else {
    MESSAGE("this CPU has no AVX-512: gemm_half_via_f32_avx512 (f16 and bf16) is not tested here");
  }
  return paths;
}

// Runs `path` (C of dtype c_dtype: f32 or the input type) and the f64 reference on the same inputs.
void check_half_path(const HalfPath& path, const GemmCase& g, DType c_dtype, uint32_t seed) {
  INFO(std::string(path.name), " C ", hg::dtype_name(c_dtype), " ", describe(g));
  const auto [m, n, k] = g.shape;
  const Operands in(g, seed);  // g.dtype is the input type: A, B and C's initial values rounded to it
  Matrix c = in.c_initial.as(c_dtype);
  Matrix c_ref = in.c_initial.as(DType::f64);
  const Matrix a64 = in.a.as(DType::f64), b64 = in.b.as(DType::f64);
  path.run(g.trans_a, g.trans_b, m, n, k, float(g.alpha), in.a.data(), in.a.ld(), in.b.data(), in.b.ld(),
           float(g.beta), c.data(), c.ld(), c_dtype != DType::f32);
  cpu::gemm_reference(g.trans_a, g.trans_b, m, n, k, g.alpha, a64.data(), a64.ld(), b64.data(), b64.ld(), g.beta,
                      c_ref.data(), c_ref.ld(), DType::f64);

  const double eps_out = unit_roundoff(c_dtype);
  // Half the spacing of the output type's subnormals: where relative rounding stops.
  const double tiny = c_dtype == DType::f16 ? 0x1p-25 : c_dtype == DType::bf16 ? 0x1p-134 : 0x1p-150;
  int64_t failures = 0;
  std::string first_failure;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const double ref = c_ref.get(i, j), got = c.get(i, j);
      const double tol =
          double(k + 3) * 0x1p-24 * in.bound(g, i, j) * (1.0 + eps_out) + eps_out * std::abs(ref) + tiny;
      if (!(std::abs(got - ref) <= tol) && failures++ == 0)
        first_failure = "C[" + std::to_string(i) + ", " + std::to_string(j) + "] = " + std::to_string(got) +
                        ", reference " + std::to_string(ref) + ", tolerance " + std::to_string(tol);
    }
  INFO(first_failure);
  CHECK(failures == 0);
  CHECK(c.gaps_untouched());
}

// Edges of both packed kernels: 1 x N and N x 1, k = 1, odd k (a zero-padded last pair), m and n off
// the 14 x 32 tile, MC = 224 rows, NC = 2048 columns, and k across KC (512 f32 / 1024 bf16 pairs)
// so that a half C goes through fp32 partials.
const Shape kHalfShapes[] = {{1, 1, 1},      {1, 77, 9},     {9, 1, 3},       {7, 13, 5},      {15, 33, 17},
                             {14, 32, 16},   {29, 64, 511},  {28, 95, 513},   {225, 47, 9},    {33, 65, 1},
                             {13, 2081, 40}, {31, 40, 1025}, {17, 50, 2051}, {100, 31, 257}};

}  // namespace

TEST_CASE("each half-precision GEMM path matches a float64 reference for every transpose, shape and C type") {
  uint32_t seed = 5000;
  for (const HalfPath& path : available_half_paths())
    for (DType c_dtype : {DType::f32, path.input})
      for (bool trans_a : kTransposes)
        for (bool trans_b : kTransposes)
          for (const Shape& shape : kHalfShapes) {
            check_half_path(path, {path.input, trans_a, trans_b, shape, 1.0, 0.0, 1}, c_dtype, seed++);
            check_half_path(path, {path.input, trans_a, trans_b, shape, 0.75, -1.5, 7}, c_dtype, seed++);
          }
}

TEST_CASE("a half-precision C is the half rounding of the fp32 result, bit for bit, across KC slices") {
  // With alpha a power of two and beta == 0 the f32-C and half-C runs sum the same fp32 values in
  // the same order, so the half C must equal hg::half / hg::bfloat16 of the f32 C exactly: one
  // rounding to nearest even, no matter how many slices were kept as fp32 partials. alpha 2^-20 and
  // 2^12 push results into the half types' subnormals and past f16's range (overflow to infinity).
  // 460 rows with k over KC (2100 > 2048, the vdpbf16ps kernel's deepest KC): the half C runs in row chunks of 448 (bounded partials), the f32 C not
  // (one thread, so that the whole 460 rows are one thread's rectangle).
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(1);
  uint32_t seed = 7000;
  for (const HalfPath& path : available_half_paths())
    for (double alpha : {1.0, 0x1p-20, 0x1p12, 0x1p-130})
      for (const Shape& shape : {Shape{30, 70, 3000}, Shape{45, 33, 700}, Shape{5, 200, 2}, Shape{460, 40, 2100}})
        for (bool trans_a : kTransposes) {
          const GemmCase g{path.input, trans_a, !trans_a, shape, alpha, 0.0, 2};
          INFO(std::string(path.name), " ", describe(g));
          const auto [m, n, k] = shape;
          const Operands in(g, seed++);
          Matrix c32(DType::f32, m, n, n + 2), c_half(path.input, m, n, n + 2);
          c32.fill(kNaN);
          c_half.fill(kNaN);
          path.run(g.trans_a, g.trans_b, m, n, k, float(alpha), in.a.data(), in.a.ld(), in.b.data(), in.b.ld(), 0.0f,
                   c32.data(), c32.ld(), false);
          path.run(g.trans_a, g.trans_b, m, n, k, float(alpha), in.a.data(), in.a.ld(), in.b.data(), in.b.ld(), 0.0f,
                   c_half.data(), c_half.ld(), true);
          CHECK(c32.as(path.input).same_bytes(c_half));
        }
  omp_set_num_threads(saved_threads);
}

TEST_CASE("the half-precision GEMM paths give bit-identical results on 1 and 2 threads") {
  // Each element is computed by one thread with the same instruction sequence (the threads split C
  // into rectangles of whole tiles; the KC slicing does not depend on them), so the split must not
  // change a bit. 300 x 200 x 2100 is large enough to be split and crosses a KC slice of both kernels (the vdpbf16ps
  // kernel's KC is 2048 wherever L2 is 1 MiB or more).
  const int saved_threads = omp_get_max_threads();
  uint32_t seed = 9000;
  for (const HalfPath& path : available_half_paths())
    for (DType c_dtype : {DType::f32, path.input})
      for (bool trans_b : kTransposes) {
        const GemmCase g{path.input, false, trans_b, {300, 200, 2100}, 0.5, -1.0, 3};
        INFO(std::string(path.name), " C ", hg::dtype_name(c_dtype), " ", describe(g));
        const Operands in(g, seed++);
        Matrix one = in.c_initial.as(c_dtype), two = in.c_initial.as(c_dtype);
        omp_set_num_threads(1);
        path.run(false, trans_b, 300, 200, 2100, 0.5f, in.a.data(), in.a.ld(), in.b.data(), in.b.ld(), -1.0f,
                 one.data(), one.ld(), c_dtype != DType::f32);
        omp_set_num_threads(2);
        path.run(false, trans_b, 300, 200, 2100, 0.5f, in.a.data(), in.a.ld(), in.b.data(), in.b.ld(), -1.0f,
                 two.data(), two.ld(), c_dtype != DType::f32);
        CHECK(one.same_bytes(two));
        CHECK(!one.same_bytes(in.c_initial.as(c_dtype)));  // the GEMM did write C
      }
  omp_set_num_threads(saved_threads);
}

TEST_CASE("gemm_bias equals gemm onto C filled with the bias, bit for bit, with C poisoned") {
  // On the packed paths the bias is added in the tile store instead of being copied into C first;
  // the sums (alpha * acc + bias in fp32, then one rounding) are the same as gemm with beta = 1 onto
  // rows of bias, so the results must match exactly. C starts as NaN: gemm_bias must not read it.
  uint32_t seed = 11000;
  for (DType dtype : kFloatingTypes)
    for (const Shape& shape : {Shape{30, 70, 600}, Shape{45, 33, 1100}, Shape{2, 40, 9}, Shape{64, 5, 30}})
      for (bool trans_a : kTransposes)
        for (bool trans_b : kTransposes) {
          const GemmCase g{dtype, trans_a, trans_b, shape, -0.75, 1.0, 3};
          INFO(describe(g));
          const auto [m, n, k] = shape;
          const Operands in(g, seed++);
          Matrix bias(dtype, 1, n, n);
          std::mt19937 rng(seed);
          bias.fill_random(rng);
          Matrix expected(dtype, m, n, n + 3), got(dtype, m, n, n + 3);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) expected.set(i, j, bias.get(0, j));
          got.fill(kNaN);
          cpu::gemm(trans_a, trans_b, m, n, k, g.alpha, in.a.data(), in.a.ld(), in.b.data(), in.b.ld(), 1.0,
                    expected.data(), expected.ld(), dtype);
          cpu::gemm_bias(trans_a, trans_b, m, n, k, g.alpha, in.a.data(), in.a.ld(), in.b.data(), in.b.ld(),
                         bias.data(), got.data(), got.ld(), dtype);
          CHECK(got.same_bytes(expected));
        }
}

// ---- AMX bf16 GEMM (issue 20): gemm_bf16_amx run directly ----------------------------------------
// bf16 A and B (fresh random normal values in [-1, 1): AMX reads bf16 subnormals as zero, so none
// are drawn), against a float64 sum over the same bf16 values, with
//     tol = k * eps_f32 * (|alpha| sum_p |a_ip b_pj|) + eps_f32 * |beta C| + output rounding,
// the output rounding being eps_f32 * |ref| for f32 C and one bf16 ulp (2^-8 |ref|) for bf16 C.
// Gaps between rows hold a sentinel that must survive; C is NaN when beta == 0 (never read). The
// bf16 C must also be bit-identical to the f32 C of the same call rounded to nearest even (one
// rounding of the same fp32 sum), and 2 threads bit-identical to 1.

namespace {

struct AmxCase {
  bool trans_a, trans_b;
  int64_t m, n, k;
  float alpha, beta;
  int64_t pad;  // extra elements per row of A, B and C
};

std::string describe_amx(const AmxCase& g, bool c_bf16) {
  return "trans_a=" + std::to_string(g.trans_a) + " trans_b=" + std::to_string(g.trans_b) +
         " m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k) +
         " alpha=" + std::to_string(g.alpha) + " beta=" + std::to_string(g.beta) + " pad=" + std::to_string(g.pad) +
         " c=" + (c_bf16 ? "bf16" : "f32");
}

// Normal bf16 values in [-1, 1): magnitudes below 2^-20 (none subnormal, but keep clear) become 2^-20.
std::vector<hg::bfloat16> random_bf16(int64_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<hg::bfloat16> v(size_t(std::max<int64_t>(count, 1)));
  for (auto& x : v) {
    float f = uniform(rng);
    if (std::abs(f) < 0x1p-20f) f = 0x1p-20f;
    x = hg::bfloat16(f);
  }
  return v;
}

// The results of one call: C as double, f32 and bf16 variants, each with its gaps checked.
struct AmxResult {
  std::vector<float> c32;
  std::vector<uint16_t> c16;
};

AmxResult run_amx(const AmxCase& g, const std::vector<hg::bfloat16>& a, int64_t lda,
                  const std::vector<hg::bfloat16>& b, int64_t ldb, const std::vector<hg::bfloat16>& c0, int threads) {
  const int64_t ldc = g.n + g.pad;
  AmxResult r;
  r.c32.assign(size_t(std::max<int64_t>(g.m * ldc, 1)), float(kSentinel));
  r.c16.assign(r.c32.size(), hg::bfloat16(float(kSentinel)).bits);
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = 0; j < g.n; ++j) {
      const float v = g.beta == 0.0f ? std::numeric_limits<float>::quiet_NaN() : float(c0[size_t(i * ldc + j)]);
      r.c32[size_t(i * ldc + j)] = v;
      r.c16[size_t(i * ldc + j)] = hg::bfloat16(v).bits;
    }
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  cpu::detail::gemm_bf16_amx(g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, a.data(), lda, b.data(), ldb, g.beta,
                             r.c32.data(), ldc, false);
  cpu::detail::gemm_bf16_amx(g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, a.data(), lda, b.data(), ldb, g.beta,
                             r.c16.data(), ldc, true);
  omp_set_num_threads(saved);
  return r;
}

void check_amx_case(const AmxCase& g, uint32_t seed, bool compare_threads) {
  INFO(describe_amx(g, false));
  std::mt19937 rng(seed);
  const int64_t lda = (g.trans_a ? g.m : g.k) + g.pad, ldb = (g.trans_b ? g.k : g.n) + g.pad, ldc = g.n + g.pad;
  const std::vector<hg::bfloat16> a = random_bf16((g.trans_a ? g.k : g.m) * lda, rng);
  const std::vector<hg::bfloat16> b = random_bf16((g.trans_b ? g.n : g.k) * ldb, rng);
  const std::vector<hg::bfloat16> c0 = random_bf16(g.m * ldc, rng);
  const AmxResult got = run_amx(g, a, lda, b, ldb, c0, 1);

  const auto op_a = [&](int64_t i, int64_t p) { return double(float(g.trans_a ? a[size_t(p * lda + i)] : a[size_t(i * lda + p)])); };
  const auto op_b = [&](int64_t p, int64_t j) { return double(float(g.trans_b ? b[size_t(j * ldb + p)] : b[size_t(p * ldb + j)])); };
  int64_t failures_32 = 0, failures_16 = 0, not_rounded_once = 0, gaps = 0;
  std::string first;
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t j = 0; j < g.n; ++j) {
      double sum = 0, size = 0;
      for (int64_t p = 0; p < g.k; ++p) {
        sum += op_a(i, p) * op_b(p, j);
        size += std::abs(op_a(i, p) * op_b(p, j));
      }
      const double c_in = g.beta == 0.0f ? 0.0 : double(float(c0[size_t(i * ldc + j)]));
      const double ref = double(g.alpha) * sum + double(g.beta) * c_in;
      const double fp32 = double(g.k + 1) * 0x1p-24 * std::abs(double(g.alpha)) * size +
                          0x1p-24 * std::abs(double(g.beta) * c_in) + 0x1p-24 * std::abs(ref) + 1e-30;
      const float v32 = got.c32[size_t(i * ldc + j)];
      const float v16 = hg::bfloat16_bits_to_float(got.c16[size_t(i * ldc + j)]);
      if (!(std::abs(double(v32) - ref) <= fp32) && failures_32++ == 0)
        first = "f32 C[" + std::to_string(i) + ", " + std::to_string(j) + "] = " + std::to_string(v32) +
                ", reference " + std::to_string(ref) + ", tolerance " + std::to_string(fp32);
      if (!(std::abs(double(v16) - ref) <= fp32 + 0x1p-8 * std::abs(ref)) && failures_16++ == 0)
        first = "bf16 C[" + std::to_string(i) + ", " + std::to_string(j) + "] = " + std::to_string(v16) +
                ", reference " + std::to_string(ref);
      if (hg::float_to_bfloat16_bits(v32) != got.c16[size_t(i * ldc + j)]) ++not_rounded_once;
    }
    for (int64_t j = g.n; j < ldc; ++j)
      if (got.c32[size_t(i * ldc + j)] != float(kSentinel) ||
          got.c16[size_t(i * ldc + j)] != hg::bfloat16(float(kSentinel)).bits)
        ++gaps;
  }
  INFO(first);
  CHECK(failures_32 == 0);
  CHECK(failures_16 == 0);
  CHECK(not_rounded_once == 0);
  CHECK(gaps == 0);
  if (compare_threads) {
    const AmxResult two = run_amx(g, a, lda, b, ldb, c0, 2);
    CHECK(std::memcmp(two.c32.data(), got.c32.data(), got.c32.size() * sizeof(float)) == 0);
    CHECK(two.c16 == got.c16);
  }
}

}  // namespace

TEST_CASE("gemm_bf16_amx matches a float64 reference for every transpose, edge, stride, alpha, beta and C type") {
  if (!cpu::detail::cpu_has_amx_bf16_gemm()) {
    MESSAGE("skipped: this CPU (or OS) has no AMX-BF16 tiles; cpu_has_amx_bf16_gemm() is false");
    return;
  }
  const int64_t sizes[] = {1, 2, 15, 16, 17, 31, 32, 33, 47, 64, 70};
  uint32_t seed = 100;
  for (bool trans_a : kTransposes)
    for (bool trans_b : kTransposes) {
      // Odd and even sizes 1..70 in every position, k = 1 included.
      for (int64_t m : sizes)
        for (int64_t n : {int64_t(1), int64_t(17), int64_t(32), int64_t(70)})
          for (int64_t k : {int64_t(1), int64_t(31), int64_t(64), int64_t(65)}) {
            check_amx_case({trans_a, trans_b, m, n, k, 1.0f, 0.0f, 3}, seed++, false);
            check_amx_case({trans_a, trans_b, n, m, k, -0.75f, 1.5f, 1}, seed++, false);
          }
      for (int64_t k : sizes) check_amx_case({trans_a, trans_b, 33, 47, k, 2.0f, -1.0f, 0}, seed++, false);
      // Large strides, and shapes across MC = 128 and KC = 512 on 1 and 2 threads (NC = 512 and
      // deep k are crossed in the next test case).
      check_amx_case({trans_a, trans_b, 70, 65, 69, 0.5f, 0.0f, 301}, seed++, false);
      check_amx_case({trans_a, trans_b, 130, 260, 520, 1.0f, 0.0f, 5}, seed++, true);
      check_amx_case({trans_a, trans_b, 300, 97, 257, -1.25f, 0.5f, 2}, seed++, true);
    }
}

TEST_CASE("gemm_bf16_amx with k == 0 or alpha == 0 scales C by beta, never reading C when beta == 0") {
  if (!cpu::detail::cpu_has_amx_bf16_gemm()) {
    MESSAGE("skipped: this CPU (or OS) has no AMX-BF16 tiles; cpu_has_amx_bf16_gemm() is false");
    return;
  }
  const std::vector<hg::bfloat16> ab(64, hg::bfloat16(std::numeric_limits<float>::quiet_NaN()));
  std::vector<float> c32(12, std::numeric_limits<float>::quiet_NaN());
  cpu::detail::gemm_bf16_amx(false, false, 3, 4, 0, 1.0f, ab.data(), 1, ab.data(), 4, 0.0f, c32.data(), 4, false);
  for (float v : c32) CHECK(v == 0.0f);
  std::vector<uint16_t> c16(12, hg::bfloat16(2.0f).bits);
  cpu::detail::gemm_bf16_amx(true, true, 3, 4, 5, 0.0f, ab.data(), 3, ab.data(), 5, -0.5f, c16.data(), 4, true);
  for (uint16_t v : c16) CHECK(v == hg::bfloat16(-1.0f).bits);
}

TEST_CASE("gemm_bf16_amx across NC = 512 columns and past 4096 of k (B packed per pass), 1 and 2 threads") {
  if (!cpu::detail::cpu_has_amx_bf16_gemm()) {
    MESSAGE("skipped: this CPU (or OS) has no AMX-BF16 tiles; cpu_has_amx_bf16_gemm() is false");
    return;
  }
  uint32_t seed = 20000;
  for (bool trans_a : kTransposes)
    for (bool trans_b : kTransposes) {
      // n = 1030: three column blocks, the last 6 wide; k 1025 (three KC slices, 1 deep last) and 33.
      check_amx_case({trans_a, trans_b, 40, 1030, 1025, 1.0f, 0.0f, 3}, seed++, true);
      check_amx_case({trans_a, trans_b, 37, 1030, 33, -0.5f, 2.0f, 1}, seed++, true);
    }
  // k = 4130 > 4096: two passes of B over row groups of 512 (530 rows: two groups on one thread).
  check_amx_case({false, false, 530, 40, 4130, 1.0f, 0.0f, 2}, seed++, true);
  check_amx_case({true, true, 530, 33, 4130, 0.5f, -1.0f, 0}, seed++, true);
}

TEST_CASE("the bf16 gemm_bias epilogues equal the same path's gemm onto bias rows, bit for bit") {
  // gemm() on an AMX machine takes AMX, so these two are called directly: vdpbf16ps
  // (gemm_bias_bf16_avx512) and the widening path's bf16 overload (gemm_bias_half_via_f32_avx512).
  // Each must equal its own gemm with beta = 1 onto C filled with the bias rows (same fp32 sums,
  // one rounding), for every transpose and with k across both KCs (512 and 1024); C starts as NaN.
  using BiasGemm = void (*)(bool, bool, int64_t, int64_t, int64_t, float, const hg::bfloat16*, int64_t,
                            const hg::bfloat16*, int64_t, const hg::bfloat16*, hg::bfloat16*, int64_t);
  using PlainGemm = void (*)(bool, bool, int64_t, int64_t, int64_t, float, const hg::bfloat16*, int64_t,
                             const hg::bfloat16*, int64_t, float, void*, int64_t, bool);
  struct BiasPath {
    const char* name;
    bool available;
    BiasGemm bias;
    PlainGemm plain;
  };
  const BiasPath paths[] = {
      {"vdpbf16ps", cpu::detail::cpu_has_avx512_bf16_gemm(), cpu::detail::gemm_bias_bf16_avx512,
       cpu::detail::gemm_bf16_avx512},
      {"bf16 via f32 packing", cpu::detail::cpu_has_avx512_gemm(), cpu::detail::gemm_bias_half_via_f32_avx512,
       cpu::detail::gemm_half_via_f32_avx512}};
  uint32_t seed = 21000;
  for (const BiasPath& path : paths) {
    if (!path.available) {
      MESSAGE("this CPU cannot run the ", path.name, " bias epilogue: not tested here");
      continue;
    }
    for (const Shape& shape : {Shape{30, 70, 600}, Shape{45, 33, 1100}, Shape{4, 8, 9}, Shape{460, 40, 2100}})
      for (bool trans_a : kTransposes)
        for (bool trans_b : kTransposes) {
          const GemmCase g{DType::bf16, trans_a, trans_b, shape, -0.75, 1.0, 3};
          INFO(path.name, " ", describe(g));
          const auto [m, n, k] = shape;
          const Operands in(g, seed++);
          Matrix bias(DType::bf16, 1, n, n);
          std::mt19937 rng(seed);
          bias.fill_random(rng);
          Matrix expected(DType::bf16, m, n, n + 3), got(DType::bf16, m, n, n + 3);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) expected.set(i, j, bias.get(0, j));
          got.fill(kNaN);
          const auto* a = static_cast<const hg::bfloat16*>(in.a.data());
          const auto* b = static_cast<const hg::bfloat16*>(in.b.data());
          path.plain(trans_a, trans_b, m, n, k, -0.75f, a, in.a.ld(), b, in.b.ld(), 1.0f, expected.data(),
                     expected.ld(), true);
          path.bias(trans_a, trans_b, m, n, k, -0.75f, a, in.a.ld(), b, in.b.ld(),
                    static_cast<const hg::bfloat16*>(bias.data()), static_cast<hg::bfloat16*>(got.data()), got.ld());
          CHECK(got.same_bytes(expected));
          CHECK(got.gaps_untouched());
        }
  }
}

TEST_CASE("parse_cpu_gemm_choice reads HG_CPU_GEMM's values and names the variable on a bad one") {
  using cpu::detail::CpuGemmChoice;
  using cpu::detail::parse_cpu_gemm_choice;
  CHECK(parse_cpu_gemm_choice(nullptr) == CpuGemmChoice::automatic);
  CHECK(parse_cpu_gemm_choice("") == CpuGemmChoice::automatic);
  CHECK(parse_cpu_gemm_choice("auto") == CpuGemmChoice::automatic);
  CHECK(parse_cpu_gemm_choice("amx") == CpuGemmChoice::amx);
  CHECK(parse_cpu_gemm_choice("amx4") == CpuGemmChoice::amx4);
  CHECK(parse_cpu_gemm_choice("avx512") == CpuGemmChoice::avx512);
  CHECK(parse_cpu_gemm_choice("fp32") == CpuGemmChoice::fp32);
  CHECK(parse_cpu_gemm_choice("flags") == CpuGemmChoice::flags);
  for (const char* bad : {"AMX", "avx2", "amx ", "f32", "amx3", "flag"}) {
    const std::string expected =
        "HG_CPU_GEMM=\"" + std::string(bad) + "\": expected auto, flags, amx, amx4, avx512 or fp32";
    CHECK_THROWS_WITH_AS(parse_cpu_gemm_choice(bad), doctest::Contains(expected.c_str()), hg::Error);
  }
}

// ---- explicit blockings (gemm_avx512_blocking.h) ----------------------------------------------------
//
// The packed kernels take their tile and KC / MC / NC per CPU at run time. These cases run both f32
// tiles (whichever this CPU would pick) and the vdpbf16ps kernel under deliberately small blocks, so
// that modest matrices cross every block edge: k over several KC slices (and not a multiple of the
// packers' 16-wide transposes), m over several MC blocks with a partial last tile (and, for the
// 6-row tile, 16-row packing groups that straddle its panels), n over several NC blocks and a
// partial last panel. Inputs are fresh random values, C is NaN when beta == 0 and the row gaps
// hold a sentinel, as everywhere in this file.

namespace {

using cpu::detail::GemmBlocking;
using cpu::detail::GemmTile;

GemmBlocking g_blocking{GemmTile::mr14_nr32, 512, 224, 2048};  // what the *_blocked wrappers use

void avx512_blocked_as_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const void* a,
                            int64_t lda, const void* b, int64_t ldb, double beta, void* c, int64_t ldc, DType) {
  cpu::detail::gemm_f32_avx512_blocked(g_blocking, ta, tb, m, n, k, float(alpha), static_cast<const float*>(a), lda,
                                       static_cast<const float*>(b), ldb, float(beta), static_cast<float*>(c), ldc);
}
void bf16_via_f32_blocked(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const void* a, int64_t lda,
                          const void* b, int64_t ldb, float beta, void* c, int64_t ldc, bool c_half) {
  cpu::detail::gemm_half_via_f32_avx512_blocked(g_blocking, ta, tb, m, n, k, alpha,
                                                static_cast<const hg::bfloat16*>(a), lda,
                                                static_cast<const hg::bfloat16*>(b), ldb, beta, c, ldc, c_half);
}
void f16_via_f32_blocked(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const void* a, int64_t lda,
                         const void* b, int64_t ldb, float beta, void* c, int64_t ldc, bool c_half) {
  cpu::detail::gemm_half_via_f32_avx512_blocked(g_blocking, ta, tb, m, n, k, alpha, static_cast<const hg::half*>(a),
                                                lda, static_cast<const hg::half*>(b), ldb, beta, c, ldc, c_half);
}
void bf16_vdpbf16ps_blocked(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const void* a, int64_t lda,
                            const void* b, int64_t ldb, float beta, void* c, int64_t ldc, bool c_half) {
  cpu::detail::gemm_bf16_avx512_blocked(g_blocking, ta, tb, m, n, k, alpha, static_cast<const hg::bfloat16*>(a), lda,
                                        static_cast<const hg::bfloat16*>(b), ldb, beta, c, ldc, c_half);
}

// Small blocks for each tile (and both ways of packing a transposed A): KC = 20 (not a multiple of
// the 16-wide transposes), MC = 5 tiles of rows, NC = 70 (2 x 32 + 6 / 1 x 64 + 6: a partial panel
// in every NC block).
const GemmBlocking kSmallBlockings[] = {{GemmTile::mr14_nr32, 20, 70, 70, false},
                                        {GemmTile::mr14_nr32, 20, 70, 70, true},
                                        {GemmTile::mr6_nr64, 20, 30, 70, true},
                                        {GemmTile::mr6_nr64, 37, 18, 130, true}};

// Shapes across those blocks: m across MC and the tiles (47 = 30 + 17, 16-row groups straddling
// 6-row panels), k across several KC slices (and k < KC), n across NC and partial panels.
const Shape kSmallBlockShapes[] = {{1, 1, 1},   {6, 64, 20},  {7, 65, 21},   {47, 71, 41},
                                   {31, 140, 7}, {61, 200, 83}, {16, 3, 100}, {100, 129, 45}};

}  // namespace

TEST_CASE("f32_blocking_for keeps Zen 4's tile and blocking; a 48 KiB L1d takes 6 x 64 unless k is shallow") {
  for (int64_t k : {1, 256, 512, 4096}) {
    const GemmBlocking zen4 = cpu::detail::f32_blocking_for({32 * 1024, 1024 * 1024}, k);
    CHECK(zen4.tile == GemmTile::mr14_nr32);
    CHECK(zen4.kc == 512);
    CHECK(zen4.mc == 224);
    CHECK(zen4.nc == 2048);
    CHECK(!zen4.pack_a_by_rows);
    const GemmBlocking unknown = cpu::detail::f32_blocking_for({0, 0}, k);
    CHECK(unknown.tile == GemmTile::mr14_nr32);
    CHECK(unknown.mc == 224);
    CHECK(!unknown.pack_a_by_rows);
  }
  // 48 KiB L1d: the 14 x 32 B panel (k x 128 bytes) fits in 3/4 of it up to k = 288.
  for (int64_t k : {1, 256, 288}) {
    const GemmBlocking shallow = cpu::detail::f32_blocking_for({48 * 1024, 2048 * 1024}, k);
    CHECK(shallow.tile == GemmTile::mr14_nr32);
    CHECK(shallow.pack_a_by_rows);
  }
  for (int64_t k : {289, 512, 4096}) {
    const GemmBlocking deep = cpu::detail::f32_blocking_for({48 * 1024, 2048 * 1024}, k);
    CHECK(deep.tile == GemmTile::mr6_nr64);
    CHECK(deep.mc % 6 == 0);
    CHECK(deep.pack_a_by_rows);
  }
  const GemmBlocking bf16 = cpu::detail::bf16_blocking_for({32 * 1024, 1024 * 1024});
  CHECK(bf16.kc == 2048);
  CHECK(bf16.mc == 224);
  CHECK(bf16.nc == 2048);
  CHECK(cpu::detail::bf16_blocking_for({0, 0}).kc == 1024);
  CHECK(cpu::detail::bf16_blocking_for({32 * 1024, 512 * 1024}).kc == 1024);
  CHECK(cpu::detail::bf16_blocking_for({48 * 1024, 2048 * 1024}).kc == 2048);
  CHECK(cpu::detail::bf16_blocking_for({48 * 1024, 2048 * 1024}).mc == 224);
  CHECK(std::string(cpu::detail::gemm_tile_name(GemmTile::mr6_nr64)) == "6x64");
  CHECK(std::string(cpu::detail::gemm_tile_name(GemmTile::mr14_nr32)) == "14x32");
  const cpu::detail::CpuCaches caches = cpu::detail::detect_cpu_caches();
  MESSAGE("this CPU: L1d ", caches.l1d, " B, L2 ", caches.l2, " B: f32 tile at k = 256 ",
          cpu::detail::gemm_tile_name(cpu::detail::f32_blocking(1024, 1024, 256).tile), ", at k = 2048 ",
          cpu::detail::gemm_tile_name(cpu::detail::f32_blocking(1024, 1024, 2048).tile));
}

TEST_CASE("both f32 tiles match gemm_reference under small blockings, every transpose, alpha and beta") {
  if (!cpu::detail::cpu_has_avx512_gemm()) {
    MESSAGE("this CPU has no AVX-512: the packed f32 tiles are not tested here");
    return;
  }
  uint32_t seed = 20000;
  std::vector<GemmBlocking> blockings(std::begin(kSmallBlockings), std::end(kSmallBlockings));
  blockings.push_back(cpu::detail::f32_blocking_for({32 * 1024, 1024 * 1024}, 1));
  blockings.push_back(cpu::detail::f32_blocking_for({48 * 1024, 2048 * 1024}, 1));
  blockings.push_back(cpu::detail::f32_blocking_for({48 * 1024, 2048 * 1024}, 4096));
  for (const GemmBlocking& blocking : blockings) {
    g_blocking = blocking;
    INFO("tile ", cpu::detail::gemm_tile_name(blocking.tile), " kc ", blocking.kc, " mc ", blocking.mc, " nc ",
         blocking.nc, " pack_a_by_rows ", blocking.pack_a_by_rows);
    for (bool trans_a : kTransposes)
      for (bool trans_b : kTransposes) {
        for (const Shape& shape : kSmallBlockShapes) {
          check_against_reference({DType::f32, trans_a, trans_b, shape, 1.0, 0.0, 1}, avx512_blocked_as_gemm, seed++);
          check_against_reference({DType::f32, trans_a, trans_b, shape, -0.5, 1.5, 9}, avx512_blocked_as_gemm, seed++);
        }
        // Past the real blocks too: k over 512, m over 240, n over 64-column panels.
        check_against_reference({DType::f32, trans_a, trans_b, {250, 130, 530}, 0.75, 0.0, 2}, avx512_blocked_as_gemm,
                                seed++);
      }
  }
}

TEST_CASE("the half paths (both f32 tiles, and vdpbf16ps) match float64 under small blockings") {
  struct Run {
    HalfPath path;
    GemmBlocking blocking;
  };
  std::vector<Run> runs;
  if (cpu::detail::cpu_has_avx512_gemm())
    for (const GemmBlocking& blocking : kSmallBlockings) {
      runs.push_back({{"bf16 via f32 packing", DType::bf16, bf16_via_f32_blocked}, blocking});
      runs.push_back({{"f16 via f32 packing", DType::f16, f16_via_f32_blocked}, blocking});
    }
  if (cpu::detail::cpu_has_avx512_bf16_gemm()) {
    // KC 20 and 21 (rounded up to an even 22: a slice never splits a k-pair), MC = 2 tiles.
    runs.push_back({{"bf16 vdpbf16ps", DType::bf16, bf16_vdpbf16ps_blocked}, {GemmTile::mr14_nr32, 20, 28, 70}});
    runs.push_back({{"bf16 vdpbf16ps", DType::bf16, bf16_vdpbf16ps_blocked}, {GemmTile::mr14_nr32, 21, 14, 40}});
    runs.push_back({{"bf16 vdpbf16ps", DType::bf16, bf16_vdpbf16ps_blocked}, cpu::detail::bf16_blocking_for({0, 0})});
    runs.push_back({{"bf16 vdpbf16ps", DType::bf16, bf16_vdpbf16ps_blocked},
                    cpu::detail::bf16_blocking_for({48 * 1024, 2048 * 1024})});
  }
  if (runs.empty()) MESSAGE("this CPU has no AVX-512: the packed half paths are not tested here");
  uint32_t seed = 30000;
  for (const Run& run : runs) {
    g_blocking = run.blocking;
    INFO("tile ", cpu::detail::gemm_tile_name(run.blocking.tile), " kc ", run.blocking.kc, " mc ", run.blocking.mc,
         " nc ", run.blocking.nc);
    for (DType c_dtype : {DType::f32, run.path.input})
      for (bool trans_a : kTransposes)
        for (bool trans_b : kTransposes)
          for (const Shape& shape : kSmallBlockShapes) {
            check_half_path(run.path, {run.path.input, trans_a, trans_b, shape, 1.0, 0.0, 1}, c_dtype, seed++);
            check_half_path(run.path, {run.path.input, trans_a, trans_b, shape, 0.75, -1.5, 5}, c_dtype, seed++);
          }
  }
}

TEST_CASE("under small blockings a half C is still rounded once from the fp32 sum over all KC slices") {
  // As "a half-precision C is the half rounding of the fp32 result": beta == 0 and alpha a power of
  // two, so the half C must be exactly the half rounding of the same path's f32 C, with k spanning
  // many slices and the rows run in chunks of 2 MC (the bounded fp32 partials).
  std::vector<std::pair<HalfPath, GemmBlocking>> runs;
  if (cpu::detail::cpu_has_avx512_gemm())
    for (const GemmBlocking& blocking : kSmallBlockings)
      runs.push_back({{"bf16 via f32 packing", DType::bf16, bf16_via_f32_blocked}, blocking});
  if (cpu::detail::cpu_has_avx512_bf16_gemm())
    runs.push_back({{"bf16 vdpbf16ps", DType::bf16, bf16_vdpbf16ps_blocked}, {GemmTile::mr14_nr32, 20, 28, 70}});
  uint32_t seed = 40000;
  for (const auto& [path, blocking] : runs) {
    g_blocking = blocking;
    for (bool trans_a : kTransposes) {
      const GemmCase g{path.input, trans_a, !trans_a, {97, 150, 130}, 0x1p-3, 0.0, 2};
      INFO(std::string(path.name), " tile ", cpu::detail::gemm_tile_name(blocking.tile), " ", describe(g));
      const Operands in(g, seed++);
      Matrix c32(DType::f32, 97, 150, 152), c_half(path.input, 97, 150, 152);
      c32.fill(kNaN);
      c_half.fill(kNaN);
      path.run(g.trans_a, g.trans_b, 97, 150, 130, float(g.alpha), in.a.data(), in.a.ld(), in.b.data(), in.b.ld(),
               0.0f, c32.data(), c32.ld(), false);
      path.run(g.trans_a, g.trans_b, 97, 150, 130, float(g.alpha), in.a.data(), in.a.ld(), in.b.data(), in.b.ld(),
               0.0f, c_half.data(), c_half.ld(), true);
      CHECK(c32.as(path.input).same_bytes(c_half));
    }
  }
}
