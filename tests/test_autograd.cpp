// The autograd engine: accumulation, shared inputs, diamonds, no_grad, detach, retain_graph and
// the freed-graph error; multi-output nodes (both outputs used, one used, one used twice, either as the
// root, retain_graph and the freed-graph error), checked against hand-computed gradients; a leaf's
// first gradient adopted without a copy only when nothing else can reach its bytes; later gradients
// added into .grad in place (no temporary, the same bits), and out of place where the two overlap.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>

#include "engine/allocator.h"
#include "engine/autograd.h"
#include "engine/ops.h"
#include "engine/random.h"

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

// ---- multi-output nodes (record_op_multi) ----
namespace {

// A two-output test op: u = 2 a, v = a * a (elementwise), one node. Its backward records which output
// gradients arrived (count of calls, and whether each was defined) and returns
// da = 2 du + 2 a dv, the undefined ones taken as 0.
struct TwoOutputs {
  Tensor u, v;
};
struct Seen {
  int calls = 0;
  bool du = false, dv = false;
};

TwoOutputs two_outputs(const Tensor& a, Seen& seen) {
  TwoOutputs out;
  {
    NoGradGuard no_grad;
    out.u = a * 2.0;
    out.v = a * a;
  }
  const Tensor saved = a.detach();
  record_op_multi("two_outputs", {a}, {&out.u, &out.v},
                  [saved, &seen](const std::vector<Tensor>& g, const NeedsGrad&) {
                    ++seen.calls;
                    seen.du = g[0].defined();
                    seen.dv = g[1].defined();
                    Tensor da = zeros_like(saved);
                    if (g[0].defined()) da = da + g[0] * 2.0;
                    if (g[1].defined()) da = da + g[1] * saved * 2.0;
                    return std::vector<Tensor>{da};
                  });
  return out;
}

}  // namespace

TEST_CASE("a two-output op: both outputs used, each with its own upstream gradient") {
  Tensor a = leaf({1, -2, 3});
  Seen seen;
  TwoOutputs o = two_outputs(a, seen);
  CHECK(o.u.grad_fn() == o.v.grad_fn());
  CHECK(o.u.grad_fn()->num_outputs() == 2);
  // L = sum(u * [1, 2, 3]) + sum(v * [10, 20, 30]): da = 2 [1, 2, 3] + 2 a [10, 20, 30].
  Tensor p = from_vector(std::vector<double>{1, 2, 3}, {3}, f64), q = from_vector(std::vector<double>{10, 20, 30}, {3}, f64);
  (sum(o.u * p) + sum(o.v * q)).backward();
  CHECK(seen.calls == 1);
  CHECK(seen.du);
  CHECK(seen.dv);
  CHECK(grad_of(a) == std::vector<double>{2 + 20, 4 - 80, 6 + 180});
}

TEST_CASE("a two-output op with one output used: the other's gradient is undefined") {
  Tensor a = leaf({1, -2, 3});
  Seen seen;
  {
    TwoOutputs o = two_outputs(a, seen);
    sum(o.v).backward();  // only v: da = 2 a
    CHECK(seen.calls == 1);
    CHECK_FALSE(seen.du);
    CHECK(seen.dv);
    CHECK(grad_of(a) == std::vector<double>{2, -4, 6});
  }
  a.set_grad(Tensor());
  seen = Seen();
  TwoOutputs o = two_outputs(a, seen);
  // The root is output 0 itself, seeded directly: du = [1, 1, 1], no dv.
  o.u.backward(ones({3}, f64));
  CHECK(seen.calls == 1);
  CHECK(seen.du);
  CHECK_FALSE(seen.dv);
  CHECK(grad_of(a) == std::vector<double>{2, 2, 2});
  // And output 1 as the root.
  a.set_grad(Tensor());
  TwoOutputs o2 = two_outputs(a, seen);
  o2.v.backward(from_vector(std::vector<double>{1, 0, 2}, {3}, f64));
  CHECK(seen.dv);
  CHECK_FALSE(seen.du);
  CHECK(grad_of(a) == std::vector<double>{2, 0, 12});
}

TEST_CASE("a two-output op with one output used twice: its contributions are summed in its slot, the node runs once") {
  Tensor a = leaf({1, -2, 3});
  Seen seen;
  TwoOutputs o = two_outputs(a, seen);
  // L = sum(u) + sum(u * u) + sum(v * 3): du = 1 + 2 u = 1 + 4 a, dv = 3; da = 2 du + 2 a dv = 2 + 14 a.
  (sum(o.u) + sum(o.u * o.u) + sum(o.v * 3.0)).backward();
  CHECK(seen.calls == 1);
  CHECK(grad_of(a) == std::vector<double>{2 + 14, 2 - 28, 2 + 42});
}

TEST_CASE("a two-output op: retain_graph allows a second backward, and without it the error names the op") {
  Tensor a = leaf({1, 2});
  Seen seen;
  TwoOutputs o = two_outputs(a, seen);
  const Tensor loss = sum(o.u) + sum(o.v);  // da = 2 + 2 a
  loss.backward(Tensor(), /*retain_graph=*/true);
  CHECK(grad_of(a) == std::vector<double>{4, 6});
  loss.backward();  // accumulates; frees the graph
  CHECK(grad_of(a) == std::vector<double>{8, 12});
  CHECK(seen.calls == 2);
  CHECK_THROWS_WITH_AS(loss.backward(), doctest::Contains("backward through the graph a second time"), Error);
  // A fresh loss over one output of the freed node: the error names it.
  CHECK_THROWS_WITH_AS(sum(o.v * 2.0).backward(),
                       doctest::Contains("the saved tensors of 'two_outputs' were freed by the first backward"), Error);
}

TEST_CASE("record_op_multi refuses the same tensor as two outputs") {
  Tensor a = leaf({1, 2});
  Tensor u;
  {
    NoGradGuard no_grad;
    u = a * 2.0;
  }
  CHECK_THROWS_WITH_AS(record_op_multi("dup", {a}, {&u, &u},
                                       [](const std::vector<Tensor>&, const NeedsGrad&) { return std::vector<Tensor>{Tensor()}; }),
                       doctest::Contains("outputs 0 and 1 are the same tensor"), Error);
}

// ---- a leaf's first gradient: adopted when nothing else can see it, copied otherwise ----
namespace {

// y = a + b recorded with a backward that hands out what `give` returns for (a, b) given dy.
using Give = std::function<std::vector<Tensor>(const Tensor& dy)>;
Tensor add_with_backward(const Tensor& a, const Tensor& b, Give give) {
  Tensor y;
  {
    NoGradGuard no_grad;
    y = a + b;
  }
  record_op("add_with_backward", {a, b}, y, [give](const Tensor& dy, const NeedsGrad&) { return give(dy); });
  return y;
}

Tensor fresh(std::vector<double> v) { return from_vector(v, {int64_t(v.size())}, f64); }

}  // namespace

TEST_CASE("a fresh gradient nothing else holds becomes leaf.grad without a copy") {
  Tensor a = leaf({1, 2, 3}), b = leaf({4, 5, 6});
  const void* handed_out = nullptr;
  Tensor y = add_with_backward(a, b, [&](const Tensor&) {
    Tensor ga = fresh({0.5, -1.5, 2.5});
    handed_out = ga.data_ptr();
    return std::vector<Tensor>{ga, fresh({7, 8, 9})};
  });
  sum(y).backward();
  CHECK(a.grad().data_ptr() == handed_out);
  CHECK(grad_of(a) == std::vector<double>{0.5, -1.5, 2.5});
  CHECK(grad_of(b) == std::vector<double>{7, 8, 9});
  // A second backward accumulates into the adopted buffer.
  sum(add_with_backward(a, b, [](const Tensor&) { return std::vector<Tensor>{fresh({1, 1, 1}), fresh({1, 1, 1})}; }))
      .backward();
  CHECK(a.grad().data_ptr() == handed_out);
  CHECK(grad_of(a) == std::vector<double>{1.5, -0.5, 3.5});
}

TEST_CASE("a gradient something else can see is copied into leaf.grad") {
  SUBCASE("one tensor handed to two leaves: each gets its own buffer") {
    Tensor a = leaf({1, 2}), b = leaf({3, 4});
    sum(add_with_backward(a, b, [](const Tensor&) {
          Tensor g = fresh({2, -3});
          return std::vector<Tensor>{g, g};
        }))
        .backward();
    CHECK(a.grad().storage() != b.grad().storage());
    a.grad().copy_(fresh({0, 0}));
    CHECK(grad_of(b) == std::vector<double>{2, -3});
  }
  SUBCASE("a tensor the backward also keeps") {
    Tensor a = leaf({1, 2}), b = leaf({3, 4});
    Tensor kept = fresh({5, 6});
    sum(add_with_backward(a, b, [&](const Tensor&) { return std::vector<Tensor>{kept, Tensor()}; })).backward();
    CHECK(a.grad().storage() != kept.storage());
    kept.copy_(fresh({-1, -1}));
    CHECK(grad_of(a) == std::vector<double>{5, 6});
    CHECK_FALSE(b.grad().defined());
  }
  SUBCASE("the only view into a larger buffer (at its start or not): .grad holds only its own elements") {
    for (int64_t start : {0, 1}) {
      Tensor a = leaf({1, 2}), b = leaf({3, 4});
      sum(add_with_backward(a, b, [start](const Tensor&) {
            return std::vector<Tensor>{fresh({9, 8, 7, 6}).narrow(0, start, 2), Tensor()};
          }))
          .backward();
      CHECK(grad_of(a) == (start == 0 ? std::vector<double>{9, 8} : std::vector<double>{8, 7}));
      CHECK(a.grad().storage()->nbytes() == 2 * sizeof(double));
      CHECK(a.grad().offset() == 0);
    }
  }
  SUBCASE("the caller's seed gradient of a leaf root") {
    Tensor x = leaf({1, 2, 3});
    Tensor seed = fresh({0.25, 0.5, 0.75});
    x.backward(seed);
    CHECK(x.grad().storage() != seed.storage());
    seed.copy_(fresh({0, 0, 0}));
    CHECK(grad_of(x) == std::vector<double>{0.25, 0.5, 0.75});
  }
}

// ---- later gradients: added into leaf.grad in place -------------------------------------------

TEST_CASE("a later gradient is added into leaf.grad in place: no temporary, add's bits, every floating dtype") {
  for (DType dtype : {f32, f64, bf16, f16}) {
    CAPTURE(std::string(dtype_name(dtype)));
    manual_seed(71);
    // Past the CPU kernels' parallel threshold, with a vector tail.
    const int64_t n = 40001;
    Tensor a = randn({n}, dtype).requires_grad_(), b = randn({n}, dtype).requires_grad_();
    const Tensor g1 = randn({n}, dtype), g2 = randn({n}, dtype);
    auto backward_handing_out = [&](const Tensor& g) {
      Tensor y = add_with_backward(a, b, [g](const Tensor&) { return std::vector<Tensor>{g.clone(), g.clone()}; });
      Tensor loss = sum(y);
      const int64_t before = memory_stats().allocation_count;
      loss.backward();
      return memory_stats().allocation_count - before;
    };
    const int64_t first = backward_handing_out(g1);  // adopted: .grad is the backward's own g1
    const void* buffer = a.grad().data_ptr();
    const int64_t second = backward_handing_out(g2);
    // The same allocations as the first backward: none for the sums (add-then-copy_ took one each).
    CHECK(second == first);
    CHECK(a.grad().data_ptr() == buffer);
    const Tensor expected = add(g1, g2);
    CHECK(a.grad().to_vector<double>() == expected.to_vector<double>());
    CHECK(b.grad().to_vector<double>() == expected.to_vector<double>());
  }
}

TEST_CASE("a later gradient that overlaps leaf.grad's bytes is summed out of place") {
  // .grad is elements 1..3 of a buffer and the incoming gradient elements 0..2 of the same buffer:
  // added in place element by element, each sum would read the one written just before it.
  Tensor a = leaf({0, 0, 0}), b = leaf({0, 0, 0});
  Tensor flat = fresh({1, 10, 100, 1000});
  a.set_grad(flat.narrow(0, 1, 3));
  sum(add_with_backward(a, b, [&](const Tensor&) { return std::vector<Tensor>{flat.narrow(0, 0, 3), Tensor()}; }))
      .backward();
  CHECK(grad_of(a) == std::vector<double>{11, 110, 1100});
}
