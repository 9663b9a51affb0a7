// train::ExponentialMovingAverage (train/ema.h) on the suite's device: the shadow against the formula in
// double over 6 updates of fresh random weights (with and without warmup), swap in / out and copy_to
// exact, refusals. Built twice: test_ema (CPU) and test_cuda_ema (the CUDA device; the emulator in CI).
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "engine/random.h"
#include "engine/tensor.h"
#include "support/check_error.h"
#include "support/flat_values.h"
#include "support/test_seed.h"
#include "support/suite_device.h"
#include "train/ema.h"

using namespace hg;

TEST_CASE(SUITE_PREFIX "the EMA follows its formula (with and without warmup) and swaps the weights exactly") {
  if (testing::skip_without_suite_device("test_cuda_ema")) return;
  const Device kDevice = testing::suite_device();
  MESSAGE("seed " << testing::fresh_seed());
  manual_seed(testing::fresh_seed());
  for (const bool warmup : {false, true}) {
    INFO("warmup " << warmup);
    const std::vector<Tensor> params = {randn({3, 4}, DType::f32, kDevice), randn({7}, DType::f32, kDevice)};
    train::ExponentialMovingAverage ema(params, train::EmaOptions().decay(0.9).warmup(warmup));
    std::vector<std::vector<double>> expected;  // the formula, in double
    for (int64_t n = 0; n < 6; ++n) {
      for (const Tensor& p : params) p.copy_(randn(p.shape(), DType::f32, kDevice));  // the "optimizer step"
      ema.update();
      const double d = warmup ? std::min(0.9, (1.0 + double(n)) / (10.0 + double(n))) : 0.9;
      if (n > 0) CHECK(ema.decay_at(n) == d);
      for (size_t i = 0; i < params.size(); ++i) {
        const std::vector<float> p = params[i].to(kCPU).to_vector<float>();
        if (n == 0)
          expected.emplace_back(p.begin(), p.end());
        else
          for (size_t k = 0; k < p.size(); ++k) expected[i][k] += (1.0 - d) * (double(p[k]) - expected[i][k]);
      }
    }
    CHECK(ema.updates() == 6);
    if (warmup) CHECK(ema.decay_at(1) == doctest::Approx(2.0 / 11.0).epsilon(1e-15));
    for (size_t i = 0; i < params.size(); ++i) {
      const std::vector<float> s = ema.shadow()[i].to(kCPU).to_vector<float>();
      for (size_t k = 0; k < s.size(); ++k) CHECK(double(s[k]) == doctest::Approx(expected[i][k]).epsilon(1e-5));
    }
    const std::vector<float> live = testing::flat_values(params), averaged = testing::flat_values(ema.shadow());
    CHECK(live != averaged);
    {
      train::EmaScope scope(ema);
      CHECK(testing::flat_values(params) == averaged);
    }
    CHECK(testing::flat_values(params) == live);
    CHECK(testing::flat_values(ema.shadow()) == averaged);
    const std::vector<Tensor> copy = {zeros({3, 4}, DType::f32, kDevice), zeros({7}, DType::f32, kDevice)};
    ema.copy_to(copy);
    CHECK(testing::flat_values(copy) == averaged);
  }
  CHECK_ERROR(train::ExponentialMovingAverage({randn({2}, DType::f32, kDevice)}, train::EmaOptions().decay(1.5)),
              "decay 1.5", "expected 0 <= decay <= 1");
  train::ExponentialMovingAverage ema({randn({2}, DType::f32, kDevice)});
  CHECK_ERROR(ema.copy_to({zeros({3}, DType::f32, kDevice)}), "copy_to: parameter 0 is", "expected f32[2]");
  CHECK_ERROR(ema.swap_out(), "swap_out() without swap_in()");
  ema.swap_in();
  CHECK_ERROR(ema.update(), "update() while the averaged weights are swapped in");
  ema.swap_out();
}
