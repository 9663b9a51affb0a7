// optim/: SGD and AdamW against reference loops written here in plain doubles from PyTorch's
// formulas (10 steps, fresh random parameters, a new random gradient every step), in f32, f64 and
// (within dtype tolerance) f16/bf16; zero_grad, skipped parameters, the hyperparameter and parameter
// errors (asserted on their text), schedules at chosen steps, clip_grad_norm (norm, scaling,
// determinism across thread counts, non-finite policy) and the state_tensors round trip.
//
// The reference rounds the parameter to its dtype after every step, as the optimizer stores it, so
// that the comparison measures the update's arithmetic and not the accumulated rounding of storage.
// For f16/bf16 the optimizer keeps an fp32 master copy (the default): the reference then rounds to
// f32 and the stored parameter is compared with the rounding of that master value.
#include <doctest/doctest.h>

#include "support/check_error.h"

#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "engine/random.h"
#include "kernels/half.h"
#include "kernels/kernels.h"
#include "kernels/step_kernels.h"
#include "optim/optim.h"

using namespace hg;
using namespace hg::optim;

namespace {

constexpr int kSteps = 10;
const DType kFloatingTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

// x rounded to dtype, as a store into a tensor of that dtype would.
double round_to(DType dtype, double x) {
  switch (dtype) {
    case DType::f32:
      return double(float(x));
    case DType::f16:
      return double(float(half(float(x))));
    case DType::bf16:
      return double(float(bfloat16(float(x))));
    default:
      return x;
  }
}

// The dtype the optimizer keeps the value of a parameter of `dtype` in: f32 master weights for halves.
DType master_dtype(DType dtype) { return is_half(dtype) ? DType::f32 : dtype; }

// The reference's master values as the parameter stores them.
std::vector<double> stored(DType dtype, std::vector<double> theta) {
  for (double& x : theta) x = round_to(dtype, x);
  return theta;
}

// Tolerance of one stored parameter: a couple of units in the last place of the dtype (a rounding of
// the f32 arithmetic may land on the other side of a half-way point), plus an absolute floor.
double rel_tol(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return 1e-12;
    case DType::f32:
      return 2e-6;
    case DType::f16:
      return 2e-3;
    case DType::bf16:
      return 1.6e-2;
    default:
      return 0;
  }
}

// Absolute floor for values of order 1 that cancel towards 0 (a few ulp of 1 in the compute type).
double abs_tol(DType dtype) { return dtype == DType::f64 ? 1e-13 : 1e-6; }

std::vector<double> random_values(std::mt19937_64& rng, int64_t n, double scale = 1.0) {
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> out(static_cast<size_t>(n));
  for (double& v : out) v = normal(rng);
  return out;
}

Tensor make_param(std::mt19937_64& rng, const Shape& shape, DType dtype) {
  Tensor p = from_vector(random_values(rng, shape_numel(shape)), shape, dtype);
  p.requires_grad_();
  return p;
}

// Gives p a fresh random gradient of its dtype; returns the stored (rounded) values.
std::vector<double> set_random_grad(std::mt19937_64& rng, const Tensor& p, double scale = 1.0) {
  const Tensor g = from_vector(random_values(rng, p.numel(), scale), p.shape(), p.dtype());
  p.set_grad(g);
  return g.to_vector<double>();
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double rtol, double atol,
                 const std::string& what) {
  REQUIRE(got.size() == want.size());
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 5; ++i) {
    const double err = std::abs(got[i] - want[i]);
    if (!(err <= atol + rtol * std::abs(want[i]))) {
      ++failures;
      INFO(what, " element ", i, ": got ", got[i], ", want ", want[i], ", error ", err);
      CHECK(err <= atol + rtol * std::abs(want[i]));
    }
  }
  CHECK(failures == 0);
}

// ---- reference loops (plain doubles, PyTorch's formulas) ------------------------------------------

struct AdamWRef {
  double lr, beta1, beta2, eps, weight_decay;
  DType dtype;
  std::vector<double> theta, m, v;
  int64_t t = 0;

  void step(const std::vector<double>& g) {
    ++t;
    const double bias1 = 1.0 - std::pow(beta1, double(t));
    const double bias2 = 1.0 - std::pow(beta2, double(t));
    for (size_t i = 0; i < theta.size(); ++i) {
      double th = theta[i] * (1.0 - lr * weight_decay);
      m[i] = beta1 * m[i] + (1.0 - beta1) * g[i];
      v[i] = beta2 * v[i] + (1.0 - beta2) * g[i] * g[i];
      th -= lr / bias1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bias2) + eps);
      theta[i] = round_to(master_dtype(dtype), th);
    }
  }
};

struct SGDRef {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
  DType dtype;
  std::vector<double> theta, buf;
  bool has_buf = false;

  void step(std::vector<double> g) {
    for (size_t i = 0; i < theta.size(); ++i) g[i] += weight_decay * theta[i];
    if (momentum != 0.0) {
      if (!has_buf) {
        buf = g;
        has_buf = true;
      } else {
        for (size_t i = 0; i < buf.size(); ++i) buf[i] = momentum * buf[i] + (1.0 - dampening) * g[i];
      }
      for (size_t i = 0; i < g.size(); ++i) g[i] = nesterov ? g[i] + momentum * buf[i] : buf[i];
    }
    for (size_t i = 0; i < theta.size(); ++i) theta[i] = round_to(master_dtype(dtype), theta[i] - lr * g[i]);
  }
};

}  // namespace

// ---- AdamW -----------------------------------------------------------------------------------------

TEST_CASE("AdamW matches the double reference over 10 steps in every dtype") {
  for (const DType dtype : kFloatingTypes) {
    for (const bool decay_only_matrices : {false, true}) {
      const std::string dtype_str = dtype_name(dtype);
      CAPTURE(dtype_str);
      CAPTURE(decay_only_matrices);
      std::mt19937_64 rng(42 + int(dtype));
      const double lr = is_half(dtype) ? 3e-2 : 1e-2;
      std::vector<Tensor> params = {make_param(rng, {7, 5}, dtype), make_param(rng, {9}, dtype)};
      AdamW opt(params, AdamWOptions().lr(lr).betas(0.9, 0.95).eps(1e-8).weight_decay(0.1).decay_only_matrices(
                            decay_only_matrices));
      std::vector<AdamWRef> refs;
      for (const Tensor& p : params) {
        const bool decayed = !decay_only_matrices || p.dim() >= 2;
        const size_t n = size_t(p.numel());
        refs.push_back({lr, 0.9, 0.95, 1e-8, decayed ? 0.1 : 0.0, dtype, p.to_vector<double>(),
                        std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)});
      }
      for (int s = 0; s < kSteps; ++s) {
        for (size_t i = 0; i < params.size(); ++i) refs[i].step(set_random_grad(rng, params[i]));
        opt.step();
      }
      for (size_t i = 0; i < params.size(); ++i) {
        const std::string name = "param " + std::to_string(i);
        check_close(params[i].to_vector<double>(), stored(dtype, refs[i].theta), rel_tol(dtype), abs_tol(dtype), name);
        const ParamState& st = opt.state(int64_t(i));
        CHECK(st.step == kSteps);
        const Tensor& m = st.buffers.at("exp_avg");
        CHECK(m.dtype() == accumulate_dtype(dtype));
        CHECK(m.shape() == params[i].shape());
        const double moment_tol = dtype == DType::f64 ? 1e-12 : 1e-5;
        check_close(m.to_vector<double>(), refs[i].m, moment_tol, abs_tol(dtype), name + " exp_avg");
        check_close(st.buffers.at("exp_avg_sq").to_vector<double>(), refs[i].v, moment_tol, abs_tol(dtype),
                    name + " exp_avg_sq");
      }
    }
  }
}

TEST_CASE("AdamW decay_only_matrices leaves vectors undecayed") {
  // With a zero gradient the moments stay 0 and the update is pure decay: theta * (1 - lr wd).
  Tensor w = ones({2, 3}, DType::f64).requires_grad_();
  Tensor b = ones({3}, DType::f64).requires_grad_();
  AdamW opt({w, b}, AdamWOptions().lr(0.1).weight_decay(0.5).decay_only_matrices(true));
  w.set_grad(zeros({2, 3}, DType::f64));
  b.set_grad(zeros({3}, DType::f64));
  opt.step();
  for (const double x : w.to_vector<double>()) CHECK(x == doctest::Approx(0.95).epsilon(1e-15));
  for (const double x : b.to_vector<double>()) CHECK(x == 1.0);
}

TEST_CASE("AdamW groups keep their own lr and weight decay") {
  std::mt19937_64 rng(7);
  Tensor a = make_param(rng, {4, 4}, DType::f64);
  Tensor b = make_param(rng, {6}, DType::f64);
  AdamW opt(std::vector<ParamGroup>{{{a}, 1e-2, 0.2}, {{b}, 5e-3, 0.0}}, AdamWOptions().betas(0.8, 0.99));
  AdamWRef ra{
      1e-2, 0.8, 0.99, 1e-8, 0.2, DType::f64, a.to_vector<double>(), std::vector<double>(16), std::vector<double>(16)};
  AdamWRef rb{
      5e-3, 0.8, 0.99, 1e-8, 0.0, DType::f64, b.to_vector<double>(), std::vector<double>(6), std::vector<double>(6)};
  for (int s = 0; s < kSteps; ++s) {
    if (s == 5) {
      opt.set_lr(0, 2e-2);  // a schedule may drive one group
      ra.lr = 2e-2;
    }
    ra.step(set_random_grad(rng, a));
    rb.step(set_random_grad(rng, b));
    opt.step();
  }
  check_close(a.to_vector<double>(), ra.theta, 1e-12, 1e-15, "a");
  check_close(b.to_vector<double>(), rb.theta, 1e-12, 1e-15, "b");
  opt.set_lr(1e-4);
  CHECK(opt.param_groups()[0].lr == 1e-4);
  CHECK(opt.param_groups()[1].lr == 1e-4);
}

TEST_CASE("adamw_step kernel with an fp32 master copy matches the fp32 update") {
  // Mixed precision: a bf16 parameter with an f32 master copy must follow the f32 parameter exactly,
  // the bf16 copy being the master's rounding. n spans several chunks and the parallel threshold.
  const int64_t n = 40000;
  std::mt19937_64 rng(3);
  std::vector<float> theta32(n), master(n), m32(n, 0.f), v32(n, 0.f), mb(n, 0.f), vb(n, 0.f), g32(n);
  std::vector<bfloat16> theta_b(n), g_b(n);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int64_t i = 0; i < n; ++i) {
    theta32[i] = master[i] = normal(rng);
    theta_b[i] = bfloat16(master[i]);
  }
  for (int64_t step = 1; step <= 3; ++step) {
    for (int64_t i = 0; i < n; ++i) {
      g_b[i] = bfloat16(normal(rng));
      g32[i] = float(g_b[i]);
    }
    kernels::cpu::adamw_step(theta32.data(), nullptr, g32.data(), m32.data(), v32.data(), n, 1e-2, 0.9, 0.95, 1e-8, 0.1,
                             step, DType::f32);
    kernels::cpu::adamw_step(theta_b.data(), master.data(), g_b.data(), mb.data(), vb.data(), n, 1e-2, 0.9, 0.95, 1e-8,
                             0.1, step, DType::bf16);
  }
  int mismatches = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float tol = 2e-7f * std::abs(theta32[i]) + 1e-12f;
    if (std::abs(master[i] - theta32[i]) > tol || theta_b[i].bits != bfloat16(master[i]).bits) ++mismatches;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("adamw_step gives an element the same bits wherever it sits and whatever the thread count") {
  // ZeRO steps each rank's shard with adamw_step, so an element's update must not depend on the
  // range it is part of (where vector tails fall) nor on the thread count: the whole array in one
  // call, in uneven pieces and on one thread must agree bit for bit, for f32 and for half
  // parameters with a master copy.
  const int64_t n = 70001;  // over the parallel threshold
  const int64_t cuts[] = {0, 17, 33, 1000, 40007, n};
  std::mt19937_64 rng(21);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    const std::string dtype_str = dtype_name(dtype);
    CAPTURE(dtype_str);
    const bool master = dtype != DType::f32;
    const size_t size = dtype_size(dtype);
    std::vector<float> master0(n), m0(n), v0(n);
    std::vector<unsigned char> grad(n * size), param0(n * size);
    for (int64_t i = 0; i < n; ++i) {
      master0[i] = normal(rng);
      m0[i] = 0.1f * normal(rng);
      v0[i] = 0.01f * std::abs(normal(rng));
      const float g = normal(rng);
      if (dtype == DType::f32) {
        std::memcpy(&grad[i * size], &g, size);
        std::memcpy(&param0[i * size], &master0[i], size);
      } else if (dtype == DType::f16) {
        const half h(g);
        std::memcpy(&grad[i * size], &h, size);
      } else {
        const bfloat16 b(g);
        std::memcpy(&grad[i * size], &b, size);
      }
    }
    struct Run {
      std::vector<float> master, m, v;
      std::vector<unsigned char> param;
    };
    const auto run = [&](bool pieces, int threads) {
      Run r{master0, m0, v0, param0};
      const int saved = omp_get_max_threads();
      omp_set_num_threads(threads);
      for (int64_t step = 1; step <= 2; ++step) {
        for (size_t c = 0; c + 1 < std::size(cuts); ++c) {
          const int64_t begin = pieces ? cuts[c] : 0, count = pieces ? cuts[c + 1] - cuts[c] : n;
          kernels::cpu::adamw_step(r.param.data() + begin * size, master ? r.master.data() + begin : nullptr,
                                   grad.data() + begin * size, r.m.data() + begin, r.v.data() + begin, count, 1e-2,
                                   0.9, 0.95, 1e-8, 0.1, step, dtype);
          if (!pieces) break;
        }
      }
      omp_set_num_threads(saved);
      return r;
    };
    const Run whole = run(false, 2), split = run(true, 2), single = run(false, 1);
    for (const Run* other : {&split, &single}) {
      CHECK(std::memcmp(whole.m.data(), other->m.data(), n * sizeof(float)) == 0);
      CHECK(std::memcmp(whole.v.data(), other->v.data(), n * sizeof(float)) == 0);
      CHECK(whole.param == other->param);
      if (master) CHECK(std::memcmp(whole.master.data(), other->master.data(), n * sizeof(float)) == 0);
    }
    CHECK(whole.param != param0);  // the step did something
  }
}

// ---- SGD ---------------------------------------------------------------------------------------------

TEST_CASE("SGD matches the double reference over 10 steps") {
  struct Config {
    const char* name;
    double lr, momentum, dampening, weight_decay;
    bool nesterov;
  };
  const Config configs[] = {
      {"plain", 0.1, 0.0, 0.0, 0.0, false},
      {"momentum", 0.05, 0.9, 0.0, 0.0, false},
      {"nesterov", 0.05, 0.9, 0.0, 0.0, true},
      {"weight decay", 0.1, 0.0, 0.0, 0.05, false},
      {"momentum and weight decay", 0.05, 0.8, 0.0, 0.01, false},
      {"dampening", 0.05, 0.9, 0.5, 0.01, false},
      {"nesterov and weight decay", 0.02, 0.95, 0.0, 0.1, true},
  };
  for (const Config& c : configs) {
    for (const DType dtype : kFloatingTypes) {
      const std::string config = c.name;
      CAPTURE(config);
      const std::string dtype_str = dtype_name(dtype);
      CAPTURE(dtype_str);
      std::mt19937_64 rng(100 + int(dtype));
      std::vector<Tensor> params = {make_param(rng, {6, 3}, dtype), make_param(rng, {11}, dtype)};
      SGD opt(params, SGDOptions()
                          .lr(c.lr)
                          .momentum(c.momentum)
                          .dampening(c.dampening)
                          .weight_decay(c.weight_decay)
                          .nesterov(c.nesterov));
      std::vector<SGDRef> refs;
      for (const Tensor& p : params) {
        refs.push_back({c.lr, c.momentum, c.dampening, c.weight_decay, c.nesterov, dtype, p.to_vector<double>(), {}});
      }
      for (int s = 0; s < kSteps; ++s) {
        for (size_t i = 0; i < params.size(); ++i) refs[i].step(set_random_grad(rng, params[i]));
        opt.step();
      }
      for (size_t i = 0; i < params.size(); ++i) {
        const std::string name = "param " + std::to_string(i);
        check_close(params[i].to_vector<double>(), stored(dtype, refs[i].theta), rel_tol(dtype), abs_tol(dtype), name);
        const ParamState& st = opt.state(int64_t(i));
        CHECK(st.step == kSteps);
        if (c.momentum > 0) {
          const Tensor& buf = st.buffers.at("momentum_buffer");
          CHECK(buf.dtype() == accumulate_dtype(dtype));
          const double tol = dtype == DType::f64 ? 1e-12 : 1e-5;
          check_close(buf.to_vector<double>(), refs[i].buf, tol, abs_tol(dtype), name + " momentum_buffer");
        } else {
          CHECK(st.buffers.count("momentum_buffer") == 0);
        }
        CHECK(st.buffers.count("master") == size_t(is_half(dtype)));
      }
    }
  }
}

// ---- the Optimizer base ---------------------------------------------------------------------------

TEST_CASE("zero_grad drops gradients or zeroes them in place") {
  std::mt19937_64 rng(5);
  Tensor a = make_param(rng, {3, 2}, DType::f32);
  Tensor b = make_param(rng, {4}, DType::f32);
  SGD opt({a, b}, SGDOptions().lr(0.1));

  SUBCASE("set_to_none") {
    set_random_grad(rng, a);
    set_random_grad(rng, b);
    opt.zero_grad();
    CHECK_FALSE(a.grad().defined());
    CHECK_FALSE(b.grad().defined());
  }
  SUBCASE("in place") {
    set_random_grad(rng, a);
    const Tensor before = a.grad();
    opt.zero_grad(false);
    REQUIRE(a.grad().defined());
    CHECK(a.grad().is_same(before));
    for (const double x : a.grad().to_vector<double>()) CHECK(x == 0.0);
    CHECK_FALSE(b.grad().defined());  // an undefined gradient stays undefined
  }
  SUBCASE("after backward") {
    sum(a * a).backward();
    REQUIRE(a.grad().defined());
    opt.zero_grad(false);
    for (const double x : a.grad().to_vector<double>()) CHECK(x == 0.0);
    sum(a * 3.0).backward();  // accumulates into the zeroed gradient
    for (const double x : a.grad().to_vector<double>()) CHECK(x == 3.0);
  }
}

TEST_CASE("parameters without a gradient are skipped and keep no state") {
  std::mt19937_64 rng(9);
  Tensor a = make_param(rng, {5}, DType::f32);
  Tensor b = make_param(rng, {5}, DType::f32);
  AdamW opt({a, b}, AdamWOptions().lr(0.1));
  const std::vector<double> b_before = b.to_vector<double>();
  const std::vector<double> a_before = a.to_vector<double>();
  set_random_grad(rng, a);
  opt.step();
  CHECK(b.to_vector<double>() == b_before);
  CHECK(a.to_vector<double>() != a_before);
  CHECK(opt.state(0).step == 1);
  CHECK(opt.state(1).step == 0);
  CHECK(opt.state(1).buffers.empty());
  set_random_grad(rng, b);
  opt.step();
  CHECK(opt.state(0).step == 2);
  CHECK(opt.state(1).step == 1);  // b's first update uses bias correction of step 1
}

TEST_CASE("a full training loop lowers a quadratic loss") {
  // theta* = target; loss = mean((theta - target)^2) through backward, with schedule and clipping.
  Tensor target = from_vector(std::vector<float>{1, -2, 3, 0.5f}, {4});
  Tensor theta = zeros({4}).requires_grad_();
  AdamW opt({theta}, AdamWOptions().lr(0.1).weight_decay(0.0));
  WarmupCosine schedule(0.1, 10, 200, 0.01);
  double first = 0, last = 0;
  for (int64_t s = 0; s < 200; ++s) {
    opt.zero_grad();
    Tensor diff = theta - target;
    Tensor loss = mean(diff * diff);
    loss.backward();
    clip_grad_norm({theta}, 1.0);
    opt.set_lr(schedule.lr(s));
    opt.step();
    (s == 0 ? first : last) = loss.item();
  }
  CHECK(last < 1e-3 * first);
}

TEST_CASE("bad hyperparameters are refused with a clear message") {
  Tensor p = zeros({3}).requires_grad_();
  CHECK_ERROR(AdamW({p}, AdamWOptions().lr(-1)), "[AdamW]", "invalid learning rate -1", "expected lr >= 0");
  CHECK_ERROR(AdamW({p}, AdamWOptions().beta1(1.0)), "[AdamW]", "invalid beta1 1", "expected 0 <= beta1 < 1");
  CHECK_ERROR(AdamW({p}, AdamWOptions().betas(0.9, -0.1)), "[AdamW]", "invalid beta2 -0.1", "0 <= beta2 < 1");
  CHECK_ERROR(AdamW({p}, AdamWOptions().eps(0)), "[AdamW]", "invalid eps 0", "expected eps > 0");
  CHECK_ERROR(AdamW({p}, AdamWOptions().weight_decay(-0.5)), "[AdamW]", "invalid weight_decay -0.5",
              "expected weight_decay >= 0");
  CHECK_ERROR(AdamW({p}, AdamWOptions().lr(std::numeric_limits<double>::quiet_NaN())), "invalid learning rate nan");
  CHECK_ERROR(SGD({p}, SGDOptions().lr(-0.1)), "[SGD]", "invalid learning rate -0.1");
  CHECK_ERROR(SGD({p}, SGDOptions().momentum(-0.9)), "[SGD]", "invalid momentum -0.9", "expected momentum >= 0");
  CHECK_ERROR(SGD({p}, SGDOptions().dampening(1.5)), "[SGD]", "invalid dampening 1.5", "0 <= dampening <= 1");
  CHECK_ERROR(SGD({p}, SGDOptions().nesterov(true)), "[SGD]",
              "nesterov momentum requires momentum > 0 and dampening = 0", "got momentum 0 and dampening 0");
  CHECK_ERROR(SGD({p}, SGDOptions().momentum(0.9).dampening(0.1).nesterov(true)), "[SGD]",
              "got momentum 0.9 and dampening 0.1");
  SGD opt({p}, SGDOptions());
  CHECK_ERROR(opt.set_lr(-2), "[SGD]", "invalid learning rate -2");
  CHECK_ERROR(opt.set_lr(3, 0.1), "[SGD]", "group 3 out of range", "1 groups");
  CHECK_ERROR(opt.add_param_group({{zeros({2}).requires_grad_()}, 0.1, -1.0}), "[SGD]", "invalid weight_decay -1");
}

TEST_CASE("parameters must be floating leaves; one that does not require grad (frozen) is skipped") {
  Tensor ok = zeros({3}).requires_grad_();
  Tensor leaf = ones({2, 2}).requires_grad_();
  {
    const Tensor frozen = randn({2, 3});
    const std::vector<float> frozen_before = frozen.to_vector<float>();
    AdamW opt({ok, frozen});
    ok.set_grad(randn({3}));
    opt.step();
    CHECK(frozen.to_vector<float>() == frozen_before);
    CHECK(!opt.state(1).initialized());
    CHECK(opt.state(0).initialized());
    ok.set_grad(Tensor());
  }
  CHECK_ERROR(AdamW({ok, arange(4)}), "[AdamW] parameter 1 of group 0 (i64[4] cpu)", "is not floating");
  CHECK_ERROR(AdamW({leaf * 2.0}), "[AdamW] parameter 0 of group 0", "is not a leaf", "output of", "leaf tensor");
  CHECK_ERROR(AdamW({ok, Tensor()}), "[AdamW] parameter 1 of group 0 is an undefined tensor");
  CHECK_ERROR(SGD({ok, ok}), "[SGD] parameter 1 of group 0", "appears more than once");
  CHECK_ERROR(SGD(std::vector<Tensor>{}), "[SGD] got an empty parameter list");
  SGD opt({ok}, SGDOptions());
  CHECK_ERROR(opt.add_param_group({{leaf, ok}, 0.1, 0.0}), "[SGD] parameter 1 of group 1", "appears more than once");
  CHECK(opt.num_params() == 1);  // the failed group left nothing behind
  opt.add_param_group({{leaf}, 0.1, 0.0});
  CHECK(opt.num_params() == 2);
  // A gradient of another dtype is refused at the step.
  ok.set_grad(zeros({3}, DType::f64));
  CHECK_ERROR(opt.step(), "[SGD] parameter 0 is f32[3] cpu", "gradient is f64[3] cpu",
              "same shape and device, and the parameter's dtype");
}

// ---- schedules -----------------------------------------------------------------------------------------

TEST_CASE("learning-rate schedules at chosen steps") {
  const LinearWarmup warm(2.0, 10);
  CHECK(warm.lr(0) == 0.0);
  CHECK(warm.lr(5) == doctest::Approx(1.0));
  CHECK(warm.lr(10) == 2.0);
  CHECK(warm.lr(1000) == 2.0);
  const LinearWarmup warm_from(1.0, 4, 0.2);
  CHECK(warm_from.lr(0) == doctest::Approx(0.2));
  CHECK(warm_from.lr(2) == doctest::Approx(0.6));
  CHECK(warm_from.lr(4) == 1.0);

  const CosineDecay cosine(1.0, 100, 0.1);
  CHECK(cosine.lr(0) == 1.0);
  CHECK(cosine.lr(50) == doctest::Approx((1.0 + 0.1) / 2).epsilon(1e-14));
  CHECK(cosine.lr(25) == doctest::Approx(0.1 + 0.9 * (1 + std::sqrt(0.5)) / 2).epsilon(1e-14));
  CHECK(cosine.lr(100) == doctest::Approx(0.1).epsilon(1e-14));
  CHECK(cosine.lr(5000) == doctest::Approx(0.1).epsilon(1e-14));

  CHECK(ConstantLr(0.3).lr(123456) == 0.3);

  // The GPT recipe: warmup 100, cosine to min over the remaining 1000 steps.
  const WarmupCosine gpt(6e-4, 100, 1100, 6e-5);
  CHECK(gpt.lr(0) == 0.0);
  CHECK(gpt.lr(50) == doctest::Approx(3e-4));
  CHECK(gpt.lr(99) == doctest::Approx(6e-4 * 0.99));
  CHECK(gpt.lr(100) == doctest::Approx(6e-4).epsilon(1e-14));
  CHECK(gpt.lr(600) == doctest::Approx((6e-4 + 6e-5) / 2).epsilon(1e-12));
  CHECK(gpt.lr(1100) == doctest::Approx(6e-5).epsilon(1e-12));
  CHECK(gpt.lr(100000) == doctest::Approx(6e-5).epsilon(1e-12));
  for (int64_t s = 101; s < 1100; s += 37) CHECK(gpt.lr(s) < gpt.lr(s - 1));  // decreasing after warmup

  const WarmupCosine no_warmup(1.0, 0, 10, 0.0);
  CHECK(no_warmup.lr(0) == 1.0);
  CHECK(no_warmup.lr(5) == doctest::Approx(0.5));

  // Sequential composes any pieces; each sees steps counted from its milestone.
  const Sequential seq({std::make_shared<ConstantLr>(0.5), std::make_shared<LinearWarmup>(1.0, 4),
                        std::make_shared<CosineDecay>(1.0, 10, 0.0)},
                       {3, 7});
  CHECK(seq.lr(0) == 0.5);
  CHECK(seq.lr(2) == 0.5);
  CHECK(seq.lr(3) == 0.0);
  CHECK(seq.lr(5) == doctest::Approx(0.5));
  CHECK(seq.lr(7) == 1.0);
  CHECK(seq.lr(12) == doctest::Approx(0.5));
  CHECK(seq.lr(17) == doctest::Approx(0.0));
}

TEST_CASE("schedule arguments are validated") {
  CHECK_ERROR(LinearWarmup(1.0, 0), "[LinearWarmup] invalid warmup_steps 0", "expected warmup_steps >= 1");
  CHECK_ERROR(LinearWarmup(1.0, 5, 1.5), "[LinearWarmup] invalid start_factor 1.5");
  CHECK_ERROR(LinearWarmup(-1.0, 5), "[LinearWarmup] invalid base_lr -1");
  CHECK_ERROR(CosineDecay(1.0, 0), "[CosineDecay] invalid decay_steps 0");
  CHECK_ERROR(CosineDecay(1.0, 10, 2.0), "[CosineDecay] min_lr 2 is above base_lr 1");
  CHECK_ERROR(WarmupCosine(1.0, 10, 10), "[WarmupCosine] got warmup_steps 10 and total_steps 10",
              "0 <= warmup_steps < total_steps");
  CHECK_ERROR(Sequential({std::make_shared<ConstantLr>(1.0)}, {5}), "[Sequential] got 1 schedules and 1 milestones");
  CHECK_ERROR(Sequential({std::make_shared<ConstantLr>(1.0), std::make_shared<ConstantLr>(2.0),
                          std::make_shared<ConstantLr>(3.0)},
                         {5, 5}),
              "[Sequential] milestone 1 is 5", "strictly increasing");
  CHECK_ERROR(Sequential({std::make_shared<ConstantLr>(1.0), nullptr}, {5}), "[Sequential] schedule 1 is null");
  CHECK_ERROR(ConstantLr(1.0).lr(-1), "[ConstantLr] lr(step) needs step >= 0, got -1");
}

// ---- clip_grad_norm --------------------------------------------------------------------------------------

TEST_CASE("clip_grad_norm returns the global norm and scales gradients to max_norm") {
  std::mt19937_64 rng(11);
  for (const DType dtype : {DType::f64, DType::f32, DType::bf16}) {
    const std::string dtype_str = dtype_name(dtype);
    CAPTURE(dtype_str);
    std::vector<Tensor> params = {make_param(rng, {13, 7}, dtype), make_param(rng, {5}, dtype),
                                  make_param(rng, {3, 3}, dtype)};
    double sum = 0;
    for (size_t i = 0; i < 2; ++i) {  // the third parameter has no gradient
      for (const double g : set_random_grad(rng, params[i], 3.0)) sum += g * g;
    }
    const double expected = std::sqrt(sum);
    const double max_norm = expected / 4;
    const double norm = clip_grad_norm(params, max_norm);
    CHECK(norm == doctest::Approx(expected).epsilon(1e-12));
    double after = 0;
    for (size_t i = 0; i < 2; ++i) {
      for (const double g : params[i].grad().to_vector<double>()) after += g * g;
    }
    // f64 holds the scaled values exactly enough for 1e-6; lower precisions add their rounding.
    const double tol = dtype == DType::f64 ? 1e-6 : (dtype == DType::f32 ? 2e-6 : 1e-2);
    CHECK(std::sqrt(after) == doctest::Approx(max_norm).epsilon(tol));
    CHECK_FALSE(params[2].grad().defined());
  }
}

// The values of t bit for bit (widened to double, which is exact for every floating dtype here, and
// compared as bytes, so -0 differs from +0).
bool same_bits(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0;
}

TEST_CASE("clip_grad_norm scales every gradient exactly as grad * coef, in place, for every dtype") {
  // On the CPU the scaling is one in-place pass (the device form's kernel, vectorised for f16/bf16);
  // it must give the bits of the out-of-place op it replaced. Sizes around the 16-lane vectors.
  std::mt19937_64 rng(14);
  for (const DType dtype : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    const std::string dtype_str = dtype_name(dtype);
    CAPTURE(dtype_str);
    std::vector<Tensor> params;
    for (const int64_t n : {int64_t(1), int64_t(15), int64_t(17), int64_t(33), int64_t(16385)})
      params.push_back(make_param(rng, {n}, dtype));
    for (const Tensor& p : params) set_random_grad(rng, p, 2.0);
    const double norm = grad_norm(params);
    const double coef = 0.3 / (norm + 1e-6);
    std::vector<Tensor> expected;
    for (const Tensor& p : params) expected.push_back(p.grad() * coef);
    CHECK(clip_grad_norm(params, 0.3) == norm);
    for (size_t i = 0; i < params.size(); ++i) {
      CAPTURE(i);
      CHECK(same_bits(params[i].grad(), expected[i]));
    }
  }
}

TEST_CASE("clip_grad_norm leaves gradients under max_norm untouched") {
  std::mt19937_64 rng(12);
  Tensor p = make_param(rng, {100}, DType::f32);
  const std::vector<double> g = set_random_grad(rng, p);
  double sum = 0;
  for (const double x : g) sum += x * x;
  const double norm = clip_grad_norm({p}, std::sqrt(sum) * 2);
  CHECK(norm == doctest::Approx(std::sqrt(sum)).epsilon(1e-12));
  CHECK(p.grad().to_vector<double>() == g);
}

TEST_CASE("clip_grad_norm is deterministic across thread counts") {
  std::mt19937_64 rng(13);
  // Large enough to take the parallel path and many chunks.
  std::vector<Tensor> params = {make_param(rng, {600, 1000}, DType::f32), make_param(rng, {70001}, DType::f32)};
  for (const Tensor& p : params) set_random_grad(rng, p);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one = grad_norm(params);
  omp_set_num_threads(2);
  const double two = grad_norm(params);
  omp_set_num_threads(threads);
  CHECK(one == two);  // bit for bit
  double sum = 0;
  for (const Tensor& p : params) {
    for (const double g : p.grad().to_vector<double>()) sum += g * g;
  }
  CHECK(one == doctest::Approx(std::sqrt(sum)).epsilon(1e-13));
}

TEST_CASE("clip_grad_norm returns a non-finite norm and leaves the gradients alone") {
  Tensor a = zeros({4}).requires_grad_();
  Tensor b = zeros({2}).requires_grad_();
  a.set_grad(from_vector(std::vector<float>{1, 2, std::numeric_limits<float>::infinity(), 3}, {4}));
  b.set_grad(from_vector(std::vector<float>{5, 6}, {2}));
  CHECK(std::isinf(clip_grad_norm({a, b}, 1.0)));
  CHECK(b.grad().to_vector<float>() == std::vector<float>{5, 6});
  a.set_grad(from_vector(std::vector<float>{1, std::numeric_limits<float>::quiet_NaN(), 2, 3}, {4}));
  CHECK(std::isnan(clip_grad_norm({a, b}, 1.0)));
  CHECK(b.grad().to_vector<float>() == std::vector<float>{5, 6});
  CHECK_ERROR(clip_grad_norm({a}, 0.0), "[clip_grad_norm] invalid max_norm 0", "finite max_norm > 0");
}

// ---- state_tensors -------------------------------------------------------------------------------------

TEST_CASE("state_tensors round trip continues the run bit for bit") {
  for (const bool adam : {true, false}) {
    CAPTURE(adam);
    std::mt19937_64 rng(21);
    std::vector<Tensor> a = {make_param(rng, {4, 3}, DType::f32), make_param(rng, {3}, DType::bf16),
                             make_param(rng, {2}, DType::f32)};
    auto make = [&](const std::vector<Tensor>& params) -> std::unique_ptr<LocalOptimizer> {
      if (adam) return std::make_unique<AdamW>(params, AdamWOptions().lr(0.05).weight_decay(0.1));
      return std::make_unique<SGD>(params, SGDOptions().lr(0.05).momentum(0.9).weight_decay(0.01));
    };
    std::unique_ptr<LocalOptimizer> first = make(a);
    for (int s = 0; s < 3; ++s) {
      for (size_t i = 0; i < 2; ++i) set_random_grad(rng, a[i]);  // a[2] never gets a gradient
      first->step();
    }
    const auto saved = first->state_tensors();
    std::map<std::string, Tensor> named(saved.begin(), saved.end());
    const std::vector<std::string> buffers =
        adam ? std::vector<std::string>{"exp_avg", "exp_avg_sq"} : std::vector<std::string>{"momentum_buffer"};
    CHECK(named.size() == 2 * (1 + buffers.size()) + 1);  // + the bf16 parameter's master copy
    CHECK(named.at("1.master").dtype() == DType::f32);
    for (const char* index : {"0", "1"}) {
      REQUIRE(named.count(std::string(index) + ".step"));
      CHECK(named.at(std::string(index) + ".step").item() == 3);
      for (const std::string& b : buffers) REQUIRE(named.count(std::string(index) + "." + b));
    }
    CHECK(named.at("1." + buffers[0]).dtype() == DType::f32);  // bf16 parameter, f32 state

    std::vector<Tensor> b;
    for (const Tensor& p : a) b.push_back(p.detach().clone().requires_grad_());
    std::unique_ptr<LocalOptimizer> second = make(b);
    second->load_state_tensors(saved);
    for (int s = 0; s < 2; ++s) {
      for (size_t i = 0; i < 2; ++i) {
        set_random_grad(rng, a[i]);
        b[i].set_grad(a[i].grad().clone());
      }
      first->step();
      second->step();
    }
    for (size_t i = 0; i < a.size(); ++i) CHECK(a[i].to_vector<double>() == b[i].to_vector<double>());
    CHECK(second->state(0).step == 5);
    CHECK(second->state(2).step == 0);
  }
}

TEST_CASE("load_state_tensors checks names - shapes and completeness") {
  Tensor w = zeros({2, 3}).requires_grad_();
  Tensor h = zeros({4}, DType::f16).requires_grad_();
  AdamW opt({w, h});
  const Tensor step = scalar_tensor(2, DType::i64);
  const Tensor m = zeros({2, 3});
  CHECK_ERROR(opt.load_state_tensors({{"0.exp_avg", zeros({3, 2})}}),
              "[AdamW] load_state_tensors:", "'0.exp_avg' is f32[3, 2] cpu", "parameter 0 is f32[2, 3] cpu",
              "expected f32[2, 3] cpu");
  CHECK_ERROR(opt.load_state_tensors({{"1.exp_avg", zeros({4}, DType::f16)}}), "'1.exp_avg' is f16[4] cpu",
              "expected f32[4] cpu");
  CHECK_ERROR(opt.load_state_tensors({{"0.momentum_buffer", m}}), "unknown state 'momentum_buffer'",
              "step, exp_avg, exp_avg_sq");
  CHECK_ERROR(opt.load_state_tensors({{"5.step", step}}), "'5.step' names parameter 5", "has 2 parameters");
  CHECK_ERROR(opt.load_state_tensors({{"exp_avg", m}}), "'exp_avg' is not named '{parameter index}.{state}'");
  CHECK_ERROR(opt.load_state_tensors({{"0.step", scalar_tensor(0, DType::i64)}}),
              "expected an integer step count >= 1");
  CHECK_ERROR(opt.load_state_tensors({{"0.step", step}, {"0.exp_avg", m}}),
              "parameter 0 has state but no '0.exp_avg_sq'");
  CHECK_ERROR(opt.load_state_tensors({{"0.step", step}, {"0.step", step}}), "'0.step' appears more than once");
  CHECK(opt.state_tensors().empty());  // every failed load left the state as it was
  opt.load_state_tensors({{"0.step", step}, {"0.exp_avg", m}, {"0.exp_avg_sq", m}});
  CHECK(opt.state(0).step == 2);
  CHECK_FALSE(opt.state(1).initialized());
}

TEST_CASE("whole_parameters commit refreshes the fp32 master copies of rewritten half parameters") {
  manual_seed(3);
  Tensor p = randn({5, 4}).to(DType::bf16).requires_grad_();
  AdamW opt({p}, AdamWOptions().lr(0.1));
  p.set_grad(randn({5, 4}).to(DType::bf16));
  opt.step();
  const Tensor master = opt.state(0).buffers.at("master");
  const Tensor restored = randn({5, 4}).to(DType::bf16);  // e.g. early stopping's best weights
  {
    const auto whole = opt.whole_parameters();
    NoGradGuard no_grad;
    p.copy_(restored);
    CHECK(master.to_vector<float>() != restored.to(DType::f32).to_vector<float>());  // stale until commit
    whole->commit();
  }
  CHECK(opt.state(0).buffers.at("master").to_vector<float>() == restored.to(DType::f32).to_vector<float>());
  CHECK_FALSE(opt.is_sharded());
  CHECK(opt.sharded_state() == nullptr);  // a local optimizer's state goes into the training checkpoint
}

// ---- the device-resident step (kernels/step_kernels.h) --------------------------------------------------

TEST_CASE("every fused optimizer's device step: a set skip flag changes nothing and counts no update, lr is read") {
  using Make = std::function<std::unique_ptr<optim::LocalOptimizer>(Tensor)>;
  const std::pair<const char*, Make> optimizers[] = {
      {"SGD with momentum and dampening",
       [](Tensor p) {
         return std::make_unique<optim::SGD>(std::vector<Tensor>{p}, optim::SGDOptions().momentum(0.9).dampening(0.3));
       }},
      {"SGD Nesterov",
       [](Tensor p) {
         return std::make_unique<optim::SGD>(std::vector<Tensor>{p}, optim::SGDOptions().momentum(0.8).nesterov(true));
       }},
      {"AdamW", [](Tensor p) { return std::make_unique<optim::AdamW>(std::vector<Tensor>{p}); }},
      {"Adam with AMSGrad",
       [](Tensor p) {
         return std::make_unique<optim::Adam>(std::vector<Tensor>{p}, optim::AdamOptions().amsgrad(true));
       }},
      {"RMSprop centered with momentum",
       [](Tensor p) {
         return std::make_unique<optim::RMSprop>(std::vector<Tensor>{p},
                                                 optim::RMSpropOptions().momentum(0.5).centered(true));
       }},
      {"Adagrad with lr decay",
       [](Tensor p) {
         return std::make_unique<optim::Adagrad>(std::vector<Tensor>{p}, optim::AdagradOptions().lr_decay(0.1));
       }},
      {"Lion", [](Tensor p) { return std::make_unique<optim::Lion>(std::vector<Tensor>{p}); }},
  };
  manual_seed(11);
  for (const auto& [name, make] : optimizers)
    for (DType dtype : {DType::f32, DType::bf16}) {
      INFO(name, " in ", std::string(dtype_name(dtype)));
      Tensor a = randn({37}).to(dtype).requires_grad_();
      Tensor b = a.detach().clone().requires_grad_();
      const std::vector<float> initial = a.to_vector<float>();
      const auto skipping = make(a), plain = make(b);
      REQUIRE(skipping->device_step() != nullptr);
      // The device step's learning rate, not the group's (left at its default), is the one applied.
      const Tensor lr = scalar_tensor(0.02, DType::f64).reshape({1});
      plain->set_lr(0.02);
      const Tensor flag = zeros({1});
      for (int step = 1; step <= 5; ++step) {
        const Tensor g = randn({37}).to(dtype);
        a.set_grad(g.clone());
        b.set_grad(g.clone());
        const bool skip = step == 1 || step == 3;  // the first: SGD's buffer starts at the next update
        flag.fill_(skip ? 1.0 : 0.0);
        const std::vector<float> param_before = a.to_vector<float>();
        std::vector<std::vector<float>> state_before;
        for (const auto& [key, t] : skipping->state_tensors()) state_before.push_back(t.to_vector<float>());
        CHECK(skipping->device_step()->step(lr, flag));
        if (skip) {
          CHECK(a.to_vector<float>() == param_before);
          std::vector<std::vector<float>> state_after;
          for (const auto& [key, t] : skipping->state_tensors()) state_after.push_back(t.to_vector<float>());
          CHECK(state_after == state_before);
        } else {
          plain->step();  // the same gradients without the skipped ones: the same bits
          CHECK(a.to_vector<float>() == b.to_vector<float>());
        }
      }
      CHECK(a.to_vector<float>() != initial);  // the three steps taken moved it
      const auto entries = skipping->state_tensors();
      REQUIRE(!entries.empty());
      CHECK(entries.front().first == "0.step");
      CHECK(entries.front().second.item() == 3);  // 5 calls, two skipped
    }
}

TEST_CASE("clip_grad_norm_on_device gives clip_grad_norm's gradients and norm bit for bit") {
  manual_seed(12);
  for (double max_norm : {0.5, 1e6}) {
    std::vector<Tensor> host, device;
    for (int64_t n : {5, 300, 70000}) {
      const Tensor g = randn({n});
      host.push_back(zeros({n}).requires_grad_());
      device.push_back(zeros({n}).requires_grad_());
      host.back().set_grad(g.clone());
      device.back().set_grad(g.clone());
    }
    const double norm = clip_grad_norm(host, max_norm);
    const Tensor sum_sq = scalar_tensor(-1.0, DType::f64).reshape({1});  // poisoned: must be written
    clip_grad_norm_on_device(device, max_norm, sum_sq);
    CHECK(std::sqrt(sum_sq.item()) == norm);
    for (size_t i = 0; i < host.size(); ++i) CHECK(device[i].grad().to_vector<float>() == host[i].grad().to_vector<float>());
  }
}

TEST_CASE("the device form of every built-in schedule gives lr(step) to the last bit") {
  const std::vector<LrSchedulePtr> schedules = {
      std::make_shared<ConstantLr>(0.3), std::make_shared<LinearWarmup>(0.1, 7, 0.25),
      std::make_shared<CosineDecay>(0.1, 13, 0.01), std::make_shared<WarmupCosine>(3e-4, 10, 100, 3e-5),
      std::make_shared<Sequential>(
          std::vector<LrSchedulePtr>{std::make_shared<WarmupCosine>(0.2, 3, 20, 0.0), std::make_shared<ConstantLr>(0.01),
                                     std::make_shared<LinearWarmup>(0.05, 4)},
          std::vector<int64_t>{12, 30})};
  for (const LrSchedulePtr& s : schedules) {
    const std::optional<kernels::LrScheduleDesc> form = s->device_form();
    REQUIRE(form.has_value());
    for (int64_t t = 0; t < 120; ++t) {
      double lr = -1.0;
      kernels::cpu::lr_schedule_eval(*form, &t, &lr);
      CHECK(lr == s->lr(t));
    }
  }
}
