// kernels/cpu/gemm_bf16_amx.cpp's f16 path (gemm_f16_amx): f16 A and B split exactly into two bf16
// pieces (hi = bf16_rne(x), lo = x - hi) and multiplied on AMX tiles as hi*hi + hi*lo + lo*hi
// (3 terms) or with lo*lo too (4 terms), against a float64 sum over the same f16 values and against
// the fp32 path (gemm_half_via_f32_avx512, f16 widened while packing) on the same inputs.
//
// Inputs span f16's range: normal values with exponents drawn uniformly over a wide band, f16
// subnormals (which a plain bf16 conversion would keep but AMX would flush if they were bf16
// subnormals: their pieces are normal bf16), and values near 65504 (whose hi piece is 65536).
// Per element, with size = |alpha| sum_p |a_ip b_pj| + |beta C|:
//     4 terms: |C - ref| <= (k + 2) eps_f32 size + output rounding        (every product exact)
//     3 terms: the same + 2^-16 |alpha| sum_p |a_ip b_pj|                  (the dropped lo*lo)
// the output rounding being eps_f32 |ref| for f32 C and half an f16 ulp (2^-11 |ref|, 2^-25 below
// f16's normal range) for f16 C. The largest error in units of the fp32 path's bound (the 4-term
// bound above) over all cases of a test must also be no worse than 2x the fp32 path's own on the
// same inputs (f16 C with 3 or 4 terms; f32 C with 4 terms; 3 terms with f32 C is reported). Gaps
// between rows hold a sentinel that must survive, C is NaN when beta == 0 (never read), the f16 C is
// bit-identical to the same call's f32 C rounded once, and 2 threads are bit-identical to 1.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <omp.h>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/gemm_avx512.h"
#include "kernels/cpu/gemm_calibration.h"
#include "kernels/error.h"
#include "kernels/half.h"
#include "kernels/kernels.h"

namespace {

namespace cpu = hg::kernels::cpu;
using hg::half;

constexpr float kSentinel = 768.0f;  // exact in f16

bool skip_without_amx() {
  if (cpu::detail::cpu_has_amx_bf16_gemm()) return false;
  MESSAGE("skipped: this CPU (or OS) has no AMX-BF16 tiles; cpu_has_amx_bf16_gemm() is false");
  return true;
}

// f16 values over a wide range: sign * [1, 2) * 2^e with e uniform in [e_lo, e_hi] (rounded to
// f16, so e < -14 gives subnormals), plus 1 in 20 a random f16 subnormal and, when `big`, 1 in 200
// a value in [65024, 65504] (the top of f16's range).
std::vector<half> random_f16(int64_t count, std::mt19937& rng, int e_lo, int e_hi, bool big) {
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(e_lo, e_hi), kind(0, 199), subnormal(1, 0x3ff), top(0x7bf0, 0x7bff);
  std::vector<half> v(size_t(std::max<int64_t>(count, 1)));
  for (half& x : v) {
    const int what = kind(rng);
    const uint16_t sign = (rng() & 1) ? 0x8000 : 0;
    if (what < 10) {
      x.bits = uint16_t(sign | subnormal(rng));
    } else if (what == 10 && big) {
      x.bits = uint16_t(sign | top(rng));
    } else {
      x = half((sign ? -1.0f : 1.0f) * std::ldexp(mantissa(rng), exponent(rng)));
    }
  }
  return v;
}

struct F16Case {
  bool trans_a, trans_b;
  int64_t m, n, k;
  float alpha, beta;
  int64_t pad;  // extra elements per row of A, B and C
};

std::string describe(const F16Case& g) {
  return "trans_a=" + std::to_string(g.trans_a) + " trans_b=" + std::to_string(g.trans_b) +
         " m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k) +
         " alpha=" + std::to_string(g.alpha) + " beta=" + std::to_string(g.beta) + " pad=" + std::to_string(g.pad);
}

struct Inputs {
  std::vector<half> a, b, c0;
  int64_t lda, ldb, ldc;
};

Inputs make_inputs(const F16Case& g, uint32_t seed) {
  std::mt19937 rng(seed);
  Inputs in;
  in.lda = (g.trans_a ? g.m : g.k) + g.pad;
  in.ldb = (g.trans_b ? g.k : g.n) + g.pad;
  in.ldc = g.n + g.pad;
  in.a = random_f16((g.trans_a ? g.k : g.m) * in.lda, rng, -14, 6, true);
  in.b = random_f16((g.trans_b ? g.n : g.k) * in.ldb, rng, -22, -6, false);
  in.c0 = random_f16(g.m * in.ldc, rng, -8, 4, false);
  return in;
}

// Which implementation fills C.
enum class Path { amx3, amx4, via_f32 };

// C (f32 or f16 bits, gaps = sentinel; NaN where beta == 0 so a read would show) after one call.
template <class C>
std::vector<C> run(Path path, const F16Case& g, const Inputs& in, int threads) {
  constexpr bool c_f16 = std::is_same_v<C, half>;
  std::vector<C> c(size_t(std::max<int64_t>(g.m * in.ldc, 1)), C(kSentinel));
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = 0; j < g.n; ++j)
      c[size_t(i * in.ldc + j)] =
          C(g.beta == 0.0f ? std::numeric_limits<float>::quiet_NaN() : float(in.c0[size_t(i * in.ldc + j)]));
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  if (path == Path::via_f32)
    cpu::detail::gemm_half_via_f32_avx512(g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, in.a.data(), in.lda,
                                          in.b.data(), in.ldb, g.beta, c.data(), in.ldc, c_f16);
  else
    cpu::detail::gemm_f16_amx(g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, in.a.data(), in.lda, in.b.data(), in.ldb,
                              g.beta, c.data(), in.ldc, c_f16, path == Path::amx3 ? 3 : 4);
  omp_set_num_threads(saved);
  return c;
}

// The largest |C - ref| / size over a case, and how many elements broke their bound.
struct Errors {
  double worst = 0;        // max |C - ref| / size
  double worst_units = 0;  // max |C - ref| / (the fp32 path's bound)
  int64_t failures = 0, gaps = 0;
  std::string first;
};

template <class C>
Errors measure(const char* label, const std::vector<C>& c, const F16Case& g, const Inputs& in, double dropped) {
  constexpr bool c_f16 = std::is_same_v<C, half>;
  Errors e;
  const auto op_a = [&](int64_t i, int64_t p) {
    return double(float(g.trans_a ? in.a[size_t(p * in.lda + i)] : in.a[size_t(i * in.lda + p)]));
  };
  const auto op_b = [&](int64_t p, int64_t j) {
    return double(float(g.trans_b ? in.b[size_t(j * in.ldb + p)] : in.b[size_t(p * in.ldb + j)]));
  };
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t j = 0; j < g.n; ++j) {
      double sum = 0, products = 0;
      for (int64_t p = 0; p < g.k; ++p) {
        sum += op_a(i, p) * op_b(p, j);
        products += std::abs(op_a(i, p) * op_b(p, j));
      }
      const double c_in = g.beta == 0.0f ? 0.0 : double(float(in.c0[size_t(i * in.ldc + j)]));
      const double ref = double(g.alpha) * sum + double(g.beta) * c_in;
      const double size = std::abs(double(g.alpha)) * products + std::abs(double(g.beta) * c_in);
      const double rounding = c_f16 ? std::max(0x1p-11 * std::abs(ref), 0x1p-25) : 0x1p-24 * std::abs(ref);
      const double fp32_tol = double(g.k + 2) * 0x1p-24 * size + rounding + 1e-300;
      const double tol = fp32_tol + dropped * std::abs(double(g.alpha)) * products;
      const double got = double(float(c[size_t(i * in.ldc + j)]));
      const double err = std::abs(got - ref);
      if (size > 0) e.worst = std::max(e.worst, err / size);
      e.worst_units = std::max(e.worst_units, err / fp32_tol);
      if (!(err <= tol) && e.failures++ == 0)
        e.first = std::string(label) + " C[" + std::to_string(i) + ", " + std::to_string(j) +
                  "] = " + std::to_string(got) + ", reference " + std::to_string(ref) + ", tolerance " +
                  std::to_string(tol);
    }
    for (int64_t j = g.n; j < in.ldc; ++j)
      if (float(c[size_t(i * in.ldc + j)]) != kSentinel) ++e.gaps;
  }
  return e;
}

// Runs one case through every path; returns the worst errors (for the summary message).
struct CaseResult {
  double amx3_f16, amx4_f16, fp32_f16, amx3_f32, amx4_f32, fp32_f32;  // in units of the fp32 bound
  double rel_amx3_f32, rel_amx4_f32, rel_fp32_f32;                    // relative to sum |a b|
};

CaseResult check_case(const F16Case& g, uint32_t seed, bool compare_threads) {
  INFO(describe(g));
  const Inputs in = make_inputs(g, seed);
  const auto amx3_32 = run<float>(Path::amx3, g, in, 1);
  const auto amx4_32 = run<float>(Path::amx4, g, in, 1);
  const auto fp32_32 = run<float>(Path::via_f32, g, in, 1);
  const auto amx3_16 = run<half>(Path::amx3, g, in, 1);
  const auto amx4_16 = run<half>(Path::amx4, g, in, 1);
  const auto fp32_16 = run<half>(Path::via_f32, g, in, 1);

  const Errors e3_32 = measure("amx3 f32", amx3_32, g, in, 0x1p-16);
  const Errors e4_32 = measure("amx4 f32", amx4_32, g, in, 0.0);
  const Errors ef_32 = measure("fp32-path f32", fp32_32, g, in, 0.0);
  const Errors e3_16 = measure("amx3 f16", amx3_16, g, in, 0x1p-16);
  const Errors e4_16 = measure("amx4 f16", amx4_16, g, in, 0.0);
  const Errors ef_16 = measure("fp32-path f16", fp32_16, g, in, 0.0);
  for (const Errors* e : {&e3_32, &e4_32, &ef_32, &e3_16, &e4_16, &ef_16}) {
    INFO(e->first);
    CHECK(e->failures == 0);
    CHECK(e->gaps == 0);
  }
  // One rounding of the same fp32 sums: the f16 C is the f32 C rounded to nearest even.
  int64_t not_rounded_once = 0;
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = 0; j < g.n; ++j) {
      const size_t at = size_t(i * in.ldc + j);
      if (half(amx3_32[at]).bits != amx3_16[at].bits || half(amx4_32[at]).bits != amx4_16[at].bits)
        ++not_rounded_once;
    }
  CHECK(not_rounded_once == 0);
  if (compare_threads) {
    const auto two_32 = run<float>(Path::amx3, g, in, 2);
    const auto two_16 = run<half>(Path::amx3, g, in, 2);
    CHECK(std::memcmp(two_32.data(), amx3_32.data(), two_32.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(two_16.data(), amx3_16.data(), two_16.size() * sizeof(half)) == 0);
  }
  return {e3_16.worst_units, e4_16.worst_units, ef_16.worst_units, e3_32.worst_units, e4_32.worst_units,
          ef_32.worst_units, e3_32.worst, e4_32.worst, ef_32.worst};
}

// The worst of each over the cases of a test, then the comparison with the fp32 path.
struct Worst {
  CaseResult w{};
  void keep(const CaseResult& r) {
    double* mine = &w.amx3_f16;
    const double* theirs = &r.amx3_f16;
    for (int i = 0; i < int(sizeof(CaseResult) / sizeof(double)); ++i) mine[i] = std::max(mine[i], theirs[i]);
  }
  void check_and_report() const {
    CHECK(w.amx3_f16 <= 2.0 * w.fp32_f16);
    CHECK(w.amx4_f16 <= 2.0 * w.fp32_f16);
    CHECK(w.amx4_f32 <= 2.0 * w.fp32_f32);
    MESSAGE("worst |C - ref| in units of the fp32 path's bound: f16 C: amx3 ", w.amx3_f16, ", amx4 ", w.amx4_f16,
            ", fp32 path ", w.fp32_f16, "; f32 C: amx3 ", w.amx3_f32, ", amx4 ", w.amx4_f32, ", fp32 path ",
            w.fp32_f32, ". Relative to sum|ab| (f32 C): amx3 ", w.rel_amx3_f32, ", amx4 ", w.rel_amx4_f32,
            ", fp32 path ", w.rel_fp32_f32);
  }
};

}  // namespace

TEST_CASE("gemm_f16_amx matches a float64 reference and the fp32 path for every transpose, edge, alpha and beta") {
  if (skip_without_amx()) return;
  uint32_t seed = 2000;
  Worst worst;
  const auto keep = [&](const CaseResult& r) { worst.keep(r); };
  for (bool trans_a : {false, true})
    for (bool trans_b : {false, true}) {
      for (int64_t m : {1, 17, 33})
        for (int64_t n : {1, 16, 47})
          for (int64_t k : {1, 31, 33, 64}) {
            keep(check_case({trans_a, trans_b, m, n, k, 1.0f, 0.0f, 3}, seed++, false));
            keep(check_case({trans_a, trans_b, n, m, k, -0.75f, 1.5f, 1}, seed++, false));
          }
      keep(check_case({trans_a, trans_b, 70, 65, 301, 0.5f, 0.0f, 0}, seed++, false));
      // Two KC slices of f16 (KC = 256), several row and column panels; 1 and 2 threads.
      keep(check_case({trans_a, trans_b, 130, 100, 520, 1.0f, 0.0f, 5}, seed++, true));
      keep(check_case({trans_a, trans_b, 97, 140, 257, -1.25f, 0.5f, 2}, seed++, true));
    }
  worst.check_and_report();
}

TEST_CASE("gemm_f16_amx past f16's pass depth (B packed per 2048 of k) and across NC = 512 columns") {
  if (skip_without_amx()) return;
  Worst worst;
  worst.keep(check_case({false, false, 40, 530, 2100, 1.0f, 0.0f, 1}, 77, true));
  worst.keep(check_case({true, true, 33, 40, 2100, 0.5f, -1.0f, 0}, 78, true));
  worst.check_and_report();
}

TEST_CASE("gemm_f16_amx keeps infinities and NaN: an infinite operand gives inf, never inf - inf") {
  if (skip_without_amx()) return;
  const int64_t m = 32, n = 32, k = 40;
  std::vector<half> a(size_t(m * k), half(0.5f)), b(size_t(k * n), half(0.25f));
  a[size_t(3 * k + 7)] = half(std::numeric_limits<float>::infinity());   // row 3: +inf
  a[size_t(5 * k + 9)] = half(-std::numeric_limits<float>::infinity());  // row 5: -inf
  a[size_t(8 * k + 1)].bits = 0x7c01;                                    // row 8: a signalling NaN
  for (int terms : {3, 4}) {
    std::vector<float> c(size_t(m * n), -1.0f);
    cpu::detail::gemm_f16_amx(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n, false, terms);
    INFO("terms = ", terms);
    for (int64_t j = 0; j < n; ++j) {
      CHECK(c[size_t(3 * n + j)] == std::numeric_limits<float>::infinity());
      CHECK(c[size_t(5 * n + j)] == -std::numeric_limits<float>::infinity());
      CHECK(std::isnan(c[size_t(8 * n + j)]));
      CHECK(c[size_t(0 * n + j)] == doctest::Approx(0.5 * 0.25 * k));
    }
  }
}

TEST_CASE("gemm_f16_amx recomputes only the blocks that hold an infinity (2 threads), the rest stays exact") {
  if (skip_without_amx()) return;
  const int64_t m = 300, n = 600, k = 300;
  std::mt19937 rng(99);
  std::vector<half> a = random_f16(m * k, rng, -6, 2, false), b = random_f16(k * n, rng, -6, 2, false);
  for (half& x : b)
    if (float(x) == 0.0f) x = half(0.5f);  // inf * 0 would be NaN, which is not what this case checks
  a[size_t(200 * k + 17)] = half(std::numeric_limits<float>::infinity());
  std::vector<half> c(size_t(m * n), half(std::numeric_limits<float>::quiet_NaN()));
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  cpu::detail::gemm_f16_amx(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n, true, 3);
  omp_set_num_threads(saved);
  int64_t wrong_inf = 0, out_of_bound = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const float got = float(c[size_t(i * n + j)]);
      if (i == 200) {
        const float expected = float(b[size_t(17 * n + j)]) > 0 ? std::numeric_limits<float>::infinity()
                                                                 : -std::numeric_limits<float>::infinity();
        if (got != expected) ++wrong_inf;
        continue;
      }
      double ref = 0, size = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double prod = double(float(a[size_t(i * k + p)])) * double(float(b[size_t(p * n + j)]));
        ref += prod;
        size += std::abs(prod);
      }
      const double tol = double(k + 2) * 0x1p-24 * size + 0x1p-16 * size + std::max(0x1p-11 * std::abs(ref), 0x1p-25);
      if (!(std::abs(double(got) - ref) <= tol)) ++out_of_bound;
    }
  CHECK(wrong_inf == 0);
  CHECK(out_of_bound == 0);
}

TEST_CASE("gemm() and gemm_bias() on f16 take the AMX split path where the plan says AMX") {
  if (skip_without_amx()) return;
  const char* forced = std::getenv("HG_CPU_GEMM");
  if (forced && *forced && std::string(forced) != "auto" && std::string(forced) != "flags") {
    MESSAGE("skipped: HG_CPU_GEMM=", forced, " forces another path");
    return;
  }
  const F16Case g{false, true, 70, 90, 130, 1.0f, 0.0f, 0};
  const auto planned = cpu::detail::planned_gemm_candidate(cpu::detail::GemmPlanDType::f16, g.m, g.n, g.k);
  if (planned != cpu::detail::GemmCandidate::amx) {
    MESSAGE("skipped: the plan (", cpu::gemm_plan_source(hg::DType::f16), ") takes ",
            cpu::detail::gemm_candidate_name(planned), " for this shape");
    return;
  }
  const Inputs in = make_inputs(g, 4242);
  const auto direct = run<half>(Path::amx3, g, in, 1);
  std::vector<half> via_gemm(direct.size(), half(std::numeric_limits<float>::quiet_NaN()));
  cpu::gemm(g.trans_a, g.trans_b, g.m, g.n, g.k, 1.0, in.a.data(), in.lda, in.b.data(), in.ldb, 0.0, via_gemm.data(),
            in.ldc, hg::DType::f16);
  CHECK(std::memcmp(direct.data(), via_gemm.data(), direct.size() * sizeof(half)) == 0);

  // gemm_bias: the same products summed onto the bias rows, rounded once; C poisoned first.
  std::vector<half> bias(size_t(g.n));
  for (int64_t j = 0; j < g.n; ++j) bias[size_t(j)] = in.c0[size_t(j)];
  std::vector<half> with_bias(direct.size(), half(std::numeric_limits<float>::quiet_NaN()));
  cpu::gemm_bias(g.trans_a, g.trans_b, g.m, g.n, g.k, 1.0, in.a.data(), in.lda, in.b.data(), in.ldb, bias.data(),
                 with_bias.data(), in.ldc, hg::DType::f16);
  std::vector<half> expected(direct.size());
  for (int64_t i = 0; i < g.m; ++i) std::copy(bias.begin(), bias.end(), expected.begin() + i * in.ldc);
  cpu::detail::gemm_f16_amx(g.trans_a, g.trans_b, g.m, g.n, g.k, 1.0f, in.a.data(), in.lda, in.b.data(), in.ldb,
                            1.0f, expected.data(), in.ldc, true, 3);
  CHECK(std::memcmp(expected.data(), with_bias.data(), expected.size() * sizeof(half)) == 0);
}

TEST_CASE("gemm_f16_amx rejects a term count other than 3 or 4, naming the argument") {
  if (skip_without_amx()) return;
  std::vector<half> x(4, half(1.0f));
  std::vector<float> c(4);
  CHECK_THROWS_WITH_AS(cpu::detail::gemm_f16_amx(false, false, 2, 2, 2, 1.0f, x.data(), 2, x.data(), 2, 0.0f,
                                                 c.data(), 2, false, 2),
                       doctest::Contains("terms = 2; expected 3 or 4"), hg::Error);
}
