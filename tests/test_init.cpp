// layers/init.h: PyTorch's initialisers. The gains and fans are PyTorch's formulas exactly; each
// distribution is checked on a large draw against its bound, mean and standard deviation (analytic for
// the truncated normal); orthogonal_ gives orthonormal rows or columns to f32 rounding.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "engine/ops.h"
#include "engine/random.h"
#include "layers/init.h"
#include "support/check_error.h"

using namespace hg;
namespace init = hg::nn::init;

namespace {

struct Moments {
  double mean = 0, std = 0, max_abs = 0, min = 0, max = 0;
};

Moments moments_of(const Tensor& t) {
  const std::vector<double> v = t.to_vector<double>();
  Moments m;
  m.min = *std::min_element(v.begin(), v.end());
  m.max = *std::max_element(v.begin(), v.end());
  for (double x : v) m.mean += x, m.max_abs = std::max(m.max_abs, std::fabs(x));
  m.mean /= double(v.size());
  for (double x : v) m.std += (x - m.mean) * (x - m.mean);
  m.std = std::sqrt(m.std / double(v.size() - 1));
  return m;
}

double phi(double x) { return std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI); }
double cdf(double x) { return 0.5 * (1 + std::erf(x / std::sqrt(2.0))); }

}  // namespace

TEST_CASE("calculate_gain and the fans are PyTorch's") {
  CHECK(init::calculate_gain("linear") == 1.0);
  CHECK(init::calculate_gain("conv2d") == 1.0);
  CHECK(init::calculate_gain("sigmoid") == 1.0);
  CHECK(init::calculate_gain("tanh") == 5.0 / 3.0);
  CHECK(init::calculate_gain("relu") == std::sqrt(2.0));
  CHECK(init::calculate_gain("leaky_relu") == std::sqrt(2.0 / (1.0 + 0.01 * 0.01)));
  CHECK(init::calculate_gain("leaky_relu", std::sqrt(5.0)) == std::sqrt(2.0 / 6.0));
  CHECK(init::calculate_gain("selu") == 0.75);
  CHECK_ERROR(init::calculate_gain("gelu"), "unknown nonlinearity \"gelu\"", "leaky_relu");
  CHECK(init::fans(empty({8, 4, 3, 3})) == std::pair<int64_t, int64_t>{36, 72});
  CHECK(init::fans(empty({10, 20})) == std::pair<int64_t, int64_t>{20, 10});
  CHECK_ERROR(init::fans(empty({5})), "rank >= 2", "f32[5]");
}

TEST_CASE("xavier and kaiming draw with their bounds and standard deviations") {
  manual_seed(31);
  const Tensor w = empty({256, 512});
  const double xavier_bound = std::sqrt(6.0 / (256 + 512));
  init::xavier_uniform_(w);
  Moments m = moments_of(w);
  CHECK(m.max_abs <= xavier_bound);
  CHECK(m.max_abs > 0.999 * xavier_bound);
  CHECK(m.std == doctest::Approx(xavier_bound / std::sqrt(3.0)).epsilon(0.01));
  init::xavier_normal_(w, 2.0);
  m = moments_of(w);
  CHECK(m.std == doctest::Approx(2.0 * std::sqrt(2.0 / (256 + 512))).epsilon(0.01));
  CHECK(std::fabs(m.mean) < 0.02 * m.std);  // 131072 draws: the standard error is 0.003 std
  // Linear's and Conv2d's default: kaiming_uniform_(a = sqrt(5)) is U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  init::kaiming_uniform_(w, std::sqrt(5.0));
  m = moments_of(w);
  CHECK(m.max_abs <= 1.0 / std::sqrt(512.0) * (1 + 1e-6));
  CHECK(m.max_abs > 0.999 / std::sqrt(512.0));
  init::kaiming_normal_(w, 0.0, init::FanMode::fan_out, "relu");
  m = moments_of(w);
  CHECK(m.std == doctest::Approx(std::sqrt(2.0) / std::sqrt(256.0)).epsilon(0.01));
  const Tensor half = empty({64, 64}, DType::bf16);
  init::kaiming_uniform_(half);  // any floating dtype, rounded
  CHECK(moments_of(half).max_abs <= std::sqrt(3.0) * init::calculate_gain("leaky_relu") / 8.0 * (1 + 1e-2));
}

TEST_CASE("trunc_normal_ stays in [a, b] with the truncated normal's mean and standard deviation") {
  manual_seed(32);
  const double mean = 1.0, std = 2.0, a = 0.0, b = 3.0;
  const Tensor t = empty({200000});
  init::trunc_normal_(t, mean, std, a, b);
  const Moments m = moments_of(t);
  CHECK(m.min >= a);
  CHECK(m.max <= b);
  const double alpha = (a - mean) / std, beta = (b - mean) / std, z = cdf(beta) - cdf(alpha);
  const double expected_mean = mean + std * (phi(alpha) - phi(beta)) / z;
  const double ratio = (phi(alpha) - phi(beta)) / z;
  const double expected_var = std * std * (1 + (alpha * phi(alpha) - beta * phi(beta)) / z - ratio * ratio);
  CHECK(m.mean == doctest::Approx(expected_mean).epsilon(0.005));
  CHECK(m.std == doctest::Approx(std::sqrt(expected_var)).epsilon(0.005));
  init::trunc_normal_(t);  // the defaults: N(0, 1) on [-2, 2]
  CHECK(moments_of(t).max_abs <= 2.0);
  CHECK_ERROR(init::trunc_normal_(t, 0, 1, 2, -2), "expected std > 0 and a < b");
}

TEST_CASE("orthogonal_ gives orthonormal rows or columns, times the gain") {
  manual_seed(33);
  for (const Shape& shape : {Shape{6, 10}, Shape{10, 6}, Shape{4, 2, 3, 3}, Shape{7, 7}}) {
    INFO("shape " << shape_str(shape));
    const Tensor t = empty(shape);
    init::orthogonal_(t, 2.0);
    const int64_t rows = shape[0], cols = t.numel() / rows;
    const Tensor w = t.reshape({rows, cols}).to(DType::f64);
    const Tensor gram = rows <= cols ? matmul(w, w.transpose(0, 1)) : matmul(w.transpose(0, 1), w);
    const std::vector<double> g = gram.to_vector<double>();
    const int64_t n = std::min(rows, cols);
    double worst = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) worst = std::max(worst, std::fabs(g[size_t(i * n + j)] - (i == j ? 4.0 : 0.0)));
    CHECK(worst < 1e-5);  // f32 rounding of entries of size ~1
  }
  CHECK_ERROR(init::orthogonal_(empty({3})), "rank >= 2");
}

TEST_CASE("zeros_ and ones_") {
  const Tensor t = empty({3, 4});
  init::ones_(t);
  CHECK(t.to_vector<float>() == std::vector<float>(12, 1.0f));
  init::zeros_(t);
  CHECK(t.to_vector<float>() == std::vector<float>(12, 0.0f));
}
