// engine/anomaly.h: anomaly mode names the first op whose forward output or backward gradient holds
// NaN/inf, with its shapes and module stack; off, nothing is checked and NaN flows through.
#include <doctest/doctest.h>

#include "support/check_error.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "engine/anomaly.h"
#include "engine/random.h"
#include "layers/nn.h"

using namespace hg;

namespace {

std::shared_ptr<nn::GPT> tiny_gpt() {
  manual_seed(11);
  const auto config = nn::GPTConfig().vocab_size(16).context(8).n_layer(2).n_head(2).n_embd(8);
  return std::make_shared<nn::GPT>(config);
}

Tensor random_ids(int64_t B, int64_t T) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < B * T; ++i) ids.push_back((i * 7 + 3) % 16);
  return from_vector(ids, {B, T});
}

// Sets element `index` of parameter `name` to `value`.
void plant(nn::GPT& model, const std::string& name, int64_t index, float value) {
  for (auto& [n, p] : model.named_parameters())
    if (n == name) {
      p.data<float>()[index] = value;
      return;
    }
  FAIL("no parameter ", name);
}

}  // namespace

TEST_CASE("anomaly mode is off by default and DetectAnomaly restores the previous setting") {
  CHECK_FALSE(detect_anomaly_enabled());
  {
    DetectAnomaly on;
    CHECK(detect_anomaly_enabled());
    {
      DetectAnomaly off(false);
      CHECK_FALSE(detect_anomaly_enabled());
    }
    CHECK(detect_anomaly_enabled());
  }
  CHECK_FALSE(detect_anomaly_enabled());
}

TEST_CASE("has_non_finite finds one NaN or inf in any floating dtype and ignores integers") {
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    std::vector<float> values(37);
    for (size_t i = 0; i < values.size(); ++i) values[i] = float(i) * 0.37f - 5.0f;
    CHECK_FALSE(has_non_finite(from_vector(values, {37}).to(dtype)));
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity()}) {
      std::vector<float> poisoned = values;
      poisoned[23] = bad;
      CHECK(has_non_finite(from_vector(poisoned, {37}).to(dtype)));
    }
  }
  CHECK_FALSE(has_non_finite(from_vector(std::vector<int64_t>{1, 2}, {2})));
}

TEST_CASE("a NaN planted in a weight names the op with its shapes and module stack in the forward") {
  auto model = tiny_gpt();
  plant(*model, "h.1.mlp.c_fc.weight", 5, std::numeric_limits<float>::quiet_NaN());
  const Tensor ids = random_ids(2, 8), targets = random_ids(2, 8);
  // Off: the NaN flows silently into the loss.
  CHECK(std::isnan(model->loss(ids, targets).item()));
  DetectAnomaly anomaly;
  CHECK_ERROR(model->loss(ids, targets), "[detect_anomaly] forward of op 'linear'", "output [2, 8, 32] f32",
              // c_fc runs without its bias: bias_gelu adds it in the next op (layers/transformer.cpp).
              "inputs: [2, 8, 8] f32, [32, 8] f32 (already NaN or inf), (none)",
              "module stack: GPT > h.1 > mlp > c_fc");
}

TEST_CASE("an inf planted in an embedding row names the embedding and its module") {
  auto model = tiny_gpt();
  plant(*model, "wpe.weight", 3, std::numeric_limits<float>::infinity());
  DetectAnomaly anomaly;
  CHECK_ERROR(model->loss(random_ids(1, 8), random_ids(1, 8)), "forward of op 'embedding'", "module stack: GPT > wpe");
}

TEST_CASE("a backward that makes inf from finite values is named with the module stack of its forward") {
  // sqrt(0) = 0 forward, d/dx = 1 / (2 sqrt(0)) = inf backward.
  DetectAnomaly anomaly;
  Tensor x = from_vector(std::vector<float>{4, 0, 1}, {3}).requires_grad_(true);
  Tensor y = sum(sqrt(x));
  CHECK(std::isfinite(y.item()));
  CHECK_ERROR(y.backward(), "[detect_anomaly] backward of op 'sqrt'", "gradient of input 0 [3] f32",
              "incoming gradient [3] f32 (finite)", "module stack (forward): (no module)");
}

TEST_CASE("the GPT's backward with a NaN loss gradient names the last op of the loss") {
  auto model = tiny_gpt();
  const Tensor loss = [&] {
    DetectAnomaly anomaly;
    return model->loss(random_ids(2, 8), random_ids(2, 8));
  }();
  CHECK(std::isfinite(loss.item()));
  DetectAnomaly anomaly;
  CHECK_ERROR(loss.backward(full({}, std::numeric_limits<double>::quiet_NaN())), "backward of op 'linear_cross_entropy'",
              "(already NaN or inf)", "module stack (forward): GPT");
}

TEST_CASE("a clean training step under anomaly mode matches the step without it") {
  auto a = tiny_gpt(), b = tiny_gpt();
  const Tensor ids = random_ids(2, 8), targets = random_ids(2, 8);
  a->loss(ids, targets).backward();
  {
    DetectAnomaly anomaly;
    b->loss(ids, targets).backward();
  }
  const auto pa = a->named_parameters(), pb = b->named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    INFO(pa[i].first);
    const std::vector<float> ga = pa[i].second.grad().to_vector<float>(), gb = pb[i].second.grad().to_vector<float>();
    CHECK(ga == gb);
  }
}

namespace {
// Records the module stack its forward sees, under a parent that registers it as "inner".
struct Probe final : nn::UnaryModule {
  std::string seen;
  Tensor forward(const Tensor& x) override {
    nn::ModuleScope scope(*this);
    seen = anomaly::module_stack();
    return x * 2.0;
  }
};
struct Outer final : nn::UnaryModule {
  std::shared_ptr<Probe> inner = register_module("inner", std::make_shared<Probe>());
  Tensor forward(const Tensor& x) override {
    nn::ModuleScope scope(*this);
    return inner->forward(x);
  }
};
}  // namespace

TEST_CASE("off the module scopes push nothing and on they name the path through the tree") {
  Outer outer;
  const Tensor x = from_vector(std::vector<float>{1, 2}, {2});
  outer.forward(x);
  CHECK(outer.inner->seen == "(no module)");  // off: ModuleScope is the one branch, nothing else
  {
    DetectAnomaly anomaly;
    outer.forward(x);
    CHECK(outer.inner->seen == "Outer > inner");
    outer.inner->forward(x);
    CHECK(outer.inner->seen == "Probe");  // called on its own: its class name
  }
  CHECK(anomaly::module_stack() == "(no module)");  // every scope popped
}
