// Convolution and pooling on the CPU: the im2col + GEMM kernels against the direct-loop reference in
// every dtype over a table of geometries (stride, padding, dilation, groups, odd sizes, 1x1, a
// kernel as large as the padded input), backward passes in f16/bf16/f32 against the f64 kernels on
// the same rounded inputs, pooling against hand-computed answers, bad shapes rejected with clear
// messages, and the layers (Conv2d, MaxPool2d, AvgPool2d, Flatten) learning a small task.
// Gradients in float64 are checked over the full Jacobian in test_gradcheck (tests/support/op_cases.cpp).
//
// Tolerance for a dtype (|got - ref| <= atol + rtol |ref|): the reference accumulates in double from
// the same rounded inputs, the kernels in acc_t with a different summation order, and outputs of
// half types are rounded once: rtol = 2 ulp(out) + 64 u(acc), atol = 64 u(acc) S where S bounds the
// sum of |terms| of an output (R terms of |x w| <= 16 for our inputs in [-2, 2]).
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "engine/ops.h"
#include "engine/random.h"
#include "kernels/kernels.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "support/check_error.h"
#include "support/conv_geometry.h"
#include "support/host_buffer.h"

using namespace hg;
using hg::kernels::Conv2dGeometry;
using hg::kernels::ConvPass;
using hg::testing::HostBuffer;

namespace {

using hg::testing::geometry;

struct Case {
  const char* name;
  Conv2dGeometry g;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> kCases = {
      {"3x3 same padding", geometry(2, 3, 8, 8, 4, 3, 3, 1, 1, 1, 1)},
      {"odd sizes stride 2", geometry(3, 2, 7, 9, 5, 3, 2, 2, 2, 1, 0)},
      {"dilation", geometry(1, 3, 9, 8, 2, 3, 3, 1, 2, 2, 1, 2, 3)},
      {"groups", geometry(2, 6, 5, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 2)},
      {"depthwise", geometry(1, 4, 6, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 4)},
      {"1x1", geometry(2, 5, 4, 3, 3, 1, 1)},
      {"kernel fills padded input", geometry(2, 2, 3, 4, 3, 5, 6, 1, 1, 1, 1)},
      {"stride larger than kernel", geometry(1, 2, 11, 10, 3, 2, 2, 3, 4, 0, 1)},
      {"many images", geometry(9, 1, 6, 6, 2, 3, 3, 1, 1, 1, 1)},
  };
  return kCases;
}

double ulp_of(DType dtype) {
  switch (dtype) {
    case DType::f16: return std::ldexp(1.0, -10);
    case DType::bf16: return std::ldexp(1.0, -7);
    default: return 0.0;
  }
}
double unit_roundoff(DType dtype) { return dtype == DType::f64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24); }

HostBuffer random_buffer(DType dtype, int64_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  HostBuffer b(dtype, n);
  for (int64_t i = 0; i < n; ++i) b.set(i, u(rng));
  return b;
}

// The same values in another dtype (the test inputs are exactly representable after the first rounding).
HostBuffer converted(const HostBuffer& in, DType dtype) {
  HostBuffer out(dtype, in.size());
  for (int64_t i = 0; i < in.size(); ++i) out.set(i, in.get(i));
  return out;
}

std::string compare(const char* what, const HostBuffer& got, const HostBuffer& ref, DType dtype, int64_t terms) {
  const double rtol = 2 * ulp_of(dtype) + 64 * unit_roundoff(dtype);
  const double atol = 64 * unit_roundoff(dtype) * 4.0 * double(terms) + (dtype == DType::f16 ? std::ldexp(1.0, -24) : 0);
  for (int64_t i = 0; i < got.size(); ++i) {
    const double a = got.get(i), b = ref.get(i);
    if (!(std::abs(a - b) <= atol + rtol * std::abs(b)))
      return std::string(what) + "[" + std::to_string(i) + "]: got " + std::to_string(a) + ", expected " + std::to_string(b);
  }
  return "";
}

int64_t x_numel(const Conv2dGeometry& g) { return g.batch * g.in_channels * g.height * g.width; }
int64_t y_numel(const Conv2dGeometry& g) { return g.batch * g.out_channels * g.out_pixels(); }

std::vector<unsigned char> workspace_for(const Conv2dGeometry& g, ConvPass pass, DType dtype) {
  return std::vector<unsigned char>(kernels::cpu::conv2d_workspace_bytes(g, pass, dtype) + 1);
}

}  // namespace

TEST_CASE("conv2d forward: im2col + GEMM equals the direct loops in every dtype") {
  std::mt19937_64 rng(11);
  for (const Case& c : cases()) {
    for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
      const Conv2dGeometry& g = c.g;
      const HostBuffer x = random_buffer(dtype, x_numel(g), rng), w = random_buffer(dtype, g.weight_numel(), rng),
                       b = random_buffer(dtype, g.out_channels, rng);
      HostBuffer y(dtype, y_numel(g)), ref(dtype, y_numel(g));
      y.poison_with_nan();
      auto ws = workspace_for(g, ConvPass::Forward, dtype);
      kernels::cpu::conv2d_forward(g, x.data(), w.data(), b.data(), y.data(), ws.data(), ws.size(), dtype);
      kernels::cpu::conv2d_forward_reference(g, x.data(), w.data(), b.data(), ref.data(), dtype);
      const std::string failure = compare(c.name, y, ref, dtype, g.col_rows());
      CHECK_MESSAGE(failure.empty(), dtype_name(dtype), " ", failure);
    }
  }
}

TEST_CASE("conv2d backward: every dtype matches the f64 kernels on the same inputs") {
  std::mt19937_64 rng(12);
  for (const Case& c : cases()) {
    const Conv2dGeometry& g = c.g;
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      const HostBuffer x = random_buffer(dtype, x_numel(g), rng), w = random_buffer(dtype, g.weight_numel(), rng),
                       dy = random_buffer(dtype, y_numel(g), rng);
      HostBuffer dx(dtype, x_numel(g)), dw(dtype, g.weight_numel());
      HostBuffer dx64(DType::f64, x_numel(g)), dw64(DType::f64, g.weight_numel());
      dx.poison_with_nan();
      dw.poison_with_nan();
      const HostBuffer x64 = converted(x, DType::f64), w64 = converted(w, DType::f64), dy64 = converted(dy, DType::f64);
      auto ws = workspace_for(g, ConvPass::BackwardData, dtype);
      kernels::cpu::conv2d_backward_data(g, dy.data(), w.data(), dx.data(), ws.data(), ws.size(), dtype);
      ws = workspace_for(g, ConvPass::BackwardFilter, dtype);
      kernels::cpu::conv2d_backward_filter(g, x.data(), dy.data(), dw.data(), ws.data(), ws.size(), dtype);
      ws = workspace_for(g, ConvPass::BackwardData, DType::f64);
      kernels::cpu::conv2d_backward_data(g, dy64.data(), w64.data(), dx64.data(), ws.data(), ws.size(), DType::f64);
      ws = workspace_for(g, ConvPass::BackwardFilter, DType::f64);
      kernels::cpu::conv2d_backward_filter(g, x64.data(), dy64.data(), dw64.data(), ws.data(), ws.size(), DType::f64);
      std::string failure = compare("dx", dx, dx64, dtype, g.group_out_channels() * g.kernel_h * g.kernel_w);
      CHECK_MESSAGE(failure.empty(), c.name, " ", dtype_name(dtype), " ", failure);
      failure = compare("dweight", dw, dw64, dtype, g.batch * g.out_pixels());
      CHECK_MESSAGE(failure.empty(), c.name, " ", dtype_name(dtype), " ", failure);
    }
  }
}

TEST_CASE("conv2d backward data is the adjoint of forward in f64") {
  // <conv(x), dy> == <x, conv_backward_data(dy)> and == <w, conv_backward_filter(x, dy)> (no bias):
  // ties the backward kernels to the direct-loop forward reference independently of gradcheck.
  std::mt19937_64 rng(13);
  for (const Case& c : cases()) {
    const Conv2dGeometry& g = c.g;
    const HostBuffer x = random_buffer(DType::f64, x_numel(g), rng), w = random_buffer(DType::f64, g.weight_numel(), rng),
                     dy = random_buffer(DType::f64, y_numel(g), rng);
    HostBuffer y(DType::f64, y_numel(g)), dx(DType::f64, x_numel(g)), dw(DType::f64, g.weight_numel());
    kernels::cpu::conv2d_forward_reference(g, x.data(), w.data(), nullptr, y.data(), DType::f64);
    auto ws = workspace_for(g, ConvPass::BackwardData, DType::f64);
    kernels::cpu::conv2d_backward_data(g, dy.data(), w.data(), dx.data(), ws.data(), ws.size(), DType::f64);
    ws = workspace_for(g, ConvPass::BackwardFilter, DType::f64);
    kernels::cpu::conv2d_backward_filter(g, x.data(), dy.data(), dw.data(), ws.data(), ws.size(), DType::f64);
    double y_dy = 0, x_dx = 0, w_dw = 0;
    for (int64_t i = 0; i < y.size(); ++i) y_dy += y.get(i) * dy.get(i);
    for (int64_t i = 0; i < x.size(); ++i) x_dx += x.get(i) * dx.get(i);
    for (int64_t i = 0; i < w.size(); ++i) w_dw += w.get(i) * dw.get(i);
    CHECK_MESSAGE(std::abs(y_dy - x_dx) <= 1e-9 * (1 + std::abs(y_dy)), c.name, ": ", y_dy, " vs ", x_dx);
    CHECK_MESSAGE(std::abs(y_dy - w_dw) <= 1e-9 * (1 + std::abs(y_dy)), c.name, ": ", y_dy, " vs ", w_dw);
  }
}

TEST_CASE("conv2d kernels reject a small workspace and bad geometry") {
  const Conv2dGeometry g = geometry(1, 2, 5, 5, 3, 3, 3);
  std::vector<float> x(50, 1.0f), w(54, 1.0f), y(27);
  const size_t bytes = kernels::cpu::conv2d_workspace_bytes(g, ConvPass::Forward, DType::f32);
  std::vector<unsigned char> ws(bytes);
  CHECK_ERROR(kernels::cpu::conv2d_forward(g, x.data(), w.data(), nullptr, y.data(), ws.data(), bytes - 1, DType::f32),
              "workspace of", "too small");
  Conv2dGeometry bad = g;
  bad.groups = 4;
  CHECK_ERROR(kernels::cpu::conv2d_workspace_bytes(bad, ConvPass::Forward, DType::f32), "groups = 4 must divide");
  bad = g;
  bad.stride_w = 0;
  CHECK_ERROR(kernels::cpu::conv2d_workspace_bytes(bad, ConvPass::Forward, DType::f32), "stride > 0");
}

TEST_CASE("conv2d op: output shapes and a known answer") {
  // A 3x3 box filter over ones with padding 1: 4 in the corners, 6 on the edges, 9 inside, plus the bias.
  const Tensor x = ones({1, 1, 4, 5});
  const Tensor w = ones({2, 1, 3, 3});
  const Tensor b = from_vector(std::vector<float>{0.5f, -1.0f}, {2});
  const Tensor y = conv2d(x, w, b, {1, 1}, {1, 1});
  REQUIRE(y.shape() == Shape{1, 2, 4, 5});
  const std::vector<float> v = y.to_vector<float>();
  CHECK(v[0] == 4.5f);
  CHECK(v[1] == 6.5f);
  CHECK(v[6] == 9.5f);
  CHECK(v[20] == 3.0f);
  CHECK(conv2d(randn({2, 3, 9, 7}), randn({4, 3, 3, 2}), Tensor(), {2, 3}, {1, 0}, {2, 1}).shape() == Shape{2, 4, 4, 2});
  CHECK(conv2d(randn({0, 3, 5, 5}), randn({4, 3, 3, 3}), Tensor()).shape() == Shape{0, 4, 3, 3});
}

TEST_CASE("conv2d op: bad shapes name what was wrong") {
  const Tensor x = randn({2, 3, 6, 6});
  CHECK_ERROR(conv2d(x, randn({4, 2, 3, 3}), Tensor()), "[conv2d]", "has 3 channels", "expects 2");
  CHECK_ERROR(conv2d(x, randn({4, 3, 7, 7}), Tensor()), "[conv2d]", "7x7 kernel", "larger than the padded 6x6 input");
  CHECK_ERROR(conv2d(x, randn({4, 3, 3, 3}), randn({3})), "[conv2d] bias", "expected bias [4]");
  CHECK_ERROR(conv2d(randn({3, 6, 6}), randn({4, 3, 3, 3}), Tensor()), "[conv2d] x", "must be 4-D [N, C, H, W]");
  CHECK_ERROR(conv2d(x, randn({4, 3, 3}), Tensor()), "[conv2d] weight", "must be 4-D");
  CHECK_ERROR(conv2d(x, randn({5, 1, 3, 3}), Tensor(), {1, 1}, {0, 0}, {1, 1}, 3), "groups = 3", "divide");
  CHECK_ERROR(conv2d(x, randn({4, 3, 3, 3}), Tensor(), {0, 1}), "[conv2d] stride (0, 1) must be >= 1");
  CHECK_ERROR(conv2d(x, randn({4, 3, 3, 3}, f64), Tensor()), "[conv2d]");
  CHECK_ERROR(max_pool2d(x, {2, 2}, {2, 2}, {2, 0}), "[max_pool2d] padding 2x0", "at most half");
  CHECK_ERROR(avg_pool2d(x, {8, 2}), "[avg_pool2d] the 8x2 window is larger than the padded 6x6 input");
  CHECK_ERROR(max_pool2d(randn({6, 6}), {2, 2}), "[max_pool2d] x", "must be 4-D");
}

TEST_CASE("max_pool2d and avg_pool2d: known answers with overlapping windows and padding") {
  // x = 0..15 as a 4x4 plane.
  std::vector<float> values(16);
  for (int i = 0; i < 16; ++i) values[size_t(i)] = float(i);
  const Tensor x = from_vector(values, {1, 1, 4, 4}).requires_grad_();
  const Tensor m = max_pool2d(x, {2, 2});
  CHECK(m.to_vector<float>() == std::vector<float>{5, 7, 13, 15});
  const Tensor a = avg_pool2d(x, {2, 2});
  CHECK(a.to_vector<float>() == std::vector<float>{2.5f, 4.5f, 10.5f, 12.5f});
  // 3x3 windows, stride 1, padding 1: every output is the max of its clipped neighbourhood.
  const Tensor overlap = max_pool2d(x, {3, 3}, {1, 1}, {1, 1});
  CHECK(overlap.to_vector<float>() == std::vector<float>{5, 6, 7, 7, 9, 10, 11, 11, 13, 14, 15, 15, 13, 14, 15, 15});
  // Its gradient: element 15 is the max of 4 windows, 5 of 1, 0 of none.
  sum(overlap).backward();
  const std::vector<float> g = x.grad().to_vector<float>();
  CHECK(g[15] == 4.0f);
  CHECK(g[5] == 1.0f);
  CHECK(g[0] == 0.0f);
  // Avg with padding counts the zeros: the corner window holds 0, 1, 4, 5 of 9 cells.
  const Tensor padded = avg_pool2d(x.detach(), {3, 3}, {1, 1}, {1, 1});
  CHECK(padded.to_vector<float>()[0] == doctest::Approx(10.0 / 9.0));
  // NaN propagates through max.
  values[6] = NAN;
  CHECK(std::isnan(max_pool2d(from_vector(values, {1, 1, 4, 4}), {2, 2}).to_vector<float>()[1]));
}

TEST_CASE("layers: Conv2d parameters and shapes with Flatten, Unflatten and option errors") {
  manual_seed(3);
  nn::Conv2d conv(nn::Conv2dOptions(4, 6, {3, 2}).stride(2).padding(1).groups(2));
  CHECK(conv.weight.shape() == Shape{6, 2, 3, 2});
  CHECK(conv.bias.shape() == Shape{6});
  CHECK(conv.parameter_count() == 6 * 2 * 3 * 2 + 6);
  const double bound = 1.0 / std::sqrt(2.0 * 3 * 2);
  for (double v : conv.weight.to_vector<double>()) CHECK(std::abs(v) <= bound);
  const Tensor y = conv(randn({2, 4, 7, 6}));
  CHECK(y.shape() == Shape{2, 6, 4, 4});
  CHECK(nn::Flatten()(y).shape() == Shape{2, 96});
  nn::Unflatten unflatten({6, 4, 4});
  CHECK(unflatten(nn::Flatten()(y)).to_vector<float>() == y.to_vector<float>());
  CHECK(unflatten(nn::Flatten()(y)).shape() == y.shape());
  CHECK(unflatten.extra_repr() == "dim=1, unflattened_size=(6, 4, 4)");
  CHECK_ERROR(unflatten(randn({2, 95})), "[Unflatten] expected [N, 96] to unflatten into [6, 4, 4], got");
  CHECK_ERROR(nn::Unflatten({3, 0}), "[Unflatten] sizes must be positive");
  CHECK(nn::MaxPool2d(2)(y).shape() == Shape{2, 6, 2, 2});
  CHECK(nn::AvgPool2d({3, 3}, {1, 1}, {1, 1})(y).shape() == Shape{2, 6, 4, 4});
  CHECK(nn::Conv2d(nn::Conv2dOptions(1, 2, 3).bias(false)).bias.defined() == false);
  CHECK_ERROR(nn::Conv2d(nn::Conv2dOptions(3, 4, 3).groups(2)), "[Conv2d] groups = 2 must divide in_channels = 3");
  CHECK_ERROR(conv(randn({2, 3, 7, 6})), "[Conv2d] input", "expected [N, 4, H, W]");
  CHECK_ERROR(nn::MaxPool2d({0, 2}), "[MaxPool2d] expected kernel > 0");
}

TEST_CASE("a small CNN learns to tell horizontal from vertical bars") {
  // Class 0: a horizontal bar at a random row, class 1: a vertical one, on noise. A conv-relu-pool
  // network must reach (almost) perfect accuracy in a few dozen AdamW steps.
  manual_seed(5);
  std::mt19937_64 rng(5);
  auto make_batch = [&](int64_t n) {
    std::vector<float> pixels(size_t(n * 64));
    std::vector<int64_t> labels(static_cast<size_t>(n));
    std::normal_distribution<float> noise(0.0f, 0.2f);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t label = int64_t(rng() % 2), at = int64_t(rng() % 8);
      for (int64_t k = 0; k < 64; ++k) {
        const int64_t r = k / 8, c = k % 8;
        pixels[size_t(i * 64 + k)] = ((label == 0 ? r : c) == at ? 1.0f : 0.0f) + noise(rng);
      }
      labels[size_t(i)] = label;
    }
    return std::make_pair(from_vector(pixels, {n, 1, 8, 8}), from_vector(labels, {n}));
  };
  nn::Sequential model;
  model.push_back(std::make_shared<nn::Conv2d>(nn::Conv2dOptions(1, 4, 3).padding(1)));
  model.push_back(std::make_shared<nn::ReLU>());
  model.push_back(std::make_shared<nn::MaxPool2d>(2));
  model.push_back(std::make_shared<nn::Flatten>());
  model.push_back(std::make_shared<nn::Linear>(4 * 4 * 4, 2));
  optim::AdamW optimizer(model.parameters(), optim::AdamWOptions().lr(1e-2));
  double first_loss = 0, last_loss = 0;
  for (int step = 0; step < 60; ++step) {
    auto [x, y] = make_batch(32);
    const Tensor loss = cross_entropy(model(x), y);
    loss.backward();
    optimizer.step();
    optimizer.zero_grad();
    (step == 0 ? first_loss : last_loss) = loss.item();
  }
  auto [x, y] = make_batch(200);
  const Tensor classes = hg::max(model(x), 1).second;
  const std::vector<int64_t> predicted = classes.to_vector<int64_t>();
  const std::vector<int64_t> truth = y.to_vector<int64_t>();
  int right = 0;
  for (size_t i = 0; i < truth.size(); ++i) right += predicted[i] == truth[i];
  CHECK(last_loss < 0.2 * first_loss);
  CHECK(right >= 196);
}
