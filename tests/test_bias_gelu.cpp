// bias_gelu (engine/ops/bias_gelu.cpp, kernels/cpu/bias_gelu.cpp): the fused kernels against a double
// reference in every dtype at sizes that run in parallel, bit-identical results for 1 and 2 threads,
// the GPT step with the fused MLP equal to the composed one (loss and every gradient, two steps, f32
// tight and bf16 dtype-aware), and its errors. Gradchecks (f64) and the CPU vs CUDA parity run from
// its rows in tests/support/op_cases.cpp.
//
// Inputs are fresh seeded random values rounded to the dtype (the reference reads the rounded values);
// outputs are poisoned with NaN before the kernels run.
#include <doctest/doctest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "kernels/cpu/bias_gelu.h"
#include "engine/random.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "support/check_error.h"
#include "support/gelu_reference.h"
#include "support/gradcheck.h"
#include "support/roundoff.h"
#include "support/test_seed.h"
#include "support/uniform_tensor.h"

using namespace hg;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using hg::testing::gelu_ref;
using hg::testing::gelu_slope_ref;

using hg::testing::uniform;
using hg::testing::unit_roundoff;
using hg::testing::values;

struct Outputs {
  Tensor y, dx, db;
};

Outputs run_kernels(const Tensor& x, const Tensor& b, const Tensor& dy, bool erf, int threads) {
  const int64_t rows = x.size(0), cols = x.size(1);
  Outputs o{full(x.shape(), kNaN, x.dtype()), full(x.shape(), kNaN, x.dtype()), full({cols}, kNaN, x.dtype())};
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  kernels::cpu::bias_gelu_forward(x.data_ptr(), b.data_ptr(), o.y.data_ptr(), rows, cols, erf, x.dtype());
  kernels::cpu::bias_gelu_backward(x.data_ptr(), b.data_ptr(), dy.data_ptr(), o.dx.data_ptr(), o.db.data_ptr(), rows,
                                   cols, erf, x.dtype());
  omp_set_num_threads(saved);
  return o;
}

}  // namespace

TEST_CASE("bias_gelu kernels equal a double reference in every dtype, and 1 and 2 threads agree bit for bit") {
  std::mt19937 rng = testing::seeded_rng();
  for (DType dtype : {f32, f64, f16, bf16})
    for (bool erf : {false, true})
      for (auto [rows, cols] : {std::pair<int64_t, int64_t>{3, 5}, {300, 257}, {17, 1024}}) {
        const std::string dtype_text = dtype_name(dtype);
        CAPTURE(dtype_text);
        CAPTURE(erf);
        CAPTURE(rows);
        CAPTURE(cols);
        const Tensor x = uniform(rng, {rows, cols}, -4, 4, dtype), b = uniform(rng, {cols}, -1, 1, dtype);
        const Tensor dy = uniform(rng, {rows, cols}, -1, 1, dtype);
        const Outputs one = run_kernels(x, b, dy, erf, 1), two = run_kernels(x, b, dy, erf, 2);
        CHECK(values(one.y) == values(two.y));
        CHECK(values(one.dx) == values(two.dx));
        CHECK(values(one.db) == values(two.db));
        const std::vector<double> xv = values(x), bv = values(b), gv = values(dy);
        const std::vector<double> y = values(one.y), dx = values(one.dx), db = values(one.db);
        // The math runs in f32 (f64 for f64) with libmvec's tanh/erf (a few ulp): 64 u of the
        // accumulation type, plus the rounding of the stored result (u_t).
        // eta_t: half the subnormal spacing of f16 (gelu of x + b near -5 is ~1e-6, subnormal in f16).
        const double u_acc = dtype == f64 ? 0x1p-53 : 0x1p-24, u_t = unit_roundoff(dtype);
        const double eta_t = dtype == f16 ? 0x1p-25 : 1e-300;
        std::vector<double> db_ref(size_t(cols), 0.0), db_mag(size_t(cols), 0.0);
        int bad = 0;
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < cols; ++j) {
            const size_t i = size_t(r * cols + j);
            const double pre = xv[i] + bv[size_t(j)];
            const double y_ref = gelu_ref(pre, erf), dx_ref = gv[i] * gelu_slope_ref(pre, erf);
            const double tol_y = 64 * u_acc * (std::abs(pre) + 1) + u_t * std::abs(y_ref) + eta_t;
            const double tol_dx = 64 * u_acc * (std::abs(gv[i]) * (std::abs(pre) + 1)) + u_t * std::abs(dx_ref) + eta_t;
            if (!(std::abs(y[i] - y_ref) <= tol_y) || !(std::abs(dx[i] - dx_ref) <= tol_dx)) ++bad;
            db_ref[size_t(j)] += dx[i];  // the kernel sums dx as stored
            db_mag[size_t(j)] += std::abs(dx[i]);
          }
        CHECK(bad == 0);
        for (int64_t j = 0; j < cols; ++j) {
          const double tol = (double(rows) + 2) * u_acc * db_mag[size_t(j)] + u_t * std::abs(db_ref[size_t(j)]) + eta_t;
          if (!(std::abs(db[size_t(j)] - db_ref[size_t(j)]) <= tol)) ++bad;
        }
        CHECK(bad == 0);
      }
}

TEST_CASE("linear_gelu: gelu(linear(x, W, b)) with and without a bias, its gradients in float64, every dtype") {
  std::mt19937 rng = testing::seeded_rng();
  for (GeluApproximation act : {GeluApproximation::Tanh, GeluApproximation::Erf}) {
    const Tensor x = uniform(rng, {2, 3, 5}, -2, 2, f64).requires_grad_();
    const Tensor w = uniform(rng, {4, 5}, -1, 1, f64).requires_grad_();
    const Tensor b = uniform(rng, {4}, -1, 1, f64).requires_grad_();
    CHECK(testing::gradcheck("linear_gelu",
                             [&](const std::vector<Tensor>& in) { return linear_gelu(in[0], in[1], in[2], act); },
                             {x, w, b}) == "");
    CHECK(testing::gradcheck("linear_gelu without bias",
                             [&](const std::vector<Tensor>& in) { return linear_gelu(in[0], in[1], Tensor(), act); },
                             {x, w}) == "");
    for (DType dtype : {f64, f32, bf16}) {
      const std::string dtype_text = dtype_name(dtype);
      CAPTURE(dtype_text);
      const Tensor xd = cast(x.detach(), dtype), wd = cast(w.detach(), dtype), bd = cast(b.detach(), dtype);
      const std::vector<double> fused = values(linear_gelu(xd, wd, bd, act));
      const std::vector<double> composed = values(gelu(linear(xd, wd, bd), act));
      // The composed path rounds x W^T + b to the dtype before GELU, the fused one adds b in fp32.
      const double tol = dtype == f64 ? 1e-14 : 4 * unit_roundoff(dtype);
      REQUIRE(fused.size() == composed.size());
      for (size_t i = 0; i < fused.size(); ++i)
        CHECK(std::abs(fused[i] - composed[i]) <= tol * (1 + std::abs(composed[i])));
    }
  }
}

namespace {

// Loss and every gradient of a GPT step, with the MLPs fused or composed, over two steps of AdamW.
struct StepResult {
  std::vector<double> losses;
  std::vector<std::pair<std::string, std::vector<double>>> grads;
};

StepResult gpt_steps(bool fused, DType dtype, const Tensor& ids, const Tensor& targets, GeluApproximation act) {
  manual_seed(5);
  nn::GPT model(nn::GPTConfig().vocab_size(64).context(16).n_layer(2).n_head(2).n_embd(32).activation(act));
  model.to(dtype);
  for (auto& block : model.h) {
    block->mlp->fuse_bias_gelu = fused;
    block->attn->attention_from_qkv = fused;
  }
  optim::AdamW optimizer(model.parameters(), optim::AdamWOptions().lr(1e-2).weight_decay(0.1));
  optimizer.set_mixed_precision(optim::MixedPrecisionOptions().master_weights(dtype != f32));
  StepResult result;
  for (int step = 0; step < 2; ++step) {
    const Tensor loss = model.loss(ids, targets);
    loss.backward();
    result.losses.push_back(loss.item());
    for (const auto& [name, p] : model.named_parameters())
      result.grads.emplace_back(name + " step " + std::to_string(step), values(p.grad()));
    optimizer.step();
    optimizer.zero_grad();
  }
  return result;
}

}  // namespace

TEST_CASE("GPT with the fused bias_gelu MLP equals the composed one: loss and every gradient over two steps") {
  std::mt19937 rng = testing::seeded_rng();
  manual_seed(rng());
  const Tensor ids = randint(0, 64, {3, 16}, i64), targets = randint(0, 64, {3, 16}, i64);
  for (DType dtype : {f32, bf16})
    for (GeluApproximation act : {GeluApproximation::Tanh, GeluApproximation::Erf}) {
      const std::string dtype_text = dtype_name(dtype);
      CAPTURE(dtype_text);
      const StepResult fused = gpt_steps(true, dtype, ids, targets, act);
      const StepResult composed = gpt_steps(false, dtype, ids, targets, act);
      // f32: the two paths differ only in summation order (the bias gradient): a few ulp (seen: 2e-7
      // relative). bf16: the composed path rounds x W + b to bf16 before GELU, the fused one adds b in
      // f32, so gradients differ by about one bf16 rounding (u = 2^-8; seen: 5e-3 relative).
      // Step 0, f32: the two paths differ only in summation order (the bias gradient): a few ulp (seen:
      // 2e-7 relative). bf16: the composed path rounds x W + b to bf16 before GELU, the fused one adds b
      // in f32: about one bf16 rounding (u = 2^-8; seen: 5e-3 relative). Step 1 follows an AdamW step,
      // whose m / sqrt(v) turns tiny differences of near-zero gradients into lr-sized weight
      // differences (seen: up to 1e-5 in f32, 6e-3 in bf16; step 0 is often bit-identical).
      const double loss_tol = dtype == f32 ? 1e-6 : 1e-2;
      const double grad_tol[2] = {dtype == f32 ? 2e-6 : 2e-2, dtype == f32 ? 5e-5 : 3e-2};
      for (size_t s = 0; s < 2; ++s) CHECK(std::abs(fused.losses[s] - composed.losses[s]) <= loss_tol * composed.losses[s]);
      REQUIRE(fused.grads.size() == composed.grads.size());
      double worst[2] = {0, 0};
      for (size_t i = 0; i < fused.grads.size(); ++i) {
        CAPTURE(fused.grads[i].first);
        const size_t step = i < fused.grads.size() / 2 ? 0 : 1;
        const auto& a = fused.grads[i].second;
        const auto& b = composed.grads[i].second;
        REQUIRE(a.size() == b.size());
        double diff = 0, norm = 0;
        for (size_t k = 0; k < a.size(); ++k) {
          diff += (a[k] - b[k]) * (a[k] - b[k]);
          norm += b[k] * b[k];
        }
        CHECK(std::isfinite(diff));
        CHECK(norm > 0);
        CHECK(std::sqrt(diff) <= grad_tol[step] * std::sqrt(norm));
        worst[step] = std::max(worst[step], std::sqrt(diff / norm));
      }
      MESSAGE(dtype_text, ": largest relative gradient difference ", worst[0], " at step 0, ", worst[1], " at step 1");
    }
}

TEST_CASE("bias_gelu errors name the op and what was expected") {
  CHECK_ERROR(bias_gelu(zeros({2, 3}), zeros({4})), "[bias_gelu]", "expected bias [3]");
  CHECK_ERROR(bias_gelu(zeros({2, 3}), Tensor()), "[bias_gelu]", "undefined");
  CHECK_ERROR(bias_gelu(zeros({2, 3}), zeros({3}, bf16)), "[bias_gelu]");
  CHECK_ERROR(bias_gelu(zeros({2, 3}, i64), zeros({3}, i64)), "[bias_gelu]");
}
