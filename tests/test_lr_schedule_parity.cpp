// The learning-rate schedules against PyTorch's schedulers: tests/data/torch/schedules.jsonl (written once
// by scripts/make-torch-schedule-vectors, torch 1.13): lr(s) at every step of each case to 1e-12
// relative (PyTorch's chained form multiplies as it goes; halfgrad evaluates the closed form), and the
// device form evaluated by the lr_schedule_eval kernel equal to lr(s) bit for bit: the CPU's
// (test_lr_schedule_parity) and the CUDA one (test_cuda_lr_schedule_parity; the emulator in CI).
// ReduceLROnPlateau replays the same file's plateau cases: their metric sequences fed one by one, the
// learning rate after each step(metric) equal to PyTorch's bit for bit (both multiply lr by factor).
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <optional>

#include "engine/tensor.h"
#include "optim/lr_schedule.h"
#include "optim/plateau.h"
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
    if (c["scheduler"] == "ReduceLROnPlateau") continue;  // replayed below
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

namespace {

PlateauOptions plateau_options(const json& a) {
  return PlateauOptions()
      .mode(a.value("mode", std::string("min")) == "max" ? PlateauMode::max : PlateauMode::min)
      .factor(a.value("factor", 0.1))
      .patience(a.value("patience", int64_t(10)))
      .threshold(a.value("threshold", 1e-4))
      .threshold_mode(a.value("threshold_mode", std::string("rel")) == "abs" ? ThresholdMode::abs : ThresholdMode::rel)
      .cooldown(a.value("cooldown", int64_t(0)))
      .min_lr(a.value("min_lr", 0.0))
      .eps(a.value("eps", 1e-8));
}

}  // namespace

TEST_CASE(SUITE_PREFIX "ReduceLROnPlateau follows PyTorch 1.13 metric by metric, and resumes from its state") {
  std::ifstream in(std::string(HG_TORCH_TEST_DATA) + "/schedules.jsonl");
  REQUIRE(in.good());
  std::string line;
  std::getline(in, line);
  int cases = 0, reductions = 0;
  while (std::getline(in, line)) {
    const json c = json::parse(line);
    if (c["scheduler"] != "ReduceLROnPlateau") continue;
    INFO("case " << c["name"].get<std::string>());
    const std::vector<double> metrics = c["metrics"], expected = c["lrs"];
    REQUIRE(metrics.size() == expected.size());
    ReduceLROnPlateau plateau(c["args"]["lr"], plateau_options(c["args"]));
    std::optional<ReduceLROnPlateau> resumed;
    for (size_t s = 0; s < metrics.size(); ++s) {
      INFO("step " << s);
      const double before = plateau.lr();
      CHECK(plateau.step(metrics[s]) == expected[s]);
      CHECK(plateau.lr() == expected[s]);
      if (plateau.lr() != before) ++reductions;
      if (s == metrics.size() / 2) {  // a copy restored from the state at the half continues identically
        resumed.emplace(1.0, plateau_options(c["args"]));
        resumed->load_state(plateau.state());
      } else if (resumed) {
        CHECK(resumed->step(metrics[s]) == expected[s]);
      }
    }
    CHECK(plateau.last_epoch() == int64_t(metrics.size()));
    ++cases;
  }
  CHECK(cases == 4);
  CHECK(reductions >= 10);  // the vectors exercise reductions, not only a constant rate
}

TEST_CASE(SUITE_PREFIX "ReduceLROnPlateau refuses bad options and a bad state, by name") {
  CHECK_ERROR(ReduceLROnPlateau(0.1, PlateauOptions().factor(1.0)), "[ReduceLROnPlateau] invalid factor 1");
  CHECK_ERROR(ReduceLROnPlateau(0.1, PlateauOptions().patience(-1)), "[ReduceLROnPlateau] invalid patience -1");
  CHECK_ERROR(ReduceLROnPlateau(0.1, PlateauOptions().cooldown(-2)), "[ReduceLROnPlateau] invalid cooldown -2");
  CHECK_ERROR(ReduceLROnPlateau(-0.1), "[ReduceLROnPlateau] invalid lr -0.1");
  ReduceLROnPlateau plateau(0.1);
  CHECK_ERROR(plateau.load_state(zeros({5}, DType::f64)), "[ReduceLROnPlateau] state is", "expected f64 [6]");
  CHECK_ERROR(plateau.load_state(zeros({6}, DType::f64)), "[ReduceLROnPlateau] state has format tag 0");
  CHECK(plateau.lr() == 0.1);  // unchanged by the refused loads
  // NaN is never an improvement: patience 0 cuts at once.
  ReduceLROnPlateau eager(0.1, PlateauOptions().patience(0));
  CHECK(eager.step(std::nan("")) == doctest::Approx(0.01).epsilon(1e-15));
}
