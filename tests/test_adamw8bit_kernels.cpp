// The 8-bit AdamW kernels on the CPU (kernels/adamw8bit_math.h, kernels/cpu/adamw8bit.cpp): the two
// quantisation maps against bitsandbytes' construction written out here, the nearest-code quantisation
// and its round-trip error, the fused step against a float64 reference of the block algorithm (each step
// started from the kernel's own state, so a code that lands on the other side of a midpoint by an fp32
// rounding does not compound), the skip flag / device lr / step count of the capturable form, thread
// count independence, the offload form against the device form, the AVX-512 path against the scalar one,
// non-finite updates (inf, NaN, 1e30 gradients: only their own elements change), a subnormal block,
// errors, and that 8-bit AdamW follows 32-bit AdamW on a random quadratic. Seeds are printed;
// HG_TEST_SEED=<seed> repeats a run.
#include <doctest/doctest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/adamw8bit_math.h"
#include "kernels/cpu/adamw8bit_block.h"
#include "kernels/error.h"
#include "kernels/step_kernels.h"
#include "support/adamw8bit_state.h"
#include "support/check_error.h"
#include "support/host_buffer.h"
#include "support/test_seed.h"

using namespace hg;
using namespace hg::kernels;
using hg::kernels::cpu::AdamWIsa;
using namespace hg::testing;
using State8 = AdamW8BitState;

namespace {

constexpr double kLr = 1e-3, kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8, kDecay = 0.01;
const AdamW8BitTables& tables() { return kAdamW8BitTables; }

// bitsandbytes' create_dynamic_map(signed), written as its Python is: linspace boundaries, their means,
// scaled by 10^(-(7-1)+i), then 0 and 1, sorted.
std::vector<double> bitsandbytes_map(bool is_signed) {
  std::vector<double> data;
  for (int i = 0; i < 7; ++i) {
    const int fraction_items = is_signed ? (1 << i) + 1 : (1 << (i + 1)) + 1;
    std::vector<double> boundaries(fraction_items);
    for (int j = 0; j < fraction_items; ++j) boundaries[j] = 0.1 + (1.0 - 0.1) * j / (fraction_items - 1);
    for (int j = 0; j + 1 < fraction_items; ++j) {
      const double mean = (boundaries[j] + boundaries[j + 1]) / 2.0;
      data.push_back(std::pow(10.0, -(7 - 1) + i) * mean);
      if (is_signed) data.push_back(-std::pow(10.0, -(7 - 1) + i) * mean);
    }
  }
  data.push_back(0.0);
  data.push_back(1.0);
  std::sort(data.begin(), data.end());
  return data;
}

// The midpoint between map entries i and i + 1, as adamw8bit_math.h defines it (in double, rounded once).
float midpoint(const float* map, int i) { return float((double(map[i]) + double(map[i + 1])) / 2.0); }

// The midpoints, sorted (index i: between codes i and i + 1).
std::vector<float> midpoints(const float* map) {
  std::vector<float> out(255);
  for (int i = 0; i < 255; ++i) out[size_t(i)] = midpoint(map, i);
  return out;
}

// The heap's nodes visited in order (left subtree, node, right subtree).
void in_order(const float* search, int h, std::vector<float>& out) {
  if (h >= kAdamW8BitCodes) return;
  in_order(search, 2 * h, out);
  out.push_back(search[h]);
  in_order(search, 2 * h + 1, out);
}

// The nearest map entry by a linear scan (ties: the lower code).
int nearest_code(double x, const float* map) {
  int best = 0;
  for (int i = 1; i < kAdamW8BitCodes; ++i)
    if (std::abs(x - double(map[i])) < std::abs(x - double(map[best]))) best = i;
  return best;
}

// Codes may differ from the reference only for a value on (within fp32 rounding of) the midpoint of two
// neighbouring entries.
bool code_acceptable(int code, int ref, double x, const float* map) {
  if (code == ref) return true;
  if (std::abs(code - ref) != 1) return false;
  const double mid = (double(map[code]) + double(map[ref])) / 2.0;
  // x = m / absmax: the kernel's fp32 moment carries an error of a few ulp of the block's largest
  // terms, so near zero (where the map's entries are 1e-7 apart) a tie is judged in absolute terms.
  return std::abs(x - mid) <= 4e-6 * std::abs(mid) + 4e-7;
}

// The reference of one step at step count t from `before`, in float64; checks `after` (the kernel's
// result) against it: codes (midpoint ties aside), absmax (relative 1e-5) and theta.
struct Mismatches {
  int64_t codes = 0;  // acceptable midpoint differences
  int64_t elements = 0;
};

void check_against_reference(const State8& before, const State8& after, const std::vector<double>& theta_before,
                             const std::vector<double>& theta_after, const HostBuffer& grad, int64_t t, double lr,
                             double theta_tolerance, Mismatches& mismatches) {
  const int64_t n = grad.size();
  const double bias1 = 1.0 - std::pow(kBeta1, double(t)), bias2 = 1.0 - std::pow(kBeta2, double(t));
  for (int64_t b = 0; b < adamw8bit_blocks(n); ++b) {
    const int64_t begin = b * kAdamW8BitBlock, end = std::min(n, begin + kAdamW8BitBlock);
    std::vector<double> m(size_t(end - begin)), v(size_t(end - begin));
    double absmax_m = 0.0, absmax_v = 0.0;
    // The kernel's fp32 m = beta1 m + (1 - beta1) g may cancel: its error is a few ulp of the terms'
    // magnitude, not of m. Tolerances on m (its absmax) and on the update that divides it are relative
    // to that magnitude.
    double m_terms_max = 0.0;
    for (int64_t i = begin; i < end; ++i) {
      const double g = grad.get(i);
      double mi = double(tables().signed_map[before.m[i]]) * before.absmax_m[b];
      double vi = double(tables().unsigned_map[before.v[i]]) * before.absmax_v[b];
      const double m_terms = kBeta1 * std::abs(mi) + (1.0 - kBeta1) * std::abs(g);
      mi = kBeta1 * mi + (1.0 - kBeta1) * g;
      vi = kBeta2 * vi + (1.0 - kBeta2) * g * g;
      const double denom = std::sqrt(vi) / std::sqrt(bias2) + kEps;
      const double update = lr / bias1 * mi / denom;
      const double theta = theta_before[i] * (1.0 - lr * kDecay) - update;
      const double cancellation = 1e-6 * lr / bias1 * m_terms / denom;
      m_terms_max = std::max(m_terms_max, m_terms);
      INFO("element ", i, " of ", n, " at step ", t, ": theta ", theta_after[i], ", reference ", theta);
      REQUIRE(std::abs(theta_after[i] - theta) <=
              theta_tolerance * (std::abs(theta) + std::abs(update)) + cancellation);
      m[i - begin] = mi;
      v[i - begin] = vi;
      absmax_m = std::max(absmax_m, std::abs(mi));
      absmax_v = std::max(absmax_v, vi);
    }
    INFO("block ", b, " of n = ", n, " at step ", t);
    REQUIRE(std::abs(after.absmax_m[b] - absmax_m) <= 1e-5 * absmax_m + 1e-6 * m_terms_max);
    REQUIRE(std::abs(after.absmax_v[b] - absmax_v) <= 1e-5 * absmax_v);
    for (int64_t i = begin; i < end; ++i) {
      const double xm = absmax_m > 0 ? m[i - begin] / absmax_m : 0.0;
      const double xv = absmax_v > 0 ? v[i - begin] / absmax_v : 0.0;
      const int ref_m = nearest_code(xm, tables().signed_map), ref_v = nearest_code(xv, tables().unsigned_map);
      INFO("element ", i, ": m / absmax = ", xm, " code ", int(after.m[i]), " (reference ", ref_m,
           "), v / absmax = ", xv, " code ", int(after.v[i]), " (reference ", ref_v, ")");
      REQUIRE(code_acceptable(after.m[i], ref_m, xm, tables().signed_map));
      REQUIRE(code_acceptable(after.v[i], ref_v, xv, tables().unsigned_map));
      mismatches.codes += (after.m[i] != ref_m) + (after.v[i] != ref_v);
    }
    mismatches.elements += 2 * (end - begin);
  }
}

std::vector<double> values_of(const HostBuffer& b) { return b.values(); }

// The CPU paths this machine runs (scalar always; AVX-512 when present).
std::vector<AdamWIsa> isas() {
  std::vector<AdamWIsa> out{AdamWIsa::scalar};
  if (cpu::adamw8bit_best_isa() == AdamWIsa::avx512) out.push_back(AdamWIsa::avx512);
  return out;
}

// Narrows the 8-bit kernels to one path for a scope.
struct IsaScope {
  AdamWIsa previous;
  explicit IsaScope(AdamWIsa isa) : previous(cpu::set_adamw8bit_isa(isa)) {}
  ~IsaScope() { cpu::set_adamw8bit_isa(previous); }
};

struct StepCount {
  int64_t slots[3] = {0, 0, 0};
  AdamWStepScalars scalars(const double* lr, const float* found_inf) {
    AdamWStepScalars s;
    s.lr = lr;
    s.lr_value = kLr;
    s.found_inf = found_inf;
    s.step = slots;
    s.parity = 0;
    return s;
  }
};

}  // namespace

TEST_CASE("adamw8bit maps: bitsandbytes' dynamic maps, sorted, with the documented entries") {
  for (const bool is_signed : {true, false}) {
    INFO((is_signed ? "signed" : "unsigned"));
    const float* map = is_signed ? tables().signed_map : tables().unsigned_map;
    const float* search = is_signed ? tables().signed_search : tables().unsigned_search;
    const std::vector<float> bounds = midpoints(map);
    const std::vector<double> expected = bitsandbytes_map(is_signed);
    REQUIRE(expected.size() == 256);
    for (int i = 0; i < 256; ++i) {
      INFO("entry ", i);
      CHECK(double(map[i]) == doctest::Approx(expected[i]).epsilon(1e-6));
      if (i > 0) CHECK(map[i - 1] < map[i]);
      if (i < 255) {
        CHECK(map[i] < bounds[i]);
        CHECK(bounds[i] < map[i + 1]);
      }
    }
    CHECK(map[255] == 1.0f);
    // The search table is the midpoints in heap order: read in order, they are the sorted midpoints.
    std::vector<float> walked;
    in_order(search, 1, walked);
    CHECK(walked == bounds);
    // Entries per decade [10^(k-7), 10^(k-6)): 2^k each sign (signed), 2^(k+1) (unsigned).
    for (int k = 0; k < 7; ++k) {
      const double low = std::pow(10.0, k - 7), high = std::pow(10.0, k - 6);
      int positive = 0, negative = 0;
      for (int i = 0; i < 256; ++i) {
        positive += map[i] >= low && map[i] < high;
        negative += -map[i] >= low && -map[i] < high;
      }
      INFO("decade ", k);
      CHECK(positive == (is_signed ? 1 << k : 1 << (k + 1)));
      CHECK(negative == (is_signed ? 1 << k : 0));
    }
  }
  CHECK(tables().signed_map[kAdamW8BitSignedZeroCode] == 0.0f);
  CHECK(tables().unsigned_map[kAdamW8BitUnsignedZeroCode] == 0.0f);
  CHECK(double(tables().signed_map[0]) == doctest::Approx(-(0.1 + 0.9 * 127.0 / 128.0)));
  CHECK(tables().unsigned_map[0] == 0.0f);
  CHECK(double(tables().signed_map[128]) == doctest::Approx(1e-6 * 0.55));
}

TEST_CASE("adamw8bit quantisation: nearest entry, exact on entries, bounded round trip") {
  std::mt19937 rng = hg::testing::seeded_rng();
  for (const bool is_signed : {true, false}) {
    INFO((is_signed ? "signed" : "unsigned"));
    const float* map = is_signed ? tables().signed_map : tables().unsigned_map;
    const float* search = is_signed ? tables().signed_search : tables().unsigned_search;
    const std::vector<float> bounds = midpoints(map);
    for (int i = 0; i < 256; ++i) CHECK(adamw8bit_quantise(map[i], search) == i);
    // Below and above the range: the ends.
    CHECK(adamw8bit_quantise(-2.0f, search) == 0);
    CHECK(adamw8bit_quantise(2.0f, search) == 255);
    CHECK(adamw8bit_quantise(std::nanf(""), search) == 0);
    // A midpoint takes the lower code; just above it, the upper.
    for (int i = 0; i < 255; ++i) {
      INFO("midpoint ", i);
      CHECK(adamw8bit_quantise(bounds[i], search) == i);
      CHECK(adamw8bit_quantise(std::nextafter(bounds[i], 2.0f), search) == i + 1);
    }
    // Random values spread over the decades: the nearest entry, error at most half the gap.
    std::uniform_real_distribution<double> exponent(-7.0, 0.0), sign(-1.0, 1.0);
    double worst_top_decade = 0.0;
    for (int k = 0; k < 20000; ++k) {
      const double magnitude = std::pow(10.0, exponent(rng));
      const float x = float(is_signed && sign(rng) < 0 ? -magnitude : magnitude);
      const int code = adamw8bit_quantise(x, search);
      const int ref = nearest_code(x, map);
      INFO("x = ", x, " code ", code, " nearest ", ref);
      REQUIRE(code_acceptable(code, ref, x, map));
      const double error = std::abs(double(adamw8bit_dequantise(uint8_t(code), 1.0f, map)) - x);
      const int lo = std::max(0, code - 1), hi = std::min(255, code + 1);
      REQUIRE(error <= (double(map[hi]) - double(map[lo])) / 2.0);
      if (std::abs(x) >= 0.1 && std::abs(x) <= 0.99) worst_top_decade = std::max(worst_top_decade, error);
    }
    // In [0.1, 1) the spacing is 0.9 / 64 (signed) or 0.9 / 128 (unsigned): half of it at most.
    CHECK(worst_top_decade <= (is_signed ? 0.9 / 128 : 0.9 / 256) * 1.0001);
    CHECK(worst_top_decade > (is_signed ? 0.9 / 128 : 0.9 / 256) * 0.8);
  }
}

TEST_CASE("adamw8bit_step_device equals the float64 block algorithm over steps and sizes") {
  std::mt19937 rng = hg::testing::seeded_rng();
  Mismatches mismatches;
  for (const AdamWIsa isa : isas())
    for (const DType dtype : {DType::f32, DType::f16, DType::bf16})
      for (const bool with_master : {false, true})
        for (const int64_t n : {int64_t(1), int64_t(100), int64_t(2048), int64_t(5000), int64_t(3 * 2048 + 17)}) {
          if (dtype != DType::f32 && !with_master && n > 100) continue;  // half without master: n <= 100 suffices
          INFO(adamw_isa_name(isa), " ", dtype_name(dtype), with_master ? " with master" : " without master",
               " n = ", n);
          const IsaScope scope(isa);
          HostBuffer param = random_adamw8bit_params(dtype, n, rng);
          HostBuffer master(DType::f32, n);
          for (int64_t i = 0; i < n; ++i) master.set(i, param.get(i));
          State8 state(n);
          StepCount count;
          for (int64_t t = 1; t <= 5; ++t) {
            const HostBuffer grad = random_adamw8bit_grad(dtype, n, rng);
            const State8 before = state;
            const std::vector<double> theta_before = values_of(with_master ? master : param);
            if (with_master) param.poison_with_nan();  // an output only: every element must be written
            cpu::adamw8bit_step_device(param.data(), with_master ? master.data() : nullptr, grad.data(), state.view(),
                                       n, count.scalars(nullptr, nullptr), kBeta1, kBeta2, kEps, kDecay, dtype);
            CHECK(count.slots[1] == t);
            count.slots[0] = count.slots[1];
            // Without master a half parameter is theta rounded to its dtype: tolerate that rounding.
            const double tolerance = with_master || dtype == DType::f32 ? 1e-6 : (dtype == DType::f16 ? 1e-3 : 8e-3);
            check_against_reference(before, state, theta_before, values_of(with_master ? master : param), grad, t, kLr,
                                    tolerance, mismatches);
            if (with_master)  // the parameter is the master's rounding
              for (int64_t i = 0; i < n; ++i) {
                HostBuffer one(dtype, 1);
                one.set(0, master.get(i));
                REQUIRE(one.get(0) == param.get(i));
              }
          }
        }
  MESSAGE("midpoint code differences: ", mismatches.codes, " of ", mismatches.elements);
  CHECK(mismatches.codes * 1000 <= mismatches.elements);
}

TEST_CASE("adamw8bit_step_device: n = 0 records the count, and the skip flag changes no byte") {
  std::mt19937 rng = hg::testing::seeded_rng();
  StepCount count;
  count.slots[0] = 7;
  State8 empty(0);
  cpu::adamw8bit_step_device(nullptr, nullptr, nullptr, empty.view(), 0, count.scalars(nullptr, nullptr), kBeta1,
                             kBeta2, kEps, kDecay, DType::f32);
  CHECK(count.slots[1] == 8);
  CHECK(count.slots[0] == 7);

  const int64_t n = 5000;
  HostBuffer param = random_adamw8bit_params(DType::f32, n, rng);
  State8 state(n);
  StepCount live;
  // Two real steps, so the state is not the initial one.
  for (int t = 0; t < 2; ++t) {
    const HostBuffer grad = random_adamw8bit_grad(DType::f32, n, rng);
    cpu::adamw8bit_step_device(param.data(), nullptr, grad.data(), state.view(), n, live.scalars(nullptr, nullptr),
                               kBeta1, kBeta2, kEps, kDecay, DType::f32);
    live.slots[0] = live.slots[1];
  }
  const HostBuffer grad = random_adamw8bit_grad(DType::f32, n, rng);
  const HostBuffer param_before = param;
  const State8 state_before = state;
  const float found_inf = 1.0f;
  live.slots[1] = -1;
  cpu::adamw8bit_step_device(param.data(), nullptr, grad.data(), state.view(), n, live.scalars(nullptr, &found_inf),
                             kBeta1, kBeta2, kEps, kDecay, DType::f32);
  CHECK(param.bitwise_equal(param_before));
  CHECK(state == state_before);
  CHECK(live.slots[0] == 2);
  CHECK(live.slots[1] == 2);
  // With blocks_done the current slot settles: unchanged when skipped, +1 otherwise.
  unsigned long long done = 0;
  AdamWStepScalars s = live.scalars(nullptr, &found_inf);
  s.blocks_done = &done;
  cpu::adamw8bit_step_device(param.data(), nullptr, grad.data(), state.view(), n, s, kBeta1, kBeta2, kEps, kDecay,
                             DType::f32);
  CHECK(live.slots[0] == 2);
  CHECK(state == state_before);
  const float no_inf = 0.0f;
  s = live.scalars(nullptr, &no_inf);
  s.blocks_done = &done;
  cpu::adamw8bit_step_device(param.data(), nullptr, grad.data(), state.view(), n, s, kBeta1, kBeta2, kEps, kDecay,
                             DType::f32);
  CHECK(live.slots[0] == 3);
  CHECK(live.slots[1] == 3);
  CHECK_FALSE(param.bitwise_equal(param_before));
  CHECK_FALSE(state == state_before);
}

TEST_CASE("adamw8bit_step_device: the device lr is read, and results do not depend on the thread count") {
  std::mt19937 rng = hg::testing::seeded_rng();
  const int64_t n = 40 * 2048 + 5;  // above the OpenMP threshold
  const HostBuffer start = random_adamw8bit_params(DType::bf16, n, rng);
  std::vector<HostBuffer> grads;
  for (int t = 0; t < 3; ++t) grads.push_back(random_adamw8bit_grad(DType::bf16, n, rng));
  const auto run = [&](int threads, bool device_lr) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    HostBuffer param = start;
    HostBuffer master(DType::f32, n);
    for (int64_t i = 0; i < n; ++i) master.set(i, start.get(i));
    State8 state(n);
    StepCount count;
    const double lr = kLr;
    for (const HostBuffer& g : grads) {
      AdamWStepScalars s = count.scalars(device_lr ? &lr : nullptr, nullptr);
      s.lr_value = device_lr ? 123.0 : kLr;  // ignored when the device lr is given
      cpu::adamw8bit_step_device(param.data(), master.data(), g.data(), state.view(), n, s, kBeta1, kBeta2, kEps,
                                 kDecay, DType::bf16);
      count.slots[0] = count.slots[1];
    }
    omp_set_num_threads(saved);
    return std::make_tuple(param, master, state);
  };
  const auto [p1, m1, s1] = run(1, false);
  const auto [p2, m2, s2] = run(2, true);
  CHECK(p1.bitwise_equal(p2));
  CHECK(m1.bitwise_equal(m2));
  CHECK(s1 == s2);
  CHECK_FALSE(p1.bitwise_equal(start));
}

TEST_CASE("adamw8bit AVX-512 path: the scalar path's codes bit for bit, and its step") {
  if (cpu::adamw8bit_best_isa() != AdamWIsa::avx512) {
    MESSAGE("no AVX-512 on this CPU: only the scalar path runs");
    return;
  }
  std::mt19937 rng = hg::testing::seeded_rng();
  // Quantisation alone: random values over the decades, every bound and its neighbours, every map entry,
  // zeros, out-of-range values, infinities and NaN.
  for (const bool is_signed : {true, false}) {
    INFO((is_signed ? "signed" : "unsigned"));
    const AdamW8BitTables& t = kAdamW8BitTables;
    const float* map = is_signed ? t.signed_map : t.unsigned_map;
    const std::vector<float> bounds = midpoints(map);
    std::vector<float> x;
    for (int i = 0; i < 255; ++i)
      for (const float b : {bounds[i], std::nextafter(bounds[i], -2.0f), std::nextafter(bounds[i], 2.0f), map[i]})
        x.push_back(b);
    for (const float special : {0.0f, -0.0f, 1.0f, -1.0f, 1.5f, -1.5f, map[255], std::numeric_limits<float>::infinity(),
                                -std::numeric_limits<float>::infinity(), std::nanf("")})
      x.push_back(special);
    std::uniform_real_distribution<double> exponent(-8.0, 0.2), sign(-1.0, 1.0);
    for (int k = 0; k < 100000; ++k) {
      const double magnitude = std::pow(10.0, exponent(rng));
      x.push_back(float(sign(rng) < 0 ? -magnitude : magnitude));
    }
    x.push_back(0.5f);  // an odd count: the scalar tail runs too
    std::vector<uint8_t> scalar(x.size(), 0x11), vector(x.size(), 0x22);
    cpu::adamw8bit_quantise_scalar(x.data(), scalar.data(), int64_t(x.size()), is_signed);
    cpu::adamw8bit_quantise_avx512(x.data(), vector.data(), int64_t(x.size()), is_signed);
    int64_t differ = 0;
    for (size_t i = 0; i < x.size(); ++i) differ += scalar[i] != vector[i];
    CHECK(differ == 0);
    CHECK(scalar[0] == 0);  // bounds[0] itself: the lower code
    CHECK(scalar[2] == 1);  // just above bounds[0]
  }
  // The whole step: moments and theta to an ulp or so (fused multiply-adds), hence the same codes but
  // for a moment on a midpoint.
  const int64_t n = 5 * 2048 + 37;
  const HostBuffer start = random_adamw8bit_params(DType::f32, n, rng);
  HostBuffer p_scalar = start, p_vector = start;
  State8 s_scalar(n), s_vector(n);
  StepCount c_scalar, c_vector;
  int64_t code_differences = 0;
  for (int t = 1; t <= 4; ++t) {
    const HostBuffer grad = random_adamw8bit_grad(DType::f32, n, rng);
    s_vector = s_scalar;  // each step from the same state
    p_vector = p_scalar;
    {
      const IsaScope scope(AdamWIsa::scalar);
      cpu::adamw8bit_step_device(p_scalar.data(), nullptr, grad.data(), s_scalar.view(), n,
                                 c_scalar.scalars(nullptr, nullptr), kBeta1, kBeta2, kEps, kDecay, DType::f32);
    }
    {
      const IsaScope scope(AdamWIsa::avx512);
      cpu::adamw8bit_step_device(p_vector.data(), nullptr, grad.data(), s_vector.view(), n,
                                 c_vector.scalars(nullptr, nullptr), kBeta1, kBeta2, kEps, kDecay, DType::f32);
    }
    c_scalar.slots[0] = c_scalar.slots[1];
    c_vector.slots[0] = c_vector.slots[1];
    for (size_t b = 0; b < s_scalar.absmax_m.size(); ++b) {
      CHECK(s_vector.absmax_m[b] == doctest::Approx(s_scalar.absmax_m[b]).epsilon(1e-6));
      CHECK(s_vector.absmax_v[b] == doctest::Approx(s_scalar.absmax_v[b]).epsilon(1e-6));
    }
    for (int64_t i = 0; i < n; ++i) {
      REQUIRE(std::abs(int(s_vector.m[i]) - int(s_scalar.m[i])) <= 1);
      REQUIRE(std::abs(int(s_vector.v[i]) - int(s_scalar.v[i])) <= 1);
      code_differences += (s_vector.m[i] != s_scalar.m[i]) + (s_vector.v[i] != s_scalar.v[i]);
      REQUIRE(std::abs(p_vector.get(i) - p_scalar.get(i)) <= 1e-6 * std::abs(p_scalar.get(i)) + 1e-5 * kLr);
    }
  }
  MESSAGE("codes that differ between the paths (moments on a midpoint): ", code_differences, " of ", 8 * n);
  CHECK(code_differences * 1000 <= 8 * n);
}

TEST_CASE("adamw8bit_offload_step equals the device form") {
  std::mt19937 rng = hg::testing::seeded_rng();
  for (const DType param_dtype : {DType::f32, DType::f16, DType::bf16}) {
    const int64_t n = 3 * 2048 + 999;
    INFO(dtype_name(param_dtype));
    const HostBuffer start = random_adamw8bit_params(param_dtype, n, rng);
    HostBuffer device_master(DType::f32, n), offload_master(DType::f32, n);
    for (int64_t i = 0; i < n; ++i) device_master.set(i, start.get(i));
    offload_master = device_master;
    HostBuffer device_param = start, offload_param(param_dtype, n);
    State8 device_state(n), offload_state(n);
    StepCount count;
    for (int64_t t = 1; t <= 3; ++t) {
      const HostBuffer grad = random_adamw8bit_grad(param_dtype, n, rng);
      // The offload form sees the gradient times 2 and undoes it with grad_scale (exact in binary).
      HostBuffer doubled(param_dtype, n);
      for (int64_t i = 0; i < n; ++i) doubled.set(i, 2.0 * grad.get(i));
      cpu::adamw8bit_step_device(device_param.data(), device_master.data(), grad.data(), device_state.view(), n,
                                 count.scalars(nullptr, nullptr), kBeta1, kBeta2, kEps, kDecay, param_dtype);
      count.slots[0] = count.slots[1];
      offload_param.poison_with_nan();
      cpu::adamw8bit_offload_step(static_cast<float*>(offload_master.data()), doubled.data(), param_dtype,
                                  offload_state.view(), offload_param.data(), param_dtype, n, kLr, kBeta1, kBeta2, kEps,
                                  kDecay, t, 0.5);
      CHECK(offload_master.bitwise_equal(device_master));
      CHECK(offload_param.bitwise_equal(device_param));
      CHECK(offload_state == device_state);
    }
  }
}

TEST_CASE("adamw8bit_step_device: an inf, a NaN and a 1e30 gradient change only their own elements") {
  // Elements 5 (inf), 300 (NaN), 2047 (1e30: finite, but (1 - beta2) g^2 overflows) of block 0 and
  // 2 * 2048 + 35 (-inf, in the AVX-512 path's scalar tail) of block 2. They had zero gradients for two
  // steps, so their m = v = 0 exactly; the clean run gives them a zero gradient again. The bad run must
  // then leave their theta untouched, give them m = v = 0, and every other element (codes, absmax,
  // theta) must be the clean run's, bit for bit; the step after it, with clean gradients, too.
  std::mt19937 rng = hg::testing::seeded_rng();
  const int64_t n = 2 * 2048 + 40;
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<std::pair<int64_t, float>> bad = {
      {5, inf}, {300, std::nanf("")}, {2047, 1e30f}, {2 * 2048 + 35, -inf}};
  for (const AdamWIsa isa : isas()) {
    INFO(cpu::adamw_isa_name(isa));
    const IsaScope scope(isa);
    HostBuffer param = random_adamw8bit_params(DType::f32, n, rng);
    State8 state(n);
    StepCount count;
    auto step = [&](HostBuffer& p, State8& s, StepCount& c, const HostBuffer& g) {
      cpu::adamw8bit_step_device(p.data(), nullptr, g.data(), s.view(), n, c.scalars(nullptr, nullptr), kBeta1, kBeta2,
                                 kEps, kDecay, DType::f32);
      c.slots[0] = c.slots[1];
    };
    auto clean_grad = [&] {
      HostBuffer g = random_adamw8bit_grad(DType::f32, n, rng);
      for (const auto& [i, value] : bad) g.set(i, 0.0);
      return g;
    };
    for (int k = 0; k < 2; ++k) step(param, state, count, clean_grad());
    for (const auto& [i, value] : bad) REQUIRE(state.m[size_t(i)] == kAdamW8BitSignedZeroCode);
    const HostBuffer grad = clean_grad();
    HostBuffer bad_grad = grad;
    for (const auto& [i, value] : bad) bad_grad.set(i, value);
    HostBuffer p_clean = param, p_bad = param;
    State8 s_clean = state, s_bad = state;
    StepCount c_clean = count, c_bad = count;
    step(p_clean, s_clean, c_clean, grad);
    step(p_bad, s_bad, c_bad, bad_grad);
    for (size_t b = 0; b < s_bad.absmax_m.size(); ++b) {
      INFO("block ", b);
      REQUIRE(std::isfinite(s_bad.absmax_m[b]));
      REQUIRE(std::isfinite(s_bad.absmax_v[b]));
      REQUIRE(s_bad.absmax_m[b] > 0.0f);
    }
    CHECK(s_bad == s_clean);
    for (int64_t i = 0; i < n; ++i) {
      const bool is_bad = std::any_of(bad.begin(), bad.end(), [&](const auto& e) { return e.first == i; });
      INFO("element ", i, (is_bad ? " (non-finite update)" : ""));
      if (is_bad) {
        REQUIRE(p_bad.get(i) == param.get(i));  // untouched: no decay, no update
        REQUIRE(s_bad.m[size_t(i)] == kAdamW8BitSignedZeroCode);
        REQUIRE(s_bad.v[size_t(i)] == kAdamW8BitUnsignedZeroCode);
      } else {
        REQUIRE(p_bad.get(i) == p_clean.get(i));
      }
    }
    // The next step, clean in both: finite everywhere, and the same state.
    const HostBuffer next = random_adamw8bit_grad(DType::f32, n, rng);
    step(p_clean, s_clean, c_clean, next);
    step(p_bad, s_bad, c_bad, next);
    for (int64_t i = 0; i < n; ++i) REQUIRE(std::isfinite(p_bad.get(i)));
    CHECK(s_bad == s_clean);
  }
}

TEST_CASE("adamw8bit_step_device: a block whose absmax is subnormal becomes the zero state, not NaN") {
  // Block 0's gradients are ~1e-38, so its new m = (1 - beta1) g ~ 1e-39 (below FLT_MIN, where 1 / absmax
  // overflows) and v = (1 - beta2) g^2 underflows to 0; block 1 is ordinary. Then a state whose absmax_m
  // is 1e-39 with codes spread over the map, stepped with a zero gradient.
  std::mt19937 rng = hg::testing::seeded_rng();
  const int64_t n = 2048 + 100;
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (const AdamWIsa isa : isas()) {
    INFO(cpu::adamw_isa_name(isa));
    const IsaScope scope(isa);
    HostBuffer param = random_adamw8bit_params(DType::f32, n, rng);
    HostBuffer grad = random_adamw8bit_grad(DType::f32, n, rng);
    for (int64_t i = 0; i < 2048; ++i) grad.set(i, 1e-38 * u(rng));
    grad.set(7, 1e-38);  // block 0's largest: absmax_m = 1e-39 (subnormal)
    State8 state(n);
    StepCount count;
    cpu::adamw8bit_step_device(param.data(), nullptr, grad.data(), state.view(), n, count.scalars(nullptr, nullptr),
                               kBeta1, kBeta2, kEps, kDecay, DType::f32);
    count.slots[0] = count.slots[1];
    check_subnormal_first_block_zeroed(state, param, n);
    // A state with absmax_m = 1e-39 and spread codes, a zero gradient: m = beta1 m stays below FLT_MIN.
    std::uniform_int_distribution<int> code(0, 255);
    for (int64_t i = 0; i < 2048; ++i) state.m[size_t(i)] = uint8_t(code(rng));
    state.absmax_m[0] = 1e-39f;
    for (int64_t i = 0; i < 2048; ++i) grad.set(i, 0.0);
    const HostBuffer before = param;
    cpu::adamw8bit_step_device(param.data(), nullptr, grad.data(), state.view(), n, count.scalars(nullptr, nullptr),
                               kBeta1, kBeta2, kEps, kDecay, DType::f32);
    CHECK(state.absmax_m[0] == 0.0f);
    for (int64_t i = 0; i < 2048; ++i) {
      INFO("element ", i);
      REQUIRE(state.m[size_t(i)] == kAdamW8BitSignedZeroCode);
      REQUIRE(std::isfinite(param.get(i)));
      // theta decays; the update m / (sqrt(v) + eps) is at most ~1e-31 * lr: nothing at fp32 resolution.
      REQUIRE(std::abs(param.get(i) - before.get(i) * (1 - kLr * kDecay)) <= 1e-6 * std::abs(before.get(i)));
    }
  }
}

TEST_CASE("adamw8bit: bad arguments are named errors") {
  State8 state(4096);
  HostBuffer p(DType::f32, 4096), g(DType::f32, 4096);
  StepCount count;
  CHECK_ERROR(cpu::adamw8bit_step_device(p.data(), nullptr, g.data(), state.view(), 4096,
                                         count.scalars(nullptr, nullptr), kBeta1, kBeta2, kEps, kDecay, DType::f64),
              "adamw8bit_step_device", "f32, f16 or bf16", "f64");
  QuantizedMoments missing = state.view();
  missing.absmax_exp_avg_sq = nullptr;
  CHECK_ERROR(cpu::adamw8bit_step_device(p.data(), nullptr, g.data(), missing, 4096, count.scalars(nullptr, nullptr),
                                         kBeta1, kBeta2, kEps, kDecay, DType::f32),
              "adamw8bit_step_device", "null quantised moment pointer");
  CHECK_ERROR(cpu::adamw8bit_step_device(p.data(), nullptr, g.data(), state.view(), -1, count.scalars(nullptr, nullptr),
                                         kBeta1, kBeta2, kEps, kDecay, DType::f32),
              "expected n >= 0");
  AdamWStepScalars no_count = count.scalars(nullptr, nullptr);
  no_count.step = nullptr;
  CHECK_ERROR(cpu::adamw8bit_step_device(p.data(), nullptr, g.data(), state.view(), 4096, no_count, kBeta1, kBeta2,
                                         kEps, kDecay, DType::f32),
              "adamw8bit_step_device", "step count", "null AdamWStepScalars::step");
  CHECK_ERROR(cpu::adamw8bit_offload_step(static_cast<float*>(p.data()), g.data(), DType::f32, state.view(), nullptr,
                                          DType::f32, 4096, kLr, kBeta1, kBeta2, kEps, kDecay, 0),
              "adamw8bit_offload_step", "step >= 1");
}

TEST_CASE("8-bit AdamW follows 32-bit AdamW on a random quadratic over 50 steps") {
  // f(x) = 1/2 sum_i a_i (x_i - c_i)^2, a_i spread over one decade; g_i = a_i (x_i - c_i).
  std::mt19937 rng = hg::testing::seeded_rng();
  const int64_t n = 4 * 2048;
  std::uniform_real_distribution<double> u(-1.0, 1.0), curvature(-0.5, 0.5);
  std::vector<double> a(n), c(n);
  std::vector<float> x32(n), x8(n), x0(n);
  for (int64_t i = 0; i < n; ++i) {
    a[i] = std::pow(10.0, curvature(rng));
    c[i] = u(rng);
    x32[i] = x8[i] = x0[i] = float(u(rng));
  }
  const auto loss = [&](const std::vector<float>& x) {
    double f = 0;
    for (int64_t i = 0; i < n; ++i) f += 0.5 * a[i] * (x[i] - c[i]) * (x[i] - c[i]);
    return f;
  };
  const double loss0 = loss(x32);
  std::vector<float> m32(n, 0.0f), v32(n, 0.0f), g(n);
  State8 state(n);
  StepCount count;
  const double lr = 0.02;
  for (int64_t t = 1; t <= 50; ++t) {
    for (int64_t i = 0; i < n; ++i) g[i] = float(a[i] * (x32[i] - c[i]));
    cpu::adamw_step(x32.data(), nullptr, g.data(), m32.data(), v32.data(), n, lr, kBeta1, kBeta2, kEps, 0.0, t,
                    DType::f32);
    for (int64_t i = 0; i < n; ++i) g[i] = float(a[i] * (x8[i] - c[i]));
    AdamWStepScalars s = count.scalars(nullptr, nullptr);
    s.lr_value = lr;
    cpu::adamw8bit_step_device(x8.data(), nullptr, g.data(), state.view(), n, s, kBeta1, kBeta2, kEps, 0.0, DType::f32);
    count.slots[0] = count.slots[1];
  }
  const double loss32 = loss(x32), loss8 = loss(x8);
  double gap = 0, travelled = 0;
  for (int64_t i = 0; i < n; ++i) {
    gap += (double(x8[i]) - x32[i]) * (double(x8[i]) - x32[i]);
    travelled += (double(x32[i]) - x0[i]) * (double(x32[i]) - x0[i]);
  }
  MESSAGE("loss: start ", loss0, ", 32-bit ", loss32, ", 8-bit ", loss8);
  CHECK(loss32 < 0.2 * loss0);
  CHECK(std::abs(loss8 - loss32) <= 0.1 * loss32);
  // The two trajectories end close: their gap is small against the distance either travelled.
  MESSAGE("|x8 - x32| = ", std::sqrt(gap), ", |x32 - x0| = ", std::sqrt(travelled));
  CHECK(std::sqrt(gap) <= 0.06 * std::sqrt(travelled));
}
