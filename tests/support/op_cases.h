#pragma once
// The table of differentiable op cases shared by the float64 gradcheck (test_gradcheck) and the
// CPU-vs-CUDA parity of every op's forward and backward (test_cuda_ops). Adding an op's checks is
// one entry: a name, input shapes, the input domain and the function from inputs to output.
// Functions build any extra tensors (indices) on the device of their first input.
//
// The unary and binary ops (the rows of kernels/unary_math.h and kernels/binary_math.h) have their
// own tables here, whose rows the kernel suites (test_kernels_cpu, test_cuda_kernels) read as well:
// a unary op's test is one UnaryOpCase row, which is also its OpCase.
#include <vector>

#include "kernels/binary_math.h"
#include "kernels/unary_math.h"
#include "support/gradcheck.h"

namespace hg::testing {

enum class Domain { Any, Positive, AwayFromZero };

struct OpCase {
  const char* name;
  std::vector<Shape> shapes;
  Domain domain;
  OpFunction fn;
};

// Every op case; the unary rows come from unary_op_cases().
const std::vector<OpCase>& op_cases();

// A unary op's test row. The kernel suites check the kernels on inputs uniform in [lo, hi) (kept
// 0.02 away from 0, where relu and abs have their kink) against the independent double references
// ref and ref_derivative (CPU), and the CUDA kernels against the CPU ones. When fn is set (the engine
// op; null for a kernel op the engine does not call), the row is also an OpCase of one [2, 3] input
// in `domain`, named `name`.
struct UnaryOpCase {
  kernels::UnaryOp op;
  const char* name;
  double lo, hi;
  double scalar;  // the op's scalar (Pow's exponent)
  double (*ref)(double x, double s);
  double (*ref_derivative)(double x, double s);
  Domain domain;
  Tensor (*fn)(const Tensor& x, double s);
};
const std::vector<UnaryOpCase>& unary_op_cases();

// A binary op's independent double reference, for the kernel suites. Its gradcheck and parity cases
// are OpCases whose names start with the op's name ("add", "mul broadcast", ...), for broadcasting.
struct BinaryOpCase {
  kernels::BinaryOp op;
  double (*ref)(double a, double b);
};
const std::vector<BinaryOpCase>& binary_op_cases();

// Random values for a case's input: standard normal, then mapped into the domain.
std::vector<double> domain_values(const Shape& shape, Domain domain);

}  // namespace hg::testing
