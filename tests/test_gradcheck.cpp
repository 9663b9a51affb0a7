// Every differentiable op against float64 central differences over its full Jacobian, over the
// shared table of op cases (tests/support/op_cases.cpp: adding an op's check is one entry there).
#include <doctest/doctest.h>

#include <cmath>

#include "engine/ops.h"
#include "engine/random.h"
#include "support/gradcheck.h"
#include "support/op_cases.h"

using namespace hg;
using namespace hg::testing;

namespace {

Tensor leaf(const Shape& shape, Domain domain) {
  Tensor out = from_vector(domain_values(shape, domain), shape, f64);
  out.requires_grad_();
  return out;
}

}  // namespace

TEST_CASE("gradcheck: every differentiable op against float64 central differences") {
  for (const OpCase& c : op_cases()) {
    manual_seed(std::hash<std::string>{}(c.name));
    std::vector<Tensor> inputs;
    for (const Shape& shape : c.shapes) inputs.push_back(leaf(shape, c.domain));
    const std::string failure = gradcheck(c.name, c.fn, inputs);
    CHECK_MESSAGE(failure.empty(), failure);
  }
}

TEST_CASE("gradcheck catches a wrong backward") {
  // A function whose recorded backward is deliberately wrong (the gradient of 2x claimed for x^2 + x)
  // must be reported: proves the checker can fail.
  auto wrong = [](const std::vector<Tensor>& x) {
    Tensor y = pow(x[0], 2.0).detach() + x[0].detach();
    Tensor out = y.clone();
    record_op("wrong", {x[0]}, out,
              [x0 = x[0].detach()](const Tensor& g, const NeedsGrad&) { return std::vector<Tensor>{g * x0 * 2.0}; });
    return out;
  };
  manual_seed(3);
  const std::string failure = gradcheck("wrong", wrong, {leaf({3}, Domain::Any)});
  CHECK(failure.find("wrong: d output") != std::string::npos);
}
