// rms_norm, group_norm and batch_norm on the CPU: every half dtype against float64 (forward, the input's
// and the parameters' gradients, the running statistics), eval against training semantics, and the
// errors. (float64 gradchecks: tests/support/op_cases.cpp; PyTorch's values: tests/test_torch_parity.cpp.)
#include <doctest/doctest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "support/check_error.h"
#include "support/tensor_compare.h"

using namespace hg;
using hg::testing::max_relative_error;

namespace {

double tolerance(DType t) { return t == f32 ? 2e-5 : t == f16 ? 4e-3 : 3e-2; }

using NormFn = std::function<Tensor(const Tensor& x, const Tensor& w, const Tensor& b)>;

// The op in `dtype` against the op in f64 on the same (rounded) values: output and all three gradients.
void check_against_f64(const char* name, DType dtype, const Shape& x_shape, int64_t params, const NormFn& fn) {
  CAPTURE(std::string(name));
  CAPTURE(std::string(dtype_name(dtype)));
  const Tensor x64 = cast(cast(randn(x_shape, f64), dtype), f64), w64 = cast(cast(randn({params}, f64), dtype), f64),
               b64 = cast(cast(randn({params}, f64), dtype), f64);
  const Tensor g64 = cast(cast(randn(x_shape, f64), dtype), f64);
  std::vector<Tensor> want, got;
  for (const DType t : {f64, dtype}) {
    // A fresh leaf per dtype (cast to the same dtype returns its input, which must stay grad-free).
    auto leaf = [t](const Tensor& v) { return cast(v, t).detach().requires_grad_(); };
    const Tensor x = leaf(x64), w = leaf(w64), b = leaf(b64);
    const Tensor y = fn(x, w, b);
    y.backward(cast(g64, t));
    std::vector<Tensor>& out = t == f64 ? want : got;
    out = {y, x.grad(), w.grad(), b.grad()};
  }
  const char* parts[] = {"output", "dx", "dweight", "dbias"};
  for (size_t i = 0; i < 4; ++i) {
    CAPTURE(std::string(parts[i]));
    CHECK(max_relative_error(got[i], want[i]) <=
          tolerance(dtype) * (i >= 2 ? 4 : 1));  // parameter grads sum many terms
  }
}

}  // namespace

TEST_CASE("rms_norm, group_norm and batch_norm in f32, f16 and bf16 agree with f64 (fp32 statistics)") {
  for (const DType t : {f32, f16, bf16}) {
    check_against_f64("rms_norm", t, {6, 40}, 40,
                      [](const Tensor& x, const Tensor& w, const Tensor& b) { return rms_norm(x, {40}, w) + b; });
    check_against_f64("group_norm", t, {3, 6, 20}, 6,
                      [](const Tensor& x, const Tensor& w, const Tensor& b) { return group_norm(x, 3, w, b); });
    check_against_f64("batch_norm train", t, {5, 4, 30}, 4, [](const Tensor& x, const Tensor& w, const Tensor& b) {
      return batch_norm(x, Tensor(), Tensor(), w, b, true);
    });
    check_against_f64("batch_norm 2d", t, {50, 4}, 4, [](const Tensor& x, const Tensor& w, const Tensor& b) {
      return batch_norm(x, Tensor(), Tensor(), w, b, true);
    });
  }
}

TEST_CASE("batch_norm: training updates the running statistics by PyTorch's rule; eval reads them") {
  const Tensor x = randn({4, 3, 5}, f64) * 2.0 + 1.0;
  Tensor rm = full({3}, 0.5, f64), rv = full({3}, 2.0, f64);
  const Tensor y = batch_norm(x, rm, rv, Tensor(), Tensor(), true, 0.25);
  const std::vector<double> v = x.to_vector<double>();
  for (int64_t c = 0; c < 3; ++c) {
    double sum = 0, squares = 0;
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t s = 0; s < 5; ++s) sum += v[size_t((n * 3 + c) * 5 + s)];
    const double mean = sum / 20;
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t s = 0; s < 5; ++s) squares += std::pow(v[size_t((n * 3 + c) * 5 + s)] - mean, 2);
    CHECK(rm.to_vector<double>()[size_t(c)] == doctest::Approx(0.75 * 0.5 + 0.25 * mean).epsilon(1e-12));
    CHECK(rv.to_vector<double>()[size_t(c)] == doctest::Approx(0.75 * 2.0 + 0.25 * squares / 19).epsilon(1e-12));
  }
  // Training normalises by the batch: every channel of y has mean 0 and biased variance 1 / (1 + eps / var).
  CHECK(std::fabs(mean(y, {0, 2}).to_vector<double>()[1]) < 1e-12);
  // Eval: (x - running_mean) / sqrt(running_var + eps), the running statistics left as they are.
  const std::vector<double> rm_before = rm.to_vector<double>(), rv_before = rv.to_vector<double>();
  const Tensor e = batch_norm(x, rm, rv, Tensor(), Tensor(), false);
  const Tensor want = (x - rm.reshape({1, 3, 1})) / sqrt(rv.reshape({1, 3, 1}) + 1e-5);
  CHECK(max_relative_error(e, want) < 1e-14);
  CHECK(rm.to_vector<double>() == rm_before);
  CHECK(rv.to_vector<double>() == rv_before);
  // Eval's input gradient is rstd * w * dy: the running statistics do not depend on x.
  const Tensor xg = x.clone().requires_grad_(), w = full({3}, 3.0, f64);
  sum(batch_norm(xg, rm, rv, w, Tensor(), false)).backward();
  CHECK(max_relative_error(xg.grad(), (3.0 / sqrt(rv + 1e-5)).reshape({1, 3, 1}).expand({4, 3, 5})) < 1e-14);
}

TEST_CASE("batch_norm, both kernel layouts: data far from zero, f64's statistics, the same bits at 1 and 2 threads") {
  // S = 15 takes the rows layout (per-column sums), S = 16 and 2500 the runs layout (per-run moments
  // merged; 2500 crosses the 1024-element chunks). 70 rows span every one of the 64 row blocks.
  for (const int64_t spatial : {int64_t(15), int64_t(16), int64_t(2500)}) {
    CAPTURE(spatial);
    const int64_t batch = 70, channels = 20;
    const Tensor x = cast(randn({batch, channels, spatial}, f64) * 0.5 + 1000.0, f32);
    const Tensor w = randn({channels}, f32), b = randn({channels}, f32), dy = randn({batch, channels, spatial}, f32);
    // The statistics in f64 from the same f32 values.
    const Tensor x64 = cast(x, f64);
    const std::vector<double> want_mean = mean(x64, {0, 2}).to_vector<double>(),
                              want_var = var(x64, {0, 2}, 0.0).to_vector<double>();
    std::vector<std::vector<float>> runs[2];
    const int threads = omp_get_max_threads();
    for (const int t : {1, 2}) {
      omp_set_num_threads(t);
      Tensor rm = zeros({channels}, f32), rv = ones({channels}, f32);
      const Tensor xl = x.clone().requires_grad_(), wl = w.clone().requires_grad_(), bl = b.clone().requires_grad_();
      const Tensor y = batch_norm(xl, rm, rv, wl, bl, true, 1.0);  // momentum 1: the running stats are the batch's
      y.backward(dy);
      for (const Tensor& v : {y, rm, rv, xl.grad(), wl.grad(), bl.grad()}) runs[t - 1].push_back(v.to_vector<float>());
    }
    omp_set_num_threads(threads);
    for (size_t i = 0; i < runs[0].size(); ++i) CHECK(runs[0][i] == runs[1][i]);
    const std::vector<float>& rm = runs[0][1];
    const std::vector<float>& rv = runs[0][2];
    const double count = double(batch * spatial);
    for (int64_t c = 0; c < channels; ++c) {
      CHECK(rm[size_t(c)] == doctest::Approx(want_mean[size_t(c)]).epsilon(1e-6));
      // The unbiased variance, about 0.25 on a mean of 1000: a one-pass sum of squares in f32 would
      // have lost it to cancellation.
      CHECK(rv[size_t(c)] == doctest::Approx(want_var[size_t(c)] * count / (count - 1)).epsilon(1e-4));
    }
  }
}

TEST_CASE("group_norm with one group per channel is instance norm; rms_norm's default eps is the dtype's") {
  const Tensor x = randn({2, 3, 8}, f64);
  const Tensor inst = (x - mean(x, {2}, true)) / sqrt(var(x, {2}, 0.0, true) + 1e-5);
  CHECK(max_relative_error(group_norm(x, 3), inst) < 1e-12);
  const Tensor tiny = full({1, 4}, 1e-5, f32);  // mean(x^2) = 1e-10, far below f32's eps 1.19e-7
  CHECK(rms_norm(tiny, {4}).to_vector<double>()[0] == doctest::Approx(1e-5 / std::sqrt(1e-10 + 1.1920929e-7)));
}

TEST_CASE("normalisation errors name the op, the shapes and what was expected") {
  const Tensor x = randn({4, 6, 5}, f32);
  CHECK_ERROR(batch_norm(randn({1, 3}, f32), Tensor(), Tensor(), Tensor(), Tensor(), true),
              "expected more than 1 in training");
  CHECK_ERROR(batch_norm(x, Tensor(), Tensor()), "undefined in eval mode");
  CHECK_ERROR(batch_norm(x, zeros({6}, f16), ones({6}, f32), Tensor(), Tensor(), true),
              "expected a contiguous [6] f32 tensor");
  CHECK_ERROR(batch_norm(x, zeros({5}), ones({6}), Tensor(), Tensor(), true), "running_mean is");
  CHECK_ERROR(batch_norm(x, zeros({6}), ones({6}), ones({5}), Tensor(), true), "expected weight of shape [6]");
  CHECK_ERROR(batch_norm(randn({6}, f32), zeros({6}), ones({6})), "expected [N, C] or [N, C, *]");
  CHECK_ERROR(group_norm(x, 4), "expected num_groups (4) > 0 to divide them");
  CHECK_ERROR(group_norm(x, 3, ones({6}, f64)), "dtype mismatch");
  CHECK_ERROR(rms_norm(x, {6}), "does not end in normalized_shape [6]");
  CHECK_ERROR(rms_norm(x, {5}, ones({6})), "expected weight of shape [5]");
  CHECK_ERROR(rms_norm(zeros({3}, i64), {3}), "[rms_norm]");
}
