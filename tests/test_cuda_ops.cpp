// Every op's forward and backward on a CUDA tensor equal the CPU's, over the shared table of op
// cases (tests/support/op_cases.cpp), in f32 and bf16. Runs on a real GPU or on the SIMT emulator;
// without either it skips visibly.
//
// Tolerances (|cuda - cpu| <= atol + rtol |cpu|): both backends accumulate in fp32 from the same
// inputs, so they differ only by summation order (GEMM, reductions) and by the libm vs CUDA math
// functions (a few ulp): f32 atol 1e-5, rtol 1e-4. bf16 outputs are rounded to 8 mantissa bits, so a
// one-ulp disagreement in a rounded intermediate is 2^-8 relative and compositions of up to ~4 ops
// may stack it: bf16 atol 2e-2, rtol 3e-2.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>

#include "engine/cuda/cuda_context.h"
#include "engine/ops.h"
#include "engine/random.h"
#include "support/op_cases.h"

using namespace hg;
using namespace hg::testing;

namespace {

struct Tolerance {
  double atol, rtol;
};

// "" when a and b agree elementwise within tol, else the first disagreement.
std::string compare(const std::string& what, const Tensor& cpu, const Tensor& cuda, Tolerance tol) {
  if (cpu.shape() != cuda.shape()) return what + ": shapes " + shape_str(cpu.shape()) + " vs " + shape_str(cuda.shape());
  const std::vector<double> a = cpu.to_vector<double>(), b = cuda.to(kCPU).to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) {
    const bool both_nan = std::isnan(a[i]) && std::isnan(b[i]);
    if (!both_nan && !(std::abs(a[i] - b[i]) <= tol.atol + tol.rtol * std::abs(a[i])))
      return what + "[" + std::to_string(i) + "]: cpu " + std::to_string(a[i]) + " vs cuda " + std::to_string(b[i]);
  }
  return "";
}

std::string check_case(const OpCase& c, DType dtype, Tolerance tol) {
  manual_seed(std::hash<std::string>{}(c.name));
  std::vector<Tensor> on_cpu, on_cuda;
  for (const Shape& shape : c.shapes) {
    const Tensor values = from_vector(domain_values(shape, c.domain), shape, dtype);
    on_cpu.push_back(values.clone().requires_grad_());
    on_cuda.push_back(values.to(Device::cuda(0)).requires_grad_());
  }
  const Tensor out_cpu = c.fn(on_cpu);
  const Tensor out_cuda = c.fn(on_cuda);
  if (out_cuda.device() != Device::cuda(0)) return std::string(c.name) + ": output left the device";
  std::string failure = compare(std::string(c.name) + " forward", out_cpu, out_cuda, tol);
  if (!failure.empty()) return failure;
  const Tensor upstream = randn(out_cpu.shape(), out_cpu.dtype());
  out_cpu.backward(upstream);
  out_cuda.backward(upstream.to(Device::cuda(0)));
  for (size_t i = 0; i < on_cpu.size(); ++i) {
    failure = compare(std::string(c.name) + " grad of input " + std::to_string(i), on_cpu[i].grad(), on_cuda[i].grad(), tol);
    if (!failure.empty()) return failure;
  }
  return "";
}

bool skip_without_cuda() {
  if (cuda::is_available()) return false;
  std::printf("SKIPPED (CUDA op parity): no CUDA device: %s\n", cuda::unavailable_reason().c_str());
  MESSAGE("skipped: no CUDA device: ", cuda::unavailable_reason());
  return true;
}

}  // namespace

TEST_CASE("every op forward and backward on CUDA equal the CPU in f32") {
  if (skip_without_cuda()) return;
  for (const OpCase& c : op_cases()) {
    const std::string failure = check_case(c, f32, {1e-5, 1e-4});
    CHECK_MESSAGE(failure.empty(), failure);
  }
}

TEST_CASE("every op forward and backward on CUDA equal the CPU in bf16") {
  if (skip_without_cuda()) return;
  for (const OpCase& c : op_cases()) {
    const std::string failure = check_case(c, bf16, {2e-2, 3e-2});
    CHECK_MESSAGE(failure.empty(), failure);
  }
}
