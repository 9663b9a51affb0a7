// kernels/pointwise_loss.h on the CPU: pointwise_loss_forward, _sum and _backward for every kind and
// floating dtype against the loss written out in double here, from the very values stored in the
// inputs. Outputs start as NaN (HostBuffer), so an element a kernel forgets to write fails. Each result
// must be within 4 eps(dtype) (|reference| + 1). Sizes cross
// the kernels' 2048-element chunks and their 2^15-element parallel threshold, and the sum must be the
// same bits at 1 and 2 threads. (The engine's losses over these kernels are checked against PyTorch's
// vectors, by float64 gradchecks and CPU against CUDA: test_torch_parity, test_gradcheck, test_cuda_ops.)
#include <doctest/doctest.h>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "kernels/pointwise_loss.h"
#include "support/host_buffer.h"

namespace {

using hg::DType;
using hg::kernels::PointwiseLoss;
using hg::testing::HostBuffer;
namespace cpu = hg::kernels::cpu;

// Relative precision of one rounding to t (and room for the few-ulp vector log / exp in f32).
double eps(DType t) {
  switch (t) {
    case DType::f64:
      return 1e-13;
    case DType::f32:
      return 4e-6;
    case DType::f16:
      return 1e-3;
    default:
      return 8e-3;  // bf16
  }
}

struct Reference {
  double value, dx, dt;
};

Reference reference(PointwiseLoss kind, double x, double t, double delta) {
  const double d = x - t;
  switch (kind) {
    case PointwiseLoss::Squared:
      return {d * d, 2 * d, -2 * d};
    case PointwiseLoss::Absolute: {
      const double s = d > 0 ? 1.0 : (d < 0 ? -1.0 : 0.0);
      return {std::abs(d), s, -s};
    }
    case PointwiseLoss::Huber: {
      const double c = std::clamp(d, -delta, delta);
      return {std::abs(d) <= delta ? 0.5 * d * d : delta * (std::abs(d) - 0.5 * delta), c, -c};
    }
    case PointwiseLoss::BinaryCrossEntropy:
      return {-(t * std::max(std::log(x), -100.0) + (1 - t) * std::max(std::log(1 - x), -100.0)),
              (x - t) / std::max(x * (1 - x), 1e-12), std::log(1 - x) - std::log(x)};
    case PointwiseLoss::KlDiv:
      return {t * std::log(t) - t * x, -t, std::log(t) + 1 - x};
    case PointwiseLoss::KlDivLogTarget:
      return {std::exp(t) * (t - x), -std::exp(t), std::exp(t) * (t - x + 1)};
  }
  return {};
}

const char* name(PointwiseLoss kind) {
  switch (kind) {
    case PointwiseLoss::Squared:
      return "squared";
    case PointwiseLoss::Absolute:
      return "absolute";
    case PointwiseLoss::Huber:
      return "huber";
    case PointwiseLoss::BinaryCrossEntropy:
      return "binary_cross_entropy";
    case PointwiseLoss::KlDiv:
      return "kl_div";
    case PointwiseLoss::KlDivLogTarget:
      return "kl_div log_target";
  }
  return "?";
}

// x and t in each kind's domain: BCE's x a probability strictly inside (0, 1), kl_div's t positive.
void fill_inputs(PointwiseLoss kind, HostBuffer& x, HostBuffer& t, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> wide(-2, 2), unit(0.02, 0.98);
  for (int64_t i = 0; i < x.size(); ++i) {
    const bool bce = kind == PointwiseLoss::BinaryCrossEntropy, kl = kind == PointwiseLoss::KlDiv;
    x.set(i, bce ? unit(rng) : wide(rng));
    t.set(i, bce || kl ? unit(rng) : wide(rng));
  }
}

constexpr PointwiseLoss kKinds[] = {PointwiseLoss::Squared, PointwiseLoss::Absolute,
                                    PointwiseLoss::Huber,   PointwiseLoss::BinaryCrossEntropy,
                                    PointwiseLoss::KlDiv,   PointwiseLoss::KlDivLogTarget};
constexpr DType kTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

}  // namespace

TEST_CASE("pointwise losses: values, sums and both gradients against double, every kind and dtype") {
  const double delta = 0.7, scale = 1.5;
  for (const int64_t n : {int64_t(1), int64_t(2049), int64_t(70001)}) {
    for (const PointwiseLoss kind : kKinds) {
      for (const DType dtype : kTypes) {
        CAPTURE(n);
        CAPTURE(std::string(name(kind)));
        CAPTURE(std::string(hg::dtype_name(dtype)));
        HostBuffer x(dtype, n), t(dtype, n), g(dtype, n), g0(dtype, 1);
        fill_inputs(kind, x, t, uint64_t(n) * 7 + uint64_t(kind));
        std::mt19937_64 rng(uint64_t(n) + 3);
        std::uniform_real_distribution<double> upstream(-1, 1);
        for (int64_t i = 0; i < n; ++i) g.set(i, upstream(rng));
        g0.set(0, 0.625);

        HostBuffer y(dtype, n), sum(dtype, 1), dx(dtype, n), dt(dtype, n), dx0(dtype, n);
        cpu::pointwise_loss_forward(kind, delta, scale, x.data(), t.data(), y.data(), n, dtype);
        cpu::pointwise_loss_sum(kind, delta, scale / double(n), x.data(), t.data(), sum.data(), n, dtype);
        cpu::pointwise_loss_backward(kind, delta, scale, x.data(), t.data(), g.data(), true, dx.data(), dt.data(), n,
                                     dtype);
        cpu::pointwise_loss_backward(kind, delta, scale, x.data(), t.data(), g0.data(), false, dx0.data(), nullptr, n,
                                     dtype);

        const double e = eps(dtype);
        double total = 0, total_abs = 0, worst = 0;
        for (int64_t i = 0; i < n; ++i) {
          const Reference r = reference(kind, x.get(i), t.get(i), delta);
          total += r.value;
          total_abs += std::abs(r.value);
          const auto off = [&](double got, double want) {
            // Relative, and absolute near 0 (the terms are O(1): their cancellation and half subnormals).
            return std::isnan(got) ? INFINITY : std::abs(got - want) / (std::abs(want) + 1.0);
          };
          worst = std::max({worst, off(y.get(i), scale * r.value), off(dx.get(i), scale * g.get(i) * r.dx),
                            off(dt.get(i), scale * g.get(i) * r.dt), off(dx0.get(i), scale * 0.625 * r.dx)});
        }
        CHECK(worst <= 4 * e);
        // The mean, with an absolute allowance for the cancellation of signed terms.
        CHECK(std::abs(sum.get(0) - scale * total / double(n)) <= 4 * e * scale * total_abs / double(n) + 1e-12);
      }
    }
  }
}

TEST_CASE("pointwise_loss_sum gives the same bits at 1 and 2 threads, and refuses what it cannot sum") {
  const int64_t n = 100003;
  for (const DType dtype : {DType::f32, DType::bf16}) {
    HostBuffer x(dtype, n), t(dtype, n), one(dtype, 1), two(dtype, 1);
    fill_inputs(PointwiseLoss::Huber, x, t, 11);
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    cpu::pointwise_loss_sum(PointwiseLoss::Huber, 1.0, 1.0 / double(n), x.data(), t.data(), one.data(), n, dtype);
    omp_set_num_threads(2);
    cpu::pointwise_loss_sum(PointwiseLoss::Huber, 1.0, 1.0 / double(n), x.data(), t.data(), two.data(), n, dtype);
    omp_set_num_threads(threads);
    CHECK(one.get(0) == two.get(0));
    CHECK(std::isfinite(one.get(0)));
  }
  HostBuffer x(DType::f32, 1), out(DType::f32, 1);
  CHECK_THROWS_WITH(
      cpu::pointwise_loss_sum(PointwiseLoss::Squared, 0, 1, x.data(), x.data(), out.data(), 0, DType::f32),
      doctest::Contains("expected n >= 1"));
  CHECK_THROWS_WITH(cpu::pointwise_loss_backward(PointwiseLoss::Squared, 0, 1, x.data(), x.data(), x.data(), true,
                                                 nullptr, nullptr, 1, DType::f32),
                    doctest::Contains("dx and dt are both null"));
  CHECK_THROWS_WITH(
      cpu::pointwise_loss_forward(PointwiseLoss::Squared, 0, 1, x.data(), x.data(), out.data(), 1, DType::i32),
      doctest::Contains("expected a floating dtype"));
}
