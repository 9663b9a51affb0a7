// Per-group hyper-parameters (optim/optimizer.h ParamGroup::overrides), for every optimizer:
//   - a group that overrides the options runs exactly as an optimizer built with those options: the
//     same bits after 6 steps of fresh random gradients (f32 and bf16 through the fp32 master), and
//     differently from the defaults (the override is not ignored);
//   - state buffers follow the group (AMSGrad, momentum, centering in one group only); the state
//     round-trips through state_tensors and a resumed run continues bit for bit; set_lr keeps overrides;
//   - unknown names, lr/weight_decay as overrides, flags other than 0/1 and out-of-range values are
//     refused with an hg::Error naming the optimizer, the group and the key.
// PyTorch parity of per-group values: tests/test_optim_parity.cpp (tests/data/torch/optim.jsonl).
#include <doctest/doctest.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "engine/random.h"
#include "optim/optim.h"

using namespace hg;
using namespace hg::optim;

namespace {

using Overrides = std::map<std::string, double>;
// Builds an optimizer over `groups` with the case's options.
using Make = std::function<std::unique_ptr<LocalOptimizer>(std::vector<ParamGroup>)>;

struct Case {
  const char* name;
  Make with_defaults;   // the options every group starts from
  Make with_overrides;  // the same options with `overrides` applied, as a one-group optimizer
  Overrides overrides;
};

std::vector<Case> cases() {
  return {
      {"SGD",
       [](auto g) { return std::make_unique<SGD>(std::move(g), SGDOptions().momentum(0.9).dampening(0.2)); },
       [](auto g) { return std::make_unique<SGD>(std::move(g), SGDOptions().momentum(0.6).nesterov(true)); },
       {{"momentum", 0.6}, {"dampening", 0}, {"nesterov", 1}}},
      {"SGD without momentum",
       [](auto g) { return std::make_unique<SGD>(std::move(g), SGDOptions().momentum(0.9)); },
       [](auto g) { return std::make_unique<SGD>(std::move(g), SGDOptions()); },
       {{"momentum", 0}}},
      {"Adam",
       [](auto g) { return std::make_unique<Adam>(std::move(g), AdamOptions()); },
       [](auto g) {
         return std::make_unique<Adam>(std::move(g), AdamOptions().betas(0.8, 0.95).eps(1e-6).amsgrad(true));
       },
       {{"beta1", 0.8}, {"beta2", 0.95}, {"eps", 1e-6}, {"amsgrad", 1}}},
      {"AdamW",
       [](auto g) { return std::make_unique<AdamW>(std::move(g), AdamWOptions()); },
       [](auto g) { return std::make_unique<AdamW>(std::move(g), AdamWOptions().betas(0.7, 0.9).eps(1e-5)); },
       {{"beta1", 0.7}, {"beta2", 0.9}, {"eps", 1e-5}}},
      {"RMSprop",
       [](auto g) { return std::make_unique<RMSprop>(std::move(g), RMSpropOptions()); },
       [](auto g) {
         return std::make_unique<RMSprop>(std::move(g),
                                          RMSpropOptions().alpha(0.9).eps(1e-6).momentum(0.5).centered(true));
       },
       {{"alpha", 0.9}, {"eps", 1e-6}, {"momentum", 0.5}, {"centered", 1}}},
      {"Adagrad",
       [](auto g) { return std::make_unique<Adagrad>(std::move(g), AdagradOptions()); },
       [](auto g) { return std::make_unique<Adagrad>(std::move(g), AdagradOptions().lr_decay(0.1).eps(1e-6)); },
       {{"lr_decay", 0.1}, {"eps", 1e-6}}},
      {"Lion",
       [](auto g) { return std::make_unique<Lion>(std::move(g), LionOptions()); },
       [](auto g) { return std::make_unique<Lion>(std::move(g), LionOptions().betas(0.5, 0.9)); },
       {{"beta1", 0.5}, {"beta2", 0.9}}},
  };
}

std::vector<uint8_t> bytes(const Tensor& t) {
  const Tensor c = t.contiguous().to(kCPU);
  const auto* p = static_cast<const uint8_t*>(c.data_ptr());
  return std::vector<uint8_t>(p, p + c.numel() * int64_t(dtype_size(c.dtype())));
}

// Fresh random gradients (the same for every run of one seed) for `params`, then a step.
void step_with(LocalOptimizer& opt, const std::vector<Tensor>& params, uint64_t seed) {
  manual_seed(seed);
  for (const Tensor& p : params) p.set_grad(randn(p.shape()).to(p.dtype()));
  opt.step();
}

Tensor param(const Shape& shape, DType dtype, uint64_t seed) {
  manual_seed(seed);
  return randn(shape).to(dtype).requires_grad_();
}

}  // namespace

TEST_CASE("a group's overrides run exactly as an optimizer built with those options") {
  constexpr int kSteps = 6;
  for (const Case& c : cases())
    for (DType dtype : {DType::f32, DType::bf16}) {
      INFO(c.name, " in ", std::string(dtype_name(dtype)));
      // Group 0 with the defaults, group 1 with its overrides; then each alone.
      const Tensor a = param({5, 7}, dtype, 1), b = param({33}, dtype, 2);
      const Tensor a1 = param({5, 7}, dtype, 1), b1 = param({33}, dtype, 2), b0 = param({33}, dtype, 2);
      auto grouped = c.with_defaults({ParamGroup{{a}, 1e-2, 0.01}, ParamGroup{{b}, 2e-2, 0.0, c.overrides}});
      auto alone_a = c.with_defaults({ParamGroup{{a1}, 1e-2, 0.01}});
      auto alone_b = c.with_overrides({ParamGroup{{b1}, 2e-2, 0.0}});
      auto defaults_b = c.with_defaults({ParamGroup{{b0}, 2e-2, 0.0}});
      for (int s = 0; s < kSteps; ++s) {
        step_with(*grouped, {a, b}, 100 + s);
        step_with(*alone_a, {a1, b1}, 100 + s);  // the same draws as above: a's then b's gradient
        step_with(*alone_b, {a1, b1}, 100 + s);
        step_with(*defaults_b, {a1, b0}, 100 + s);
      }
      CHECK(bytes(a) == bytes(a1));
      CHECK(bytes(b) == bytes(b1));
      CHECK(bytes(b) != bytes(b0));  // the overrides changed the update
      CHECK(grouped->param_groups()[1].overrides == c.overrides);
    }
}

TEST_CASE("state buffers follow the group; the state round-trips and set_lr keeps the overrides") {
  const auto make = [](const Tensor& a, const Tensor& b) {
    return std::make_unique<Adam>(
        std::vector<ParamGroup>{{{a}, 1e-2, 0.0}, ParamGroup{{b}, 1e-2, 0.0}.set("amsgrad", 1).set("beta2", 0.9)},
        AdamOptions());
  };
  const Tensor a = param({4, 3}, DType::f32, 3), b = param({6}, DType::f32, 4);
  auto opt = make(a, b);
  CHECK(opt->state_buffer_names() == std::vector<std::string>{"exp_avg", "exp_avg_sq", "max_exp_avg_sq"});
  for (int s = 0; s < 3; ++s) step_with(*opt, {a, b}, 200 + s);
  std::map<std::string, Tensor> names;
  for (const auto& [name, t] : opt->state_tensors()) names[name] = t;
  CHECK(names.count("0.exp_avg_sq") == 1);
  CHECK(names.count("0.max_exp_avg_sq") == 0);  // group 0 has no AMSGrad
  CHECK(names.count("1.max_exp_avg_sq") == 1);

  const Tensor ra = param({4, 3}, DType::f32, 5), rb = param({6}, DType::f32, 6);
  {
    NoGradGuard no_grad;
    ra.copy_(a);
    rb.copy_(b);
  }
  auto resumed = make(ra, rb);
  resumed->load_state_tensors(opt->state_tensors());
  opt->set_lr(1, 5e-3);
  resumed->set_lr(1, 5e-3);
  CHECK(resumed->param_groups()[1].overrides == Overrides{{"amsgrad", 1}, {"beta2", 0.9}});
  for (int s = 3; s < 6; ++s) step_with(*opt, {a, b}, 200 + s), step_with(*resumed, {ra, rb}, 200 + s);
  CHECK(bytes(a) == bytes(ra));
  CHECK(bytes(b) == bytes(rb));

  // Group 0 keeps no max_exp_avg_sq: an entry for it is refused by name.
  auto other = make(param({4, 3}, DType::f32, 7), param({6}, DType::f32, 8));
  std::vector<std::pair<std::string, Tensor>> entries = opt->state_tensors();
  entries.emplace_back("0.max_exp_avg_sq", zeros({4, 3}));
  CHECK_THROWS_WITH_AS(other->load_state_tensors(entries),
                       doctest::Contains("entry '0.max_exp_avg_sq' names unknown state 'max_exp_avg_sq'"), hg::Error);
}

TEST_CASE("bad overrides are refused with a message naming the optimizer, the group and the key") {
  const Tensor a = randn({3}).requires_grad_(), b = randn({2}).requires_grad_();
  const auto groups = [&](Overrides o) { return std::vector<ParamGroup>{{{a}, 1e-3, 0.0}, {{b}, 1e-3, 0.0, o}}; };
  CHECK_THROWS_WITH_AS(Adam(groups({{"momentum", 0.9}}), AdamOptions()),
                       doctest::Contains("[Adam] group 1 overrides unknown hyper-parameter 'momentum'; Adam's groups "
                                         "may override: beta1, beta2, eps, amsgrad"),
                       hg::Error);
  CHECK_THROWS_WITH_AS(SGD(groups({{"lr", 0.1}}), SGDOptions()),
                       doctest::Contains("[SGD] group 1 overrides 'lr'; set the group's lr field instead"), hg::Error);
  CHECK_THROWS_WITH_AS(Adam(groups({{"amsgrad", 0.5}}), AdamOptions()),
                       doctest::Contains("[Adam] group 1 sets the flag 'amsgrad' to 0.5; expected 0 (false) or 1"),
                       hg::Error);
  CHECK_THROWS_WITH_AS(Adam(groups({{"beta1", 1.0}}), AdamOptions()),
                       doctest::Contains("[Adam] invalid beta1 1 in group 1: expected 0 <= beta1 < 1"), hg::Error);
  CHECK_THROWS_WITH_AS(AdamW(groups({{"eps", 0}}), AdamWOptions()),
                       doctest::Contains("[AdamW] invalid eps 0 in group 1: expected eps > 0"), hg::Error);
  CHECK_THROWS_WITH_AS(AdamW(groups({{"state_bits", 8}}), AdamWOptions()),
                       doctest::Contains("[AdamW] group 1 overrides unknown hyper-parameter 'state_bits'"), hg::Error);
  CHECK_THROWS_WITH_AS(RMSprop(groups({{"alpha", 1.5}}), RMSpropOptions()),
                       doctest::Contains("[RMSprop] invalid alpha 1.5 in group 1"), hg::Error);
  CHECK_THROWS_WITH_AS(Adagrad(groups({{"lr_decay", -1}}), AdagradOptions()),
                       doctest::Contains("[Adagrad] invalid lr_decay -1 in group 1"), hg::Error);
  // PyTorch fills every sum from the constructor's value: not a group key.
  CHECK_THROWS_WITH_AS(Adagrad(groups({{"initial_accumulator_value", 0.1}}), AdagradOptions()),
                       doctest::Contains("[Adagrad] group 1 overrides unknown hyper-parameter "
                                         "'initial_accumulator_value'; Adagrad's groups may override: lr_decay, eps"),
                       hg::Error);
  CHECK_THROWS_WITH_AS(Lion(groups({{"beta2", 2}}), LionOptions()),
                       doctest::Contains("[Lion] invalid beta2 2 in group 1"), hg::Error);
  // Nesterov in a group whose dampening (the options') is not 0.
  CHECK_THROWS_WITH_AS(SGD(groups({{"nesterov", 1}}), SGDOptions().momentum(0.9).dampening(0.1)),
                       doctest::Contains("nesterov momentum requires momentum > 0 and dampening = 0, got momentum 0.9 "
                                         "and dampening 0.1 in group 1"),
                       hg::Error);
  // add_param_group checks as the constructor does.
  SGD sgd({a}, SGDOptions().momentum(0.9));
  CHECK_THROWS_WITH_AS(sgd.add_param_group(ParamGroup{{b}, 1e-3, 0.0}.set("dampening", 2)),
                       doctest::Contains("[SGD] invalid dampening 2 in group 1: expected 0 <= dampening <= 1"),
                       hg::Error);
}
