// ZeRO over any element-wise optimizer (dist/zero_elementwise_update.cpp): the optimizer the user
// built is the update rule, its state sharded like AdamW's moments. Run by ctest as a world of 1,
// under mpirun -np 2 and -np 4, and over TCP.
//   - Every rank trains on the WHOLE global batch, so the averaged gradients equal one process's
//     exactly (N equal addends, N a power of two): stages 0-3, with and without the optimizer
//     offloaded, must then give the single-process optimizer's parameters bit for bit. SGD with
//     momentum, dampening and weight decay, and with Nesterov momentum; Adam with L2 and AMSGrad;
//     RMSprop centered with momentum; Adagrad with lr decay; Lion with weight decay; AdamW: each over two
//     groups of their own lr and weight decay, the second with its own betas, eps, momentum, ... too
//     (ParamGroup::overrides), f32, and bf16 through the fp32 master; on the CPU and (suite "cuda") on
//     the CUDA device, also through the emulated NCCL.
//   - Shards saved at N ranks after 3 steps resume at N with another stage, and in one process,
//     bit for bit with the uninterrupted run; shards of another optimizer are refused by name.
//   - dist::DataParallel::wrap shards the optimizer the program built (and passes it through where
//     there is nothing to shard).
//   - What cannot be sharded is refused with a message that says why.
#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <memory>
#include <random>

#include "dist/communicator.h"
#include "dist/data_parallel.h"
#include "dist/zero_optimizer.h"
#include "engine/cuda/cuda_context.h"
#include "engine/ops.h"
#include "engine/random.h"
#include "engine/safetensors.h"
#include "layers/gpt.h"
#include "optim/optim.h"
#include "support/dist_world.h"
#include "support/shared_temp_dir.h"
#include "support/skip_cuda.h"
#include "support/tensor_bytes.h"

using namespace hg;
using namespace hg::dist;
using hg::test::comm;
using hg::test::bytes_of;
using hg::test::SharedTempDir;

namespace {

constexpr int64_t kVocab = 16, kContext = 8, kGlobalBatch = 8;
constexpr int kSteps = 5;

nn::GPTConfig config() { return nn::GPTConfig().vocab_size(kVocab).context(kContext).n_layer(2).n_head(2).n_embd(16); }

std::pair<Tensor, Tensor> global_batch(int step) {
  std::mt19937 rng(2024 + step);
  std::vector<int64_t> ids(size_t(kGlobalBatch * kContext)), targets(ids.size());
  for (auto& t : ids) t = int64_t(rng() % kVocab);
  for (auto& t : targets) t = int64_t(rng() % kVocab);
  return {from_vector(ids, {kGlobalBatch, kContext}), from_vector(targets, {kGlobalBatch, kContext})};
}

std::unique_ptr<nn::GPT> make_model(DType dtype, const Device& device = kCPU) {
  manual_seed(11);
  auto model = std::make_unique<nn::GPT>(config());
  model->to(dtype);
  model->to(device);
  return model;
}

// Which optimizer: SGD with momentum and dampening, or Nesterov; Adam with L2 and AMSGrad; RMSprop
// centered with momentum; Adagrad with lr decay; Lion; AdamW (ZeRO's fused kernels). The matrices and the
// rest (biases, norms) in two groups with their own lr and weight decay (AdamW: one lr, which its fused
// update takes), the second with its own hyper-parameters too (ParamGroup::overrides): other betas, eps,
// momentum, alpha, lr decay; AMSGrad, RMSprop's centering and momentum, and SGD's dampening
// only in the first group, so the state keeps buffers that the second group's elements never use.
enum class Rule { momentum, nesterov, adam, rmsprop, adagrad, lion, adamw };
constexpr Rule kRules[] = {Rule::momentum, Rule::nesterov, Rule::adam,  Rule::rmsprop,
                           Rule::adagrad,  Rule::lion,     Rule::adamw};

const char* rule_name(Rule rule) {
  const char* names[] = {"SGD momentum", "SGD nesterov", "Adam", "RMSprop", "Adagrad", "Lion", "AdamW"};
  return names[int(rule)];
}

// The second group's own hyper-parameters.
std::map<std::string, double> overrides(Rule rule) {
  switch (rule) {
    case Rule::momentum: return {{"momentum", 0.5}, {"dampening", 0.0}};
    case Rule::nesterov: return {{"momentum", 0.6}};
    case Rule::adam: return {{"beta1", 0.8}, {"beta2", 0.99}, {"eps", 1e-6}, {"amsgrad", 0}};
    case Rule::rmsprop: return {{"alpha", 0.95}, {"eps", 1e-6}, {"momentum", 0}, {"centered", 0}};
    case Rule::adagrad: return {{"lr_decay", 0.05}, {"eps", 1e-8}};
    case Rule::lion: return {{"beta1", 0.95}, {"beta2", 0.98}};
    case Rule::adamw: return {{"beta1", 0.8}, {"beta2", 0.99}, {"eps", 1e-6}};
  }
  return {};
}

std::unique_ptr<optim::LocalOptimizer> make_rule(const nn::GPT& model, Rule rule) {
  std::vector<Tensor> matrices, others;
  for (const Tensor& p : model.parameters()) (p.dim() >= 2 ? matrices : others).push_back(p);
  const double lr = rule == Rule::lion ? 1e-3 : rule == Rule::adam || rule == Rule::rmsprop ? 3e-3 : 0.05;
  const double other_lr = rule == Rule::adamw ? 3e-3 : 0.4 * lr;
  std::vector<optim::ParamGroup> groups{{matrices, rule == Rule::adamw ? 3e-3 : lr, 0.01},
                                        {others, other_lr, 0.0, overrides(rule)}};
  switch (rule) {
    case Rule::adamw:
      return std::make_unique<optim::AdamW>(std::move(groups), optim::AdamWOptions().betas(0.9, 0.95));
    case Rule::momentum:
      return std::make_unique<optim::SGD>(std::move(groups), optim::SGDOptions().momentum(0.9).dampening(0.25));
    case Rule::nesterov:
      return std::make_unique<optim::SGD>(std::move(groups), optim::SGDOptions().momentum(0.8).nesterov(true));
    case Rule::adam:
      return std::make_unique<optim::Adam>(std::move(groups), optim::AdamOptions().betas(0.9, 0.95).amsgrad(true));
    case Rule::rmsprop:
      return std::make_unique<optim::RMSprop>(std::move(groups),
                                              optim::RMSpropOptions().alpha(0.9).momentum(0.5).centered(true));
    case Rule::adagrad:
      return std::make_unique<optim::Adagrad>(std::move(groups),
                                              optim::AdagradOptions().lr_decay(0.01).initial_accumulator_value(0.1));
    case Rule::lion:
      return std::make_unique<optim::Lion>(std::move(groups), optim::LionOptions().betas(0.9, 0.99));
  }
  return nullptr;
}

struct Run {
  std::vector<double> losses;
  std::vector<std::vector<uint8_t>> bytes;  // each parameter's own bytes at the end
};

// Steps [first, last) of `model` with `opt` on the whole global batch; the loss of each.
void train(nn::GPT& model, optim::Optimizer& opt, int first, int last, Run& run, const Device& device = kCPU) {
  for (int s = first; s < last; ++s) {
    auto [ids, targets] = global_batch(s);
    opt.zero_grad();
    Tensor loss = model.loss(ids.to(device), targets.to(device));
    loss.backward();
    CHECK(opt.step());
    run.losses.push_back(loss.item());
  }
}

Run reference_run(DType dtype, Rule rule, const Device& device = kCPU) {
  const std::unique_ptr<nn::GPT> model = make_model(dtype, device);
  const std::unique_ptr<optim::LocalOptimizer> opt = make_rule(*model, rule);
  Run run;
  train(*model, *opt, 0, kSteps, run, device);
  for (const Tensor& p : model->parameters()) run.bytes.push_back(bytes_of(p));
  return run;
}

struct Plan {
  int stage = 0;
  bool offload = false;
  DType dtype = DType::f32;
  Device device = kCPU;
  Rule rule = Rule::momentum;
  Communicator* comm = nullptr;  // default: the launcher's world
  int first_step = 0, last_step = kSteps;
  std::string load_prefix, save_prefix;  // optimizer shards + "<prefix>.params.safetensors"
};

Run zero_run(const Plan& plan) {
  Communicator& c = plan.comm ? *plan.comm : comm();
  const std::unique_ptr<nn::GPT> owner = make_model(plan.dtype);
  nn::GPT& model = *owner;
  if (!plan.load_prefix.empty()) {
    const safetensors::File file = safetensors::load(plan.load_prefix + ".params.safetensors");
    const std::vector<Tensor> params = model.parameters();
    NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) params[i].copy_(file.tensors.at(i).second);
  }
  model.to(plan.device);
  const ZeroOptions options = ZeroOptions().stage(plan.stage).offload_optimizer(plan.offload).bucket_bytes(2048);
  ZeroOptimizer opt(make_rule(model, plan.rule), model, c, options);
  if (plan.rule != Rule::adamw) CHECK(!opt.decides_on_device());
  if (!plan.load_prefix.empty()) opt.load_state(plan.load_prefix);
  Run run;
  train(model, opt, plan.first_step, plan.last_step, run, plan.device);
  const auto whole = opt.gather_parameters();  // stage 3: every parameter whole in this scope
  if (!plan.save_prefix.empty()) {
    opt.save_state(plan.save_prefix);
    if (c.rank() == 0) safetensors::save(plan.save_prefix + ".params.safetensors", model.named_parameters());
    c.barrier().wait();
  }
  for (const Tensor& p : model.parameters()) run.bytes.push_back(bytes_of(p));
  return run;
}

// Losses equal from `first_step` on, and every parameter's bytes; a failure names the tensor.
void check_same_bits(const Run& got, const Run& want, int first_step = 0) {
  REQUIRE(got.bytes.size() == want.bytes.size());
  for (size_t i = 0; i < got.losses.size(); ++i) {
    INFO("step ", first_step + int(i));
    CHECK(got.losses[i] == want.losses[size_t(first_step) + i]);
  }
  for (size_t t = 0; t < want.bytes.size(); ++t) {
    INFO("parameter tensor ", t);
    CHECK(got.bytes[t] == want.bytes[t]);
  }
}

// An optimizer whose update reads the whole parameter (a per-tensor norm, as LAMB's trust ratio).
class PerTensorNormSGD final : public optim::LocalOptimizer {
 public:
  explicit PerTensorNormSGD(std::vector<Tensor> params) : LocalOptimizer("PerTensorNormSGD") {
    init_groups({optim::ParamGroup{std::move(params), 0.1, 0.0}});
  }
  std::vector<std::string> state_buffer_names() const override { return {}; }
  DType state_dtype(const Tensor&) const override { return DType::f32; }

 protected:
  void update(const optim::ParamGroup& group, const Tensor& param, const Tensor& grad, optim::ParamState&) override {
    Tensor target = param;
    target.copy_(param - grad * (group.lr / (std::sqrt(sum(grad * grad).item()) + 1e-6)));
  }
};

}  // namespace

// Optimizers `rules` in `dtypes` at `stages`, with and without offload, against the single-process run
// on the same device (the same kernels). Offloaded from a CUDA device, the update runs the CPU's ops on
// the host copies: the same correctly rounded IEEE operations, one op at a time.
void check_whole_batch_bits(const Device& device, const std::vector<DType>& dtypes, const std::vector<Rule>& rules,
                            const std::vector<int>& stages) {
  for (DType dtype : dtypes)
    for (Rule rule : rules) {
      const Run want = reference_run(dtype, rule, device);
      for (int stage : stages)
        for (bool offload : {false, true}) {
          // AdamW offloaded from a CUDA device runs the CPU's SIMD pass (kernels/cpu/adamw_offload.cpp), equal
          // to the device kernel to a few ulp, not to the bit (kernels/kernels.h); test_dist_zero covers it.
          if (rule == Rule::adamw && offload && !device.is_cpu()) continue;
          INFO(std::string(dtype_name(dtype)), " ", std::string(rule_name(rule)), " stage ", stage,
               std::string(offload ? " + offload" : ""),
               " on ", device.str(), ", rank ", comm().rank(), " of ", comm().world_size());
          Plan plan;
          plan.stage = stage;
          plan.offload = offload;
          plan.dtype = dtype;
          plan.device = device;
          plan.rule = rule;
          check_same_bits(zero_run(plan), want);
        }
    }
}

TEST_CASE("each optimizer under ZeRO stages 0-3 with and without offload is its single-process run bit for bit") {
  const std::vector<Rule> every(std::begin(kRules), std::end(kRules));
  check_whole_batch_bits(kCPU, {DType::f32, DType::bf16}, every, {0, 1, 2, 3});
}

// On the device (emulated in CI under ASan, also through the emulated NCCL at 4 ranks: fewer runs)
// stage 3, every optimizer in f32, and stage 1 with Adam in bf16, with and without offload.
TEST_CASE("each optimizer under ZeRO is its single-process run bit for bit on the CUDA device" *
          doctest::test_suite("cuda")) {
  if (testing::skip_without_cuda("test_dist_zero_optimizers")) return;
  const std::vector<Rule> every(std::begin(kRules), std::end(kRules));
  check_whole_batch_bits(hg::test::rank_cuda_device(), {DType::f32}, every, {3});
  check_whole_batch_bits(hg::test::rank_cuda_device(), {DType::bf16}, {Rule::adam}, {1});
}

TEST_CASE("Adam and RMSprop shards saved at N ranks resume at N with another stage and in one process bit for bit") {
  for (Rule rule : {Rule::adam, Rule::rmsprop}) {
    INFO(rule_name(rule));
    const SharedTempDir dir(comm(), "hg_zero_optimizers_");
    const std::string prefix = (dir.path / rule_name(rule)).string();
    const Run want = reference_run(DType::f32, rule);
    Plan first;
    first.rule = rule;
    first.stage = 2;
    first.last_step = 3;
    first.save_prefix = prefix;
    zero_run(first);

    Plan resumed = first;
    resumed.save_prefix.clear();
    resumed.load_prefix = prefix;
    resumed.first_step = 3;
    resumed.last_step = kSteps;
    for (int stage : {1, 3}) {
      INFO("resumed at stage ", stage);
      resumed.stage = stage;
      check_same_bits(zero_run(resumed), want, 3);
    }
    Communicator alone(CommunicatorOptions().timeout(std::chrono::seconds(60)).this_process_only(true));
    resumed.stage = 0;
    resumed.comm = &alone;
    {
      INFO("resumed in one process");
      check_same_bits(zero_run(resumed), want, 3);
    }

    // AdamW reading another optimizer's shards: refused by name.
    const std::unique_ptr<nn::GPT> model = make_model(DType::f32);
    ZeroOptimizer adamw(*model, comm(), ZeroOptions().stage(1));
    const std::string refusal = std::string("holds the state of ") + (rule == Rule::adam ? "Adam" : "RMSprop") +
                                " but this optimizer shards AdamW's";
    CHECK_THROWS_WITH_AS(adamw.load_state(prefix), doctest::Contains(refusal.c_str()), hg::Error);
  }
}

TEST_CASE("DataParallel wraps the optimizer the program built") {
  const Run want = reference_run(DType::f32, Rule::nesterov);
  {  // ZeRO 2 over the launcher's world (a world of one included)
    DataParallel parallel(DataParallelOptions().zero_stage(2));
    const std::unique_ptr<nn::GPT> model = make_model(DType::f32);
    std::unique_ptr<optim::Optimizer> opt = parallel.wrap(*model, make_rule(*model, Rule::nesterov));
    auto* zero = dynamic_cast<ZeroOptimizer*>(opt.get());
    REQUIRE(zero != nullptr);
    CHECK(zero->stage() == 2);
    CHECK(zero->update_rule().name() == "SGD");
    Run run;
    train(*model, *opt, 0, kSteps, run);
    for (const Tensor& p : model->parameters()) run.bytes.push_back(bytes_of(p));
    check_same_bits(run, want);
  }
  if (comm().world_size() == 1) {  // nothing to shard: the optimizer itself
    DataParallel parallel;
    const std::unique_ptr<nn::GPT> model = make_model(DType::f32);
    auto sgd = make_rule(*model, Rule::nesterov);
    const optim::LocalOptimizer* built = sgd.get();
    CHECK(parallel.wrap(*model, std::move(sgd)).get() == built);
  }
}

TEST_CASE("ZeroOptimizer refuses an optimizer it cannot shard with a message that says why") {
  const std::unique_ptr<nn::GPT> model = make_model(DType::f32);
  CHECK_THROWS_WITH_AS(ZeroOptimizer(std::make_unique<PerTensorNormSGD>(model->parameters()), *model, comm()),
                       doctest::Contains("cannot shard PerTensorNormSGD: its update is not element-wise"), hg::Error);
  {  // already stepped
    auto sgd = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions().lr(0.1).momentum(0.9));
    auto [ids, targets] = global_batch(0);
    model->loss(ids, targets).backward();
    sgd->step();
    sgd->zero_grad();
    CHECK_THROWS_WITH_AS(ZeroOptimizer(std::move(sgd), *model, comm()),
                         doctest::Contains("SGD has already updated its parameter 0"), hg::Error);
  }
  {  // over other parameters than the model's
    std::vector<Tensor> some = model->parameters();
    some.pop_back();
    CHECK_THROWS_WITH_AS(ZeroOptimizer(std::make_unique<optim::SGD>(some), *model, comm()),
                         doctest::Contains("build the optimizer over exactly the model's parameters"), hg::Error);
  }
  {  // stochastic rounding
    const std::unique_ptr<nn::GPT> half = make_model(DType::bf16);
    auto sgd = std::make_unique<optim::SGD>(half->parameters());
    sgd->set_mixed_precision(optim::MixedPrecisionOptions().stochastic_rounding(true));
    CHECK_THROWS_WITH_AS(ZeroOptimizer(std::move(sgd), *half, comm()),
                         doctest::Contains("stochastic rounding is not implemented under ZeRO"), hg::Error);
  }
  {  // AdamW groups with two learning rates (its fused update takes one)
    std::vector<Tensor> params = model->parameters();
    const Tensor last = params.back();
    params.pop_back();
    auto adamw = std::make_unique<optim::AdamW>(
        std::vector<optim::ParamGroup>{{params, 1e-3, 0.1}, {{last}, 2e-3, 0.0}}, optim::AdamWOptions());
    CHECK_THROWS_WITH_AS(ZeroOptimizer(std::move(adamw), *model, comm()), doctest::Contains("takes one"), hg::Error);
  }
  CHECK_THROWS_WITH_AS(ZeroOptimizer(std::unique_ptr<optim::LocalOptimizer>(), comm()),
                       doctest::Contains("no optimizer to shard"), hg::Error);
}

TEST_CASE("a parameter frozen before ZeroOptimizer is built, or after, is an error naming it") {
  for (int stage : {0, 1, 2, 3}) {
    INFO("stage ", stage);
    const std::unique_ptr<nn::GPT> model = make_model(DType::f32);
    Tensor first = model->parameters().front(), last = model->parameters().back();
    first.requires_grad_(false);
    auto sgd = [&] {
      return std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions().lr(0.1).weight_decay(0.1));
    };
    const std::string refused =
        "[ZeroOptimizer] parameter 0 (" + first.describe() + ") is frozen (requires_grad is off)";
    CHECK_THROWS_WITH_AS(ZeroOptimizer(sgd(), *model, comm(), ZeroOptions().stage(stage)),
                         doctest::Contains(refused.c_str()), hg::Error);
    first.requires_grad_(true);
    ZeroOptimizer zero(sgd(), *model, comm(), ZeroOptions().stage(stage));
    const size_t index = model->parameters().size() - 1;
    last.requires_grad_(false);  // after: the step refuses rather than decay a frozen parameter
    auto [ids, targets] = global_batch(0);
    model->loss(ids, targets).backward();
    const std::string expected = "[ZeroOptimizer] parameter " + std::to_string(index) + " (" + last.describe() +
                                 ") was frozen after the ZeroOptimizer was built";
    CHECK_THROWS_WITH_AS(zero.step(), doctest::Contains(expected.c_str()), hg::Error);
    last.requires_grad_(true);  // unfrozen, the next step runs on every rank
    zero.zero_grad();
    model->loss(ids, targets).backward();
    CHECK(zero.step());
  }
}
