// The autograd engine: accumulation, shared inputs, diamonds, no_grad, detach, retain_graph and
// the freed-graph error.
#include <doctest/doctest.h>

#include <cmath>

#include "engine/ops.h"

using namespace hg;

namespace {
Tensor leaf(std::vector<double> v) {
  Tensor t = from_vector(v, {int64_t(v.size())}, f64);
  t.requires_grad_();
  return t;
}
std::vector<double> grad_of(const Tensor& t) { return t.grad().to_vector<double>(); }
}  // namespace

TEST_CASE("gradients accumulate across backward calls") {
  Tensor x = leaf({1.0, 2.0, 3.0});
  sum(x * x).backward();
  CHECK(grad_of(x) == std::vector<double>{2, 4, 6});
  sum(x * 3.0).backward();
  CHECK(grad_of(x) == std::vector<double>{5, 7, 9});
  x.set_grad(Tensor());
  sum(x).backward();
  CHECK(grad_of(x) == std::vector<double>{1, 1, 1});
}

TEST_CASE("a diamond graph sums both paths") {
  // y = a * b + a * c with b = 2x, c = x^2, a = exp(x): dy/dx = exp(x)(2x + x^2) + exp(x)(2 + 2x)
  Tensor x = leaf({0.5, -1.0});
  Tensor a = exp(x), b = x * 2.0, c = x * x;
  sum(a * b + a * c).backward();
  const std::vector<double> g = grad_of(x);
  for (size_t i = 0; i < 2; ++i) {
    const double v = i == 0 ? 0.5 : -1.0;
    CHECK(g[i] == doctest::Approx(std::exp(v) * (2 * v + v * v) + std::exp(v) * (2 + 2 * v)));
  }
}

TEST_CASE("a tensor used by several ops - through views") {
  Tensor x = leaf({1, 2, 3, 4});
  Tensor m = x.view({2, 2});
  Tensor y = sum(m.t() * m) + sum(m.select(0, 1));
  y.backward();
  // sum(m^T * m) (elementwise) = x0^2 + 2 x1 x2 + x3^2; the selected row adds x2 + x3.
  CHECK(grad_of(x) == std::vector<double>{2, 2 * 3, 2 * 2 + 1, 2 * 4 + 1});
}

TEST_CASE("no_grad records nothing - detach cuts the graph") {
  Tensor x = leaf({1, 2});
  {
    NoGradGuard guard;
    Tensor y = x * 2.0;
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
  }
  Tensor d = (x * 2.0).detach();
  CHECK_FALSE(d.requires_grad());
  Tensor y = sum(d * x);
  y.backward();
  CHECK(grad_of(x) == std::vector<double>{2, 4});
  CHECK_FALSE(d.grad().defined());
  CHECK(grad_mode_enabled());
}

TEST_CASE("inputs that need no grad get none - and the backward may skip them") {
  Tensor x = leaf({1, 2});
  Tensor c = from_vector(std::vector<double>{3, 4}, {2}, f64);
  sum(x * c).backward();
  CHECK(grad_of(x) == std::vector<double>{3, 4});
  CHECK_FALSE(c.grad().defined());
}

TEST_CASE("a second backward through a freed graph is a clear error - retain_graph allows it") {
  Tensor x = leaf({1, 2});
  Tensor y = sum(exp(x));
  y.backward();
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("backward through the graph a second time"), Error);

  Tensor z = sum(exp(x));
  x.set_grad(Tensor());
  z.backward(Tensor(), /*retain_graph=*/true);
  z.backward();
  const std::vector<double> g = grad_of(x);
  CHECK(g[0] == doctest::Approx(2 * std::exp(1.0)));
  CHECK(g[1] == doctest::Approx(2 * std::exp(2.0)));
}

TEST_CASE("backward with an explicit gradient - implicit gradient needs a scalar") {
  Tensor x = leaf({1, 2, 3});
  Tensor y = x * x;
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("implicit gradient needs a one-element tensor"), Error);
  y.backward(from_vector(std::vector<double>{1, 0, 2}, {3}, f64));
  CHECK(grad_of(x) == std::vector<double>{2, 0, 12});
}

TEST_CASE("a branch that contributes nothing does not block the rest of the graph") {
  // max over a dim sends gradient only to the maximum; the other branch still must run.
  Tensor x = leaf({1, 5, 2});
  Tensor y = max(x) + sum(x * 2.0);
  y.backward();
  CHECK(grad_of(x) == std::vector<double>{2, 3, 2});
}

TEST_CASE("leaves keep their graph-free identity - in-place on a grad-requiring leaf is refused") {
  Tensor x = leaf({1, 2});
  CHECK(x.is_leaf());
  Tensor y = x * 2.0;
  CHECK_FALSE(y.is_leaf());
  CHECK(y.grad_fn()->name() == "affine");
  CHECK_THROWS_WITH_AS(x.fill_(0.0), doctest::Contains("in-place change"), Error);
  {
    NoGradGuard guard;
    x.fill_(0.0);
  }
  CHECK(x.to_vector<double>() == std::vector<double>{0, 0});
  CHECK_THROWS_WITH_AS(y.requires_grad_(), doctest::Contains("only be set on a leaf"), Error);
  CHECK_THROWS_WITH_AS(from_vector(std::vector<int64_t>{1}, {1}).requires_grad_(),
                       doctest::Contains("only floating tensors"), Error);
}

TEST_CASE("graphs free their memory: no reference cycles through saved outputs") {
  std::weak_ptr<TensorImpl> watched;
  Tensor x = leaf({1, 2, 3});
  {
    Tensor y = exp(x);  // exp saves its own output
    watched = y.impl_ptr();
    Tensor z = sum(y * y);
  }
  CHECK(watched.expired());
}

TEST_CASE("post-accumulate-grad hooks run once per backward after the gradient is complete") {
  Tensor w = randn({3}).requires_grad_();
  Tensor x = randn({3});
  std::vector<std::vector<float>> seen;
  register_post_accumulate_grad_hook(w, [&] { seen.push_back(w.grad().to_vector<float>()); });
  // w feeds two consumers: the hook must see the sum of both contributions, once.
  Tensor loss = sum(mul(w, x)) + sum(mul(w, w));
  loss.backward();
  REQUIRE(seen.size() == 1);
  const std::vector<float> xs = x.to_vector<float>(), ws = w.to_vector<float>();
  for (size_t i = 0; i < 3; ++i) CHECK(seen[0][i] == doctest::Approx(xs[i] + 2 * ws[i]));
  sum(mul(w, x)).backward();  // accumulates: the hook sees grad + x
  REQUIRE(seen.size() == 2);
  for (size_t i = 0; i < 3; ++i) CHECK(seen[1][i] == doctest::Approx(2 * xs[i] + 2 * ws[i]));
  int other = 0;
  const uint64_t handle = register_post_accumulate_grad_hook(w, [&] { ++other; });
  sum(w).backward();  // both hooks
  CHECK(seen.size() == 3);
  CHECK(other == 1);
  remove_post_accumulate_grad_hook(w, handle);  // that one only
  sum(w).backward();
  CHECK(seen.size() == 4);
  CHECK(other == 1);
  clear_post_accumulate_grad_hooks(w);
  sum(w).backward();
  CHECK(seen.size() == 4);
  CHECK_THROWS_AS(register_post_accumulate_grad_hook(x, [] {}), hg::Error);
}
