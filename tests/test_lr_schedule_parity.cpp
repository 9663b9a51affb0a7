// The learning-rate schedules against PyTorch's schedulers: tests/data/torch/schedules.jsonl (written once
// by scripts/make-torch-schedule-vectors, torch 1.13): lr(s) at every step of each case to 1e-12
// relative (PyTorch's chained form multiplies as it goes; halfgrad evaluates the closed form), and the
// device form evaluated by the lr_schedule_eval kernel equal to lr(s) bit for bit: the CPU's
// (test_lr_schedule_parity) and the CUDA one (test_cuda_lr_schedule_parity; the emulator in CI).
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

#include "engine/tensor.h"
#include "optim/lr_schedule.h"
#include "support/check_error.h"
#include "support/suite_device.h"

using namespace hg;
using namespace hg::optim;
using json = nlohmann::json;

namespace {

std::shared_ptr<LrSchedule> make_schedule(const std::string& scheduler, const json& a) {
  if (scheduler == "StepLR") return std::make_shared<StepLR>(a["lr"], a["step_size"], a["gamma"]);
  if (scheduler == "MultiStepLR")
    return std::make_shared<MultiStepLR>(a["lr"], a["milestones"].get<std::vector<int64_t>>(), a["gamma"]);
  if (scheduler == "ExponentialLR") return std::make_shared<ExponentialLR>(a["lr"], a["gamma"]);
  if (scheduler == "OneCycleLR")
    return std::make_shared<OneCycleLR>(a["max_lr"], a["total_steps"],
                                        OneCycleOptions()
                                            .pct_start(a.value("pct_start", 0.3))
                                            .div_factor(a.value("div_factor", 25.0))
                                            .final_div_factor(a.value("final_div_factor", 1e4))
                                            .anneal_linear(a.value("anneal_strategy", std::string("cos")) == "linear")
                                            .three_phase(a.value("three_phase", false)));
  FAIL("no such scheduler in the vectors' vocabulary: " << scheduler);
  return nullptr;
}

}  // namespace

TEST_CASE(SUITE_PREFIX "StepLR, MultiStepLR, ExponentialLR and OneCycleLR follow PyTorch 1.13 step by step") {
  if (testing::skip_without_suite_device("test_cuda_lr_schedule_parity")) return;
  const Device kDevice = testing::suite_device();
  std::ifstream in(std::string(HG_TORCH_TEST_DATA) + "/schedules.jsonl");
  REQUIRE(in.good());
  std::string line;
  std::getline(in, line);
  MESSAGE("vectors written by torch " << json::parse(line)["torch"].get<std::string>());
  int cases = 0;
  double worst = 0;
  const Tensor step = zeros({1}, DType::i64, kDevice), lr = zeros({1}, DType::f64, kDevice);
  while (std::getline(in, line)) {
    const json c = json::parse(line);
    INFO("case " << c["name"].get<std::string>());
    const auto schedule = make_schedule(c["scheduler"], c["args"]);
    const auto form = schedule->device_form();
    REQUIRE(form.has_value());
    const std::vector<double> expected = c["lrs"];
    for (size_t s = 0; s < expected.size(); ++s) {
      INFO("step " << s);
      const double got = schedule->lr(int64_t(s));
      const double error = std::fabs(got - expected[s]) / std::fabs(expected[s]);
      CHECK(error <= 1e-12);
      worst = std::max(worst, error);
      step.fill_(double(s));
      write_lr_on_device(*form, step, lr);
      CHECK(lr.item() == got);  // the kernel's evaluation is the host's, bit for bit
    }
    ++cases;
  }
  CHECK(cases == 6);
  MESSAGE("largest relative difference from PyTorch: " << worst);
}

TEST_CASE(SUITE_PREFIX "the schedules refuse what PyTorch refuses, by name") {
  CHECK_ERROR(StepLR(0.1, 0), "[StepLR] invalid step_size 0");
  CHECK_ERROR(MultiStepLR(0.1, {5, 5}), "[Sequential] milestone 1 is 5", "strictly increasing");
  CHECK_ERROR(ExponentialLR(0.1, -0.5), "[ExponentialLR] invalid gamma -0.5");
  CHECK_ERROR(OneCycleLR(0.1, 100, OneCycleOptions().pct_start(1.5)), "[OneCycleLR] invalid pct_start 1.5");
  CHECK_ERROR(OneCycleLR(0.1, 1), "[OneCycleLR] invalid total_steps 1");
  // After total_steps OneCycleLR holds its last value (PyTorch raises).
  const OneCycleLR one(0.1, 10);
  CHECK(one.lr(20) == one.lr(9));
}
