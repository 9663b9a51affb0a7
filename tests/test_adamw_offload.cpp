// The optimizer-offload CPU AdamW (kernels/cpu/adamw_offload.cpp): every SIMD path against the fused
// reference kernel (kernels::cpu::adamw_step with a master copy, itself tested against a double loop
// in test_optim) over dtypes, odd sizes (vector tails), the OpenMP path, grad_scale, NaN stores and
// argument errors. fp32 state agrees to a few ulp (fused multiply-adds may differ from the compiler's
// contraction of the reference loop); a half parameter is the exact rounding of the fp32 master.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "kernels/error.h"
#include "kernels/kernels.h"
#include "support/host_buffer.h"

using namespace hg;
using namespace hg::kernels;
using namespace hg::kernels::cpu;
using hg::testing::HostBuffer;

namespace {

HostBuffer random_buffer(DType dtype, int64_t n, std::mt19937& rng, double low, double high) {
  std::uniform_real_distribution<double> u(low, high);
  HostBuffer b(dtype, n);
  for (int64_t i = 0; i < n; ++i) b.set(i, u(rng));
  return b;
}

std::vector<AdamWIsa> isas() {
  std::vector<AdamWIsa> out{AdamWIsa::scalar};
  if (int(adamw_offload_best_isa()) >= int(AdamWIsa::avx2)) out.push_back(AdamWIsa::avx2);
  if (adamw_offload_best_isa() == AdamWIsa::avx512) out.push_back(AdamWIsa::avx512);
  return out;
}

struct State {
  HostBuffer master, m, v;
};

State random_state(int64_t n, std::mt19937& rng) {
  return {random_buffer(DType::f32, n, rng, -1, 1), random_buffer(DType::f32, n, rng, -0.1, 0.1),
          random_buffer(DType::f32, n, rng, 0, 0.01)};
}

// Elementwise |a - b| <= 1e-6 * (|b| + max |b|): a few fp32 ulp of the operands (an update that
// cancels to near zero keeps the absolute rounding error of its inputs).
bool close_f32(const HostBuffer& a, const HostBuffer& b) {
  double scale = 0;
  for (int64_t i = 0; i < b.size(); ++i) scale = std::max(scale, std::abs(b.get(i)));
  for (int64_t i = 0; i < a.size(); ++i)
    if (!(std::abs(a.get(i) - b.get(i)) <= 1e-6 * (std::abs(b.get(i)) + scale))) return false;
  return true;
}

// param is exactly master rounded to param's dtype.
bool is_rounding_of(const HostBuffer& param, const HostBuffer& master) {
  HostBuffer rounded(param.dtype(), param.size());
  for (int64_t i = 0; i < param.size(); ++i) rounded.set(i, master.get(i));
  return rounded.bitwise_equal(param);
}

}  // namespace

TEST_CASE("adamw_offload_step equals the fused adamw_step on every SIMD path") {
  std::mt19937 rng(std::random_device{}());
  INFO("best ISA: ", std::string(adamw_isa_name(adamw_offload_best_isa())));
  for (DType dtype : {DType::f32, DType::f16, DType::bf16})
    for (int64_t n : {int64_t(1), int64_t(15), int64_t(17), int64_t(1001), int64_t(100003)})
      for (AdamWIsa isa : isas()) {
        INFO(std::string(dtype_name(dtype)), " n=", n, " ", std::string(adamw_isa_name(isa)));
        const State start = random_state(n, rng);
        const HostBuffer grad = random_buffer(dtype, n, rng, -0.5, 0.5);
        // Reference: adamw_step with the master copy; param has the gradient's dtype.
        State ref = start;
        HostBuffer ref_param(dtype, n);
        for (int64_t step = 1; step <= 3; ++step)
          cpu::adamw_step(ref_param.data(), ref.master.data(), grad.data(), ref.m.data(), ref.v.data(), n, 1e-2, 0.9,
                          0.999, 1e-8, 0.1, step, dtype);
        State got = start;
        HostBuffer param(dtype, n);
        param.poison_with_nan();
        for (int64_t step = 1; step <= 3; ++step)
          cpu::adamw_offload_step(got.master.as<float>(), grad.data(), dtype, got.m.as<float>(), got.v.as<float>(),
                                  param.data(), dtype, n, 1e-2, 0.9, 0.999, 1e-8, 0.1, step, 1.0, isa);
        CHECK(close_f32(got.master, ref.master));
        CHECK(close_f32(got.m, ref.m));
        CHECK(close_f32(got.v, ref.v));
        CHECK(is_rounding_of(param, got.master));
        CHECK(!got.master.bitwise_equal(start.master));
      }
}

TEST_CASE("adamw_offload_step rounds into a parameter of another dtype and folds in grad_scale") {
  std::mt19937 rng(std::random_device{}());
  const int64_t n = 4099;
  const HostBuffer grad = random_buffer(DType::f32, n, rng, -0.5, 0.5);
  HostBuffer scaled = grad;  // grad * 1/1024 is exact
  for (int64_t i = 0; i < n; ++i) scaled.set(i, grad.get(i) / 1024.0);
  const State start = random_state(n, rng);
  for (DType param_dtype : {DType::f16, DType::bf16}) {
    State ref = start;
    HostBuffer ref_param(DType::f32, n);
    cpu::adamw_step(ref_param.data(), ref.master.data(), scaled.data(), ref.m.data(), ref.v.data(), n, 1e-3, 0.9,
                    0.95, 1e-8, 0.0, 1, DType::f32);
    for (AdamWIsa isa : isas()) {
      State got = start;
      HostBuffer param(param_dtype, n);
      param.poison_with_nan();
      cpu::adamw_offload_step(got.master.as<float>(), grad.data(), DType::f32, got.m.as<float>(), got.v.as<float>(),
                              param.data(), param_dtype, n, 1e-3, 0.9, 0.95, 1e-8, 0.0, 1, 1.0 / 1024.0, isa);
      CHECK(close_f32(got.master, ref.master));
      CHECK(is_rounding_of(param, got.master));
    }
  }
}

TEST_CASE("adamw_offload_step stores NaN as half.h does and needs no parameter") {
  for (AdamWIsa isa : isas()) {
    const int64_t n = 33;
    std::vector<float> master(n, 1.0f), m(n, 0.0f), v(n, 0.0f), grad(n, 0.25f);
    grad[5] = NAN;
    grad[20] = NAN;
    std::vector<uint16_t> f16(n), bf(n);
    std::vector<float> master2 = master, m2 = m, v2 = v;
    cpu::adamw_offload_step(master.data(), grad.data(), DType::f32, m.data(), v.data(), f16.data(), DType::f16, n,
                            1e-3, 0.9, 0.999, 1e-8, 0.0, 1, 1.0, isa);
    cpu::adamw_offload_step(master2.data(), grad.data(), DType::f32, m2.data(), v2.data(), bf.data(), DType::bf16, n,
                            1e-3, 0.9, 0.999, 1e-8, 0.0, 1, 1.0, isa);
    CHECK(f16[5] == 0x7fff);
    CHECK(bf[20] == 0x7fff);
    CHECK(std::isnan(master[5]));
    CHECK(f16[4] == half(master[4]).bits);
    std::vector<float> master3(n, 1.0f), m3(n, 0.0f), v3(n, 0.0f);
    cpu::adamw_offload_step(master3.data(), grad.data(), DType::f32, m3.data(), v3.data(), nullptr, DType::f32, n,
                            1e-3, 0.9, 0.999, 1e-8, 0.0, 1, 1.0, isa);
    CHECK(std::memcmp(master3.data() + 6, master.data() + 6, 10 * sizeof(float)) == 0);  // same path, same bits
  }
}

TEST_CASE("adamw_offload_step rejects bad arguments") {
  float x[4] = {}, g[4] = {}, m[4] = {}, v[4] = {};
  CHECK_THROWS_WITH_AS(cpu::adamw_offload_step(x, g, DType::f32, m, v, nullptr, DType::f32, 4, 1e-3, 0.9, 0.999, 1e-8,
                                               0, 0),
                       doctest::Contains("step >= 1"), hg::Error);
  CHECK_THROWS_WITH_AS(cpu::adamw_offload_step(x, g, DType::f64, m, v, nullptr, DType::f32, 4, 1e-3, 0.9, 0.999, 1e-8,
                                               0, 1),
                       doctest::Contains("f32, f16 or bf16"), hg::Error);
  CHECK_THROWS_WITH_AS(cpu::adamw_offload_step(nullptr, g, DType::f32, m, v, nullptr, DType::f32, 4, 1e-3, 0.9, 0.999,
                                               1e-8, 0, 1),
                       doctest::Contains("null"), hg::Error);
}
