// Bad input gets an hg::Error whose message names the op, what it was given and what it expected.
#include <doctest/doctest.h>

#include "support/check_error.h"

#include <cmath>
#include <vector>

#include "engine/cuda/cuda_context.h"
#include "engine/ops.h"

using namespace hg;

TEST_CASE("shape errors name the op - both shapes and the rule") {
  CHECK_ERROR(add(zeros({2, 3}), zeros({4})), "[add]", "[2, 3]", "[4]", "cannot be broadcast", "equal sizes or 1");
  CHECK_ERROR(matmul(zeros({2, 3}), zeros({4, 5})), "[matmul]", "f32[2, 3] cpu", "f32[4, 5] cpu", "inner dimensions");
  CHECK_ERROR(matmul(zeros({2, 2, 3}), zeros({3, 3, 4})), "[matmul]", "cannot be broadcast");
  CHECK_ERROR(zeros({2, 3}).view({4, 2}), "[view]", "[4, 2]", "6 elements");
  CHECK_ERROR(zeros({2, 3}).t().view({6}), "[view]", "not contiguous", "reshape");
  CHECK_ERROR(zeros({2, 3}).narrow(1, 2, 2), "[narrow]", "outside dimension 1", "f32[2, 3]");
  CHECK_ERROR(zeros({2, 3}).select(0, 2), "[select]", "index 2", "out of range");
  CHECK_ERROR(zeros({2, 3}).transpose(0, 2), "[transpose]", "dimension 2", "rank 2");
  CHECK_ERROR(zeros({2, 3}).permute({0, 0}), "[permute]", "appears twice");
  CHECK_ERROR(zeros({2, 3}).expand({2, 4}), "[expand]", "size 3", "expected 4 or 1");
  CHECK_ERROR(zeros({2, 3}).squeeze(0), "[squeeze]", "size 2", "expected 1");
  CHECK_ERROR(cat({zeros({2, 3}), zeros({3, 3})}, 1), "[cat]", "tensor 1", "f32[3, 3]", "except in dimension 1");
  CHECK_ERROR(sum(zeros({2, 3}), {0, 0}), "[sum]", "repeated");
  CHECK_ERROR(empty({2, -1}), "[empty]", "negative size", "[2, -1]");
  CHECK_ERROR(empty({1, 1, 1, 1, 1, 1, 1, 1, 1}), "[empty]", "exceeds the maximum rank 8");
  CHECK_ERROR(from_vector(std::vector<float>{1, 2, 3}, {2, 2}), "[from_vector]", "3 values", "[2, 2]");
}

TEST_CASE("dtype and device errors say what to do") {
  CHECK_ERROR(add(zeros({2}), zeros({2}, f64)), "[add]", "dtype mismatch", "f32[2] cpu", "f64[2] cpu", ".to(dtype)");
  CHECK_ERROR(exp(zeros({2}, i64)), "[exp]", "must be floating", "i64[2] cpu");
  const std::string reason = cuda::unavailable_reason();  // kept alive for the check's pointers
  if (!cuda::is_available()) CHECK_ERROR(zeros({2}).to(Device::cuda(0)), "[to]", "cuda:0", reason.c_str());
  CHECK_ERROR(zeros({2}).to(Device::cuda(15)), "cuda:15", "not available");
  CHECK_ERROR(empty({2}, f32, Device::cuda(1)), "cuda:1", "not available");
  CHECK_ERROR(zeros({2}).data<double>(), "[Tensor::data]", "f32", "f64");
  CHECK_ERROR(zeros({2}).item(), "[Tensor::item]", "one-element", "f32[2]");
}

TEST_CASE("op-specific argument errors") {
  CHECK_ERROR(cross_entropy(zeros({3, 4}), zeros({3}, f32)), "[cross_entropy]", "targets", "i32 or i64");
  CHECK_ERROR(cross_entropy(zeros({3, 4}), zeros({2}, i64)), "[cross_entropy]", "expected targets of shape [3]");
  CHECK_ERROR(cross_entropy(zeros({2, 4}), from_vector(std::vector<int64_t>{1, 4}, {2})), "cross_entropy", "target 4 at row 1",
              "expected 0 <= target < 4");
  CHECK_ERROR(layer_norm(zeros({2, 4}), zeros({3}), Tensor()), "[layer_norm]", "weight", "[4]");
  CHECK_ERROR(layer_norm(zeros({2, 4}), Tensor(), Tensor(), 0.0), "[layer_norm]", "eps > 0");
  CHECK_ERROR(embedding(zeros({5, 2}), from_vector(std::vector<int64_t>{1, 5}, {2})), "embedding", "id 5 at position 1",
              "expected 0 <= id < 5");
  CHECK_ERROR(embedding(zeros({5}), from_vector(std::vector<int64_t>{1}, {1})), "[embedding]", "[vocab, dim]");
  CHECK_ERROR(dropout(zeros({4}), 1.0), "[dropout]", "outside [0, 1)");
  CHECK_ERROR(scaled_dot_product_attention(zeros({4, 2}), zeros({3, 2}), zeros({3, 2})), "causal", "Tq = 4");
  CHECK_ERROR(max(zeros({0, 3}), 0), "[max]", "empty");
  CHECK_ERROR(Tensor().shape(), "undefined tensor");
}

TEST_CASE("index errors on CUDA: the CPU's message, raised at the next host read, once") {
  if (!cuda::is_available()) {
    MESSAGE("skipped: no CUDA device: ", cuda::unavailable_reason());
    return;
  }
  const Device dev = Device::cuda(0);
  const Tensor logits = zeros({4, 5}, f32, dev);
  // The op makes no host wait, so it cannot know yet; the next read (item) raises, naming the op.
  Tensor loss;
  CHECK_NOTHROW(loss = cross_entropy(logits, from_vector(std::vector<int64_t>{0, 1, -100, 7}, {4}, i64, dev)));
  CHECK_ERROR(loss.item(),
              "[cross_entropy_forward] target 7 at row 3 is out of range, expected 0 <= target < 5 (or "
              "ignore_index = -100)",
              "cuda:0");
  // Raised once: the record is clear afterwards, and good targets read normally (log 5 for zeros).
  const Tensor good = cross_entropy(logits, from_vector(std::vector<int64_t>{0, 1, -100, 4}, {4}, i64, dev));
  CHECK(good.item() == doctest::Approx(std::log(5.0)));

  // Embedding: raised by a copy to the host; forward and backward both bad: the first is reported.
  const Tensor weight = zeros({5, 2}, f32, dev).requires_grad_();
  Tensor y;
  CHECK_NOTHROW(y = embedding(weight, from_vector(std::vector<int64_t>{1, 5}, {2}, i64, dev)));
  CHECK_NOTHROW(y.backward(ones({2, 2}, f32, dev)));
  CHECK_ERROR(y.to(kCPU), "[embedding_forward] id 5 at position 1 is out of range, expected 0 <= id < 5");
  CHECK_NOTHROW(y.to(kCPU));

  // ... and by hg::cuda::synchronize.
  y = embedding(weight, from_vector(std::vector<int64_t>{-2, 1}, {2}, i64, dev));
  CHECK_ERROR(cuda::synchronize(0), "[embedding_forward] id -2 at position 0", "hg::cuda::synchronize");
  CHECK_NOTHROW(cuda::synchronize(0));
}
