// Mixed precision on the CPU: the stochastic-rounding kernel (neighbours, probabilities,
// determinism), the optimizer's fp32 master weights (fused and generic paths agree bit for bit,
// small updates survive, state round trip), fp32 gradient buffers, and gradient accumulation
// (N micro-batches of b equal one batch of N b).
#include <doctest/doctest.h>

#include "support/check_error.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "engine/ops.h"
#include "engine/random.h"
#include "kernels/half.h"
#include "kernels/kernels.h"
#include "kernels/stochastic_round.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "samples/addition_task.h"

using namespace hg;

namespace {

float half_value(DType dtype, uint16_t bits) {
  return dtype == DType::f16 ? half_bits_to_float(bits) : bfloat16_bits_to_float(bits);
}

uint16_t nearest_bits(DType dtype, float x) {
  return dtype == DType::f16 ? float_to_half_bits(x) : float_to_bfloat16_bits(x);
}

// Random floats spread over the normal and subnormal ranges of the half type, both signs.
std::vector<float> random_values(DType dtype, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const double max_exponent = dtype == DType::f16 ? 15.0 : 100.0;
  const double min_exponent = dtype == DType::f16 ? -26.0 : -130.0;
  std::uniform_real_distribution<double> exponent(min_exponent, max_exponent), unit(0.0, 1.0);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = float((unit(rng) < 0.5 ? -1.0 : 1.0) * std::exp2(exponent(rng)));
  return x;
}

std::vector<uint16_t> round_cpu(const std::vector<float>& x, DType dtype, uint64_t seed, uint64_t offset) {
  std::vector<uint16_t> y(x.size(), 0xffffu);  // poisoned: every element must be written
  kernels::cpu::stochastic_round(x.data(), y.data(), int64_t(x.size()), seed, offset, dtype);
  return y;
}

}  // namespace

TEST_CASE("stochastic rounding picks one of the two neighbours") {
  for (DType dtype : {DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(dtype));
    const std::vector<float> x = random_values(dtype, 20000, 5);
    const std::vector<uint16_t> y = round_cpu(x, dtype, 42, 3);
    int64_t rounded_away_from_nearest = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const uint16_t nearest = nearest_bits(dtype, x[i]);
      const float r = half_value(dtype, y[i]), v = half_value(dtype, nearest);
      // r is x's nearest value or the neighbour of it on x's other side: never further than one step.
      const bool ok = y[i] == nearest || (v > x[i] ? r <= x[i] : r >= x[i]);
      if (!ok) CHECK_MESSAGE(ok, "x = ", x[i], " rounded to ", r, " (nearest ", v, ")");
      const int distance = std::abs(int(y[i] & 0x7fff) - int(nearest & 0x7fff));
      CHECK(distance <= 1);
      rounded_away_from_nearest += y[i] != nearest;
    }
    // About a quarter of random values round to the farther neighbour (p uniform on [0, 1/2]).
    CHECK(rounded_away_from_nearest > 20000 / 6);
    CHECK(rounded_away_from_nearest < 20000 / 3);
  }
}

TEST_CASE("stochastic rounding is unbiased") {
  for (DType dtype : {DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(dtype));
    // x = 1 + 0.3 ulp rounds up with probability 0.3; a negative subnormal-range value too.
    const float ulp = dtype == DType::f16 ? std::ldexp(1.0f, -10) : std::ldexp(1.0f, -7);
    const float subnormal_ulp = dtype == DType::f16 ? std::ldexp(1.0f, -24) : std::ldexp(1.0f, -133);
    for (float x : {1.0f + 0.3f * ulp, -(7.0f + 0.7f) * subnormal_ulp}) {
      CAPTURE(x);
      const int64_t n = 200000;
      const std::vector<uint16_t> y = round_cpu(std::vector<float>(size_t(n), x), dtype, 7, 0);
      double mean = 0.0;
      for (uint16_t b : y) mean += double(half_value(dtype, b)) / double(n);
      const double step = std::abs(double(x)) < 1e-3 ? subnormal_ulp : ulp;
      // The mean of n draws is within 5 standard deviations (sqrt(p (1 - p) / n) steps) of x.
      CHECK(std::abs(mean - double(x)) < 5.0 * std::sqrt(0.21 / double(n)) * step);
    }
  }
}

TEST_CASE("stochastic rounding keeps RNE results where there is no choice") {
  for (DType dtype : {DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(dtype));
    const float big = dtype == DType::f16 ? 1e6f : 3.0e38f;  // rounds to inf under RNE (bf16: 3.0e38 > max?)
    std::vector<float> x = {1.5f, -2.0f, 0.0f, -0.0f, INFINITY, -INFINITY, NAN, big, -big};
    if (dtype == DType::bf16) x[7] = std::nextafter(3.4028235e38f, 0.0f), x[8] = -x[7];
    for (int trial = 0; trial < 64; ++trial) {
      const std::vector<uint16_t> y = round_cpu(x, dtype, uint64_t(trial), 11);
      for (size_t i = 0; i < x.size(); ++i) {
        CAPTURE(x[i]);
        const uint16_t nearest = nearest_bits(dtype, x[i]);
        // Exact values, infinities, NaN and overflowing values: RNE's answer every time.
        if (i < 7 || std::isinf(half_value(dtype, nearest))) CHECK(y[i] == nearest);
      }
    }
  }
}

TEST_CASE("stochastic rounding draws are a pure function of seed offset and index") {
  const std::vector<float> x = random_values(DType::bf16, 5000, 9);
  const std::vector<uint16_t> a = round_cpu(x, DType::bf16, 1, 100);
  CHECK(a == round_cpu(x, DType::bf16, 1, 100));
  CHECK(a != round_cpu(x, DType::bf16, 2, 100));
  CHECK(a != round_cpu(x, DType::bf16, 1, 101));
  // Element i does not depend on n: a prefix rounds as the whole does.
  const std::vector<float> prefix(x.begin(), x.begin() + 1001);
  const std::vector<uint16_t> b = round_cpu(prefix, DType::bf16, 1, 100);
  CHECK(std::equal(b.begin(), b.end(), a.begin()));
  // Each element as stochastic_round.h computes it from philox_bits.
  for (size_t i = 0; i < 64; ++i) {
    CHECK(a[i] == kernels::stochastic_round_bits<kernels::BFloat16Bits>(x[i], philox_bits(1, 100, i)));
  }
  std::vector<uint16_t> out(4);
  CHECK_ERROR(kernels::cpu::stochastic_round(x.data(), out.data(), 4, 0, 0, DType::f32), "cannot round to f32",
              "expected f16 or bf16");
}

// ---- optimizer master weights ----------------------------------------------------------------

namespace {

// A half parameter with fresh random values and a gradient, for optimizer tests.
Tensor half_param(DType dtype, const Shape& shape, uint64_t seed) {
  manual_seed(seed);
  Tensor p = randn(shape).to(dtype);
  p.requires_grad_();
  return p;
}

std::vector<uint16_t> bits_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  const auto* data = static_cast<const uint16_t*>(c.data_ptr());
  return std::vector<uint16_t>(data, data + c.numel());
}

}  // namespace

TEST_CASE("AdamW master weights: the fused path equals update-then-round bit for bit") {
  for (DType dtype : {DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(dtype));
    // The fused kernel runs when the gradient has the parameter's dtype; an fp32 gradient holding
    // the same values takes the generic path (update on the master copy, then round to nearest).
    Tensor fused = half_param(dtype, {37, 19}, 3);
    Tensor generic = fused.detach().clone();
    generic.requires_grad_().set_grad_dtype(DType::f32);
    auto options = optim::AdamWOptions().lr(1e-2).weight_decay(0.1);
    optim::AdamW a({fused}, options), b({generic}, options);
    for (int step = 0; step < 6; ++step) {
      manual_seed(100 + uint64_t(step));
      const Tensor g = randn({37, 19}).to(dtype);
      fused.set_grad(g.clone());
      generic.set_grad(g.to(DType::f32));
      a.step();
      b.step();
      CHECK(bits_of(fused) == bits_of(generic));
      // The parameter is the master copy rounded to nearest even.
      const Tensor master = a.state(0).buffers.at("master");
      CHECK(master.dtype() == DType::f32);
      CHECK(bits_of(master.to(dtype)) == bits_of(fused));
      CHECK(master.to_vector<float>() == b.state(0).buffers.at("master").to_vector<float>());
    }
  }
}

TEST_CASE("master weights keep updates smaller than half an ulp") {
  // SGD with lr * grad = 1e-4 per step on weights of 1.0: bf16's ulp at 1 is 2^-7 = 0.0078, so each
  // update is 1/78 of an ulp and round-to-nearest without a master copy drops every one of them.
  const int steps = 100;
  auto run = [&](bool master, bool stochastic) {
    Tensor p = full({4096}, 1.0, DType::bf16);
    p.requires_grad_();
    optim::SGD sgd({p}, optim::SGDOptions().lr(1e-4));
    sgd.set_mixed_precision(
        optim::MixedPrecisionOptions().master_weights(master).stochastic_rounding(stochastic).rounding_seed(5));
    for (int i = 0; i < steps; ++i) {
      p.set_grad(full({4096}, 1.0, DType::bf16));
      sgd.step();
    }
    return std::pair{p.to(DType::f32).to_vector<float>(),
                     master ? sgd.state(0).buffers.at("master").to_vector<float>() : std::vector<float>{}};
  };
  const double expected = 1.0 - steps * 1e-4;  // 0.99
  {
    const auto [values, master] = run(false, false);
    for (float v : values) CHECK(v == 1.0f);  // every update lost
  }
  {
    const auto [values, master] = run(true, false);
    CHECK(master[0] == doctest::Approx(expected).epsilon(1e-5));
    CHECK(values[0] == float(bfloat16(master[0])));  // the parameter is the master's rounding
  }
  {
    // Stochastic rounding without a master copy: right on average.
    const auto [values, master] = run(false, true);
    double mean = 0.0;
    for (float v : values) mean += v / 4096.0;
    CHECK(mean == doctest::Approx(expected).epsilon(2e-4));
  }
}

TEST_CASE("stochastic rounding in the optimizer is reproducible and depends on the seed") {
  auto run = [](uint64_t seed) {
    Tensor p = half_param(DType::bf16, {300}, 8);
    optim::AdamW adamw({p}, optim::AdamWOptions().lr(1e-3));
    adamw.set_mixed_precision(optim::MixedPrecisionOptions().stochastic_rounding(true).rounding_seed(seed));
    for (int step = 0; step < 3; ++step) {
      manual_seed(50 + uint64_t(step));
      p.set_grad(randn({300}).to(DType::bf16));
      adamw.step();
    }
    return bits_of(p);
  };
  CHECK(run(1) == run(1));
  CHECK(run(1) != run(2));
}

TEST_CASE("master weights are optimizer state that saves and loads") {
  Tensor p = half_param(DType::f16, {8, 8}, 4);
  optim::AdamW adamw({p}, optim::AdamWOptions().lr(1e-2));
  p.set_grad(full({8, 8}, 0.5, DType::f16));
  adamw.step();
  std::vector<std::string> names;
  for (const auto& [name, t] : adamw.state_tensors()) names.push_back(name);
  CHECK(std::find(names.begin(), names.end(), "0.master") != names.end());

  Tensor q = p.detach().clone();
  q.requires_grad_();
  optim::AdamW restored({q}, optim::AdamWOptions().lr(1e-2));
  restored.load_state_tensors(adamw.state_tensors());
  p.set_grad(full({8, 8}, -0.25, DType::f16));
  q.set_grad(full({8, 8}, -0.25, DType::f16));
  adamw.step();
  restored.step();
  CHECK(bits_of(p) == bits_of(q));

  // A checkpoint without the master copy does not fit a half parameter that keeps one.
  std::vector<std::pair<std::string, Tensor>> missing;
  for (const auto& entry : adamw.state_tensors())
    if (entry.first != "0.master") missing.push_back(entry);
  CHECK_ERROR(restored.load_state_tensors(missing), "has state but no '0.master'");
  CHECK_ERROR(restored.set_mixed_precision(optim::MixedPrecisionOptions().master_weights(false)),
              "cannot turn master weights off after the first step");
}

TEST_CASE("fp32 gradient buffers of a half parameter") {
  // One backward adds 256 to every gradient, 63 more add 1 each. In bf16 (8 significant bits) 256 + 1
  // rounds back to 256 every time; the fp32 buffer sums to 319 exactly.
  auto accumulate = [](bool fp32_buffer) {
    Tensor p = half_param(DType::bf16, {64}, 12);
    if (fp32_buffer) p.set_grad_dtype(DType::f32);
    sum(p * 256.0).backward();
    for (int i = 0; i < 63; ++i) sum(p).backward();
    return p.grad();
  };
  const Tensor fp32 = accumulate(true), bf16 = accumulate(false);
  CHECK(fp32.dtype() == DType::f32);
  CHECK(bf16.dtype() == DType::bf16);
  for (float v : fp32.to_vector<float>()) CHECK(v == 319.0f);
  for (float v : bf16.to(DType::f32).to_vector<float>()) CHECK(v == 256.0f);

  Tensor p = half_param(DType::bf16, {4}, 1);
  p.set_grad_dtype(DType::f32);
  CHECK(p.grad_dtype() == DType::f32);
  sum(p).backward();
  CHECK_ERROR(p.set_grad_dtype(DType::bf16), "already holds a f32 gradient");
  CHECK_ERROR(p.set_grad_dtype(DType::i32), "gradients must be floating");
}

// ---- gradient accumulation -------------------------------------------------------------------

namespace {

constexpr double kLr = 3e-3;

nn::GPTConfig tiny_gpt() { return nn::GPTConfig().vocab_size(32).context(16).n_layer(2).n_head(2).n_embd(32); }

struct RunResult {
  std::vector<std::vector<float>> grads;   // after the first step's backward(s)
  std::vector<std::vector<float>> params;  // after the last step
  std::vector<double> losses;
};

// `steps` AdamW steps of a tiny GPT on fixed random data of batch B, as `micro` micro-batches of
// B / micro sequences, each loss scaled by 1 / micro so the summed gradient is the batch mean's.
enum class Rule { adamw, sgd_momentum };

RunResult train_accumulating(DType dtype, int64_t micro, int steps, bool fp32_grads = false, Rule rule = Rule::adamw) {
  manual_seed(21);
  nn::GPT model(tiny_gpt());
  model.to(dtype);
  if (fp32_grads) model.set_grad_dtype(DType::f32);
  std::unique_ptr<optim::Optimizer> optimizer;
  if (rule == Rule::adamw)
    optimizer = std::make_unique<optim::AdamW>(model.parameters(), optim::AdamWOptions().lr(kLr).weight_decay(0.1));
  else
    optimizer = std::make_unique<optim::SGD>(model.parameters(), optim::SGDOptions().lr(0.5).momentum(0.9));
  const int64_t B = 8, T = 16;
  RunResult result;
  for (int step = 0; step < steps; ++step) {
    manual_seed(1000 + uint64_t(step));
    const Tensor ids = randint(0, 32, {B, T}), targets = randint(0, 32, {B, T});
    double loss_sum = 0.0;
    for (int64_t m = 0; m < micro; ++m) {
      const int64_t b = B / micro;
      const Tensor loss = model.loss(ids.narrow(0, m * b, b), targets.narrow(0, m * b, b)) * (1.0 / double(micro));
      loss.backward();
      loss_sum += loss.item();
    }
    result.losses.push_back(loss_sum);
    if (step == 0)
      for (const Tensor& p : model.parameters()) result.grads.push_back(p.grad().to(DType::f32).to_vector<float>());
    optim::clip_grad_norm(model.parameters(), 1.0);
    optimizer->step();
    optimizer->zero_grad();
  }
  for (const Tensor& p : model.parameters()) result.params.push_back(p.to(DType::f32).to_vector<float>());
  return result;
}

// max |a - b| / (max |b| + tiny) over each tensor.
double max_relative_difference(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  double worst = 0.0;
  for (size_t t = 0; t < a.size(); ++t) {
    double diff = 0.0, scale = 1e-30;
    for (size_t i = 0; i < a[t].size(); ++i) {
      diff = std::max(diff, double(std::abs(a[t][i] - b[t][i])));
      scale = std::max(scale, double(std::abs(b[t][i])));
    }
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

}  // namespace

// max |a - b| over every element.
double max_abs_difference(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  double worst = 0.0;
  for (size_t t = 0; t < a.size(); ++t)
    for (size_t i = 0; i < a[t].size(); ++i) worst = std::max(worst, double(std::abs(a[t][i] - b[t][i])));
  return worst;
}

TEST_CASE("gradient accumulation: micro-batches equal one full batch in f32") {
  for (Rule rule : {Rule::sgd_momentum, Rule::adamw}) {
    const RunResult full_batch = train_accumulating(DType::f32, 1, 4, false, rule);
    for (int64_t micro : {2, 4}) {
      CAPTURE(micro);
      CAPTURE(rule == Rule::adamw);
      const RunResult accumulated = train_accumulating(DType::f32, micro, 4, false, rule);
      CHECK(max_relative_difference(accumulated.grads, full_batch.grads) < 1e-6);
      for (size_t i = 0; i < full_batch.losses.size(); ++i)
        CHECK(accumulated.losses[i] == doctest::Approx(full_batch.losses[i]).epsilon(1e-6));
      if (rule == Rule::sgd_momentum) {
        CHECK(max_relative_difference(accumulated.params, full_batch.params) < 1e-6);
      } else {
        // Adam divides by sqrt(v): an element whose gradient is pure cancellation noise (~1e-7 of
        // the terms it sums) moves by up to lr either way, whatever the noise's size. Four steps
        // therefore bound the difference by a fraction of 4 lr, not by 1e-6 relative.
        CHECK(max_abs_difference(accumulated.params, full_batch.params) < 4 * kLr);
      }
    }
  }
}

TEST_CASE("gradient accumulation in half precision stays within rounding of the full batch") {
  // Half activations round each micro-batch's forward differently from the full batch's (row
  // blocks of the GEMMs see other neighbours only through the shared weights, so the products are
  // the same, but reductions over the batch -- the weight gradients -- are summed in a different
  // grouping and rounded to half once per micro-batch). The bound is a few half ulps of the
  // largest gradient: 4 micro-batches add at most 4 roundings of 2^-8 (f16: 2^-11) relative each.
  for (DType dtype : {DType::bf16, DType::f16}) {
    CAPTURE(dtype_name(dtype));
    const double unit = dtype == DType::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    const RunResult full_batch = train_accumulating(dtype, 1, 3);
    const RunResult half_grads = train_accumulating(dtype, 4, 3);
    const RunResult fp32_grads = train_accumulating(dtype, 4, 3, true);
    CHECK(max_relative_difference(half_grads.grads, full_batch.grads) < 8 * unit);
    CHECK(max_relative_difference(fp32_grads.grads, full_batch.grads) < 8 * unit);
    for (size_t i = 0; i < full_batch.losses.size(); ++i) {
      CHECK(half_grads.losses[i] == doctest::Approx(full_batch.losses[i]).epsilon(16 * unit));
      CHECK(fp32_grads.losses[i] == doctest::Approx(full_batch.losses[i]).epsilon(16 * unit));
    }
  }
}

// ---- loss scaling and half-precision training --------------------------------------------------

TEST_CASE("a loss-scaled fp16 run equals an unscaled control that skips the same steps") {
  // Scaling the loss by a power of two S scales every fp16 gradient of the backward by exactly S,
  // except where the unscaled gradient underflows fp16 (below 2^-24, or loses bits below 2^-14):
  // that is the point of scaling. The dynamic scaler starts at 2^20 with growth every 3 clean
  // steps, so it overflows, skips and backs off during the run; the control (no scaling) skips the
  // very same iterations. The runs then differ only through the control's underflowed gradient
  // elements, which are tiny. SGD moves a parameter in proportion to its gradient, so tiny gradient
  // differences stay tiny (Adam would not do: it normalises a gradient of 1e-8 into a step of ~lr,
  // and an underflowed 0 into none, so there the comparison would measure Adam, not the scaling).
  auto train = [](bool scaled, std::vector<bool>* skipped) {
    manual_seed(31);
    nn::GPT model(tiny_gpt());
    model.to(DType::f16);
    const std::vector<Tensor> params = model.parameters();
    optim::SGD sgd(params, optim::SGDOptions().lr(0.1).momentum(0.9));
    optim::LossScaler scaler =
        scaled ? optim::LossScaler::dynamic(
                     optim::DynamicLossScaleOptions().init_scale(std::ldexp(1.0, 20)).growth_interval(3))
               : optim::LossScaler::none();
    for (int step = 0; step < 12; ++step) {
      manual_seed(500 + uint64_t(step));
      const Tensor ids = randint(0, 32, {4, 16}), targets = randint(0, 32, {4, 16});
      scaler.scale(model.loss(ids, targets)).backward();
      if (scaled) {
        scaler.unscale_(sgd);
        skipped->push_back(!scaler.step(sgd));
        scaler.update();
      } else if ((*skipped)[size_t(step)]) {
        // the scaled run skipped this iteration: so does the control
      } else {
        sgd.step();
      }
      sgd.zero_grad();
    }
    std::vector<std::vector<float>> values;
    for (const Tensor& p : params) values.push_back(p.to(DType::f32).to_vector<float>());
    return values;
  };
  std::vector<bool> skipped;
  const auto scaled = train(true, &skipped);
  const int64_t skips = std::count(skipped.begin(), skipped.end(), true);
  CHECK(skips >= 1);  // 2^20 overflows fp16 on the first backward
  CHECK(skips <= 6);  // and the scaler settles
  const auto control = train(false, &skipped);
  // Identical data and skips: the parameters (|values| < 0.5) agree to 4 fp16 ulps at 0.25 (5e-4);
  // measured: 9.2e-5, one ulp.
  const double difference = max_abs_difference(scaled, control);
  MESSAGE("max |scaled - control| = ", difference);
  CHECK(difference < 5e-4);
}

TEST_CASE("the addition task trains in bf16 and fp16 along the f32 loss curve") {
  // train_gpt's default task at a small size (2-digit addition, 1 block of width 64, 32 problems a
  // step) for 150 steps: the smooth part of training, where the loss falls from ln 256 = 5.5 to
  // ~0.93 the same way in every run. (Later, the moment a model "gets" carrying is a sharp, seed-
  // sensitive transition, so single runs there differ by more than precision; the full-length
  // comparison in each precision is measured with train_gpt and reported in the README.) Half
  // precision must follow f32 within 0.05 of loss, averaged over the last 30 steps; a run whose
  // precision broke learning (no master weights, an unscaled fp16 underflow, a wrong unscale)
  // stays far above.
  auto train = [](DType dtype) {
    manual_seed(3);
    samples::AdditionTask task(2);
    const auto config =
        nn::GPTConfig().vocab_size(256).context(task.problem_length() - 1).n_layer(1).n_head(2).n_embd(64);
    nn::GPT model(config);
    model.to(dtype);
    const std::vector<Tensor> params = model.parameters();
    optim::AdamW adamw(params, optim::AdamWOptions().lr(3e-3).weight_decay(0.1).decay_only_matrices(true));
    optim::LossScaler scaler = dtype == DType::f16 ? optim::LossScaler::dynamic() : optim::LossScaler::none();
    std::mt19937_64 rng(17);
    double recent_loss = 0.0;
    const int steps = 150, averaged = 30;
    for (int step = 0; step < steps; ++step) {
      auto [ids, targets] = task.training_batch(32, rng);
      const Tensor loss = model.loss(ids, targets);
      scaler.scale(loss).backward();
      scaler.unscale_(adamw);
      adamw.clip_grad_norm(1.0);
      scaler.step(adamw);
      scaler.update();
      adamw.zero_grad();
      if (step >= steps - averaged) recent_loss += loss.item() / averaged;
    }
    return recent_loss;
  };
  const double f32_loss = train(DType::f32);
  MESSAGE("f32: loss ", f32_loss);
  CHECK(f32_loss < 2.0);
  for (DType dtype : {DType::bf16, DType::f16}) {
    const std::string name = dtype_name(dtype);
    CAPTURE(name);
    const double loss = train(dtype);
    MESSAGE(name, ": loss ", loss);
    CHECK(std::abs(loss - f32_loss) < 0.05);
  }
}
