// optim/loss_scaler.h: the dynamic policy step by step (growth, backoff, hysteresis, the clean-step
// counter, the max and min scale), static and none modes, the skip-on-overflow step on a small GPT
// with an inf or a NaN planted in one gradient (parameters and AdamW state bit-identical, gradients
// zeroed, scale halved), exact power-of-two unscaling, the overflow reducer, step() of an optimizer
// that unscales itself (ZeRO), checkpoint state and its validation.
//
// The same source is compiled twice: test_loss_scaler runs everything on the CPU;
// test_cuda_loss_scaler (HG_LOSS_SCALER_ON_CUDA) runs the model cases on the CUDA device (the SIMT
// emulator in the emulated build), and skips visibly without one.
#include <doctest/doctest.h>

#include "support/check_error.h"
#include "support/suite_device.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "engine/random.h"
#include "layers/nn.h"
#include "optim/optim.h"

#if defined(HG_LOSS_SCALER_ON_CUDA)
#include "engine/cuda/cuda_context.h"
#endif

// The model cases' names say where they run, so the two builds of this file list apart in ctest.
#if defined(HG_LOSS_SCALER_ON_CUDA)
#define ON_DEVICE "cuda: "
#else
#define ON_DEVICE ""
#endif

using namespace hg;
using namespace hg::optim;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<unsigned char> bytes_of(const Tensor& t) {
  const Tensor host = t.to(kCPU).contiguous();
  std::vector<unsigned char> out(size_t(host.numel()) * host.element_size());
  if (!out.empty()) std::memcpy(out.data(), host.data_ptr(), out.size());
  return out;
}

#if !defined(HG_LOSS_SCALER_ON_CUDA)
// A parameter with a fresh random gradient; `poison` (inf or NaN) goes into its element 3.
Tensor param_with_grad(double poison = 0.0) {
  Tensor p = randn({8}).requires_grad_();
  Tensor g = randn({8});
  if (poison != 0.0) g.narrow(0, 3, 1).fill_(poison);
  p.set_grad(g);
  return p;
}

// One step of the policy alone: unscale_ of a gradient that is clean or not, then update().
void policy_step(LossScaler& scaler, bool overflow) {
  const Tensor p = param_with_grad(overflow ? kInf : 0.0);
  CHECK(scaler.unscale_({p}) == !overflow);
  scaler.update();
}

#endif  // !HG_LOSS_SCALER_ON_CUDA

}  // namespace

#if !defined(HG_LOSS_SCALER_ON_CUDA)

TEST_CASE("dynamic scale: growth 2 backoff 0.25 interval 2 from 4 gives 4 then 8 then 2 on overflow") {
  LossScaler scaler = LossScaler::dynamic(
      DynamicLossScaleOptions().init_scale(4).growth_factor(2).backoff_factor(0.25).growth_interval(2));
  CHECK(scaler.scale_value() == 4);
  policy_step(scaler, false);
  CHECK(scaler.scale_value() == 4);
  CHECK(scaler.good_steps() == 1);
  policy_step(scaler, false);
  CHECK(scaler.scale_value() == 8);
  CHECK(scaler.good_steps() == 0);
  policy_step(scaler, true);
  CHECK(scaler.scale_value() == 2);
  CHECK(scaler.good_steps() == 0);
}

TEST_CASE("dynamic scale: the clean-step counter restarts on an overflow") {
  LossScaler scaler = LossScaler::dynamic(DynamicLossScaleOptions().init_scale(16).growth_interval(3));
  policy_step(scaler, false);
  policy_step(scaler, false);
  CHECK(scaler.good_steps() == 2);
  policy_step(scaler, true);
  CHECK(scaler.scale_value() == 8);
  CHECK(scaler.good_steps() == 0);
  policy_step(scaler, false);
  policy_step(scaler, false);
  CHECK(scaler.scale_value() == 8);  // two clean steps since the overflow: not yet
  policy_step(scaler, false);
  CHECK(scaler.scale_value() == 16);
}

TEST_CASE("dynamic scale: hysteresis 2 tolerates one overflow then backs off") {
  LossScaler scaler = LossScaler::dynamic(DynamicLossScaleOptions().init_scale(64).growth_interval(2).hysteresis(2));
  CHECK(scaler.hysteresis_left() == 2);
  policy_step(scaler, true);
  CHECK(scaler.scale_value() == 64);  // tolerated
  CHECK(scaler.hysteresis_left() == 1);
  CHECK(scaler.good_steps() == 0);
  policy_step(scaler, true);
  CHECK(scaler.scale_value() == 32);
  policy_step(scaler, true);  // the budget is spent until the scale grows again (DeepSpeed)
  CHECK(scaler.scale_value() == 16);
  policy_step(scaler, false);
  CHECK(scaler.hysteresis_left() == 1);
  policy_step(scaler, false);
  CHECK(scaler.scale_value() == 32);
  CHECK(scaler.hysteresis_left() == 2);  // restored by the growth
  policy_step(scaler, true);
  CHECK(scaler.scale_value() == 32);

  LossScaler consecutive = LossScaler::dynamic(
      DynamicLossScaleOptions().init_scale(64).growth_interval(100).hysteresis(2).consecutive_hysteresis(true));
  policy_step(consecutive, true);
  policy_step(consecutive, false);  // one clean step restores the budget
  CHECK(consecutive.hysteresis_left() == 2);
  policy_step(consecutive, true);
  CHECK(consecutive.scale_value() == 64);
  policy_step(consecutive, true);
  CHECK(consecutive.scale_value() == 32);
}

TEST_CASE("dynamic scale: never grows to inf and never drops below min_scale") {
  LossScaler big =
      LossScaler::dynamic(DynamicLossScaleOptions().init_scale(0x1p120).growth_interval(1).growth_factor(4));
  for (int i = 0; i < 10; ++i) policy_step(big, false);
  CHECK(big.scale_value() == 0x1p127);
  CHECK(std::isfinite(float(big.scale_value())));
  CHECK(std::isfinite(big.scale(scalar_tensor(1.5)).item()));
  LossScaler capped =
      LossScaler::dynamic(DynamicLossScaleOptions().init_scale(1024).max_scale(4096).growth_interval(1));
  for (int i = 0; i < 5; ++i) policy_step(capped, false);
  CHECK(capped.scale_value() == 4096);

  LossScaler low = LossScaler::dynamic(DynamicLossScaleOptions().init_scale(4).min_scale(1));
  const double expected[] = {2, 1, 1, 1};
  for (double e : expected) {
    policy_step(low, true);
    CHECK(low.scale_value() == e);
  }
  LossScaler odd = LossScaler::dynamic(DynamicLossScaleOptions().init_scale(10).min_scale(3).backoff_factor(0.5));
  policy_step(odd, true);
  policy_step(odd, true);
  CHECK(odd.scale_value() == 3);    // max(2.5, 3)
  CHECK(odd.skipped_steps() == 0);  // unscale_ + update alone skip nothing: step() counts skips
}

TEST_CASE("static and none modes") {
  LossScaler fixed = LossScaler::fixed(128);
  CHECK(fixed.mode() == LossScaleMode::Static);
  const Tensor loss = scalar_tensor(0.75);
  CHECK(fixed.scale(loss).item() == 96);
  for (bool overflow : {true, false, true, false, false}) policy_step(fixed, overflow);
  CHECK(fixed.scale_value() == 128);

  Tensor p = param_with_grad();
  const std::vector<unsigned char> grad_before = bytes_of(p.grad());
  SGD sgd({p}, SGDOptions().lr(0.5));
  CHECK(fixed.step(sgd));  // unscales first: gradient / 128, then steps
  fixed.update();
  for (int64_t i = 0; i < 8; ++i) {
    const double g = p.grad().to_vector<float>()[size_t(i)];
    CHECK(g == double(reinterpret_cast<const float*>(grad_before.data())[i]) / 128);
  }

  LossScaler none;
  CHECK(none.mode() == LossScaleMode::None);
  CHECK(std::string(none.mode_name()) == "none");
  CHECK(none.scale(loss).is_same(loss));
  const Tensor bad = param_with_grad(kNaN);
  const std::vector<unsigned char> bad_before = bytes_of(bad.grad());
  CHECK(none.unscale_({bad}));  // nothing is checked or touched in mode none
  CHECK(bytes_of(bad.grad()) == bad_before);
  none.update();
  CHECK(none.scale_value() == 1);
}

TEST_CASE("unscale_ covers gradients of every dtype and is idempotent within a step") {
  LossScaler scaler = LossScaler::dynamic(DynamicLossScaleOptions().init_scale(8));
  std::vector<Tensor> params;
  std::vector<std::vector<double>> expected;
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    Tensor p = randn({37}, t).requires_grad_();
    const Tensor g = randn({37}, t);
    p.set_grad(g);
    std::vector<double> e;
    for (double v : g.to(DType::f64).to_vector<double>()) e.push_back(v / 8);
    expected.push_back(e);
    params.push_back(p);
  }
  params.push_back(randn({3}).requires_grad_());  // no gradient: skipped
  CHECK(scaler.unscale_(params));
  CHECK(scaler.unscale_(params));  // the second call does not divide again
  for (size_t i = 0; i < expected.size(); ++i) {
    CHECK(params[i].grad().to(DType::f64).to_vector<double>() == expected[i]);  // /8 is exact
  }
  scaler.update();
}

TEST_CASE("the overflow reducer combines the flag, and misuse is an error") {
  LossScaler scaler = LossScaler::dynamic(DynamicLossScaleOptions().init_scale(64));
  std::vector<bool> seen;
  scaler.set_overflow_reducer([&](bool local) {
    seen.push_back(local);
    return true;  // another rank overflowed
  });
  Tensor p = param_with_grad();
  const std::vector<unsigned char> before = bytes_of(p);
  SGD sgd({p}, SGDOptions().lr(0.5));
  CHECK_FALSE(scaler.step(sgd));
  CHECK(seen == std::vector<bool>{false});
  CHECK(bytes_of(p) == before);
  CHECK_ERROR(scaler.step(sgd), "[LossScaler]", "step() called twice");
  scaler.update();
  CHECK(scaler.scale_value() == 32);
  CHECK(scaler.skipped_steps() == 1);
  scaler.set_overflow_reducer({});
  CHECK_ERROR(scaler.update(), "[LossScaler]", "update() without unscale_()");

  CHECK_ERROR(LossScaler::dynamic(DynamicLossScaleOptions().growth_factor(1)), "invalid growth_factor");
  CHECK_ERROR(LossScaler::dynamic(DynamicLossScaleOptions().backoff_factor(1)), "invalid backoff_factor");
  CHECK_ERROR(LossScaler::dynamic(DynamicLossScaleOptions().growth_interval(0)), "invalid growth_interval");
  CHECK_ERROR(LossScaler::dynamic(DynamicLossScaleOptions().hysteresis(0)), "invalid hysteresis");
  CHECK_ERROR(LossScaler::dynamic(DynamicLossScaleOptions().min_scale(0)), "invalid min_scale");
  CHECK_ERROR(LossScaler::dynamic(DynamicLossScaleOptions().max_scale(1e300)), "invalid max_scale");
  CHECK_ERROR(LossScaler::dynamic(DynamicLossScaleOptions().init_scale(0.5)), "invalid init_scale");
  CHECK_ERROR(LossScaler::fixed(kInf), "invalid static loss scale");
}

// An optimizer that unscales and checks its gradients itself, as dist::ZeroOptimizer does (sharded
// gradients, an inf/NaN found across ranks): the scaler hands it the scale, takes its verdict and
// records it like any other step.
class SelfCheckingOptimizer final : public Optimizer {
 public:
  bool unscale_finds_inf = false, step_succeeds = true;
  int unscales = 0, steps = 0, zeroed = 0;
  double last_scale = 0;
  const std::string& name() const override {
    static const std::string kName = "SelfChecking";
    return kName;
  }
  std::vector<Tensor> parameters() const override { return {}; }
  bool step() override {
    ++steps;
    return step_succeeds;
  }
  void zero_grad(bool) override { ++zeroed; }
  void set_lr(double) override {}
  bool unscale_and_check(double scale) override {
    ++unscales;
    last_scale = scale;
    return unscale_finds_inf;
  }
  std::vector<std::pair<std::string, Tensor>> state_tensors() const override { return {}; }
  void load_state_tensors(const std::vector<std::pair<std::string, Tensor>>&) override {}
};

TEST_CASE("step of an optimizer that unscales itself records its outcome like step") {
  LossScaler scaler = LossScaler::dynamic(DynamicLossScaleOptions().init_scale(64).growth_interval(2));
  SelfCheckingOptimizer opt;
  CHECK(scaler.step(opt));
  CHECK(opt.last_scale == 64);  // the scale, for the optimizer to divide by inside its update
  scaler.update();
  opt.unscale_finds_inf = true;
  CHECK_FALSE(scaler.step(opt));  // its check found inf/NaN: no step, gradients zeroed
  CHECK(scaler.found_inf());
  CHECK(opt.steps == 1);
  CHECK(opt.zeroed == 1);
  CHECK_ERROR(scaler.step(opt), "[LossScaler]", "step() called twice");
  scaler.update();
  CHECK(opt.unscales == 2);
  CHECK(scaler.scale_value() == 32);  // backed off, no growth from the one clean step before
  CHECK(scaler.skipped_steps() == 1);
  CHECK(scaler.good_steps() == 0);
  opt.unscale_finds_inf = false;
  CHECK(scaler.unscale_(opt));
  CHECK(scaler.unscale_(opt));  // idempotent within a step: the optimizer divides once
  CHECK(opt.unscales == 3);
  opt.step_succeeds = false;  // finite after unscaling, but the optimizer's own check skips the step
  CHECK_FALSE(scaler.step(opt));
  CHECK(scaler.found_inf());
  scaler.update();
  CHECK(scaler.skipped_steps() == 2);
  CHECK(scaler.scale_value() == 16);
  LossScaler none;
  CHECK_FALSE(none.step(opt));  // mode none: the optimizer's result, nothing counted
  CHECK(none.skipped_steps() == 0);
}

TEST_CASE("scaler state round trip and malformed state") {
  const auto options = DynamicLossScaleOptions().init_scale(256).growth_interval(5).hysteresis(3);
  LossScaler a = LossScaler::dynamic(options);
  Tensor p = param_with_grad(kInf);
  SGD sgd({p}, SGDOptions().lr(0.1));
  CHECK_FALSE(a.step(sgd));
  a.update();
  for (bool overflow : {false, true, true, false, false}) policy_step(a, overflow);
  CHECK(a.scale_value() == 128);
  CHECK(a.hysteresis_left() == 1);

  LossScaler b = LossScaler::dynamic(options);
  b.load_state_tensors(a.state_tensors());
  CHECK(b.scale_value() == a.scale_value());
  CHECK(b.good_steps() == a.good_steps());
  CHECK(b.hysteresis_left() == a.hysteresis_left());
  CHECK(b.skipped_steps() == 1);
  for (bool overflow : {false, false, false, true, false}) {
    policy_step(a, overflow);
    policy_step(b, overflow);
    CHECK(b.scale_value() == a.scale_value());
  }

  const auto state = a.state_tensors();
  auto without = [&](const std::string& name) {
    std::vector<std::pair<std::string, Tensor>> out;
    for (const auto& e : state) {
      if (e.first != name) out.push_back(e);
    }
    return out;
  };
  auto with = [&](const std::string& name, const Tensor& value) {
    auto out = without(name);
    out.emplace_back(name, value);
    return out;
  };
  LossScaler c = LossScaler::dynamic(options);
  CHECK_ERROR(c.load_state_tensors(without("scale")), "entry 'scale' is missing");
  auto duplicated = state;
  duplicated.push_back(state[1]);
  CHECK_ERROR(c.load_state_tensors(duplicated), "appears more than once");
  CHECK_ERROR(c.load_state_tensors(with("growth", scalar_tensor(1))), "unknown entry 'growth'");
  CHECK_ERROR(c.load_state_tensors(with("scale", scalar_tensor(0.25, DType::f64))), "outside [min_scale, max_scale]");
  CHECK_ERROR(c.load_state_tensors(with("scale", zeros({2}, DType::f64))), "expected a one-element tensor");
  CHECK_ERROR(c.load_state_tensors(with("skipped_steps", scalar_tensor(1.5, DType::f64))), "expected an integer");
  CHECK_ERROR(c.load_state_tensors(with("hysteresis_left", scalar_tensor(7, DType::i64))), "hysteresis_left 7");
  CHECK_ERROR(c.load_state_tensors(with("good_steps", scalar_tensor(5, DType::i64))), "not below growth_interval");
  LossScaler fixed = LossScaler::fixed(256);
  CHECK_ERROR(fixed.load_state_tensors(state), "'dynamic' scaler", "this one is 'static'");
  CHECK(c.scale_value() == 256);  // nothing changed by the failed loads
  CHECK(c.good_steps() == 0);
  CHECK(c.skipped_steps() == 0);
}

#endif  // !HG_LOSS_SCALER_ON_CUDA

// ---- a small GPT: an inf or NaN in one gradient skips the step -------------------------------------

namespace {

Device model_device() { return testing::suite_device(); }

// Empty when the model device is usable; otherwise why not (printed as SKIPPED).
std::string no_device_reason() {
#if defined(HG_LOSS_SCALER_ON_CUDA)
  if (!cuda::is_available()) return "no CUDA device: " + cuda::unavailable_reason();
#endif
  return "";
}

struct SmallGPT {
  nn::GPTConfig config;
  std::shared_ptr<nn::GPT> model;
  Tensor ids, targets;

  explicit SmallGPT(DType dtype) {
    manual_seed(23);
    config = nn::GPTConfig().vocab_size(16).context(8).n_layer(1).n_head(2).n_embd(16);
    model = std::make_shared<nn::GPT>(config);
    model->to(dtype);
    model->to(model_device());
    ids = randint(0, 16, {2, 8}).to(model_device());
    targets = randint(0, 16, {2, 8}).to(model_device());
  }
  Tensor loss() const { return model->loss(ids, targets); }
};

std::vector<std::vector<unsigned char>> snapshot(const std::vector<Tensor>& tensors) {
  std::vector<std::vector<unsigned char>> out;
  for (const Tensor& t : tensors) out.push_back(bytes_of(t));
  return out;
}

std::vector<Tensor> optimizer_state(const Optimizer& optimizer) {
  std::vector<Tensor> out;
  for (const auto& [name, t] : optimizer.state_tensors()) out.push_back(t);
  return out;
}

}  // namespace

TEST_CASE(ON_DEVICE "a planted inf or NaN in one gradient of a GPT skips the step bit-exactly and halves the scale") {
  if (const std::string why = no_device_reason(); !why.empty()) {
    MESSAGE("SKIPPED: " << why << "; the loss scaler's model cases run on a GPU or in the emulated build");
    return;
  }
  for (DType dtype : {DType::f32, DType::f16}) {
    for (double poison : {kInf, kNaN}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(poison);
      SmallGPT gpt(dtype);
      const std::vector<Tensor> params = gpt.model->parameters();
      AdamW adamw(params, AdamWOptions().lr(1e-2).weight_decay(0.1));
      LossScaler scaler = LossScaler::dynamic(DynamicLossScaleOptions().init_scale(1024).growth_interval(100));

      // A clean step first, so that AdamW has state to keep intact.
      gpt.model->zero_grad();
      scaler.scale(gpt.loss()).backward();
      CHECK(scaler.unscale_(params));
      CHECK(std::isfinite(clip_grad_norm(params, 1.0)));
      CHECK(scaler.step(adamw));
      scaler.update();
      CHECK(scaler.scale_value() == 1024);
      CHECK(scaler.good_steps() == 1);

      gpt.model->zero_grad();
      scaler.scale(gpt.loss()).backward();
      const Tensor victim = params[params.size() / 2].grad();
      REQUIRE(victim.defined());
      victim.view({-1}).narrow(0, victim.numel() / 3, 1).fill_(poison);
      const auto params_before = snapshot(params);
      const auto state_before = snapshot(optimizer_state(adamw));
      CHECK_FALSE(scaler.unscale_(params));
      CHECK_FALSE(std::isfinite(clip_grad_norm(params, 1.0)));
      CHECK_FALSE(scaler.step(adamw));
      scaler.update();
      CHECK(snapshot(params) == params_before);
      CHECK(snapshot(optimizer_state(adamw)) == state_before);
      for (const Tensor& p : params) {
        REQUIRE(p.grad().defined());
        for (double g : p.grad().to(kCPU).to(DType::f64).to_vector<double>()) CHECK(g == 0.0);
      }
      CHECK(scaler.scale_value() == 512);
      CHECK(scaler.skipped_steps() == 1);
      CHECK(scaler.good_steps() == 0);
      CHECK(adamw.state(0).step == 1);

      // Training goes on: the next clean step updates the parameters again.
      gpt.model->zero_grad();
      scaler.scale(gpt.loss()).backward();
      CHECK(scaler.step(adamw));
      scaler.update();
      CHECK(snapshot(params) != params_before);
      CHECK(adamw.state(0).step == 2);
    }
  }
}

TEST_CASE(ON_DEVICE "a power-of-two loss scale unscales to exactly the unscaled gradients in f32") {
  if (const std::string why = no_device_reason(); !why.empty()) {
    MESSAGE("SKIPPED: " << why << "; the loss scaler's model cases run on a GPU or in the emulated build");
    return;
  }
  // Multiplying by 2^k commutes with every rounding of backward (no value here comes near the
  // overflow or subnormal range), so scale -> backward -> unscale_ reproduces the plain gradients
  // bit for bit.
  SmallGPT gpt(DType::f32);
  const std::vector<Tensor> params = gpt.model->parameters();
  gpt.loss().backward();
  std::vector<Tensor> plain;
  for (const Tensor& p : params) plain.push_back(p.grad().clone());
  gpt.model->zero_grad();
  LossScaler scaler = LossScaler::dynamic();  // 2^16
  scaler.scale(gpt.loss()).backward();
  CHECK(scaler.unscale_(params));
  for (size_t i = 0; i < params.size(); ++i) {
    CAPTURE(i);
    CHECK(bytes_of(params[i].grad()) == bytes_of(plain[i]));
  }
  scaler.update();
}
