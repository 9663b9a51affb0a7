// The fused optimizer kernels of SGD, Adam, RMSprop, Adagrad and Lion (kernels/optimizer_kernels.h) on the CUDA
// device against the CPU ones, through the optimizers: fresh random parameters and a new random gradient
// every step (5 steps), f32 and f64 parameters, bf16 and f16 ones through the fp32 master copy and without
// it (an fp32 working copy), sizes of one element, a few, and several blocks' worth (not a multiple of any
// width), every variant (SGD's dampening and Nesterov, AMSGrad, L2 decay, momentum, centered, lr decay, decoupled
// decay), and a group with its own hyper-parameters. Both backends round every product and sum on its own
// (kernels/optimizer_math.h): parameters and every state buffer must agree bit for bit. Labelled cuda:
// runs on the SIMT emulator in CI; skips visibly without a device.
#include <doctest/doctest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "engine/random.h"
#include "optim/optim.h"
#include "support/skip_cuda.h"

using namespace hg;
using namespace hg::optim;

namespace {

using Make = std::function<std::unique_ptr<LocalOptimizer>(std::vector<ParamGroup>)>;

struct Case {
  const char* name;
  Make make;
};

std::vector<Case> cases() {
  return {
      {"SGD", [](auto g) { return std::make_unique<SGD>(std::move(g), SGDOptions()); }},
      {"SGD momentum",
       [](auto g) { return std::make_unique<SGD>(std::move(g), SGDOptions().momentum(0.9).dampening(0.25)); }},
      {"SGD nesterov",
       [](auto g) { return std::make_unique<SGD>(std::move(g), SGDOptions().momentum(0.8).nesterov(true)); }},
      {"Adam", [](auto g) { return std::make_unique<Adam>(std::move(g), AdamOptions().betas(0.8, 0.95)); }},
      {"Adam amsgrad", [](auto g) { return std::make_unique<Adam>(std::move(g), AdamOptions().amsgrad(true)); }},
      {"RMSprop", [](auto g) { return std::make_unique<RMSprop>(std::move(g), RMSpropOptions().alpha(0.9)); }},
      {"RMSprop momentum",
       [](auto g) { return std::make_unique<RMSprop>(std::move(g), RMSpropOptions().momentum(0.9)); }},
      {"RMSprop centered",
       [](auto g) { return std::make_unique<RMSprop>(std::move(g), RMSpropOptions().centered(true)); }},
      {"RMSprop centered momentum",
       [](auto g) { return std::make_unique<RMSprop>(std::move(g), RMSpropOptions().momentum(0.5).centered(true)); }},
      {"Adagrad",
       [](auto g) {
         return std::make_unique<Adagrad>(std::move(g), AdagradOptions().lr_decay(0.05).initial_accumulator_value(0.1));
       }},
      {"Lion", [](auto g) { return std::make_unique<Lion>(std::move(g), LionOptions().betas(0.9, 0.99)); }},
  };
}

std::vector<uint8_t> bytes(const Tensor& t) {
  const Tensor c = t.to(kCPU).contiguous();
  const auto* p = static_cast<const uint8_t*>(c.data_ptr());
  return std::vector<uint8_t>(p, p + c.numel() * int64_t(dtype_size(c.dtype())));
}

struct Run {
  std::vector<Tensor> params;
  std::unique_ptr<LocalOptimizer> opt;
};

// Two groups (decay and none; the second with its own betas / alpha / eps ... where the case has them)
// over parameters of `sizes`, all from seed 7, on `device`.
Run start(const Case& c, DType dtype, bool master, const Device& device, const std::vector<int64_t>& sizes) {
  Run r;
  manual_seed(7);
  for (int64_t n : sizes) r.params.push_back(randn({n}).to(dtype).to(device).requires_grad_());
  std::vector<Tensor> first(r.params.begin(), r.params.end() - 1);
  ParamGroup other{{r.params.back()}, 3e-3, 0.0};
  const std::string name = c.name;
  if (name.rfind("Adam", 0) == 0 || name == "Lion") other.set("beta1", 0.7).set("beta2", 0.9);
  if (name.rfind("RMSprop", 0) == 0) other.set("alpha", 0.95).set("eps", 1e-6);
  if (name == "Adagrad") other.set("lr_decay", 0.0).set("eps", 1e-6);
  if (name == "SGD momentum" || name == "SGD nesterov") other.set("momentum", 0.6);
  r.opt = c.make({ParamGroup{first, 1e-2, 0.05}, other});
  r.opt->set_mixed_precision(MixedPrecisionOptions().master_weights(master));
  return r;
}

// Every parameter and state tensor of the two runs, byte for byte.
void check_same_bits(const Run& host, const Run& device) {
  for (size_t i = 0; i < host.params.size(); ++i) {
    INFO("parameter ", i);
    CHECK(bytes(host.params[i]) == bytes(device.params[i]));
  }
  const auto host_state = host.opt->state_tensors(), device_state = device.opt->state_tensors();
  REQUIRE(host_state.size() == device_state.size());
  for (size_t k = 0; k < host_state.size(); ++k) {
    INFO(host_state[k].first);
    CHECK(host_state[k].first == device_state[k].first);
    CHECK(bytes(host_state[k].second) == bytes(device_state[k].second));
  }
}

}  // namespace

TEST_CASE("the fused optimizer kernels on the CUDA device give the CPU's bits" * doctest::test_suite("cuda")) {
  if (testing::skip_without_cuda("test_cuda_optimizer_kernels")) return;
  const Device cuda = Device::cuda(0);
  const std::vector<int64_t> sizes = {1, 5, 3001, 67};
  struct Precision {
    DType dtype;
    bool master;
  };
  const Precision precisions[] = {
      {DType::f32, true}, {DType::f64, true}, {DType::bf16, true}, {DType::f16, true}, {DType::bf16, false}};
  for (const Case& c : cases())
    for (const Precision& precision : precisions) {
      INFO(c.name, " ", std::string(dtype_name(precision.dtype)), precision.master ? "" : " without master");
      Run host = start(c, precision.dtype, precision.master, kCPU, sizes);
      Run device = start(c, precision.dtype, precision.master, cuda, sizes);
      const std::vector<uint8_t> initial = bytes(host.params[2]);
      for (int step = 0; step < 5; ++step) {
        manual_seed(100 + step);
        for (size_t i = 0; i < sizes.size(); ++i) {
          const Tensor g = randn({sizes[i]}).to(precision.dtype);
          host.params[i].set_grad(g);
          device.params[i].set_grad(g.to(cuda));
        }
        host.opt->step();
        device.opt->step();
      }
      check_same_bits(host, device);
      CHECK(bytes(host.params[2]) != initial);  // the update moved the parameters: the kernels ran
    }
}

TEST_CASE("the fused optimizers' device steps on the CUDA device give the CPU's bits, skips included" *
          doctest::test_suite("cuda")) {
  if (testing::skip_without_cuda("test_cuda_optimizer_kernels")) return;
  const Device cuda = Device::cuda(0);
  const std::vector<int64_t> sizes = {1, 5, 3001, 67};
  for (const Case& c : cases())
    for (const DType dtype : {DType::f32, DType::bf16}) {
      INFO(c.name, " ", std::string(dtype_name(dtype)));
      Run host = start(c, dtype, true, kCPU, sizes);
      Run device = start(c, dtype, true, cuda, sizes);
      REQUIRE(device.opt->device_step() != nullptr);
      const Tensor lr = full({1}, 0.02, DType::f64);
      const std::vector<uint8_t> initial = bytes(host.params[2]);
      for (int step = 0; step < 5; ++step) {
        manual_seed(200 + step);
        for (size_t i = 0; i < sizes.size(); ++i) {
          const Tensor g = randn({sizes[i]}).to(dtype);
          host.params[i].set_grad(g);
          device.params[i].set_grad(g.to(cuda));
        }
        const Tensor flag = full({1}, step == 0 || step == 2 ? 1.0 : 0.0);  // the first update skipped too
        host.opt->device_step()->step(lr, flag);
        device.opt->device_step()->step(lr.to(cuda), flag.to(cuda));
      }
      check_same_bits(host, device);
      const auto host_state = host.opt->state_tensors();
      CHECK(host_state.front().second.item() == 3);  // five calls, two skipped
      CHECK(bytes(host.params[2]) != initial);
    }
}
