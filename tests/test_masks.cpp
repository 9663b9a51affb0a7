// Bool tensors and the ops that make and use masks (engine/ops/compare.cpp): the bool dtype through
// fill, cast and safetensors; comparisons (NaN, integers beyond float's range, scalars, broadcasting,
// strided views, the parallel path); logic, any / all; where and masked_fill with their gradients; and
// the errors of all of them and of the new losses. PyTorch's own outputs for these ops are checked in
// test_torch_parity.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "engine/random.h"
#include "engine/safetensors.h"
#include "support/check_error.h"
#include "support/temp_dir.h"

using namespace hg;

namespace {

std::vector<int> bools(const Tensor& t) {
  REQUIRE(t.dtype() == b8);
  std::vector<int> out;
  for (int32_t v : t.to_vector<int32_t>()) out.push_back(v);
  return out;
}

Tensor values(std::vector<double> v, const Shape& shape, DType dtype = f32) { return from_vector(v, shape, dtype); }

}  // namespace

TEST_CASE("bool dtype: one byte, named bool, cast to and from every dtype (nonzero and NaN are true)") {
  CHECK(dtype_size(b8) == 1);
  CHECK(std::string(dtype_name(b8)) == "bool");
  CHECK(!is_floating(b8));
  CHECK(!is_integral(b8));
  const Tensor x = values({0.0, -0.0, 2.5, NAN, -1e-30, INFINITY}, {6}, f32);
  CHECK(bools(cast(x, b8)) == std::vector<int>{0, 0, 1, 1, 1, 1});
  for (DType t : {f32, f64, f16, bf16, i32, i64, u8}) {
    CAPTURE(std::string(dtype_name(t)));
    const Tensor back = cast(cast(values({0, 3, 0, 1}, {4}, t), b8), t);
    CHECK(back.to_vector<double>() == std::vector<double>{0, 1, 0, 1});
  }
  CHECK(bools(full({3}, 7.0, b8)) == std::vector<int>{1, 1, 1});  // fill with any nonzero is true
  CHECK(bools(zeros({2}, b8)) == std::vector<int>{0, 0});
  CHECK(cast(x, b8).describe().find("bool") != std::string::npos);
  Tensor mask = cast(x, b8);
  CHECK_ERROR(mask.requires_grad_(), "[requires_grad_]", "only floating");
}

TEST_CASE("bool dtype: safetensors writes BOOL and reads it back; a BOOL byte other than 0 or 1 is refused") {
  hg::test::TempDir dir;
  const std::string path = (dir.path / "mask.safetensors").string();
  const Tensor m = gt(values({1, -1, 3, 0, 2, -5}, {2, 3}), 0.5);
  safetensors::save(path, {{"mask", m}}, {}, {.checksums = false});  // so the byte check is what refuses it
  const Tensor loaded = *safetensors::load(path).find("mask");
  CHECK(loaded.dtype() == b8);
  CHECK(bools(loaded) == bools(m));

  // Corrupt one data byte (the tensor's bytes are the file's last 6) to 2.
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(-2, std::ios::end);
  const char two = 2;
  f.write(&two, 1);
  f.close();
  CHECK_ERROR(safetensors::load(path), "tensor 'mask'", "BOOL element 4 is byte 2", "expected 0 or 1");
}

TEST_CASE("comparisons: IEEE NaN rules, broadcasting, strided views, half types, scalars") {
  const Tensor a = values({NAN, 1, 2, -0.0, INFINITY, 3}, {2, 3});
  const Tensor b = values({NAN, 1, 3, 0.0, INFINITY, -3}, {2, 3});
  CHECK(bools(eq(a, b)) == std::vector<int>{0, 1, 0, 1, 1, 0});
  CHECK(bools(ne(a, b)) == std::vector<int>{1, 0, 1, 0, 0, 1});
  CHECK(bools(lt(a, b)) == std::vector<int>{0, 0, 1, 0, 0, 0});
  CHECK(bools(le(a, b)) == std::vector<int>{0, 1, 1, 1, 1, 0});
  CHECK(bools(a > b) == std::vector<int>{0, 0, 0, 0, 0, 1});
  CHECK(bools(a >= b) == std::vector<int>{0, 1, 0, 1, 1, 1});
  // Broadcasting [2, 3] against [3, 1] and a transposed view.
  const Tensor c = values({1, 2, 3}, {3, 1});
  // a.t() is [[NaN, -0], [1, inf], [2, 3]], compared row by row with 1, 2, 3.
  CHECK(bools(lt(a.t(), c)) == std::vector<int>{0, 1, 1, 0, 1, 0});
  CHECK(bools(eq(a.t(), a.t().contiguous())) == std::vector<int>{0, 1, 1, 1, 1, 1});
  for (DType t : {f16, bf16}) {
    const Tensor h = cast(values({0.1, 0.5, -2}, {3}), t);
    CHECK(bools(ge(h, 0.5)) == std::vector<int>{0, 1, 0});
    CHECK(bools(lt(h, cast(values({0.2, 0.5, -1}, {3}), t))) == std::vector<int>{1, 0, 1});
  }
  // Integers compare as integers: 2^53 + 1 != 2^53 in i64, though equal as doubles.
  const Tensor big = from_vector(std::vector<int64_t>{(int64_t(1) << 53) + 1, 5}, {2});
  const Tensor big2 = from_vector(std::vector<int64_t>{int64_t(1) << 53, 5}, {2});
  CHECK(bools(eq(big, big2)) == std::vector<int>{0, 1});
  // A scalar the integer dtype cannot hold compares in f64: 6 < 6.5, and a bool is never 2.
  CHECK(bools(lt(from_vector(std::vector<int32_t>{6, 7}, {2}), 6.5)) == std::vector<int>{1, 0});
  CHECK(bools(eq(gt(values({1, 0}, {2}), 0.5), 2.0)) == std::vector<int>{0, 0});
  CHECK(bools(eq(gt(values({1, 0}, {2}), 0.5), 1.0)) == std::vector<int>{1, 0});
  // Empty and rank-0.
  CHECK(eq(zeros({0, 4}), zeros({4})).shape() == Shape{0, 4});
  CHECK(bools(eq(scalar_tensor(2.0), 2.0)) == std::vector<int>{1});
}

TEST_CASE("comparisons and where on the parallel path equal an element-by-element reference") {
  manual_seed(17);
  const Tensor a = randn({300, 257}), b = randn({257});  // > 2^15 elements, broadcast, odd row length
  const Tensor m = lt(a.t().contiguous().t(), b);        // strided a
  const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
  const std::vector<int> mv = bools(m);
  int wrong = 0;
  for (size_t i = 0; i < av.size(); ++i) wrong += mv[i] != int(av[i] < bv[i % 257]);
  CHECK(wrong == 0);
  const Tensor y = where(m, a, b);
  const std::vector<float> yv = y.to_vector<float>();
  wrong = 0;
  for (size_t i = 0; i < av.size(); ++i) wrong += yv[i] != (mv[i] ? av[i] : bv[i % 257]);
  CHECK(wrong == 0);
}

TEST_CASE("logical ops read any dtype; &, |, ^ take bools; any and all, over dims and over nothing") {
  const Tensor p = gt(values({1, 0, 1, 0}, {2, 2}), 0.5), q = gt(values({1, 1, 0, 0}, {2, 2}), 0.5);
  CHECK(bools(p & q) == std::vector<int>{1, 0, 0, 0});
  CHECK(bools(p | q) == std::vector<int>{1, 1, 1, 0});
  CHECK(bools(p ^ q) == std::vector<int>{0, 1, 1, 0});
  CHECK(bools(logical_not(p)) == std::vector<int>{0, 1, 0, 1});
  CHECK(bools(logical_and(values({NAN, 0, 2}, {3}), from_vector(std::vector<int64_t>{1, 1, 0}, {3}))) ==
        std::vector<int>{1, 0, 0});
  CHECK(bools(logical_not(values({NAN, 0, -0.0}, {3}))) == std::vector<int>{0, 1, 1});
  CHECK(bools(any(p)) == std::vector<int>{1});
  CHECK(bools(all(p)) == std::vector<int>{0});
  CHECK(bools(any(p, {1})) == std::vector<int>{1, 1});
  CHECK(bools(all(p, {0})) == std::vector<int>{1, 0});
  CHECK(bools(all(logical_or(p, q), {0}, true)) == std::vector<int>{1, 0});
  CHECK(all(p, {0}, true).shape() == Shape{1, 2});
  CHECK(bools(any(zeros({0}, b8))) == std::vector<int>{0});
  CHECK(bools(all(zeros({0}, b8))) == std::vector<int>{1});
  CHECK(bools(any(values({0, 0, 3}, {3}))) == std::vector<int>{1});
  CHECK_ERROR((values({1}, {1}) & p), "[operator&]", "expected a bool tensor", "logical_and");
}

TEST_CASE("where and masked_fill: values, every dtype, and gradients that a NaN in the other branch cannot reach") {
  const Tensor cond = gt(values({1, 0, 1}, {3}), 0.5);
  for (DType t : {f32, f64, f16, bf16, i32, i64, u8}) {
    CAPTURE(std::string(dtype_name(t)));
    const Tensor y = where(cond, cast(values({1, 2, 3}, {3}), t), cast(values({7, 8, 9}, {3}), t));
    CHECK(y.dtype() == t);
    CHECK(y.to_vector<double>() == std::vector<double>{1, 8, 3});
  }
  CHECK(bools(where(cond, cond, logical_not(cond))) == std::vector<int>{1, 1, 1});

  Tensor a = values({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  Tensor b = values({NAN, -1, NAN}, {3}).requires_grad_();
  const Tensor y = where(gt(values({1, 0, 1}, {3}), 0.5), a, b);  // b broadcast over rows
  CHECK(y.to_vector<double>() == std::vector<double>{1, -1, 3, 4, -1, 6});
  sum(y * values({1, 2, 3, 4, 5, 6}, {2, 3})).backward();
  CHECK(a.grad().to_vector<double>() == std::vector<double>{1, 0, 3, 4, 0, 6});
  CHECK(b.grad().to_vector<double>() == std::vector<double>{0, 7, 0});

  Tensor x = values({1, 2, 3, 4}, {2, 2}).requires_grad_();
  const Tensor filled = masked_fill(x, gt(values({0, 1}, {1, 2}), 0.5), -1e9);
  CHECK(filled.to_vector<double>() == std::vector<double>{1, -1e9, 3, -1e9});
  sum(filled).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 0, 1, 0});
}

TEST_CASE("masks: errors name the op, what was given and what was expected") {
  const Tensor f = values({1, 2, 3}, {3}), m = gt(f, 1.5);
  CHECK_ERROR(eq(f, cast(f, f64)), "[eq]", "f32", "f64");
  CHECK_ERROR(lt(f, values({1, 2}, {2})), "[lt]", "cannot be broadcast");
  CHECK_ERROR(where(f, f, f), "[where]", "cond", "expected a bool tensor");
  CHECK_ERROR(where(m, f, cast(f, f16)), "[where]", "f32", "f16");
  CHECK_ERROR(where(m, f, values({1, 2}, {2})), "[where]", "cannot be broadcast");
  CHECK_ERROR(masked_fill(f, f, 0.0), "[masked_fill]", "expected a bool tensor");
  CHECK_ERROR(masked_fill(f, gt(values({1, 0, 1, 1, 0, 1}, {2, 3}), 0.5), 0.0), "[masked_fill]", "does not broadcast to x [3]");
  CHECK_ERROR(eq(Tensor(), f), "[eq]");
}

TEST_CASE("elementwise and loss errors: clamp without bounds, softplus beta, loss shapes, ranges and targets") {
  const Tensor x = values({0.2, 0.7, 0.4, 0.9}, {2, 2});
  CHECK_ERROR(clamp(x, std::nullopt, std::nullopt), "[clamp]", "at least one bound");
  CHECK_ERROR(clamp(x, Tensor(), Tensor()), "[clamp]", "at least one bound");
  CHECK_ERROR(softplus(x, 0.0), "[softplus]", "beta > 0");
  CHECK_ERROR(mse_loss(x, values({1, 2}, {2})), "[mse_loss]", "differ in shape", "[2, 2]", "[2]");
  CHECK_ERROR(l1_loss(x, cast(x, f64)), "[l1_loss]", "f32", "f64");
  CHECK_ERROR(binary_cross_entropy(values({0.5, 1.5}, {2}), values({0, 1}, {2})), "[binary_cross_entropy]", "outside [0, 1]", "binary_cross_entropy_with_logits");
  CHECK_ERROR(binary_cross_entropy(values({0.5, NAN}, {2}), values({0, 1}, {2})), "[binary_cross_entropy]", "NaN");
  const Tensor logp = log_softmax(randn({3, 4}), 1);
  CHECK_ERROR(nll_loss(logp, from_vector(std::vector<int64_t>{1, 4, 0}, {3})), "[nll_loss]", "target 4 at element 1", "0 <= target < 4", "ignore_index = -100");
  CHECK_ERROR(nll_loss(logp, from_vector(std::vector<int64_t>{1, 2}, {2})), "[nll_loss]", "expected target of shape [3]");
  CHECK_ERROR(nll_loss(logp, from_vector(std::vector<int64_t>{1, 2, 0}, {3}), ones({3})), "[nll_loss]", "weight", "one per class, [4]");
  CHECK_ERROR(cross_entropy(logp, from_vector(std::vector<int64_t>{1, 2, 0}, {3}),
                            CrossEntropyOptions().set_label_smoothing(1.5)),
              "[cross_entropy]", "label_smoothing = 1.5");
  CHECK_ERROR(mse_loss(x, x, Reduction::BatchMean), "[mse_loss]", "batchmean", "kl_div");
  CHECK_ERROR(huber_loss(x, x, Reduction::Mean, 0.0), "[huber_loss]", "delta > 0");
}

TEST_CASE("nll_loss on the CPU: the host scan of the targets, with and without ignored ones, i32 and i64") {
  const Tensor logp = log_softmax(randn({4, 5}, f64), 1).requires_grad_();
  const std::vector<double> lp = logp.to_vector<double>();
  // The definition: -sum over counted i of logp[i, t_i], over the count.
  for (const DType it : {i64, i32}) {
    CAPTURE(std::string(dtype_name(it)));
    const Tensor all_counted = cast(from_vector(std::vector<int64_t>{3, 0, 4, 1}, {4}), it);
    CHECK(nll_loss(logp, all_counted).item() == doctest::Approx(-(lp[3] + lp[5] + lp[14] + lp[16]) / 4));
    const Tensor some_ignored = cast(from_vector(std::vector<int64_t>{3, -100, 4, -100}, {4}), it);
    CHECK(nll_loss(logp, some_ignored).item() == doctest::Approx(-(lp[3] + lp[14]) / 2));
    // The first bad target is named by its position, past ignored ones.
    CHECK_ERROR(nll_loss(logp, cast(from_vector(std::vector<int64_t>{-100, 2, 5, -1}, {4}), it)), "[nll_loss]",
                "target 5 at element 2");
  }
  // The gradient of the unmasked form: -1/M at each target, 0 elsewhere.
  nll_loss(logp, from_vector(std::vector<int64_t>{3, 0, 4, 1}, {4})).backward();
  const std::vector<double> g = logp.grad().to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == (i == 3 || i == 5 || i == 14 || i == 16 ? -0.25 : 0.0));
}

TEST_CASE("nll_loss: every target ignored gives NaN for the mean, 0 for the sum (PyTorch's)") {
  const Tensor logp = log_softmax(randn({2, 3}), 1);
  const Tensor ignored = from_vector(std::vector<int64_t>{-100, -100}, {2});
  CHECK(std::isnan(nll_loss(logp, ignored).item()));
  CHECK(nll_loss(logp, ignored, Tensor(), -100, Reduction::Sum).item() == 0.0);
}
