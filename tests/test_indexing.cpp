// Indexing along a dimension (gather, scatter_add, index_select, index_add, flip), cumsum and topk on
// the CPU: the kernels against double references over every dtype, both index layouts and index dtypes
// and edge sizes; the engine ops' errors; fp32 accumulation of half sums. (Gradients: the op-table
// rows in tests/support/op_cases.cpp; PyTorch's values: tests/test_torch_parity.cpp.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "kernels/kernels.h"
#include "support/check_error.h"
#include "support/random_buffers.h"

using namespace hg;
using hg::testing::HostBuffer;
using hg::testing::random_indices;
using hg::testing::random_normal;
namespace cpu = hg::kernels::cpu;

namespace {

struct Sizes {
  int64_t outer, n, m, inner;
};

// Edge sizes: empty index, one row, inner 1, inner beyond scatter's 512-column task block, and output
// planes of 300,000 elements (index_add's row chunks hold 262,144: two chunks per plane, two planes).
const std::vector<Sizes> kSizes = {{3, 5, 4, 7},    {1, 1, 6, 1}, {2, 9, 0, 3},
                                   {1, 4, 33, 700}, {5, 2, 3, 1}, {2, 600, 700, 500}};

const DType kFloating[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

// The relative error a sum of doubles rounded once to `dtype` may carry, plus fp32 accumulation.
double rounding(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return 1e-13;
    case DType::f32:
      return 2e-6;
    case DType::f16:
      return 1.0 / 1024;
    default:
      return 1.0 / 128;
  }
}

}  // namespace

TEST_CASE("index_gather and index_scatter_add match their definitions: every dtype, both index layouts") {
  std::mt19937_64 rng(35);
  for (DType t : kFloating) {
    for (DType it : {DType::i32, DType::i64}) {
      for (bool per_element : {true, false}) {
        for (const Sizes& s : kSizes) {
          CAPTURE(std::string(dtype_name(t)));
          CAPTURE(std::string(dtype_name(it)));
          CAPTURE(per_element);
          CAPTURE(s.n);
          CAPTURE(s.m);
          CAPTURE(s.inner);
          const int64_t small = s.outer * s.m * s.inner, large = s.outer * s.n * s.inner;
          const HostBuffer index = random_indices(it, per_element ? small : s.m, s.n, rng);
          auto idx = [&](int64_t o, int64_t i, int64_t k) {
            return int64_t(index.get(per_element ? (o * s.m + i) * s.inner + k : i));
          };
          // gather: a copy, exact.
          const HostBuffer x = random_normal(t, large, rng);
          HostBuffer y(t, small);
          cpu::index_gather(x.data(), index.data(), it, y.data(), s.outer, s.n, s.m, s.inner, per_element, t);
          int wrong = 0;
          for (int64_t o = 0; o < s.outer; ++o)
            for (int64_t i = 0; i < s.m; ++i)
              for (int64_t k = 0; k < s.inner; ++k)
                wrong += y.get((o * s.m + i) * s.inner + k) != x.get((o * s.n + idx(o, i, k)) * s.inner + k);
          CHECK(wrong == 0);
          // scatter_add onto a base, alpha -0.75.
          const HostBuffer src = random_normal(t, small, rng), base = random_normal(t, large, rng);
          HostBuffer out(t, large);
          cpu::index_scatter_add(base.data(), src.data(), index.data(), it, out.data(), s.outer, s.n, s.m, s.inner,
                                 per_element, -0.75, t);
          std::vector<double> want(static_cast<size_t>(large)), magnitude(static_cast<size_t>(large));
          for (int64_t p = 0; p < large; ++p) {
            want[size_t(p)] = base.get(p);
            magnitude[size_t(p)] = std::fabs(base.get(p));
          }
          for (int64_t o = 0; o < s.outer; ++o)
            for (int64_t i = 0; i < s.m; ++i)
              for (int64_t k = 0; k < s.inner; ++k) {
                const size_t p = size_t((o * s.n + idx(o, i, k)) * s.inner + k);
                want[p] += -0.75 * src.get((o * s.m + i) * s.inner + k);
                magnitude[p] += 0.75 * std::fabs(src.get((o * s.m + i) * s.inner + k));
              }
          wrong = 0;
          for (int64_t p = 0; p < large; ++p)
            wrong += !(std::fabs(out.get(p) - want[size_t(p)]) <= rounding(t) * magnitude[size_t(p)] + 1e-30);
          CHECK(wrong == 0);
        }
      }
    }
  }
}

TEST_CASE("index_gather copies any dtype's bits (index_select of bool and i64 tensors)") {
  const Tensor flags = ne(from_vector(std::vector<int32_t>{1, 0, 0, 1, 1, 0}, {3, 2}, i32), 0.0);
  CHECK(index_select(flags, 0, from_vector(std::vector<int64_t>{2, 0}, {2}, i64)).to_vector<double>() ==
        std::vector<double>{1, 0, 1, 0});
  const Tensor big = from_vector(std::vector<int64_t>{int64_t(1) << 60, -7, 3}, {3}, i64);
  CHECK(index_select(big, 0, from_vector(std::vector<int32_t>{0, 0, 2}, {3}, i32)).to_vector<int64_t>() ==
        std::vector<int64_t>{int64_t(1) << 60, int64_t(1) << 60, 3});
}

TEST_CASE("cumsum matches its definition: every dtype, forward and reverse, inner 1 and beyond the block") {
  std::mt19937_64 rng(36);
  const std::vector<Sizes> shapes = {{4, 37, 0, 1}, {2, 5, 0, 1500}, {1, 1, 0, 3}, {3, 0, 0, 2}};
  for (DType t : kFloating) {
    for (bool reverse : {false, true}) {
      for (const Sizes& s : shapes) {
        CAPTURE(std::string(dtype_name(t)));
        CAPTURE(reverse);
        CAPTURE(s.n);
        CAPTURE(s.inner);
        const int64_t count = s.outer * s.n * s.inner;
        const HostBuffer x = random_normal(t, count, rng);
        HostBuffer y(t, count);
        cpu::cumsum(x.data(), y.data(), s.outer, s.n, s.inner, reverse, t);
        int wrong = 0;
        for (int64_t o = 0; o < s.outer; ++o)
          for (int64_t k = 0; k < s.inner; ++k) {
            double running = 0, magnitude = 0;
            for (int64_t step = 0; step < s.n; ++step) {
              const int64_t p = (o * s.n + (reverse ? s.n - 1 - step : step)) * s.inner + k;
              running += x.get(p);
              magnitude += std::fabs(x.get(p));
              wrong += !(std::fabs(y.get(p) - running) <= rounding(t) * magnitude + 1e-30);
            }
          }
        CHECK(wrong == 0);
      }
    }
  }
}

TEST_CASE("scatter_add and cumsum of half tensors sum in fp32") {
  // 4096 ones into one position: a sum rounded to f16 after every add would stop at 2048 (2049 is not
  // an f16 value); fp32 accumulation reaches 4096, which f16 holds exactly.
  const Tensor ones = full({4096}, 1.0, f16);
  const Tensor target = zeros({4096}, i64);
  CHECK(scatter_add(zeros({2}, f16), 0, target, ones).to_vector<double>() == std::vector<double>{4096, 0});
  CHECK(index_add(zeros({1}, bf16), 0, target, full({4096}, 1.0, bf16)).item() == 4096);  // bf16 would stop at 256
  CHECK(cumsum(ones, 0).to_vector<double>().back() == 4096);
}

TEST_CASE("flip, gather and scatter_add give PyTorch's values on a hand-checked example") {
  const Tensor x = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}, f64);
  CHECK(flip(x, {1}).to_vector<double>() == std::vector<double>{3, 2, 1, 6, 5, 4});
  CHECK(flip(x, {0, -1}).to_vector<double>() == std::vector<double>{6, 5, 4, 3, 2, 1});
  const Tensor index = from_vector(std::vector<int64_t>{2, 2, 0, 1}, {2, 2}, i64);
  CHECK(gather(x, 1, index).to_vector<double>() == std::vector<double>{3, 3, 4, 5});
  CHECK(scatter_add(zeros({2, 3}, f64), 1, index, x.narrow(1, 0, 2)).to_vector<double>() ==
        std::vector<double>{0, 0, 3, 4, 5, 0});
  CHECK(cumsum(x, 0).to_vector<double>() == std::vector<double>{1, 2, 3, 5, 7, 9});
}

TEST_CASE("indexing errors name the op, the shapes and what was expected") {
  const Tensor x = randn({3, 4}, f32);
  const Tensor bad = from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 0}, {3, 2}, i64);
  CHECK_ERROR(gather(x, 0, bad), "[gather] index 3 at position 3 is out of range, expected 0 <= index < 3");
  CHECK_ERROR(index_select(x, 1, from_vector(std::vector<int32_t>{1, -1}, {2}, i32)),
              "[index_select] index -1 at position 1 is out of range, expected 0 <= index < 4");
  CHECK_ERROR(scatter_add(x, 1, bad, randn({3, 2}, f32)), "[scatter_add] index 4 at position 4");
  CHECK_ERROR(index_add(x, 0, from_vector(std::vector<int64_t>{5}, {1}, i64), randn({1, 4}, f32)),
              "[index_add] index 5 at position 0 is out of range, expected 0 <= index < 3");
  CHECK_ERROR(index_select(x, 0, zeros({2, 2}, i64)), "expected a 1-D");
  CHECK_ERROR(index_add(x, 0, zeros({2}, i64), randn({3, 4}, f32)), "expected source of shape [2, 4]");
  CHECK_ERROR(gather(x, 0, zeros({3}, i64)), "different numbers of dimensions");
  CHECK_ERROR(gather(x, 0, zeros({2, 5}, i64)), "larger than input");
  CHECK_ERROR(gather(x, 0, zeros({2, 2}, f32)), "must hold indices (i32 or i64)");
  CHECK_ERROR(gather(x, 2, zeros({2, 2}, i64)), "[gather]");
  CHECK_ERROR(scatter_add(x, 0, zeros({2, 2}, i64), randn({1, 2}, f32)), "larger than src");
  CHECK_ERROR(cumsum(zeros({3}, i64), 0), "[cumsum]");
  CHECK_ERROR(flip(x, {1, -1}), "more than once");
  CHECK_ERROR(layer_norm(x, Shape{3}, Tensor(), Tensor()), "does not end in normalized_shape [3]");
  CHECK_ERROR(layer_norm(x, Shape{3, 4}, randn({4}, f32), Tensor()), "expected the normalized_shape [3, 4]");
}

TEST_CASE("layer_norm over several trailing dimensions equals layer_norm over them flattened") {
  const Tensor x = randn({2, 3, 4}, f64), w = randn({3, 4}, f64), b = randn({3, 4}, f64);
  const Tensor want = layer_norm(x.reshape({2, 12}), w.reshape({12}), b.reshape({12})).reshape({2, 3, 4});
  CHECK(layer_norm(x, Shape{3, 4}, w, b).to_vector<double>() == want.to_vector<double>());
  CHECK(layer_norm(x, Shape{4}, Tensor(), Tensor()).to_vector<double>() ==
        layer_norm(x, Tensor(), Tensor()).to_vector<double>());
}

TEST_CASE("topk: by value, ties by index, NaN the largest; every dtype, both directions, edge sizes") {
  std::mt19937_64 rng(41);
  struct Case {
    int64_t rows, n, k;
  };
  for (const DType t : kFloating)
    for (const bool largest : {true, false})
      for (const Case c : {Case{5, 37, 5}, Case{3, 9, 9}, Case{4, 6, 0}, Case{1, 1, 1}, Case{2, 3000, 17},
                           Case{2, 300, 40}}) {  // k > 32: the partial_sort path
        CAPTURE(std::string(dtype_name(t)));
        CAPTURE(largest);
        CAPTURE(c.n);
        const HostBuffer x = hg::testing::random_with_ties(t, c.rows, c.n, rng);
        HostBuffer values(t, c.rows * c.k), indices(DType::i64, c.rows * c.k);
        cpu::topk(x.data(), values.data(), static_cast<int64_t*>(indices.data()), c.rows, c.n, c.k, largest, nullptr,
                  0, t);
        for (int64_t r = 0; r < c.rows; ++r) {
          // The definition: a stable sort of the positions, NaN before (largest) or after every number.
          std::vector<int64_t> order(static_cast<size_t>(c.n));
          for (int64_t i = 0; i < c.n; ++i) order[size_t(i)] = i;
          std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
            const double va = x.get(r * c.n + a), vb = x.get(r * c.n + b);
            if (std::isnan(va) || std::isnan(vb)) return largest ? std::isnan(va) && !std::isnan(vb)
                                                                 : !std::isnan(va) && std::isnan(vb);
            return largest ? va > vb : va < vb;
          });
          for (int64_t j = 0; j < c.k; ++j) {
            const int64_t want = order[size_t(j)];
            CHECK(indices.get(r * c.k + j) == double(want));
            const double v = values.get(r * c.k + j), w = x.get(r * c.n + want);
            CHECK(((std::isnan(v) && std::isnan(w)) || v == w));
          }
        }
      }
}

TEST_CASE("topk on monotone rows: every value enters its row's buffer, or none after the first k") {
  // Ascending rows make every value of every block a candidate for `largest` (and none for smallest);
  // descending rows the reverse. 1000 values: 15 full blocks of 64 and a 40-value tail.
  const int64_t n = 1000, k = 6;
  for (const DType t : kFloating) {
    CAPTURE(std::string(dtype_name(t)));
    HostBuffer x(t, 2 * n), values(t, 2 * k), indices(DType::i64, 2 * k);
    for (int64_t i = 0; i < n; ++i) {
      x.set(i, double(i));  // non-decreasing once rounded (bf16 ties values above 256: ties go by index)
      x.set(n + i, -x.get(i));
    }
    for (const bool largest : {true, false}) {
      CAPTURE(largest);
      cpu::topk(x.data(), values.data(), static_cast<int64_t*>(indices.data()), 2, n, k, largest, nullptr, 0, t);
      for (int64_t row = 0; row < 2; ++row) {
        std::vector<int64_t> order(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) order[size_t(i)] = i;
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
          const double va = x.get(row * n + a), vb = x.get(row * n + b);
          return largest ? va > vb : va < vb;
        });
        for (int64_t j = 0; j < k; ++j) CHECK(indices.get(row * k + j) == double(order[size_t(j)]));
      }
    }
  }
}

TEST_CASE("topk along any dimension, its gradient and its errors") {
  const Tensor x = from_vector(std::vector<double>{3, 1, 4, 1, 5, 9, 2, 6}, {2, 4}, f64).requires_grad_();
  const auto [values, indices] = topk(x, 2, 0);
  CHECK(values.shape() == Shape{2, 4});
  CHECK(indices.to_vector<int64_t>() == std::vector<int64_t>{1, 1, 0, 1, 0, 0, 1, 0});
  const auto [v1, i1] = topk(x, 3, -1, false);
  CHECK(v1.to_vector<double>() == std::vector<double>{1, 1, 3, 2, 5, 6});
  CHECK(i1.to_vector<int64_t>() == std::vector<int64_t>{1, 3, 0, 2, 0, 3});
  sum(v1 * from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}, f64)).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3, 1, 0, 2, 5, 0, 4, 6});
  CHECK(topk(randn({3, 0}), 0, 1).first.shape() == Shape{3, 0});
  CHECK_ERROR(topk(randn({3, 4}), 5), "[topk]", "k = 5", "0 <= k <= 4");
  CHECK_ERROR(topk(randn({3, 4}), 1, 2), "[topk]", "dim");
  CHECK_ERROR(topk(from_vector(std::vector<int64_t>{1, 2}, {2}, i64), 1), "[topk]", "input");
}
