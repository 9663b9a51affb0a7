// Early stopping (train/early_stopping.h): patience, min_delta, both modes, NaN, and the restored
// weights equal, bit for bit, those of the best evaluation.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "engine/random.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "support/check_error.h"
#include "train/early_stopping.h"

using namespace hg;
using namespace hg::optim;
using namespace hg::train;

namespace {

std::vector<std::vector<uint8_t>> bytes_of(const std::vector<Tensor>& tensors) {
  std::vector<std::vector<uint8_t>> out;
  for (const Tensor& t : tensors) {
    const Tensor c = t.contiguous();
    const uint8_t* p = static_cast<const uint8_t*>(c.data_ptr());
    out.emplace_back(p, p + size_t(c.numel()) * c.element_size());
  }
  return out;
}

}  // namespace

TEST_CASE("early stopping counts evaluations without improvement beyond min_delta") {
  Tensor w = randn({3});
  EarlyStopping s({w}, EarlyStoppingOptions().mode(StopMode::min).patience(2).min_delta(0.1));
  CHECK_FALSE(s.has_best());
  CHECK_ERROR(s.restore_best(), "before any evaluation improved");
  CHECK_FALSE(s.update(1.0));  // first value: best
  CHECK(s.best() == 1.0);
  CHECK_FALSE(s.update(0.95));  // better, but by less than min_delta
  CHECK(s.evaluations_without_improvement() == 1);
  CHECK(s.best() == 1.0);
  CHECK_FALSE(s.update(0.85));  // by more than min_delta: resets patience
  CHECK(s.best() == 0.85);
  CHECK(s.best_evaluation() == 3);
  CHECK_FALSE(s.update(NAN));  // NaN never improves
  CHECK(s.update(0.80));       // second in a row without (enough) improvement
  CHECK(s.should_stop());
  CHECK(s.evaluations() == 5);

  EarlyStopping acc({w}, EarlyStoppingOptions().mode(StopMode::max).patience(1));
  CHECK_FALSE(acc.update(0.5));
  CHECK_FALSE(acc.update(0.6));
  CHECK(acc.update(0.6));  // equal is not better (min_delta 0)
  CHECK(acc.best() == 0.6);

  EarlyStopping nan_first({w}, EarlyStoppingOptions().patience(3));
  nan_first.update(NAN);
  CHECK_FALSE(nan_first.has_best());
  nan_first.update(5.0);
  CHECK(nan_first.has_best());
  CHECK(nan_first.best_evaluation() == 2);

  CHECK_ERROR(EarlyStopping({w}, EarlyStoppingOptions().patience(0)), "patience must be >= 1");
  CHECK_ERROR(EarlyStopping({w}, EarlyStoppingOptions().min_delta(-1)), "min_delta must be finite and >= 0");
  CHECK_ERROR(EarlyStopping({Tensor()}), "parameter 0 is an undefined tensor");
}

TEST_CASE("early stopping restores bitwise the weights of the best evaluation") {
  manual_seed(11);
  // A real model trained by a real optimizer between evaluations.
  nn::Sequential model(
      {std::make_shared<nn::Linear>(8, 16), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(16, 3)});
  SGD optimizer(model.parameters(), SGDOptions().lr(0.1).momentum(0.9));
  EarlyStopping stopper(model.parameters(), EarlyStoppingOptions().mode(StopMode::min).patience(2));
  const Tensor x = randn({32, 8});
  const Tensor y = from_vector(std::vector<int64_t>(32, 1), {32});
  const double metrics[] = {2.0, 1.5, 1.2, 1.4, 1.3};  // best at evaluation 3, then two without improvement
  std::vector<std::vector<uint8_t>> best_bytes;
  for (int e = 0; e < 5; ++e) {
    optimizer.zero_grad();
    cross_entropy(model.forward(x), y).backward();
    optimizer.step();
    const bool stop = stopper.update(metrics[e]);
    if (e == 2) best_bytes = bytes_of(model.parameters());
    CHECK(stop == (e == 4));
  }
  const auto final_bytes = bytes_of(model.parameters());
  CHECK(final_bytes != best_bytes);  // the weights moved on after the best evaluation
  const std::vector<Tensor> handles = model.parameters();
  stopper.restore_best();
  CHECK(bytes_of(model.parameters()) == best_bytes);
  for (size_t i = 0; i < handles.size(); ++i) CHECK(handles[i].data_ptr() == model.parameters()[i].data_ptr());
  CHECK(stopper.best_evaluation() == 3);
  // The restored model keeps training: it still requires grad.
  for (const Tensor& p : model.parameters()) CHECK(p.requires_grad());
}
