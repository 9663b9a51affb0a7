// The fused classifier (linear_cross_entropy) on a CUDA device equals the CPU backend: loss and the
// gradients of x and weight, f32 and bf16, chunks that do and do not divide N; the all-ignored NaN;
// a bad target raised at the next host read. Runs on a real GPU or on the SIMT emulator; without
// either it skips visibly. The op's buffers come from a device cache first filled with NaN blocks.
//
// Tolerances (|cuda - cpu| <= rel (|cpu| + max |cpu|)): both backends run the same chunk loop with the
// same GEMMs (cuBLASLt, or the emulator's, which calls the CPU GEMM) and fp32 accumulation; they differ
// by summation order in the reductions of the softmax and by libm vs CUDA exp/log (a few fp32 ulp):
// f32 rel 1e-5, loss 1e-5 relative. bf16: a logit or P element rounded the other way after such a
// difference is 2^-8 relative, and a gradient sums such elements: rel 2 2^-8.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "engine/cuda/cuda_context.h"
#include "engine/ops.h"
#include "engine/random.h"
#include "support/check_error.h"

using namespace hg;

namespace {

const Device kCuda = Device::cuda(0);

bool skip_without_cuda() {
  if (cuda::is_available()) return false;
  std::printf("SKIPPED (fused classifier on CUDA): no CUDA device: %s\n", cuda::unavailable_reason().c_str());
  MESSAGE("skipped: no CUDA device: ", cuda::unavailable_reason());
  return true;
}

void poison_device_cache(const std::vector<int64_t>& byte_sizes) {
  std::vector<Tensor> blocks;
  for (int64_t bytes : byte_sizes)
    blocks.push_back(full({std::max<int64_t>(1, bytes / 4)}, std::numeric_limits<double>::quiet_NaN(), f32, kCuda));
}

struct Result {
  double loss = 0;
  std::vector<double> dx, dw;
};

Result run(const Tensor& x0, const Tensor& w0, const Tensor& targets, int64_t chunk, const Device& device) {
  const Tensor x = x0.to(device).detach().requires_grad_(), w = w0.to(device).detach().requires_grad_();
  if (device != kCPU) {
    const int64_t N = x0.size(0), C = x0.size(1), V = w0.size(0), R = chunk, e = int64_t(x0.element_size());
    poison_device_cache({R * V * e, R * V * 4, R * C * 4, N * C * e, N * C * 4, V * C * 4, V * C * e, N * 4});
  }
  const Tensor loss = linear_cross_entropy(x, w, targets.to(device), -100, chunk);
  loss.backward(full({}, 2.0, loss.dtype(), device));
  return {loss.item(), x.grad().to(kCPU).to_vector<double>(), w.grad().to(kCPU).to_vector<double>()};
}

std::string compare(const char* what, const std::vector<double>& ref, const std::vector<double>& got, double rel) {
  if (ref.size() != got.size()) return std::string(what) + ": sizes differ";
  double scale = 0;
  for (double a : ref) scale = std::max(scale, std::abs(a));
  for (size_t i = 0; i < ref.size(); ++i)
    if (!(std::abs(ref[i] - got[i]) <= rel * (std::abs(ref[i]) + scale)))
      return std::string(what) + "[" + std::to_string(i) + "]: cpu " + std::to_string(ref[i]) + ", cuda " +
             std::to_string(got[i]);
  return "";
}

}  // namespace

TEST_CASE("linear_cross_entropy on CUDA equals the CPU, forward and backward, f32 and bf16") {
  if (skip_without_cuda()) return;
  const int64_t N = 45, C = 32, V = 70;
  for (DType dtype : {f32, bf16}) {
    manual_seed(31 + int(dtype));
    const Tensor x = randn({N, C}, f32).to(dtype), w = (randn({V, C}, f32) * 0.3).to(dtype);
    std::vector<int64_t> t = randint(0, V, {N}, i64).to_vector<int64_t>();
    for (int64_t r = 2; r < N; r += 6) t[size_t(r)] = -100;
    const Tensor targets = from_vector(t, {N});
    const double rel = dtype == f32 ? 1e-5 : 2 * std::ldexp(1.0, -8);
    for (int64_t chunk : {int64_t(16), int64_t(45), int64_t(64)}) {  // 16 leaves a last chunk of 13
      const std::string dtype_str = dtype_name(dtype);
      CAPTURE(dtype_str);
      CAPTURE(chunk);
      const Result cpu = run(x, w, targets, chunk, kCPU), gpu = run(x, w, targets, chunk, kCuda);
      CHECK(std::isfinite(gpu.loss));
      CHECK(gpu.loss == doctest::Approx(cpu.loss).epsilon(dtype == f32 ? 1e-5 : 1e-3));
      const std::string dx = compare("dx", cpu.dx, gpu.dx, rel), dw = compare("dw", cpu.dw, gpu.dw, rel);
      CHECK_MESSAGE(dx.empty(), dx);
      CHECK_MESSAGE(dw.empty(), dw);
    }
  }
}

TEST_CASE("linear_cross_entropy on CUDA: every row ignored is NaN; a bad target is raised at the next host read") {
  if (skip_without_cuda()) return;
  const Tensor x = randn({4, 3}, f32, kCuda), w = randn({5, 3}, f32, kCuda);
  CHECK(std::isnan(linear_cross_entropy(x, w, full({4}, -100.0, i64, kCuda)).item()));
  Tensor loss;
  CHECK_NOTHROW(loss = linear_cross_entropy(x, w, from_vector(std::vector<int64_t>{0, 1, -100, 7}, {4}, i64, kCuda)));
  CHECK_ERROR(loss.item(), "target 7 at row 3 is out of range, expected 0 <= target < 5 (or ignore_index = -100)");
  const Tensor good = linear_cross_entropy(x, w, from_vector(std::vector<int64_t>{0, 1, -100, 4}, {4}, i64, kCuda));
  CHECK(std::isfinite(good.item()));
}
