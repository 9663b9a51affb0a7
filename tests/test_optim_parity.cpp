// The optimizers against PyTorch: tests/data/torch/optim.jsonl (written once by
// scripts/make-torch-optim-vectors; PyTorch is never a build or test dependency) holds, for SGD, Adam,
// AdamW, RMSprop, Adagrad and Lion (the paper's Lion, written with torch ops), initial parameters in two
// groups of their own lr and weight decay, six steps of random gradients and PyTorch's parameters after
// each step, all in float64. Each optimizer replays them in f64 and must land within 1e-12 of every
// value's magnitude, floored at 1e-3 (the same formulas rounded in another order: measured 4.2e-14 at
// most, SGD with Nesterov momentum). In f32 the replay must stay within 5e-5 (measured 1.5e-5, the same
// SGD, whose momentum compounds the rounding; Lion's sign turns a rounding of an interpolation near 0
// into a step of lr either way, so it is compared in f64 only).
// Then each optimizer's state round-trips through state_tensors (a resumed run continues bit for bit),
// and bad hyperparameters are refused with a message that names them.
// The last seven cases give the second group its own betas, eps, momentum, dampening, nesterov, amsgrad,
// alpha, centered or lr_decay (PyTorch's param_groups overriding the defaults; ParamGroup::set here) over
// ten steps: within 1e-12 in f64 (measured 6.2e-15) and 1e-5 in f32 (measured 6.5e-6, SGD whose second
// group has no momentum; 1e-6 is under f32's rounding of ten SGD steps at values near the 1e-3 floor).
// Every optimizer runs its fused kernel (kernels/optimizer_kernels.h). In f32, Adam, RMSprop, Adagrad and
// Lion are within 1.2e-6 of PyTorch over the first eleven cases (Adagrad), 3.0e-6 over the per-group ones
// (AdamW); SGD within 1.5e-5 (Nesterov, as above).
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/ops.h"
#include "optim/optim.h"

using namespace hg;
using nlohmann::json;

namespace {

const std::string kVectors = std::string(HG_TORCH_TEST_DATA) + "/optim.jsonl";

std::vector<json> load_cases() {
  std::ifstream in(kVectors);
  REQUIRE_MESSAGE(in.good(), "cannot open ", kVectors);
  std::vector<json> cases;
  std::string line;
  std::getline(in, line);  // header
  const size_t expected = json::parse(line).at("cases").get<size_t>();
  while (std::getline(in, line))
    if (!line.empty()) cases.push_back(json::parse(line));
  REQUIRE(cases.size() == expected);
  return cases;
}

double option(const json& options, const char* name, double fallback) {
  return options.contains(name) ? options.at(name).get<double>() : fallback;
}

// The optimizer a case names, over `groups`, with its options under halfgrad's names.
std::unique_ptr<optim::LocalOptimizer> make_optimizer(const json& c, std::vector<optim::ParamGroup> groups) {
  const std::string name = c.at("optimizer");
  const json& o = c.at("options");
  auto beta = [&](int i, double fallback) {
    return o.contains("betas") ? o.at("betas").at(i).get<double>() : fallback;
  };
  if (name == "SGD")
    return std::make_unique<optim::SGD>(std::move(groups), optim::SGDOptions()
                                                               .momentum(option(o, "momentum", 0))
                                                               .dampening(option(o, "dampening", 0))
                                                               .nesterov(o.value("nesterov", false)));
  if (name == "Adam")
    return std::make_unique<optim::Adam>(std::move(groups), optim::AdamOptions()
                                                                .betas(beta(0, 0.9), beta(1, 0.999))
                                                                .eps(option(o, "eps", 1e-8))
                                                                .amsgrad(o.value("amsgrad", false)));
  if (name == "AdamW")
    return std::make_unique<optim::AdamW>(
        std::move(groups), optim::AdamWOptions().betas(beta(0, 0.9), beta(1, 0.999)).eps(option(o, "eps", 1e-8)));
  if (name == "RMSprop")
    return std::make_unique<optim::RMSprop>(std::move(groups), optim::RMSpropOptions()
                                                                   .alpha(option(o, "alpha", 0.99))
                                                                   .eps(option(o, "eps", 1e-8))
                                                                   .momentum(option(o, "momentum", 0))
                                                                   .centered(o.value("centered", false)));
  if (name == "Adagrad")
    return std::make_unique<optim::Adagrad>(std::move(groups),
                                            optim::AdagradOptions()
                                                .lr_decay(option(o, "lr_decay", 0))
                                                .initial_accumulator_value(option(o, "initial_accumulator_value", 0))
                                                .eps(option(o, "eps", 1e-10)));
  if (name == "Lion")
    return std::make_unique<optim::Lion>(std::move(groups), optim::LionOptions().betas(beta(0, 0.9), beta(1, 0.99)));
  FAIL("unknown optimizer ", name);
  return nullptr;
}

struct Replay {
  std::vector<Tensor> params;
  std::unique_ptr<optim::LocalOptimizer> optimizer;
};

Replay start(const json& c, DType dtype) {
  Replay r;
  for (const json& p : c.at("params"))
    r.params.push_back(
        from_vector(p.at("values").get<std::vector<double>>(), p.at("shape").get<Shape>()).to(dtype).requires_grad_());
  std::vector<optim::ParamGroup> groups;
  for (const json& g : c.at("groups")) {
    optim::ParamGroup group{{}, g.at("lr").get<double>(), g.at("weight_decay").get<double>()};
    for (const json& i : g.at("params")) group.params.push_back(r.params.at(i.get<size_t>()));
    // The group's own hyper-parameters, PyTorch's keys under halfgrad's names (betas -> beta1, beta2).
    const json own = g.value("options", json::object());
    for (const auto& [key, value] : own.items()) {
      if (key == "betas") {
        group.set("beta1", value.at(0).get<double>()).set("beta2", value.at(1).get<double>());
      } else {
        group.set(key, value.is_boolean() ? double(value.get<bool>()) : value.get<double>());
      }
    }
    groups.push_back(group);
  }
  r.optimizer = make_optimizer(c, std::move(groups));
  return r;
}

void apply_step(Replay& r, const json& grads, DType dtype) {
  for (size_t i = 0; i < r.params.size(); ++i)
    r.params[i].set_grad(from_vector(grads.at(i).get<std::vector<double>>(), r.params[i].shape()).to(dtype));
  r.optimizer->step();
}

// The largest |got - want| over max(|want|, 1e-3) of every element of every parameter.
double relative_difference(const Replay& r, const json& after) {
  double worst = 0;
  for (size_t i = 0; i < r.params.size(); ++i) {
    const std::vector<double> got = r.params[i].to(DType::f64).to_vector<double>();
    const std::vector<double> want = after.at(i).get<std::vector<double>>();
    REQUIRE(got.size() == want.size());
    for (size_t k = 0; k < got.size(); ++k)
      worst = std::max(worst, std::abs(got[k] - want[k]) / std::max(std::abs(want[k]), 1e-3));
  }
  return worst;
}

}  // namespace

bool has_group_options(const json& c) {
  for (const json& g : c.at("groups"))
    if (g.contains("options")) return true;
  return false;
}

TEST_CASE("every optimizer replays PyTorch's steps in f64 and f32") {
  const std::vector<json> cases = load_cases();
  CHECK(cases.size() >= 18);
  int per_group_cases = 0;
  for (const json& c : cases)
    for (DType dtype : {DType::f64, DType::f32}) {
      const std::string name = c.at("name");
      if (dtype == DType::f32 && c.at("optimizer") == "Lion") continue;
      INFO(name, " in ", std::string(dtype_name(dtype)));
      Replay r = start(c, dtype);
      // The per-group cases (ten steps, groups with their own betas, eps, momentum, ...): 1e-5 in f32.
      const bool per_group = has_group_options(c);
      per_group_cases += per_group && dtype == DType::f64;
      const double tol = dtype == DType::f64 ? 1e-12 : per_group ? 1e-5 : 5e-5;
      for (size_t s = 0; s < c.at("grads").size(); ++s) {
        INFO("step ", s + 1);
        apply_step(r, c.at("grads").at(s), dtype);
        CHECK(relative_difference(r, c.at("after").at(s)) <= tol);
      }
    }
  CHECK(per_group_cases == 7);
}

TEST_CASE("every optimizer's state round-trips: a resumed run continues bit for bit") {
  for (const json& c : load_cases()) {
    INFO(c.at("name").get<std::string>());
    Replay whole = start(c, DType::f32), first = start(c, DType::f32);
    const json& grads = c.at("grads");
    for (size_t s = 0; s < 3; ++s)
      apply_step(whole, grads.at(s), DType::f32), apply_step(first, grads.at(s), DType::f32);
    Replay resumed = start(c, DType::f32);
    {
      NoGradGuard no_grad;
      for (size_t i = 0; i < resumed.params.size(); ++i) resumed.params[i].copy_(first.params[i]);
    }
    resumed.optimizer->load_state_tensors(first.optimizer->state_tensors());
    for (size_t s = 3; s < grads.size(); ++s)
      apply_step(whole, grads.at(s), DType::f32), apply_step(resumed, grads.at(s), DType::f32);
    for (size_t i = 0; i < whole.params.size(); ++i)
      CHECK(whole.params[i].to_vector<float>() == resumed.params[i].to_vector<float>());
  }
}

TEST_CASE("the optimizers refuse bad hyperparameters with a message that names them") {
  const Tensor p = randn({3}).requires_grad_();
  CHECK_THROWS_WITH_AS(optim::Adam({p}, optim::AdamOptions().beta1(1.0)), doctest::Contains("[Adam] invalid beta1 1"),
                       hg::Error);
  CHECK_THROWS_WITH_AS(optim::Adam({p}, optim::AdamOptions().eps(-1)), doctest::Contains("invalid eps"), hg::Error);
  CHECK_THROWS_WITH_AS(optim::RMSprop({p}, optim::RMSpropOptions().alpha(1.5)),
                       doctest::Contains("[RMSprop] invalid alpha 1.5"), hg::Error);
  CHECK_THROWS_WITH_AS(optim::RMSprop({p}, optim::RMSpropOptions().momentum(-0.1)),
                       doctest::Contains("invalid momentum"), hg::Error);
  CHECK_THROWS_WITH_AS(optim::Adagrad({p}, optim::AdagradOptions().lr_decay(-1)),
                       doctest::Contains("[Adagrad] invalid lr_decay"), hg::Error);
  CHECK_THROWS_WITH_AS(optim::Adagrad({p}, optim::AdagradOptions().initial_accumulator_value(NAN)),
                       doctest::Contains("invalid initial_accumulator_value"), hg::Error);
  CHECK_THROWS_WITH_AS(optim::Lion({p}, optim::LionOptions().beta2(2)), doctest::Contains("[Lion] invalid beta2 2"),
                       hg::Error);
  CHECK_THROWS_WITH_AS(optim::Lion({p}, optim::LionOptions().lr(-1)), doctest::Contains("invalid learning rate"),
                       hg::Error);
}
