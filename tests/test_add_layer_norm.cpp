// add_layer_norm (engine/ops/add_layer_norm.cpp; kernels: kernels/cpu/layer_norm.cpp): the residual add
// fused with the LayerNorm after it, an op with two outputs.
//   - forward: both outputs bit-identical to the composed add then layer_norm, every dtype, with and
//     without weight/bias, 1 and 2 threads, outputs poisoned before the kernel runs;
//   - backward kernel: dx = LayerNorm's dx + dh, bit-identical to layer_norm_backward then the add kernel
//     (without dh: to layer_norm_backward; dweight/dbias too), every dtype, 1 and 2 threads;
//   - GPT trained two steps with the fused blocks against the composed ones: loss and every gradient
//     bit-identical in f32 and bf16, with and without activation checkpointing, and the fused kernels
//     counted in a profile, so the fused path is known to have run;
//   - bad shapes, dtypes and parameters give clear errors.
// Gradchecks (f64: both outputs used with independent upstream gradients, one output only, weight and
// bias on and off) and the CPU vs emulated-CUDA op parity run from its rows in tests/support/op_cases.cpp;
// the kernel parity (f32/f64/f16/bf16, outputs poisoned) is in test_cuda_kernels.
#include <doctest/doctest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "engine/profiler/profiler.h"
#include "engine/random.h"
#include "kernels/kernels.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "support/check_error.h"
#include "support/test_seed.h"
#include "support/uniform_tensor.h"

using namespace hg;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using hg::testing::uniform;
using hg::testing::values;

// Bit for bit, NaN never equal (a poisoned element left unwritten fails).
int count_bit_differences(const Tensor& a, const Tensor& b) {
  const std::vector<double> va = values(a), vb = values(b);
  if (va.size() != vb.size()) return -1;
  int bad = 0;
  for (size_t i = 0; i < va.size(); ++i)
    if (!(va[i] == vb[i]) || std::signbit(va[i]) != std::signbit(vb[i])) ++bad;
  return bad;
}

struct WithThreads {
  explicit WithThreads(int n) : saved(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~WithThreads() { omp_set_num_threads(saved); }
  int saved;
};

}  // namespace

TEST_CASE("add_layer_norm forward: sum and normalized bit-identical to add then layer_norm, every dtype, 1 and 2 threads") {
  std::mt19937 rng = testing::seeded_rng();
  for (DType dtype : {f32, f64, f16, bf16})
    for (bool affine : {true, false})
      for (auto [rows, cols] : {std::pair<int64_t, int64_t>{3, 5}, {300, 257}, {17, 1024}, {64, 256}}) {
        const std::string dtype_text = dtype_name(dtype);
        CAPTURE(dtype_text);
        CAPTURE(affine);
        CAPTURE(rows);
        CAPTURE(cols);
        const Tensor x = uniform(rng, {rows, cols}, -2, 3, dtype), r = uniform(rng, {rows, cols}, -1.5, 1, dtype);
        const Tensor w = affine ? uniform(rng, {cols}, 0.5, 1.5, dtype) : Tensor();
        const Tensor b = affine ? uniform(rng, {cols}, -1, 1, dtype) : Tensor();
        const Tensor sum_ref = x + r;
        const Tensor y_ref = layer_norm(sum_ref, w, b, 1e-5);
        for (int threads : {1, 2}) {
          CAPTURE(threads);
          WithThreads scope(threads);
          const DType stat = accumulate_dtype(dtype);
          const Tensor h = full({rows, cols}, kNaN, dtype), y = full({rows, cols}, kNaN, dtype);
          const Tensor mean = full({rows}, kNaN, stat), rstd = full({rows}, kNaN, stat);
          kernels::cpu::add_layer_norm_forward(x.data_ptr(), r.data_ptr(), affine ? w.data_ptr() : nullptr,
                                               affine ? b.data_ptr() : nullptr, h.data_ptr(), y.data_ptr(),
                                               mean.data_ptr(), rstd.data_ptr(), rows, cols, 1e-5, dtype);
          CHECK(count_bit_differences(h, sum_ref) == 0);
          CHECK(count_bit_differences(y, y_ref) == 0);
          const Tensor mean_ref = full({rows}, kNaN, stat), rstd_ref = full({rows}, kNaN, stat);
          const Tensor y_plain = full({rows, cols}, kNaN, dtype);
          kernels::cpu::layer_norm_forward(h.data_ptr(), affine ? w.data_ptr() : nullptr,
                                           affine ? b.data_ptr() : nullptr, y_plain.data_ptr(), mean_ref.data_ptr(),
                                           rstd_ref.data_ptr(), rows, cols, 1e-5, dtype);
          CHECK(count_bit_differences(mean, mean_ref) == 0);
          CHECK(count_bit_differences(rstd, rstd_ref) == 0);
        }
        const AddLayerNorm op = add_layer_norm(x, r, w, b, 1e-5);
        CHECK(count_bit_differences(op.sum, sum_ref) == 0);
        CHECK(count_bit_differences(op.normalized, y_ref) == 0);
      }
}

TEST_CASE("add_layer_norm backward kernel: LayerNorm's dx plus dh bit-identical to the composed kernels, every dtype, any thread count") {
  std::mt19937 rng = testing::seeded_rng();
  for (DType dtype : {f32, f64, f16, bf16})
    for (bool affine : {true, false})
      for (auto [rows, cols] : {std::pair<int64_t, int64_t>{3, 5}, {300, 257}, {17, 1024}}) {
        const std::string dtype_text = dtype_name(dtype);
        CAPTURE(dtype_text);
        CAPTURE(affine);
        CAPTURE(rows);
        CAPTURE(cols);
        const DType stat = accumulate_dtype(dtype);
        const Tensor h = uniform(rng, {rows, cols}, -2, 3, dtype);
        const Tensor w = affine ? uniform(rng, {cols}, 0.5, 1.5, dtype) : Tensor();
        const Tensor b = affine ? uniform(rng, {cols}, -1, 1, dtype) : Tensor();
        const Tensor dy = uniform(rng, {rows, cols}, -1, 1, dtype), dh = uniform(rng, {rows, cols}, -1, 1, dtype);
        const Tensor mean = empty({rows}, stat), rstd = empty({rows}, stat), y = empty({rows, cols}, dtype);
        const void* wp = affine ? w.data_ptr() : nullptr;
        kernels::cpu::layer_norm_forward(h.data_ptr(), wp, affine ? b.data_ptr() : nullptr, y.data_ptr(),
                                         mean.data_ptr(), rstd.data_ptr(), rows, cols, 1e-5, dtype);
        // The composed reference: layer_norm_backward's dx (rounded to the dtype), dweight, dbias.
        const Tensor dx_ln = empty({rows, cols}, dtype), dw_ln = empty({cols}, dtype), db_ln = empty({cols}, dtype);
        kernels::cpu::layer_norm_backward(h.data_ptr(), wp, mean.data_ptr(), rstd.data_ptr(), dy.data_ptr(),
                                          dx_ln.data_ptr(), dw_ln.data_ptr(), db_ln.data_ptr(), rows, cols, dtype);
        std::vector<Tensor> first;
        for (int threads : {1, 2}) {
          CAPTURE(threads);
          WithThreads scope(threads);
          const Tensor dx = full({rows, cols}, kNaN, dtype), dw = full({cols}, kNaN, dtype), db = full({cols}, kNaN, dtype);
          kernels::cpu::add_layer_norm_backward(h.data_ptr(), wp, mean.data_ptr(), rstd.data_ptr(), dy.data_ptr(),
                                                dh.data_ptr(), dx.data_ptr(), dw.data_ptr(), db.data_ptr(), rows, cols,
                                                dtype);
          CHECK(count_bit_differences(dw, dw_ln) == 0);
          CHECK(count_bit_differences(db, db_ln) == 0);
          // dx: layer_norm_backward's dx plus dh through the add kernel, bit for bit.
          CHECK(count_bit_differences(dx, dx_ln + dh) == 0);
          if (first.empty()) {
            first = {dx, dw, db};
          } else {
            CHECK(count_bit_differences(dx, first[0]) == 0);
            CHECK(count_bit_differences(dw, first[1]) == 0);
            CHECK(count_bit_differences(db, first[2]) == 0);
          }
          // Without dh (and without parameter gradients): layer_norm_backward's dx, bit for bit.
          const Tensor dx_alone = full({rows, cols}, kNaN, dtype);
          kernels::cpu::add_layer_norm_backward(h.data_ptr(), wp, mean.data_ptr(), rstd.data_ptr(), dy.data_ptr(),
                                                nullptr, dx_alone.data_ptr(), nullptr, nullptr, rows, cols, dtype);
          CHECK(count_bit_differences(dx_alone, dx_ln) == 0);
        }
      }
}

TEST_CASE("add_layer_norm op: gradients of each output reach x, residual and the parameters") {
  // Hand-checkable cases through the op: only the sum used passes its gradient through to both inputs
  // (the parameters get none); both used adds the sum's gradient to the LayerNorm's.
  std::mt19937 rng = testing::seeded_rng();
  const Tensor x0 = uniform(rng, {4, 6}, -1, 1, f64), r0 = uniform(rng, {4, 6}, -1, 1, f64);
  const Tensor w0 = uniform(rng, {6}, 0.5, 1.5, f64), b0 = uniform(rng, {6}, -1, 1, f64);
  const Tensor gs = uniform(rng, {4, 6}, -1, 1, f64), gn = uniform(rng, {4, 6}, -1, 1, f64);
  auto leaves = [&] {
    std::vector<Tensor> v{x0.clone(), r0.clone(), w0.clone(), b0.clone()};
    for (Tensor& t : v) t.requires_grad_();
    return v;
  };
  {
    std::vector<Tensor> p = leaves();
    const AddLayerNorm o = add_layer_norm(p[0], p[1], p[2], p[3]);
    sum(o.sum * gs).backward();
    CHECK(count_bit_differences(p[0].grad(), gs) == 0);
    CHECK(count_bit_differences(p[1].grad(), gs) == 0);
    CHECK_FALSE(p[2].grad().defined());
    CHECK_FALSE(p[3].grad().defined());
  }
  // The composed reference of both outputs used.
  std::vector<Tensor> c = leaves();
  const Tensor s = c[0] + c[1];
  (sum(s * gs) + sum(layer_norm(s, c[2], c[3]) * gn)).backward();
  std::vector<Tensor> p = leaves();
  const AddLayerNorm o = add_layer_norm(p[0], p[1], p[2], p[3]);
  (sum(o.sum * gs) + sum(o.normalized * gn)).backward();
  for (size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    const std::vector<double> a = values(p[i].grad()), e = values(c[i].grad());
    REQUIRE(a.size() == e.size());
    for (size_t k = 0; k < a.size(); ++k) CHECK(std::abs(a[k] - e[k]) <= 1e-13 * (1 + std::abs(e[k])));
  }
}

namespace {

struct StepResult {
  std::vector<double> losses;
  std::vector<std::pair<std::string, std::vector<double>>> grads;
};

nn::GPTConfig small_gpt() { return nn::GPTConfig().vocab_size(64).context(16).n_layer(3).n_head(2).n_embd(32); }

// Two steps of a fused and a composed GPT from the same initialisation, each with its own AdamW. After
// the first update the composed model's weights are copied into the fused one, so the second step's
// gradients are compared at the same trained weights (LayerNorm weights no longer 1, biases no longer
// 0) even if the first step's gradients differed (AdamW's first update, lr * g / |g|, would turn a
// rounding-level sign change of a near-zero gradient into a 2 lr weight difference).
std::pair<StepResult, StepResult> gpt_steps(DType dtype, int64_t recompute_every, const Tensor& ids,
                                            const Tensor& targets) {
  std::unique_ptr<nn::GPT> models[2];
  std::unique_ptr<optim::AdamW> optimizers[2];
  for (int k = 0; k < 2; ++k) {
    manual_seed(5);
    models[k] = std::make_unique<nn::GPT>(small_gpt().recompute_every(recompute_every));
    models[k]->to(dtype);
    for (auto& block : models[k]->h) block->fuse_add_layer_norm = k == 0;
    optimizers[k] = std::make_unique<optim::AdamW>(models[k]->parameters(),
                                                   optim::AdamWOptions().lr(1e-2).weight_decay(0.1));
    optimizers[k]->set_mixed_precision(optim::MixedPrecisionOptions().master_weights(dtype != f32));
  }
  StepResult results[2];
  for (int step = 0; step < 2; ++step) {
    for (int k = 0; k < 2; ++k) {
      const Tensor loss = models[k]->loss(ids, targets);
      loss.backward();
      results[k].losses.push_back(loss.item());
      for (const auto& [name, p] : models[k]->named_parameters())
        results[k].grads.emplace_back(name + " step " + std::to_string(step), values(p.grad()));
      optimizers[k]->step();
      optimizers[k]->zero_grad();
    }
    NoGradGuard no_grad;
    const auto fused = models[0]->parameters(), composed = models[1]->parameters();
    for (size_t i = 0; i < fused.size(); ++i) fused[i].copy_(composed[i]);
  }
  return {results[0], results[1]};
}

}  // namespace

TEST_CASE("GPT with fused add_layer_norm equals the composed blocks: loss and every gradient over two steps") {
  std::mt19937 rng = testing::seeded_rng();
  manual_seed(rng());
  const Tensor ids = randint(0, 64, {3, 16}, i64), targets = randint(0, 64, {3, 16}, i64);
  for (DType dtype : {f32, bf16})
    for (int64_t recompute_every : {0, 1, 2}) {
      const std::string dtype_text = dtype_name(dtype);
      CAPTURE(dtype_text);
      CAPTURE(recompute_every);
      const auto [fused, composed] = gpt_steps(dtype, recompute_every, ids, targets);
      // Bit for bit: the forward rounds the sum before the statistics, the backward rounds LayerNorm's
      // dx before adding dh, as the composed ops do; only the passes over memory differ. (Within a
      // checkpointed segment the block boundaries are fused, at its ends they are not: equal bits
      // also keep checkpointed and plain runs identical, test_activation_checkpoint.)
      CHECK(fused.losses[0] == composed.losses[0]);
      CHECK(fused.losses[1] == composed.losses[1]);
      REQUIRE(fused.grads.size() == composed.grads.size());
      double worst[2] = {0, 0};
      for (size_t i = 0; i < fused.grads.size(); ++i) {
        CAPTURE(fused.grads[i].first);
        const size_t step = i < fused.grads.size() / 2 ? 0 : 1;
        const auto& a = fused.grads[i].second;
        const auto& b = composed.grads[i].second;
        REQUIRE(a.size() == b.size());
        double diff = 0, norm = 0;
        int differing = 0;
        for (size_t k = 0; k < a.size(); ++k) {
          differing += !(a[k] == b[k]);
          diff += (a[k] - b[k]) * (a[k] - b[k]);
          norm += b[k] * b[k];
        }
        CHECK(differing == 0);
        CHECK(norm > 0);
        worst[step] = std::max(worst[step], std::sqrt(diff / norm));
      }
      MESSAGE(dtype_text, " recompute_every ", recompute_every, ": largest relative gradient difference ", worst[0],
              " at step 0, ", worst[1], " at step 1");
    }
}

TEST_CASE("GPT runs one fused add_layer_norm per residual add: 2 per block, the last with ln_f") {
  manual_seed(3);
  const int64_t layers = 3;
  nn::GPT model(small_gpt().n_layer(layers));
  const Tensor ids = randint(0, 64, {2, 16}, i64), targets = randint(0, 64, {2, 16}, i64);
  for (bool fused : {true, false}) {
    CAPTURE(fused);
    for (auto& block : model.h) block->fuse_add_layer_norm = fused;
    profiler::start(profiler::Options().op_ranges(true));
    model.loss(ids, targets).backward();
    const profiler::Profile profile = profiler::stop();
    int64_t forward = 0, backward = 0, layer_norms = 0;
    for (const auto& r : profile.ranges) {
      forward += r.name == "add_layer_norm_forward";
      backward += r.name == "add_layer_norm backward";
      layer_norms += r.name == "layer_norm_forward";
    }
    CHECK(forward == (fused ? 2 * layers : 0));
    CHECK(backward == (fused ? 2 * layers : 0));
    // Unfused: ln_1 and ln_2 of every block and ln_f. Fused: only the first block's ln_1.
    CHECK(layer_norms == (fused ? 1 : 2 * layers + 1));
  }
}

TEST_CASE("add_layer_norm rejects bad shapes, dtypes and parameters with clear errors") {
  const Tensor x = randn({2, 3, 4}), r = randn({2, 3, 4}), w = ones({4}), b = zeros({4});
  CHECK_ERROR(add_layer_norm(x, randn({3, 4}), w, b), "[add_layer_norm]", "residual is f32[3, 4]",
              "expected equal shapes");
  CHECK_ERROR(add_layer_norm(x, randn({2, 3, 5}), w, b), "[add_layer_norm]", "expected equal shapes");
  CHECK_ERROR(add_layer_norm(x, r.to(f64), w, b), "[add_layer_norm]", "residual");
  CHECK_ERROR(add_layer_norm(x, r, ones({5}), b), "[add_layer_norm]", "weight is f32[5]",
              "expected weight of shape [4]");
  CHECK_ERROR(add_layer_norm(x, r, w, zeros({4}, f64)), "[add_layer_norm]", "bias");
  CHECK_ERROR(add_layer_norm(x, r, w, b, 0.0), "[add_layer_norm]", "expected eps > 0");
  CHECK_ERROR(add_layer_norm(randint(0, 3, {2, 4}, i64), randint(0, 3, {2, 4}, i64), w, b), "[add_layer_norm]");
}
