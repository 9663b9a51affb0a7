#include "layers/init.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/ops.h"

namespace hg::nn::init {

void normal_(const Tensor& t, double mean, double std) {
  NoGradGuard no_grad;
  t.copy_(affine(randn(t.shape(), accumulate_dtype(t.dtype()), t.device()), std, mean));
}

void uniform_(const Tensor& t, double low, double high) {
  NoGradGuard no_grad;
  t.copy_(affine(rand(t.shape(), accumulate_dtype(t.dtype()), t.device()), high - low, low));
}

void constant_(const Tensor& t, double value) {
  NoGradGuard no_grad;
  t.fill_(value);
}

namespace {
// erf^-1(y) for y in (-1, 1): Giles' single-precision approximation, then two Newton steps on erf
// (each doubles the correct digits: double precision).
double erfinv(double y) {
  const double w0 = -std::log((1.0 - y) * (1.0 + y));
  double x;
  if (w0 < 5.0) {
    const double w = w0 - 2.5;
    double p = 2.81022636e-08;
    for (double c : {3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503, -0.00417768164,
                     0.246640727, 1.50140941})
      p = c + p * w;
    x = p * y;
  } else {
    const double w = std::sqrt(w0) - 3.0;
    double p = -0.000200214257;
    for (double c : {0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613, 0.00943887047,
                     1.00167406, 2.83297682})
      p = c + p * w;
    x = p * y;
  }
  for (int i = 0; i < 2; ++i) x -= (std::erf(x) - y) / (2.0 / std::sqrt(M_PI) * std::exp(-x * x));
  return x;
}
double normal_cdf(double x) { return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))); }
}  // namespace

void trunc_normal_(const Tensor& t, double mean, double std, double a, double b) {
  HG_CHECK(std > 0 && a < b, "[init::trunc_normal_] expected std > 0 and a < b, got std = ", std, ", [", a, ", ", b,
           "]");
  NoGradGuard no_grad;
  // u ~ U(cdf(a'), cdf(b')) in standard units, x = mean + std sqrt(2) erfinv(2u - 1), clamped to [a, b].
  const double lo = normal_cdf((a - mean) / std), hi = normal_cdf((b - mean) / std);
  std::vector<double> u = rand({t.numel()}, DType::f64, kCPU).to_vector<double>();
  for (double& v : u) {
    const double p = 2.0 * (lo + (hi - lo) * v) - 1.0;
    const double x = mean + std * std::sqrt(2.0) * erfinv(std::clamp(p, -1.0 + 1e-16, 1.0 - 1e-16));
    v = std::clamp(x, a, b);
  }
  t.copy_(from_vector(u, t.shape(), DType::f64).to(t.dtype()).to(t.device()));
}

std::pair<int64_t, int64_t> fans(const Tensor& t) {
  HG_CHECK(t.dim() >= 2, "[init] fan in and fan out need a tensor of rank >= 2, got ", t.describe());
  const int64_t receptive = t.numel() / (t.size(0) * t.size(1));
  return {t.size(1) * receptive, t.size(0) * receptive};
}

double calculate_gain(const std::string& nonlinearity, double param) {
  for (const char* unit :
       {"linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "sigmoid"})
    if (nonlinearity == unit) return 1.0;
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") {
    const double slope = param < 0 ? 0.01 : param;
    return std::sqrt(2.0 / (1.0 + slope * slope));
  }
  if (nonlinearity == "selu") return 3.0 / 4.0;
  HG_FAIL("[init::calculate_gain] unknown nonlinearity \"", nonlinearity, "\"; expected linear, conv1d, conv2d, ",
          "conv3d, conv_transpose1d/2d/3d, sigmoid, tanh, relu, leaky_relu or selu");
}

void xavier_uniform_(const Tensor& t, double gain) {
  const auto [fan_in, fan_out] = fans(t);
  const double bound = gain * std::sqrt(6.0 / double(fan_in + fan_out));
  uniform_(t, -bound, bound);
}

void xavier_normal_(const Tensor& t, double gain) {
  const auto [fan_in, fan_out] = fans(t);
  normal_(t, 0.0, gain * std::sqrt(2.0 / double(fan_in + fan_out)));
}

namespace {
double kaiming_std(const Tensor& t, double a, FanMode mode, const std::string& nonlinearity) {
  const auto [fan_in, fan_out] = fans(t);
  const double fan = double(mode == FanMode::fan_in ? fan_in : fan_out);
  return calculate_gain(nonlinearity, a) / std::sqrt(fan);
}
}  // namespace

void kaiming_uniform_(const Tensor& t, double a, FanMode mode, const std::string& nonlinearity) {
  const double bound = std::sqrt(3.0) * kaiming_std(t, a, mode, nonlinearity);
  uniform_(t, -bound, bound);
}

void kaiming_normal_(const Tensor& t, double a, FanMode mode, const std::string& nonlinearity) {
  normal_(t, 0.0, kaiming_std(t, a, mode, nonlinearity));
}

void orthogonal_(const Tensor& t, double gain) {
  HG_CHECK(t.dim() >= 2, "[init::orthogonal_] needs a tensor of rank >= 2, got ", t.describe());
  const int64_t rows = t.size(0), cols = t.numel() / rows;
  // QR of the tall matrix A [m, n] (m >= n; the draw transposed when rows < cols), by modified
  // Gram-Schmidt with one reorthogonalisation pass: Q [m, n] column by column, R's diagonal kept.
  const int64_t m = std::max(rows, cols), n = std::min(rows, cols);
  std::vector<double> a = randn({m * n}, DType::f64, kCPU).to_vector<double>();  // A column-major: a[j m + i]
  for (int64_t j = 0; j < n; ++j) {
    double* q = a.data() + j * m;
    for (int pass = 0; pass < 2; ++pass)
      for (int64_t k = 0; k < j; ++k) {
        const double* p = a.data() + k * m;
        double dot = 0;
        for (int64_t i = 0; i < m; ++i) dot += p[i] * q[i];
        for (int64_t i = 0; i < m; ++i) q[i] -= dot * p[i];
      }
    double norm = 0;
    for (int64_t i = 0; i < m; ++i) norm += q[i] * q[i];
    norm = std::sqrt(norm);  // R[j, j] > 0 here, so the sign fix of PyTorch's QR is the identity
    for (int64_t i = 0; i < m; ++i) q[i] /= norm;
  }
  // t[r, c] = gain Q[r, c] (rows >= cols) or gain Q[c, r] (rows < cols: Q^T has orthonormal rows).
  std::vector<double> out(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[size_t(r * cols + c)] = gain * (rows >= cols ? a[c * m + r] : a[r * m + c]);
  NoGradGuard no_grad;
  t.copy_(from_vector(out, t.shape(), DType::f64).to(t.dtype()).to(t.device()));
}

}  // namespace hg::nn::init
