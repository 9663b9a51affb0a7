// The CPU LayerNorm kernels (kernels/cpu/layer_norm.cpp) on every vector-math tier this CPU runs
// (vector_math_force: the portable loops, and layer_norm_avx512.h's rows where the CPU has AVX-512):
//   - forward y / mean / rstd and backward dx / dweight / dbias in f32, bf16, f16 at awkward widths
//     (1, 15, 17, 255, 768, 1023, 4097), alone and fused with the residual add (add_layer_norm_*),
//     with and without weight/bias, against float64 references computed from the same (rounded)
//     inputs, under error bounds derived below;
//   - on the AVX-512 tier, every half output is the f32 kernel's result on the widened inputs rounded
//     once (and the fused dx is T(float(T(dx_f32)) + float(dh)), add_layer_norm's rule); mean and
//     rstd are the f32 kernel's bit for bit;
//   - the AVX-512 forward's register-resident rows (16 * k columns, k <= 16) equal its general row bit
//     for bit (same operations in the same order);
//   - the two tiers agree within a stated tolerance; 1 and 2 threads give the same bits; a NaN in a
//     row makes that row NaN and no other.
// Outputs are poisoned (NaN) before every kernel call; inputs are fresh seeded random values.

// GCC 12 warns that the undefined vectors inside its own AVX-512 intrinsics may be uninitialised
// (layer_norm_avx512.h is included for the register-row test; before any include).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <doctest/doctest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/layer_norm_avx512.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/dtype.h"
#include "kernels/half.h"
#include "kernels/kernels.h"
#include "support/half_values.h"

namespace cpu = hg::kernels::cpu;
using cpu::VectorMath;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr double kU = 0x1p-24;  // float's unit roundoff
constexpr double kEps = 1e-5;

std::vector<VectorMath> tiers() {
  std::vector<VectorMath> t{VectorMath::portable};
  if (cpu::vector_math_best() == VectorMath::avx512) t.push_back(VectorMath::avx512);
  return t;
}

struct ForceTier {
  explicit ForceTier(VectorMath t) { cpu::vector_math_force(t); }
  ~ForceTier() { cpu::vector_math_reset(); }
};

struct WithThreads {
  int saved;
  explicit WithThreads(int n) : saved(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~WithThreads() { omp_set_num_threads(saved); }
};

using hg::testing::d;
using hg::testing::dtype_of;
using hg::testing::poison;
using hg::testing::random_values;
using hg::testing::roundoff;
using hg::testing::subnormal_floor;
using hg::testing::widened;

template <class T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// |got - ref| <= roundoff(T) |ref| + floor(T) + bound[i], elementwise; the first failure reported.
template <class T>
void check_near(const std::vector<T>& got, const std::vector<double>& ref, const std::vector<double>& bound,
                const std::string& what) {
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = d(got[i]);
    const bool ok = std::fabs(g - ref[i]) <= roundoff<T>() * std::fabs(ref[i]) + subnormal_floor<T>() + bound[i];
    if (!ok && bad++ == 0) {
      CAPTURE(what);
      CAPTURE(i);
      CAPTURE(g);
      CAPTURE(ref[i]);
      CAPTURE(bound[i]);
      CHECK(ok);
    }
  }
  CHECK_MESSAGE(bad == 0, what, ": ", bad, " elements out of bounds");
}

template <class T>
void check_bits(const std::vector<T>& got, const std::vector<T>& expect, const std::string& what) {
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) bad += !same_bits(got[i], expect[i]);
  CHECK_MESSAGE(bad == 0, what, ": ", bad, " elements differ");
}

template <class T>
std::vector<T> rounded_to(const std::vector<float>& f) {
  std::vector<T> v(f.size());
  for (size_t i = 0; i < f.size(); ++i) v[i] = T(f[i]);
  return v;
}

// One problem's inputs and every output of the forward and backward kernels.
template <class T>
struct Run {
  std::vector<T> h, y, dx, dw, db;
  std::vector<float> mean, rstd;
};

struct Inputs {
  int64_t rows, cols;
  bool fused, affine;
};

// The kernels on (x, residual, w, b, dy, dh): forward, then backward on the forward's own mean/rstd
// (as the engine's backward uses them).
template <class T>
Run<T> run_kernels(const Inputs& in, const std::vector<T>& x, const std::vector<T>& residual, const std::vector<T>& w,
                   const std::vector<T>& b, const std::vector<T>& dy, const std::vector<T>& dh) {
  const int64_t n = in.rows * in.cols;
  const hg::DType dt = dtype_of<T>();
  Run<T> o;
  o.h = poison<T>(n);
  o.y = poison<T>(n);
  o.dx = poison<T>(n);
  o.dw = poison<T>(in.cols);
  o.db = poison<T>(in.cols);
  o.mean.assign(size_t(in.rows), kNaN);
  o.rstd.assign(size_t(in.rows), kNaN);
  const void* wp = in.affine ? w.data() : nullptr;
  const void* bp = in.affine ? b.data() : nullptr;
  if (in.fused) {
    cpu::add_layer_norm_forward(x.data(), residual.data(), wp, bp, o.h.data(), o.y.data(), o.mean.data(), o.rstd.data(),
                                in.rows, in.cols, kEps, dt);
    cpu::add_layer_norm_backward(o.h.data(), wp, o.mean.data(), o.rstd.data(), dy.data(), dh.data(), o.dx.data(),
                                 in.affine ? o.dw.data() : nullptr, in.affine ? o.db.data() : nullptr, in.rows, in.cols,
                                 dt);
  } else {
    cpu::layer_norm_forward(x.data(), wp, bp, o.y.data(), o.mean.data(), o.rstd.data(), in.rows, in.cols, kEps, dt);
    cpu::layer_norm_backward(x.data(), wp, o.mean.data(), o.rstd.data(), dy.data(), o.dx.data(),
                             in.affine ? o.dw.data() : nullptr, in.affine ? o.db.data() : nullptr, in.rows, in.cols,
                             dt);
  }
  return o;
}

template <class T>
std::string describe(VectorMath tier, const Inputs& in) {
  return std::string(cpu::vector_math_name(tier)) + " " + hg::dtype_name(dtype_of<T>()) +
         (in.fused ? " add_layer_norm " : " layer_norm ") + std::to_string(in.rows) + "x" + std::to_string(in.cols) +
         (in.affine ? " affine" : " no affine");
}

// The float64 references and their error bounds, from the kernel's own rounded inputs: v (x, or the
// kernel's h), and for the backward the kernel's own mean and rstd.
//
// Bounds (u = 2^-24): a float sum of n terms is within (n + 8) u sum|terms| of the exact sum, whatever
// the order (the portable tier may sum sequentially; the AVX-512 tier's 64 partial sums do better);
// products, the subtraction of the mean and the final fma add a few u of the magnitudes involved.
//   mean:  (n + 8) u mean|v|.
//   rstd:  the variance is first-order insensitive to the mean's error (sum (v - mean) = 0: only
//          err(mean)^2 / var remains), and its sum of positive terms, each within 3 u, is within
//          (n + 16) u relative; halved by the square root, plus 3 u for the sqrt and the division.
//   y:     xhat w carries rstd's relative error and the mean's error times rstd |w|; +4 u of |y|'s terms.
//   dx:    rstd (err(mean_g) + |xhat| err(mean_gx)) + 4 u rstd (|g| + |mean_g| + |xhat mean_gx|), the
//          sums' errors (n + 8) u mean|g| and (n + 12) u mean|g xhat|; fused: plus the rounding of the
//          LayerNorm dx to T before dh is added (roundoff(T) |dx|).
//   dw/db: (rows + 8) u sum_r |dy xhat| (+ 4 u for xhat) and (rows + 8) u sum_r |dy|.
template <class T>
void check_against_float64(VectorMath tier, const Inputs& in, const std::vector<T>& x, const std::vector<T>& residual,
                           const std::vector<T>& w, const std::vector<T>& b, const std::vector<T>& dy,
                           const std::vector<T>& dh, const Run<T>& o) {
  const std::string what = describe<T>(tier, in);
  const int64_t R = in.rows, C = in.cols, n = R * C;
  const double nc = double(C);
  if (in.fused) {  // h is the composed add's result: x + residual added in float, rounded once
    std::vector<T> expect(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) expect[i] = T(float(x[i]) + float(residual[i]));
    check_bits(o.h, expect, what + " h");
  }
  const std::vector<T>& v = in.fused ? o.h : x;
  const auto wv = [&](int64_t c) { return in.affine ? d(w[c]) : 1.0; };
  const auto bv = [&](int64_t c) { return in.affine ? d(b[c]) : 0.0; };
  std::vector<double> y_ref(static_cast<size_t>(n)), y_bound(static_cast<size_t>(n)), dx_ref(static_cast<size_t>(n)),
      dx_bound(static_cast<size_t>(n));
  std::vector<double> dw_ref(size_t(C), 0), db_ref(size_t(C), 0), dw_mag(size_t(C), 0), db_mag(size_t(C), 0);
  for (int64_t r = 0; r < R; ++r) {
    const T* vr = v.data() + r * C;
    double sum = 0, mag = 0;
    for (int64_t c = 0; c < C; ++c) sum += d(vr[c]), mag += std::fabs(d(vr[c]));
    const double mean = sum / nc;
    double sq = 0;
    for (int64_t c = 0; c < C; ++c) sq += (d(vr[c]) - mean) * (d(vr[c]) - mean);
    const double var = sq / nc, rstd = 1 / std::sqrt(var + kEps);
    const double mean_err = (nc + 8) * kU * mag / nc;
    const double rstd_rel = 0.5 * ((nc + 16) * kU + mean_err * mean_err / (var + kEps)) + 3 * kU;
    CHECK_MESSAGE(std::fabs(o.mean[r] - mean) <= mean_err, what, " mean row ", r);
    CHECK_MESSAGE(std::fabs(o.rstd[r] - rstd) <= rstd_rel * rstd, what, " rstd row ", r);
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = (d(vr[c]) - mean) * rstd, i = double(r * C + c);
      y_ref[size_t(i)] = xhat * wv(c) + bv(c);
      y_bound[size_t(i)] = std::fabs(xhat * wv(c)) * (rstd_rel + 4 * kU) + mean_err * rstd * std::fabs(wv(c)) +
                           4 * kU * std::fabs(bv(c));
    }
    // Backward from the kernel's own statistics.
    const double km = o.mean[r], kr = o.rstd[r];
    double sum_g = 0, sum_gx = 0, mag_g = 0, mag_gx = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = (d(vr[c]) - km) * kr, g = d(dy[r * C + c]) * wv(c);
      sum_g += g, sum_gx += g * xhat, mag_g += std::fabs(g), mag_gx += std::fabs(g * xhat);
      dw_ref[c] += d(dy[r * C + c]) * xhat;
      db_ref[c] += d(dy[r * C + c]);
      dw_mag[c] += std::fabs(d(dy[r * C + c]) * xhat);
      db_mag[c] += std::fabs(d(dy[r * C + c]));
    }
    const double mg = sum_g / nc, mgx = sum_gx / nc;
    const double mg_err = (nc + 8) * kU * mag_g / nc, mgx_err = (nc + 12) * kU * mag_gx / nc;
    for (int64_t c = 0; c < C; ++c) {
      const int64_t i = r * C + c;
      const double xhat = (d(vr[c]) - km) * kr, g = d(dy[i]) * wv(c);
      const double ln_dx = kr * (g - mg - xhat * mgx);
      double bound = kr * (mg_err + std::fabs(xhat) * mgx_err) +
                     4 * kU * kr * (std::fabs(g) + std::fabs(mg) + std::fabs(xhat * mgx));
      if (in.fused) {
        dx_ref[size_t(i)] = ln_dx + d(dh[i]);
        bound += roundoff<T>() * std::fabs(ln_dx) + subnormal_floor<T>();
      } else {
        dx_ref[size_t(i)] = ln_dx;
      }
      dx_bound[size_t(i)] = bound;
    }
  }
  check_near(o.y, y_ref, y_bound, what + " y");
  check_near(o.dx, dx_ref, dx_bound, what + " dx");
  if (in.affine) {
    std::vector<double> dw_bound(static_cast<size_t>(C)), db_bound(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) {
      dw_bound[c] = (double(R) + 12) * kU * dw_mag[c];
      db_bound[c] = (double(R) + 8) * kU * db_mag[c];
    }
    check_near(o.dw, dw_ref, dw_bound, what + " dweight");
    check_near(o.db, db_ref, db_bound, what + " dbias");
  }
}

// On the AVX-512 tier: each half output is the f32 kernel's output on the widened inputs, rounded once.
template <class T>
void check_rounded_once(const Inputs& in, const std::vector<T>& x, const std::vector<T>& w, const std::vector<T>& b,
                        const std::vector<T>& dy, const std::vector<T>& dh, const Run<T>& o) {
  const std::string what = describe<T>(VectorMath::avx512, in) + " vs f32 rounded once";
  const Inputs plain{in.rows, in.cols, false, in.affine};
  // The f32 row computation on the same values: v = x or the kernel's h, widened.
  const std::vector<float> vf = widened(in.fused ? o.h : x), wf = widened(w), bf = widened(b), dyf = widened(dy);
  const Run<float> f = run_kernels<float>(plain, vf, vf, wf, bf, dyf, dyf);
  check_bits(o.mean, f.mean, what + " mean");
  check_bits(o.rstd, f.rstd, what + " rstd");
  check_bits(o.y, rounded_to<T>(f.y), what + " y");
  std::vector<T> dx_expect = rounded_to<T>(f.dx);
  if (in.fused) {
    for (size_t i = 0; i < dx_expect.size(); ++i) dx_expect[i] = T(float(dx_expect[i]) + float(dh[i]));
  }
  check_bits(o.dx, dx_expect, what + " dx");
  if (in.affine) {
    check_bits(o.dw, rounded_to<T>(f.dw), what + " dweight");
    check_bits(o.db, rounded_to<T>(f.db), what + " dbias");
  }
}

// The largest |a - b| / max(|a|, scale) elementwise (NaN must match NaN). scale: 1, or per row
// (`cols` elements each) from `row_scale`: dx is rstd times a difference of O(|dy w|) terms, so its
// rounding is relative to rstd (316 for a 1-wide row, whose variance is 0), not to |dx|.
template <class T>
double max_tier_difference(const std::vector<T>& a, const std::vector<T>& b,
                           const std::vector<float>* row_scale = nullptr, int64_t cols = 1) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = d(a[i]), y = d(b[i]);
    if (std::isnan(x) || std::isnan(y)) {
      if (std::isnan(x) != std::isnan(y)) return INFINITY;
      continue;
    }
    const double scale = row_scale != nullptr ? std::max(1.0, double((*row_scale)[i / size_t(cols)])) : 1.0;
    worst = std::max(worst, std::fabs(x - y) / std::max(std::fabs(x), scale));
  }
  return worst;
}

// 16, 64, 256: rows the AVX-512 forward keeps in registers (multiples of 16 up to 256).
const int64_t kWidths[] = {1, 15, 16, 17, 64, 255, 256, 768, 1023, 4097};

template <class T>
void all_cases(std::mt19937& rng) {
  for (int64_t cols : kWidths) {
    for (bool fused : {false, true}) {
      for (bool affine : {true, false}) {
        const Inputs in{cols >= 1023 ? 5 : 9, cols, fused, affine};
        const int64_t n = in.rows * in.cols;
        // An offset mean (the two-pass variance's reason to be) and unit-scale spread.
        const std::vector<T> x = random_values<T>(rng, n, 1, 5), residual = random_values<T>(rng, n, -2, 2);
        const std::vector<T> w = random_values<T>(rng, cols, 0.5, 1.5), b = random_values<T>(rng, cols, -1, 1);
        const std::vector<T> dy = random_values<T>(rng, n, -1, 1), dh = random_values<T>(rng, n, -1, 1);
        std::vector<Run<T>> runs;
        for (VectorMath tier : tiers()) {
          const ForceTier force(tier);
          runs.push_back(run_kernels<T>(in, x, residual, w, b, dy, dh));
          check_against_float64(tier, in, x, residual, w, b, dy, dh, runs.back());
          if constexpr (!std::is_same_v<T, float>) {
            if (tier == VectorMath::avx512) check_rounded_once(in, x, w, b, dy, dh, runs.back());
          }
        }
        if (runs.size() == 2) {
          // The tiers sum in different orders: f32 results a few ulp apart (2^-16 relative to max(|v|, 1),
          // for dx max(|dx|, rstd), covers 4097-wide rows with room); half results at most one T ulp
          // apart (a value near a rounding boundary), i.e. roundoff(T) * 2 relative.
          const double tol = std::is_same_v<T, float> ? 0x1p-16 : 2 * roundoff<T>() + 0x1p-16;
          const std::string what = describe<T>(VectorMath::avx512, in) + " vs portable";
          const double dy_diff = max_tier_difference(runs[0].y, runs[1].y);
          const double dx_diff = max_tier_difference(runs[0].dx, runs[1].dx, &runs[0].rstd, cols);
          CHECK_MESSAGE(dy_diff <= tol, what, " y: ", dy_diff);
          CHECK_MESSAGE(dx_diff <= tol, what, " dx: ", dx_diff);
          CHECK_MESSAGE(max_tier_difference(runs[0].mean, runs[1].mean) <= 0x1p-16, what, " mean");
          CHECK_MESSAGE(max_tier_difference(runs[0].rstd, runs[1].rstd) <= 0x1p-16, what, " rstd");
          if (affine) {
            CHECK_MESSAGE(max_tier_difference(runs[0].dw, runs[1].dw) <= tol, what, " dweight");
            CHECK_MESSAGE(max_tier_difference(runs[0].db, runs[1].db) <= tol, what, " dbias");
          }
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("layer_norm CPU on every tier: f32, bf16, f16, widths 1..4097, fused residual, vs float64") {
  std::mt19937 rng(2027);
  all_cases<float>(rng);
  all_cases<hg::bfloat16>(rng);
  all_cases<hg::half>(rng);
}

TEST_CASE("layer_norm CPU: 1 and 2 threads give the same bits, every tier and dtype, fused too") {
  std::mt19937 rng(11);
  const auto one = [&]<class T>() {
    for (bool fused : {false, true}) {
      const Inputs in{64, 1023, fused, true};  // 65472 elements: past the kernels' parallel threshold
      const int64_t n = in.rows * in.cols;
      const std::vector<T> x = random_values<T>(rng, n, -3, 3), residual = random_values<T>(rng, n, -1, 1);
      const std::vector<T> w = random_values<T>(rng, in.cols, 0.5, 1.5), b = random_values<T>(rng, in.cols, -1, 1);
      const std::vector<T> dy = random_values<T>(rng, n, -1, 1), dh = random_values<T>(rng, n, -1, 1);
      for (VectorMath tier : tiers()) {
        const ForceTier force(tier);
        const std::string what = describe<T>(tier, in) + " 1 vs 2 threads";
        Run<T> runs[2];
        for (int threads : {1, 2}) {
          const WithThreads scope(threads);
          runs[threads - 1] = run_kernels<T>(in, x, residual, w, b, dy, dh);
        }
        check_bits(runs[0].h, runs[1].h, what + " h");
        check_bits(runs[0].y, runs[1].y, what + " y");
        check_bits(runs[0].mean, runs[1].mean, what + " mean");
        check_bits(runs[0].rstd, runs[1].rstd, what + " rstd");
        check_bits(runs[0].dx, runs[1].dx, what + " dx");
        check_bits(runs[0].dw, runs[1].dw, what + " dweight");
        check_bits(runs[0].db, runs[1].db, what + " dbias");
      }
    }
  };
  one.template operator()<float>();
  one.template operator()<hg::bfloat16>();
  one.template operator()<hg::half>();
}

TEST_CASE("layer_norm CPU: a NaN makes its row NaN and no other, every tier and dtype") {
  std::mt19937 rng(5);
  const auto one = [&]<class T>() {
    for (int64_t cols : {37, 100}) {
      for (bool fused : {false, true}) {
        const Inputs in{4, cols, fused, true};
        const int64_t n = in.rows * in.cols;
        std::vector<T> x = random_values<T>(rng, n, -3, 3);
        x[size_t(cols + 20)] = T(kNaN);
        const std::vector<T> residual = random_values<T>(rng, n, -1, 1);
        const std::vector<T> w = random_values<T>(rng, cols, 0.5, 1.5), b = random_values<T>(rng, cols, -1, 1);
        const std::vector<T> dy = random_values<T>(rng, n, -1, 1), dh = random_values<T>(rng, n, -1, 1);
        for (VectorMath tier : tiers()) {
          const ForceTier force(tier);
          const Run<T> o = run_kernels<T>(in, x, residual, w, b, dy, dh);
          CAPTURE(describe<T>(tier, in));
          for (int64_t c = 0; c < cols; ++c) {
            CHECK(std::isnan(d(o.y[size_t(cols + c)])));
            CHECK(std::isnan(d(o.dx[size_t(cols + c)])));
          }
          CHECK(std::isnan(o.mean[1]));
          for (int64_t r : {0, 2, 3}) {
            CHECK(std::isfinite(o.mean[size_t(r)]));
            CHECK(std::isfinite(o.rstd[size_t(r)]));
            for (int64_t c = 0; c < cols; ++c) {
              CHECK(std::isfinite(d(o.y[size_t(r * cols + c)])));
              CHECK(std::isfinite(d(o.dx[size_t(r * cols + c)])));
            }
          }
          for (int64_t c = 0; c < cols; ++c) CHECK(std::isfinite(d(o.db[size_t(c)])));  // dy has no NaN
        }
      }
    }
  };
  one.template operator()<float>();
  one.template operator()<hg::bfloat16>();
  one.template operator()<hg::half>();
}

TEST_CASE("layer_norm AVX-512: rows kept in registers equal the general row bit for bit, every width 16..256") {
  if (cpu::vector_math_best() != VectorMath::avx512) {
    MESSAGE("SKIPPED: this CPU has no AVX-512 (the register-resident rows never run here)");
    return;
  }
  std::mt19937 rng(3);
  const auto one = [&]<class T>() {
    for (int64_t n = 16; n <= 16 * cpu::simd512::kRegisterVectors; n += 16) {
      const std::vector<T> x = random_values<T>(rng, n, -2, 6), residual = random_values<T>(rng, n, -1, 1);
      const std::vector<float> w = random_values<float>(rng, n, 0.5, 1.5), b = random_values<float>(rng, n, -1, 1);
      for (bool fused : {false, true}) {
        std::vector<T> h[2] = {poison<T>(n), poison<T>(n)}, y[2] = {poison<T>(n), poison<T>(n)};
        float mean[2], rstd[2];
        for (int k = 0; k < 2; ++k) {
          const auto run = [&]<bool kFused>() {
            if (k == 0)
              cpu::simd512::layer_norm_forward_row<kFused>(x.data(), residual.data(), h[k].data(), w.data(), b.data(),
                                                           y[k].data(), n, 1e-5f, mean[k], rstd[k]);
            else
              cpu::simd512::layer_norm_forward_row_general<kFused>(x.data(), residual.data(), h[k].data(), w.data(),
                                                                   b.data(), y[k].data(), n, 1e-5f, mean[k], rstd[k]);
          };
          if (fused)
            run.template operator()<true>();
          else
            run.template operator()<false>();
        }
        const std::string what = std::string(hg::dtype_name(dtype_of<T>())) + " width " + std::to_string(n) +
                                 (fused ? " fused" : "") + " registers vs general";
        CHECK_MESSAGE(same_bits(mean[0], mean[1]), what, " mean");
        CHECK_MESSAGE(same_bits(rstd[0], rstd[1]), what, " rstd");
        check_bits(y[0], y[1], what + " y");
        if (fused) check_bits(h[0], h[1], what + " h");
      }
    }
  };
  one.template operator()<float>();
  one.template operator()<hg::bfloat16>();
  one.template operator()<hg::half>();
}
