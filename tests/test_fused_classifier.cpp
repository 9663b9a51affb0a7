// The fused classifier, linear_cross_entropy (engine/ops/linear_cross_entropy.cpp), on the CPU: its
// gradients against float64 finite differences, its loss and gradients against the composed
// cross_entropy(matmul(x, w^T)) for every dtype and several chunk sizes, its errors, its peak memory
// against the composed path and against its own model, and GPT::loss through it against the composed
// head. Every op output comes from a caching allocator whose free blocks were first filled with NaN,
// so a buffer the op forgets to write shows up.
//
// Tolerances of the parity with the composed path, |fused - composed| <= tol(u), u the dtype's unit
// roundoff (f32 2^-24, bf16 2^-8, f16 2^-11 -- 2^-9 and 2^-12 for round-to-nearest, doubled for margin):
//   both paths compute the same logits (the same GEMM on the same rows) and the same fp32 loss, so the
//   loss differs by summation order only: 16 u_f32 relative (and for halves a logit that rounds the
//   other way: u |logit| averaged over the rows, bounded by 4 u (1 + |loss|)).
//   Gradients: each side rounds P (softmax - onehot) to the dtype, sums a GEMM in fp32 and rounds, and
//   scales: at most 3 roundings apart, 3 u relative to the element, plus the GEMM's fp32 summation in
//   another order, and for halves the one-rounding difference of P propagated through a sum with
//   cancellation, bounded by u times the largest gradient element: tol = 4 u |ref| + 4 u max |ref|
//   (f32: 64 u_f32 for the summation orders of sums of up to 64 terms).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "engine/allocator.h"
#include "engine/autograd.h"
#include "engine/ops.h"
#include "engine/random.h"
#include "layers/nn.h"
#include "support/check_error.h"
#include "support/gradcheck.h"

using namespace hg;

namespace {

constexpr int64_t kIgnore = -100;

// Fills the CPU allocator's cache with NaN blocks of the given byte sizes, so that the op's next
// allocations of those sizes start as NaN.
void poison_cache(const std::vector<int64_t>& byte_sizes) {
  std::vector<Tensor> blocks;
  for (int64_t bytes : byte_sizes)
    blocks.push_back(full({std::max<int64_t>(1, bytes / 4)}, std::numeric_limits<double>::quiet_NaN(), f32));
}

// The buffers linear_cross_entropy allocates for N rows, C features, V classes, chunk R.
void poison_for(int64_t N, int64_t C, int64_t V, int64_t R, DType dtype) {
  const int64_t e = int64_t(dtype_size(dtype));
  poison_cache({R * V * e, R * V * e, R * V * 4, R * C * 4, N * C * e, V * C * 4, V * C * e, N * 4, N * 8});
}

// Targets in [0, V) with every `ignore_every`-th row (from row 1) set to ignore_index.
Tensor make_targets(int64_t N, int64_t V, int64_t ignore_every) {
  std::vector<int64_t> t = randint(0, V, {N}, i64).to_vector<int64_t>();
  if (ignore_every > 0)
    for (int64_t r = 1; r < N; r += ignore_every) t[size_t(r)] = kIgnore;
  return from_vector(t, {N}, i64);
}

double unit_roundoff(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return std::ldexp(1.0, -8);
    case DType::f16:
      return std::ldexp(1.0, -11);
    case DType::f64:
      return std::ldexp(1.0, -52);
    default:
      return std::ldexp(1.0, -24);
  }
}

struct Result {
  double loss = 0;
  std::vector<double> dx, dw;
};

// Loss and gradients of x and w (upstream gradient `g`) for fresh leaves built from x0 and w0.
Result run(const Tensor& x0, const Tensor& w0, const Tensor& targets, bool fused, int64_t chunk, double g = 1.0) {
  const Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_();
  if (fused) poison_for(x.size(0), x.size(1), w.size(0), chunk > 0 ? chunk : x.size(0), x.dtype());
  const Tensor loss =
      fused ? linear_cross_entropy(x, w, targets, kIgnore, chunk) : cross_entropy(matmul(x, w.t()), targets, kIgnore);
  loss.backward(full({}, g, loss.dtype()));
  return {loss.item(), x.grad().to_vector<double>(), w.grad().to_vector<double>()};
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double a : v) m = std::max(m, std::abs(a));
  return m;
}

// "" when every element agrees within rel |ref| + rel max|ref|, else the first disagreement.
std::string compare(const char* what, const std::vector<double>& ref, const std::vector<double>& got, double rel) {
  if (ref.size() != got.size()) return std::string(what) + ": sizes differ";
  const double scale = max_abs(ref);
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!(std::abs(ref[i] - got[i]) <= rel * (std::abs(ref[i]) + scale)))
      return std::string(what) + "[" + std::to_string(i) + "]: composed " + std::to_string(ref[i]) + ", fused " +
             std::to_string(got[i]) + " (tolerance " + std::to_string(rel * (std::abs(ref[i]) + scale)) + ")";
  }
  return "";
}

}  // namespace

TEST_CASE("linear_cross_entropy: float64 gradcheck of x and weight, ignored rows, chunks not dividing N") {
  manual_seed(17);
  const int64_t N = 7, C = 5, V = 6;
  const Tensor x = randn({N, C}, f64).requires_grad_();
  const Tensor w = randn({V, C}, f64).requires_grad_();
  const Tensor targets = make_targets(N, V, 3);  // rows 1 and 4 ignored
  for (int64_t chunk : {int64_t(1), int64_t(3), int64_t(0), int64_t(16)}) {
    CAPTURE(chunk);
    const std::string failure = testing::gradcheck(
        "linear_cross_entropy",
        [&](const std::vector<Tensor>& in) { return linear_cross_entropy(in[0], in[1], targets, kIgnore, chunk); },
        {x, w});
    CHECK_MESSAGE(failure.empty(), failure);
  }
}

TEST_CASE("linear_cross_entropy equals cross_entropy(matmul(x, w^T)), forward and backward, every dtype and chunk") {
  const int64_t N = 37, C = 24, V = 50;
  for (DType dtype : {f32, bf16, f16}) {
    manual_seed(100 + int(dtype));
    const Tensor x = randn({N, C}, f32).to(dtype);
    const Tensor w = (randn({V, C}, f32) * 0.5).to(dtype);
    const Tensor targets = make_targets(N, V, 5);
    const double g = 3.0;  // an upstream gradient other than 1: the backward must scale by it
    const Result ref = run(x, w, targets, false, 0, g);
    const double u = dtype == f32 ? 64 * unit_roundoff(f32) : 4 * unit_roundoff(dtype);
    const double loss_tol = dtype == f32 ? 16 * unit_roundoff(f32) * std::abs(ref.loss)
                                         : 4 * unit_roundoff(dtype) * (1 + std::abs(ref.loss));
    // 1 row per chunk, 8 (does not divide 37), 37 (one chunk), 64 (more than N), 0 (the op's choice)
    for (int64_t chunk : {int64_t(1), int64_t(8), int64_t(37), int64_t(64), int64_t(0)}) {
      const std::string dtype_str = dtype_name(dtype);
      CAPTURE(dtype_str);
      CAPTURE(chunk);
      const Result got = run(x, w, targets, true, chunk, g);
      CHECK(std::isfinite(got.loss));
      CHECK(std::abs(got.loss - ref.loss) <= loss_tol);
      const std::string dx_failure = compare("dx", ref.dx, got.dx, u);
      CHECK_MESSAGE(dx_failure.empty(), dx_failure);
      const std::string dw_failure = compare("dw", ref.dw, got.dw, u);
      CHECK_MESSAGE(dw_failure.empty(), dw_failure);
    }
  }
}

TEST_CASE("linear_cross_entropy takes i32 targets and strided x; under no_grad it records nothing") {
  manual_seed(5);
  const int64_t N = 9, C = 4, V = 7;
  const Tensor x_wide = randn({N, 2 * C}, f32);
  const Tensor x = x_wide.narrow(1, 0, C);  // not contiguous
  const Tensor w = randn({V, C}, f32).requires_grad_();
  const Tensor targets = make_targets(N, V, 4);
  const double ref = cross_entropy(matmul(x, w.t()), targets).item();
  CHECK(linear_cross_entropy(x, w, targets.to(i32), kIgnore, 2).item() == doctest::Approx(ref).epsilon(1e-6));
  NoGradGuard no_grad;
  const Tensor loss = linear_cross_entropy(x, w, targets, kIgnore, 2);
  CHECK_FALSE(loss.requires_grad());
  CHECK(loss.item() == doctest::Approx(ref).epsilon(1e-6));
}

TEST_CASE("linear_cross_entropy with every row ignored is NaN with zero gradients, as cross_entropy") {
  manual_seed(6);
  const Tensor x = randn({5, 3}, f32), w = randn({4, 3}, f32);
  const Tensor targets = full({5}, double(kIgnore), i64);
  const Result ref = run(x, w, targets, false, 0);
  const Result got = run(x, w, targets, true, 2);
  CHECK(std::isnan(ref.loss));
  CHECK(std::isnan(got.loss));
  CHECK(max_abs(ref.dx) == 0.0);
  CHECK(max_abs(got.dx) == 0.0);
  CHECK(max_abs(got.dw) == 0.0);
  // And with no rows at all.
  const Tensor none = linear_cross_entropy(zeros({0, 3}), w, zeros({0}, i64));
  CHECK(std::isnan(none.item()));
}

TEST_CASE("linear_cross_entropy names a bad target by its row over all chunks, and bad shapes and dtypes") {
  const Tensor x = randn({4, 3}, f32), w = randn({5, 3}, f32);
  const Tensor bad = from_vector(std::vector<int64_t>{0, 1, -100, 7}, {4});
  CHECK_ERROR(cross_entropy(matmul(x, w.t()), bad),
              "target 7 at row 3 is out of range, expected 0 <= target < 5 (or ignore_index = -100)");
  CHECK_ERROR(linear_cross_entropy(x, w, bad, kIgnore, 2), "[linear_cross_entropy]",
              "target 7 at row 3 is out of range, expected 0 <= target < 5 (or ignore_index = -100)");
  const Tensor good = from_vector(std::vector<int64_t>{0, 1, -100, 4}, {4});
  CHECK_ERROR(linear_cross_entropy(x.reshape({12}), w, good), "[linear_cross_entropy]", "expected x [N, C]");
  CHECK_ERROR(linear_cross_entropy(x, randn({5, 2}), good), "[linear_cross_entropy]",
              "expected weight [V, C] with C = 3");
  CHECK_ERROR(linear_cross_entropy(x, w, good.narrow(0, 0, 3)), "[linear_cross_entropy]",
              "expected targets of shape [4]");
  CHECK_ERROR(linear_cross_entropy(x, w, good.to(f32)), "[linear_cross_entropy]", "i32 or i64");
  CHECK_ERROR(linear_cross_entropy(x, w.to(bf16), good), "[linear_cross_entropy]", "dtype mismatch");
  CHECK_ERROR(linear_cross_entropy(x, w, good, kIgnore, -1), "[linear_cross_entropy]", "chunk_rows = -1");
}

TEST_CASE("linear_cross_entropy_chunk_rows: a chunk of logits within max(bytes of x, 8 MiB)") {
  // GPT-2 small, B 8 T 1024, bf16: x is 12 MiB, a row of logits 100514 bytes -> 125 rows -> 112 (x16).
  CHECK(linear_cross_entropy_chunk_rows(8192, 768, 50257, bf16) == 112);
  // Small problems fit in one chunk of 8 MiB.
  CHECK(linear_cross_entropy_chunk_rows(10, 4, 7, f32) == 10);
  // A vocabulary wider than the budget still gets one row.
  CHECK(linear_cross_entropy_chunk_rows(4, 1, int64_t(1) << 22, f32) == 1);
  CHECK(linear_cross_entropy_chunk_rows(0, 4, 7, f32) == 1);
}

TEST_CASE("linear_cross_entropy's peak memory: N x V below the composed path, within one chunk of its model") {
  // Sizes whose byte counts are the allocator's size classes exactly (powers of two).
  const int64_t N = 256, C = 16, V = 512, R = 32, e = 4;
  manual_seed(8);
  const Tensor x0 = randn({N, C}, f32), w0 = randn({V, C}, f32) * 0.1;
  const Tensor targets = make_targets(N, V, 7);
  auto peak_of = [&](bool fused) {
    const Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_();
    const int64_t before = memory_stats(kCPU).allocated_bytes;
    reset_peak_memory(kCPU);
    {
      const Tensor loss =
          fused ? linear_cross_entropy(x, w, targets, kIgnore, R) : cross_entropy(matmul(x, w.t()), targets, kIgnore);
      loss.backward();
    }
    return memory_stats(kCPU).peak_allocated_bytes - before;
  };
  const int64_t composed = peak_of(false), fused = peak_of(true);
  // The model of the fused op (engine/ops/linear_cross_entropy.cpp): kept from forward to backward,
  // dx [N, C], dW [V, C] and the rows' loss and lse; during the chunk loop, a chunk of logits and one of
  // P (R x V each) and the per-row ones (R); the backward's gx and gw beside the kept dx and dW.
  const int64_t kept = (N * C + V * C) * e + 2 * N * 4;
  const int64_t forward_peak = kept + 2 * R * V * e + R * 4;
  const int64_t backward_peak = kept + (N * C + V * C) * e;
  const int64_t model = std::max(forward_peak, backward_peak);
  const int64_t chunk = R * V * e;
  INFO("composed peak ", composed, " B, fused peak ", fused, " B, fused model ", model, " B, N V e = ", N * V * e);
  CHECK(fused <= composed - N * V * e);
  CHECK(fused >= model - chunk);
  CHECK(fused <= model + chunk);
}

TEST_CASE("the tied embedding's gradient sums the embedding's use and the fused head's") {
  manual_seed(9);
  const int64_t N = 12, C = 6, V = 10;
  const Tensor w0 = randn({V, C}, f32);
  const Tensor ids = randint(0, V, {N}, i64);
  const Tensor targets = make_targets(N, V, 5);
  auto grads = [&](bool fused, bool tied) {
    const Tensor w = w0.clone().requires_grad_();
    const Tensor head = tied ? w : w0.clone().requires_grad_();
    const Tensor x = tanh(embedding(w, ids) * 2.0);
    const Tensor loss = fused ? linear_cross_entropy(x, head, targets, kIgnore, 5)
                              : cross_entropy(matmul(x, head.t()), targets, kIgnore);
    loss.backward();
    return w.grad().to_vector<double>();
  };
  const std::vector<double> composed = grads(false, true), fused = grads(true, true);
  const std::string failure = compare("tied dw", composed, fused, 64 * unit_roundoff(f32));
  CHECK_MESSAGE(failure.empty(), failure);
  // The head's share is there: the tied gradient differs from the embedding's alone.
  CHECK(compare("embedding only", grads(true, false), fused, 1e-3) != "");
}

TEST_CASE("GPT::loss through the fused classifier equals the composed head, loss and every gradient") {
  for (DType dtype : {f32, bf16}) {
    const std::string dtype_str = dtype_name(dtype);
    CAPTURE(dtype_str);
    auto make = [&](bool fused) {
      manual_seed(1234);
      auto model = std::make_shared<nn::GPT>(
          nn::GPTConfig().vocab_size(37).context(8).n_layer(2).n_head(2).n_embd(16).fused_classifier(fused));
      model->to(dtype);
      return model;
    };
    auto fused = make(true), composed = make(false);
    manual_seed(77);
    const Tensor ids = randint(0, 37, {3, 8}, i64);
    std::vector<int64_t> t = randint(0, 37, {3, 8}, i64).to_vector<int64_t>();
    t[5] = kIgnore;
    const Tensor targets = from_vector(t, {3, 8});
    const Tensor loss_f = fused->loss(ids, targets), loss_c = composed->loss(ids, targets);
    CHECK(loss_f.item() == doctest::Approx(loss_c.item()).epsilon(dtype == f32 ? 1e-6 : 1e-2));
    loss_f.backward();
    loss_c.backward();
    const auto pf = fused->named_parameters(), pc = composed->named_parameters();
    REQUIRE(pf.size() == pc.size());
    const double rel = dtype == f32 ? 64 * unit_roundoff(f32) : 8 * unit_roundoff(dtype);
    for (size_t i = 0; i < pf.size(); ++i) {
      CAPTURE(pf[i].first);
      const std::string failure = compare(pf[i].first.c_str(), pc[i].second.grad().to_vector<double>(),
                                          pf[i].second.grad().to_vector<double>(), rel);
      CHECK_MESSAGE(failure.empty(), failure);
    }
  }
}
