// The convolution family beyond conv2d and the resampling ops on the CPU: conv_transpose2d against its
// scatter definition in float64 and as conv2d's adjoint; interpolate and the adaptive pools against
// their definitions (nearest 2x as a repeat, bilinear at the same size as the identity, a 1x1 adaptive
// pool as the mean); every half dtype against float64; reflect and replicate padding; the errors.
// (float64 gradchecks: tests/support/op_cases.cpp; PyTorch's values: tests/test_torch_parity.cpp.)
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "support/check_error.h"
#include "support/tensor_compare.h"

using namespace hg;
using hg::testing::max_relative_error;

namespace {

struct TransposeCase {
  Shape x, w;
  Size2d stride, padding, output_padding;
  int64_t groups;
  Size2d dilation;
};

// y[n, o, i s - p + k d, j s - p + l d] += x[n, c, i, j] w[c, o - group offset, k, l], in float64 loops.
Tensor conv_transpose2d_reference(const Tensor& x, const Tensor& w, const TransposeCase& c, const Shape& out_shape) {
  const std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>();
  std::vector<double> y(size_t(out_shape[0] * out_shape[1] * out_shape[2] * out_shape[3]), 0.0);
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t per_group_out = w.size(1), KH = w.size(2), KW = w.size(3), per_group_in = C / c.groups;
  const int64_t OC = out_shape[1], OH = out_shape[2], OW = out_shape[3];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t ch = 0; ch < C; ++ch)
      for (int64_t i = 0; i < H; ++i)
        for (int64_t j = 0; j < W; ++j)
          for (int64_t q = 0; q < per_group_out; ++q)
            for (int64_t k = 0; k < KH; ++k)
              for (int64_t l = 0; l < KW; ++l) {
                const int64_t o = (ch / per_group_in) * per_group_out + q;
                const int64_t oh = i * c.stride[0] - c.padding[0] + k * c.dilation[0];
                const int64_t ow = j * c.stride[1] - c.padding[1] + l * c.dilation[1];
                if (oh < 0 || oh >= OH || ow < 0 || ow >= OW) continue;
                y[size_t(((n * OC + o) * OH + oh) * OW + ow)] +=
                    xv[size_t(((n * C + ch) * H + i) * W + j)] *
                    wv[size_t(((ch * per_group_out + q) * KH + k) * KW + l)];
              }
  return from_vector(y, out_shape, f64);
}

double dot(const Tensor& a, const Tensor& b) { return sum(a * b).item(); }

}  // namespace

TEST_CASE("conv_transpose2d: the scatter definition in float64, and the adjoint of conv2d") {
  const std::vector<TransposeCase> cases = {
      {{2, 3, 4, 5}, {3, 2, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 1, {1, 1}},
      {{1, 4, 3, 3}, {4, 3, 2, 2}, {1, 2}, {0, 0}, {0, 1}, 2, {2, 1}},
      {{2, 2, 5, 4}, {2, 4, 4, 4}, {2, 2}, {1, 1}, {0, 0}, 1, {1, 1}},  // a DCGAN / U-Net upsampling block
      {{1, 6, 2, 3}, {6, 1, 3, 1}, {3, 1}, {2, 0}, {2, 0}, 6, {1, 3}},  // depthwise
      // output_padding at or above the stride (allowed below the dilation): the last rows come from
      // the unpadded result (H: padding 2 < output_padding 2 + ... reaches them), or are zeros (W).
      {{1, 2, 4, 3}, {2, 3, 3, 3}, {1, 1}, {2, 0}, {2, 1}, 1, {3, 2}},
      {{2, 2, 3, 3}, {2, 2, 2, 2}, {2, 1}, {0, 1}, {2, 1}, 1, {3, 3}},
  };
  for (const TransposeCase& c : cases) {
    CAPTURE(shape_str(c.x));
    CAPTURE(shape_str(c.w));
    const Tensor x = randn(c.x, f64), w = randn(c.w, f64);
    const Tensor y = conv_transpose2d(x, w, Tensor(), c.stride, c.padding, c.output_padding, c.groups, c.dilation);
    for (int d = 0; d < 2; ++d)
      CHECK(y.size(2 + d) == (c.x[size_t(2 + d)] - 1) * c.stride[size_t(d)] - 2 * c.padding[size_t(d)] +
                                 c.dilation[size_t(d)] * (c.w[size_t(2 + d)] - 1) + c.output_padding[size_t(d)] + 1);
    CHECK(max_relative_error(y, conv_transpose2d_reference(x, w, c, y.shape())) < 1e-13);
    // <conv_transpose2d(x), z> = <x, conv2d(z)> for the conv2d it transposes (which, with output_padding
    // >= stride, maps y's shape to more rows than x has).
    if (c.output_padding[0] >= c.stride[0] || c.output_padding[1] >= c.stride[1]) continue;
    const Tensor z = randn(y.shape(), f64);
    const double lhs = dot(y, z), rhs = dot(x, conv2d(z, w, Tensor(), c.stride, c.padding, c.dilation, c.groups));
    CHECK(lhs == doctest::Approx(rhs).epsilon(1e-12));
  }
}

TEST_CASE("conv_transpose2d and the resampling ops in f32, f16 and bf16 agree with float64") {
  using Fn = Tensor (*)(const Tensor&, const Tensor&);
  struct Row {
    const char* name;
    Shape x, w;
    Fn fn;
  };
  const std::vector<Row> rows = {
      {"conv_transpose2d",
       {2, 8, 6, 5},
       {8, 4, 4, 4},
       [](const Tensor& x, const Tensor& w) {
         return conv_transpose2d(x, w, Tensor(), {2, 2}, {1, 1});
       }},
      {"bilinear 2x",
       {2, 3, 9, 14},
       {1},
       [](const Tensor& x, const Tensor& w) {
         return interpolate(x, InterpolateOptions().set_scale_factor({2, 2}).set_mode(InterpolateMode::Bilinear)) * w;
       }},
      {"nearest 3x5 -> 7x11",
       {3, 2, 3, 5},
       {1},
       [](const Tensor& x, const Tensor& w) {
         return interpolate(x, InterpolateOptions().set_size({7, 11})) * w;
       }},
      {"adaptive_avg_pool2d",
       {2, 3, 13, 17},
       {1},
       [](const Tensor& x, const Tensor& w) {
         return adaptive_avg_pool2d(x, {4, 5}) * w;
       }},
  };
  for (const Row& r : rows)
    for (const DType t : {f32, f16, bf16}) {
      CAPTURE(std::string(r.name));
      CAPTURE(std::string(dtype_name(t)));
      const Tensor x64 = cast(cast(randn(r.x, f64), t), f64), w64 = cast(cast(randn(r.w, f64), t), f64);
      std::vector<Tensor> results[2];
      for (int k = 0; k < 2; ++k) {
        const DType dt = k == 0 ? f64 : t;
        const Tensor x = cast(x64, dt).detach().requires_grad_(), w = cast(w64, dt).detach().requires_grad_();
        const Tensor y = r.fn(x, w);
        y.backward(cast(cast(ones(y.shape(), f64) * 0.5, t), dt));
        results[k] = {y, x.grad(), w.grad()};
      }
      const double tol = t == f32 ? 2e-5 : t == f16 ? 4e-3 : 3e-2;
      CHECK(max_relative_error(results[1][0], results[0][0]) < tol);
      CHECK(max_relative_error(results[1][1], results[0][1]) < tol);
      CHECK(max_relative_error(results[1][2], results[0][2]) < 8 * tol);
    }
}

TEST_CASE("nearest upsampling copies every element's bits, in every floating dtype (-0, NaN, inf, subnormals)") {
  // The CPU's nearest maps take the gather path (one input, weight 1, per output): a copy, as PyTorch's.
  const std::vector<double> special = {-0.0, 0.0, 1.5, -2.25, INFINITY, -INFINITY, 3e-42, -7e-39, 65504.0, 1e-6};
  for (const DType t : {f32, f64, f16, bf16}) {
    CAPTURE(std::string(dtype_name(t)));
    std::vector<double> values = special;
    const Tensor x0 = randn({1, 2, 3, 4}, f64);
    for (double v : x0.to_vector<double>()) values.push_back(v);
    values.resize(24);
    Tensor x = cast(from_vector(values, {1, 2, 3, 4}, f64), t);
    x = where(eq(arange(0.0, 24.0, 1.0, f64, kCPU).view({1, 2, 3, 4}), 10.0), scalar_tensor(NAN, t), x);
    const Tensor y = interpolate(x, InterpolateOptions().set_size({7, 9}));  // factors 7/3 and 9/4
    const Tensor want = index_select(index_select(x, 2, from_vector(std::vector<int64_t>{0, 0, 0, 1, 1, 2, 2}, {7})), 3,
                                     from_vector(std::vector<int64_t>{0, 0, 0, 1, 1, 2, 2, 3, 3}, {9}));
    REQUIRE(y.numel() == want.numel());
    const size_t bytes = size_t(y.numel()) * dtype_size(t);
    CHECK(std::memcmp(y.contiguous().data_ptr(), want.contiguous().data_ptr(), bytes) == 0);
  }
}

TEST_CASE("interpolate and the adaptive pools meet their definitions") {
  const Tensor x = randn({2, 3, 4, 5}, f64);
  SUBCASE("nearest 2x repeats every pixel as a 2x2 block") {
    const Tensor y = interpolate(x, InterpolateOptions().set_scale_factor({2, 2}));
    const Tensor want = x.unsqueeze(3).unsqueeze(5).expand({2, 3, 4, 2, 5, 2}).reshape({2, 3, 8, 10});
    CHECK(max_relative_error(y, want) == 0.0);
  }
  SUBCASE("bilinear to the same size is the identity, with and without align_corners") {
    for (const bool corners : {false, true}) {
      const Tensor y = interpolate(
          x, InterpolateOptions().set_size({4, 5}).set_mode(InterpolateMode::Bilinear).set_align_corners(corners));
      CHECK(max_relative_error(y, x) < 1e-15);
    }
  }
  SUBCASE("bilinear with align_corners keeps the corners") {
    const Tensor y = interpolate(
        x, InterpolateOptions().set_size({9, 13}).set_mode(InterpolateMode::Bilinear).set_align_corners(true));
    CHECK(max_relative_error(y.narrow(2, 8, 1).narrow(3, 12, 1), x.narrow(2, 3, 1).narrow(3, 4, 1)) < 1e-15);
    CHECK(max_relative_error(y.narrow(2, 0, 1).narrow(3, 0, 1), x.narrow(2, 0, 1).narrow(3, 0, 1)) < 1e-15);
  }
  SUBCASE("adaptive_avg_pool2d to 1x1 is the mean; to a divisor, avg_pool2d") {
    CHECK(max_relative_error(adaptive_avg_pool2d(x, {1, 1}), mean(x, {2, 3}, true)) < 1e-15);
    const Tensor z = randn({2, 3, 6, 8}, f64);
    CHECK(max_relative_error(adaptive_avg_pool2d(z, {3, 2}), avg_pool2d(z, {2, 4})) < 1e-15);
  }
  SUBCASE("adaptive_avg_pool1d on [C, L] and an empty batch") {
    const Tensor v = randn({3, 10}, f64);
    CHECK(max_relative_error(adaptive_avg_pool1d(v, 5), avg_pool2d(v.view({1, 3, 1, 10}), {1, 2}).view({3, 5})) <
          1e-15);
    CHECK(adaptive_avg_pool2d(randn({0, 3, 4, 4}), {2, 2}).shape() == Shape{0, 3, 2, 2});
  }
  SUBCASE("conv1d meets its definition: stride 2, padding 1, dilation 2, 2 groups") {
    const int64_t N = 2, C = 4, L = 11, OC = 6, K = 3, stride = 2, padding = 1, dilation = 2, groups = 2;
    const Tensor s = randn({N, C, L}, f64), w = randn({OC, C / groups, K}, f64), b = randn({OC}, f64);
    const Tensor y = conv1d(s, w, b, stride, padding, dilation, groups);
    const int64_t OL = (L + 2 * padding - dilation * (K - 1) - 1) / stride + 1;
    REQUIRE(y.shape() == Shape{N, OC, OL});
    const std::vector<double> sv = s.to_vector<double>(), wv = w.to_vector<double>(), bv = b.to_vector<double>();
    std::vector<double> want(static_cast<size_t>(N * OC * OL));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < OC; ++o)
        for (int64_t l = 0; l < OL; ++l) {
          double acc = bv[size_t(o)];
          for (int64_t c = 0; c < C / groups; ++c)
            for (int64_t k = 0; k < K; ++k) {
              const int64_t at = l * stride - padding + k * dilation, channel = (o / (OC / groups)) * (C / groups) + c;
              if (at >= 0 && at < L)
                acc += wv[size_t((o * (C / groups) + c) * K + k)] * sv[size_t((n * C + channel) * L + at)];
            }
          want[size_t((n * OC + o) * OL + l)] = acc;
        }
    CHECK(max_relative_error(y, from_vector(want, y.shape(), f64)) < 1e-13);
  }
}

TEST_CASE("pad: reflect mirrors without the edge, replicate repeats it") {
  const Tensor x = from_vector(std::vector<double>{1, 2, 3, 4}, {1, 4}, f64);
  CHECK(pad(x, {2, 3}, PadMode::Reflect).to_vector<double>() == std::vector<double>{3, 2, 1, 2, 3, 4, 3, 2, 1});
  CHECK(pad(x, {2, 1}, PadMode::Replicate).to_vector<double>() == std::vector<double>{1, 1, 1, 2, 3, 4, 4});
  CHECK(pad(x, {1, 1}, PadMode::Constant, 7.0).to_vector<double>() == std::vector<double>{7, 1, 2, 3, 4, 7});
  // The gradient of a replicated edge sums its copies.
  const Tensor v = x.detach().requires_grad_();
  sum(pad(v, {2, 1}, PadMode::Replicate)).backward();
  CHECK(v.grad().to_vector<double>() == std::vector<double>{3, 1, 1, 2});
}

TEST_CASE("the convolution family, resampling and padding name what was wrong") {
  const Tensor x = randn({1, 4, 3, 3}), w = randn({4, 2, 3, 3});
  CHECK_ERROR(conv_transpose2d(x, w, Tensor(), {2, 2}, {0, 0}, {2, 0}), "[conv_transpose2d]", "output_padding",
              "below the stride (2, 2) or the dilation (1, 1)");
  CHECK_ERROR(conv_transpose2d(randn({1, 3, 3, 3}), w, Tensor()), "[conv_transpose2d]", "3 channels", "expects 4");
  CHECK_ERROR(conv_transpose2d(x, w, randn({3})), "[conv_transpose2d]", "expected bias [2]");
  CHECK_ERROR(conv_transpose2d(x, w, Tensor(), {1, 1}, {0, 0}, {0, 0}, 3), "[conv_transpose2d]", "groups = 3");
  CHECK_ERROR(conv_transpose2d(randn({1, 4, 1, 1}), randn({4, 2, 1, 1}), Tensor(), {1, 1}, {1, 1}),
              "[conv_transpose2d]", "empty");
  CHECK_ERROR(conv1d(x, w, Tensor()), "[conv1d]", "3-D [N, C, L]");
  CHECK_ERROR(interpolate(x, InterpolateOptions()), "[interpolate]", "exactly one of size and scale_factor");
  CHECK_ERROR(interpolate(x, InterpolateOptions().set_size({4})), "[interpolate]", "2 spatial dimensions", "1 sizes");
  CHECK_ERROR(interpolate(x, InterpolateOptions().set_size({4, 4}).set_align_corners(true)), "[interpolate]",
              "align_corners", "nearest");
  CHECK_ERROR(interpolate(x, InterpolateOptions().set_size({4}).set_mode(InterpolateMode::Linear)), "[interpolate]",
              "linear", "3-D [N, C, L]");
  CHECK_ERROR(interpolate(x, InterpolateOptions().set_scale_factor({0.1, 1.0})), "[interpolate]", "output size", "0");
  CHECK_ERROR(interpolate(x, InterpolateOptions().set_scale_factor({-1.0, 1.0})), "[interpolate]", "scale_factor",
              "positive");
  CHECK_ERROR(
      interpolate(from_vector(std::vector<int32_t>(9, 1), {1, 1, 3, 3}, i32), InterpolateOptions().set_size({4, 4})),
      "[interpolate]", "x");
  CHECK_ERROR(adaptive_avg_pool2d(x, {0, 2}), "[adaptive_avg_pool2d]", "output_size", "positive");
  CHECK_ERROR(adaptive_avg_pool2d(randn({4, 4}), {2, 2}), "[adaptive_avg_pool2d]", "3-D [C, H, W]");
  CHECK_ERROR(adaptive_avg_pool2d(randn({1, 2, 0, 3}), {2, 2}), "[adaptive_avg_pool2d]", "empty spatial dimension 2");
  CHECK_ERROR(pad(x, {3, 0}, PadMode::Reflect), "[pad (reflect)]", "below its size 3");
  CHECK_ERROR(pad(x, {-1, 0}, PadMode::Replicate), "[pad (replicate)]", ">= 0");
  CHECK_ERROR(pad(x, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, PadMode::Reflect), "[pad (reflect)]", "at most 4 dimensions");
}
