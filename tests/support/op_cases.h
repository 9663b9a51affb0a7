#pragma once
// The table of differentiable op cases shared by the float64 gradcheck (test_gradcheck) and the
// CPU-vs-CUDA parity of every op's forward and backward (test_cuda_ops). Adding an op's checks is
// one entry: a name, input shapes, the input domain and the function from inputs to output.
// Functions build any extra tensors (indices) on the device of their first input.
#include <vector>

#include "support/gradcheck.h"

namespace hg::testing {

enum class Domain { Any, Positive, AwayFromZero };

struct OpCase {
  const char* name;
  std::vector<Shape> shapes;
  Domain domain;
  OpFunction fn;
};

const std::vector<OpCase>& op_cases();

// Random values for a case's input: standard normal, then mapped into the domain.
std::vector<double> domain_values(const Shape& shape, Domain domain);

}  // namespace hg::testing
