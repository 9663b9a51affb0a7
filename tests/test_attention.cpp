// scaled_dot_product_attention, the op (engine/ops/attention*.cpp) on the CPU: the fused path against
// the composed reference (forward and backward, every dtype, dropout with the same masks), a float64
// gradcheck of the fused path, the GPT's strided operands, the choice between the paths and its
// errors, the activation memory each path keeps, and the GPT trained through either.
//
// Tolerances. f64 and f32 compare the two paths computed in that dtype (they differ in summation
// order only): 1e-12 and 2e-5 relative to the largest reference value. f16 and bf16 compare the fused
// path with the composed path in f64 on the same (rounded) inputs (eps = 2^-10 or 2^-7). The CPU's
// fused kernels compute in fp32 and round each output once (eps/2 of it), plus fp32 sums of up to 64
// terms (negligible against eps): O within eps/2 of its largest value. The gradients add the rounding
// of dO (an input, rounded to the dtype like q, k and v, so shared with the reference) and fp32 sums
// of dS products whose size is that of the gradient; 6 eps of max(1, largest reference value) leaves
// room for a few such roundings and fails at any masking, dropout or scaling mistake (errors of
// order one).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/allocator.h"
#include "engine/ops/attention_internal.h"
#include "engine/random.h"
#include "layers/nn.h"
#include "support/attention_grads.h"
#include "support/check_error.h"
#include "support/gradcheck.h"

using namespace hg;

namespace {

using hg::testing::max_abs;

// max |a - b| (a NaN difference: infinity) of tensors required to have as many elements.
double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.numel() == b.numel());
  return hg::testing::max_abs_diff(a, b);
}

double eps_of(DType dtype) {
  switch (dtype) {
    case f16: return std::ldexp(1.0, -10);
    case bf16: return std::ldexp(1.0, -7);
    case f32: return std::ldexp(1.0, -23);
    default: return std::ldexp(1.0, -52);
  }
}

using Result = hg::testing::AttentionGrads;

// One forward + backward with a fixed upstream gradient and dropout masks drawn from seed 5.
Result run(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, bool causal, double p,
           AttentionImpl impl) {
  return hg::testing::attention_forward_backward(q, k, v, dout, causal, p, impl);
}

}  // namespace

TEST_CASE("fused attention matches the composed path, forward and backward, in every dtype") {
  for (DType dtype : {f64, f32, bf16, f16}) {
    for (int64_t t : {1, 17, 64}) {
      for (int64_t d : {16, 64}) {
        for (bool causal : {true, false}) {
          for (double p : {0.0, 0.2}) {
            manual_seed(uint64_t(100 + t + d));
            const Tensor q = randn({2, 3, t, d}, f64), k = randn({2, 3, t, d}, f64), v = randn({2, 3, t, d}, f64);
            const Tensor dout = randn({2, 3, t, d}, f64);
            const Tensor qd = q.to(dtype), kd = k.to(dtype), vd = v.to(dtype), dd = dout.to(dtype);
            const Result fused = run(qd, kd, vd, dd, causal, p, AttentionImpl::Fused);
            INFO(dtype_name(dtype), " T = ", t, " D = ", d, " causal = ", causal, " p = ", p);
            const bool half = dtype == f16 || dtype == bf16;
            // The reference: the composed path, in f64 for the half dtypes (on the rounded inputs).
            const Result ref = half ? run(qd.to(f64), kd.to(f64), vd.to(f64), dd.to(f64), causal, p,
                                          AttentionImpl::Composed)
                                    : run(qd, kd, vd, dd, causal, p, AttentionImpl::Composed);
            const double rel = dtype == f64 ? 1e-12 : dtype == f32 ? 2e-5 : 6 * eps_of(dtype);
            CHECK(max_abs_diff(fused.out, ref.out) <= rel * std::max(1.0, max_abs(ref.out)));
            CHECK(max_abs_diff(fused.dq, ref.dq) <= rel * std::max(1.0, max_abs(ref.dq)));
            CHECK(max_abs_diff(fused.dk, ref.dk) <= rel * std::max(1.0, max_abs(ref.dk)));
            CHECK(max_abs_diff(fused.dv, ref.dv) <= rel * std::max(1.0, max_abs(ref.dv)));
            CHECK(fused.out.dtype() == dtype);
            CHECK(fused.dq.dtype() == dtype);
          }
        }
      }
    }
  }
}

TEST_CASE("fused attention: float64 gradcheck, causal and not, with dropout, Tq < Tk") {
  for (bool causal : {true, false}) {
    for (double p : {0.0, 0.3}) {
      manual_seed(3);
      const Tensor q = randn({2, 4, 3}, f64).requires_grad_();
      const Tensor k = randn({2, 6, 3}, f64).requires_grad_();
      const Tensor v = randn({2, 6, 3}, f64).requires_grad_();
      auto fn = [causal, p](const std::vector<Tensor>& in) {
        manual_seed(11);  // the same dropout mask at every evaluation
        return scaled_dot_product_attention(in[0], in[1], in[2], causal, p, AttentionImpl::Fused);
      };
      INFO("causal = ", causal, " p = ", p);
      CHECK(testing::gradcheck("attention_fused", fn, {q, k, v}) == "");
    }
  }
}

TEST_CASE("fused attention drops the very probabilities the composed path drops") {
  manual_seed(8);
  const Tensor q = randn({1, 2, 33, 8}, f64), k = randn({1, 2, 33, 8}, f64), v = randn({1, 2, 33, 8}, f64);
  manual_seed(21);
  const Tensor fused = scaled_dot_product_attention(q, k, v, true, 0.5, AttentionImpl::Fused);
  const GeneratorState after_fused = default_generator().state();
  manual_seed(21);
  const Tensor composed = scaled_dot_product_attention(q, k, v, true, 0.5, AttentionImpl::Composed);
  CHECK(max_abs_diff(fused, composed) <= 1e-12);
  CHECK(default_generator().state() == after_fused);  // both consume the same Philox blocks
  // The check can fail: another mask gives another output.
  manual_seed(22);
  const Tensor other = scaled_dot_product_attention(q, k, v, true, 0.5, AttentionImpl::Fused);
  CHECK(max_abs_diff(fused, other) > 1e-3);
}

TEST_CASE("fused attention reads the GPT's strided q, k, v in place and returns heads that merge as a view") {
  const int64_t B = 2, T = 9, H = 3, D = 4, C = H * D;
  manual_seed(4);
  const Tensor qkv = randn({B, T, 3 * C}, f32).requires_grad_();
  auto heads = [&](int64_t which) { return qkv.narrow(2, which * C, C).view({B, T, H, D}).transpose(1, 2); };
  const Tensor fused = scaled_dot_product_attention(heads(0), heads(1), heads(2), true, 0.0, AttentionImpl::Fused);
  CHECK(fused.shape() == Shape{B, H, T, D});
  CHECK(fused.transpose(1, 2).is_contiguous());
  const Tensor composed =
      scaled_dot_product_attention(heads(0), heads(1), heads(2), true, 0.0, AttentionImpl::Composed);
  CHECK(max_abs_diff(fused, composed) <= 2e-6);
  // Gradients reach the shared projection through the three slices.
  manual_seed(6);
  const Tensor g = randn({B, H, T, D}, f32);
  fused.backward(g);
  const Tensor fused_grad = qkv.grad().to(f64);
  qkv.set_grad(Tensor());
  composed.backward(g);
  CHECK(max_abs_diff(fused_grad, qkv.grad()) <= 1e-5 * std::max(1.0, max_abs(fused_grad)));
}

TEST_CASE("attention ranks 2, 3 and 5 take the fused path and keep their shapes") {
  manual_seed(9);
  for (const Shape& shape : {Shape{7, 5}, Shape{3, 7, 5}, Shape{2, 2, 3, 7, 5}}) {
    const Tensor q = randn(shape, f64), k = randn(shape, f64), v = randn(shape, f64);
    const Tensor fused = scaled_dot_product_attention(q, k, v, true, 0.0, AttentionImpl::Fused);
    const Tensor composed = scaled_dot_product_attention(q, k, v, true, 0.0, AttentionImpl::Composed);
    INFO("q ", q.describe());
    CHECK(fused.shape() == shape);
    CHECK(max_abs_diff(fused, composed) <= 1e-12);
  }
}

TEST_CASE("attention: Auto falls back to the composed path where the fused kernels refuse; Fused says why") {
  manual_seed(10);
  const Tensor q = randn({2, 5, 4}, f32), k = randn({2, 5, 4}, f32), v8 = randn({2, 5, 8}, f32);
  std::string why;
  CHECK(attention_impl_for(q, k, v8, &why) == AttentionImpl::Composed);
  CHECK(why.find("Dv = 8 differs from D = 4") != std::string::npos);
  CHECK_ERROR(scaled_dot_product_attention(q, k, v8, true, 0.0, AttentionImpl::Fused), "[scaled_dot_product_attention]",
              "Dv = 8 differs from D = 4", "AttentionImpl::Auto");
  const Tensor automatic = scaled_dot_product_attention(q, k, v8, true);
  CHECK(max_abs_diff(automatic, ops::attention_composed(q, k, v8, true, 0.0)) == 0.0);
  CHECK(attention_impl_for(q, k, k) == AttentionImpl::Fused);
  // Broadcast leading dimensions are the composed path's.
  const Tensor k1 = randn({1, 5, 4}, f32);
  CHECK(attention_impl_for(q, k1, k1, &why) == AttentionImpl::Composed);
  CHECK(why.find("leading") != std::string::npos);
}

TEST_CASE("attention rejects bad arguments with errors that name them") {
  const Tensor q = randn({2, 5, 4}, f32), k = randn({2, 3, 4}, f32);
  CHECK_ERROR(scaled_dot_product_attention(q, k, k, true), "causal attention needs at least as many keys",
              "Tq = 5", "Tk = 3");
  CHECK_ERROR(scaled_dot_product_attention(q, q, q, true, 1.0), "dropout probability 1", "outside [0, 1)");
  CHECK_ERROR(scaled_dot_product_attention(q, q, q, true, -0.5), "dropout probability -0.5");
  CHECK_ERROR(scaled_dot_product_attention(q, randn({2, 5, 3}, f32), q), "expected k [.., Tk, 4]");
  CHECK_ERROR(scaled_dot_product_attention(q, q.to(f64), q), "[scaled_dot_product_attention]");
  CHECK_ERROR(scaled_dot_product_attention(q, randn({2, 0, 4}, f32), randn({2, 0, 4}, f32), false),
              "expected at least one key");
  // A seed gradient of another dtype than the output reaches the fused backward: named, not misread.
  const Tensor qg = randn({2, 5, 4}, f32).requires_grad_();
  const Tensor out = scaled_dot_product_attention(qg, qg, qg, true, 0.0, AttentionImpl::Fused);
  CHECK_ERROR(out.backward(randn({2, 5, 4}, f64)), "gradient of the output is f64", "expected f32");
}

TEST_CASE("attention masks: a bool key-padding mask hides keys like dropping them; bad masks are named") {
  // Keys hidden by a [B, Tk] key-padding mask (viewed [B, 1, 1, Tk]) count as absent: the result
  // equals attention over the visible keys only, per batch row.
  const Tensor q = randn({2, 2, 3, 4}, f64), k = randn({2, 2, 5, 4}, f64), v = randn({2, 2, 5, 3}, f64);
  const Tensor keep = ne(from_vector(std::vector<int32_t>{1, 1, 1, 0, 0, 1, 1, 1, 1, 1}, {2, 5}, i32), 0.0);
  const Tensor y = scaled_dot_product_attention(q, k, v, keep.view({2, 1, 1, 5}));
  const Tensor first = scaled_dot_product_attention(q.narrow(0, 0, 1), k.narrow(0, 0, 1).narrow(2, 0, 3),
                                                    v.narrow(0, 0, 1).narrow(2, 0, 3), false);
  const Tensor second = scaled_dot_product_attention(q.narrow(0, 1, 1), k.narrow(0, 1, 1), v.narrow(0, 1, 1), false);
  CHECK(max(abs(y - cat({first, second}, 0))).item() < 1e-12);
  // An additive mask of -inf is the bool mask; of 0 it is no mask.
  const Tensor additive = where(keep.view({2, 1, 1, 5}), scalar_tensor(0.0, f64), scalar_tensor(-INFINITY, f64));
  CHECK(max(abs(scaled_dot_product_attention(q, k, v, additive) - y)).item() < 1e-12);
  const Tensor none = scaled_dot_product_attention(q, k, v, zeros({3, 5}, f64));
  CHECK(max(abs(none - scaled_dot_product_attention(q, k, v, false))).item() < 1e-12);

  CHECK_ERROR(scaled_dot_product_attention(q, k, v, keep), "attn_mask", "does not broadcast to the scores",
              "[2, 2, 3, 5]");
  CHECK_ERROR(scaled_dot_product_attention(q, k, v, zeros({3, 5}, f32)), "attn_mask", "must be bool, or of q's dtype");
  const Tensor needs_grad = zeros({3, 5}, f64).requires_grad_();
  CHECK_ERROR(scaled_dot_product_attention(q, k, v, needs_grad, false, 0.0, AttentionImpl::Fused),
              "requires a gradient, which the fused kernels do not compute");
}

TEST_CASE("fused CPU attention applies bool and additive masks in its tiles: the composed path's values, gradients") {
  // Sizes across several 64 x 64 tiles, Tq != Tk, with and without causal; a key-padding mask whose
  // first row hides every key of the first key tile (the online softmax starts from no key seen) and a
  // per-query additive mask; f64 and f32 (a half operand goes through the same tile code).
  struct Case {
    int64_t tq, tk;
    bool causal;
  };
  for (const DType t : {f64, f32})
    for (const Case c : {Case{70, 130, false}, Case{70, 130, true}, Case{5, 3, false}})
      for (const bool additive : {false, true}) {
        CAPTURE(std::string(dtype_name(t)));
        CAPTURE(c.tq);
        CAPTURE(c.causal);
        CAPTURE(additive);
        const Tensor q0 = randn({2, 3, c.tq, 16}, t), k0 = randn({2, 3, c.tk, 16}, t), v0 = randn({2, 3, c.tk, 16}, t);
        const Tensor g = randn({2, 3, c.tq, 16}, t);
        // Batch 0 sees keys [first, tk) (without causal: all of the first key tile hidden), batch 1 every
        // key but the first.
        const double first = c.causal ? 30.0 : double(std::min<int64_t>(64, c.tk - 1));
        const Tensor key = arange(0.0, double(c.tk), 1.0, f64, kCPU).view({1, c.tk});
        Tensor mask = ge(key, from_vector(std::vector<double>{first, 1.0}, {2, 1}, f64)).view({2, 1, 1, c.tk});
        if (additive)
          mask = cast(randn({c.tq, c.tk}, f64) + masked_fill(zeros({2, 1, 1, c.tk}, f64), logical_not(mask), -INFINITY),
                      t);
        std::vector<Tensor> results[2];
        for (int path = 0; path < 2; ++path) {
          const Tensor q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_();
          const Tensor v = v0.clone().requires_grad_();
          const Tensor y = scaled_dot_product_attention(q, k, v, mask, c.causal, 0.0,
                                                        path == 0 ? AttentionImpl::Fused : AttentionImpl::Composed);
          y.backward(g);
          results[path] = {y, q.grad(), k.grad(), v.grad()};
        }
        for (size_t i = 0; i < 4; ++i) {
          CAPTURE(i);
          const double err = max(abs(results[0][i] - results[1][i])).item();
          CHECK(err < (t == f64 ? 1e-12 : 2e-5));
        }
      }
  // A query that sees no key: NaN on both paths (PyTorch's), the other rows unaffected.
  const Tensor q = randn({1, 1, 2, 4}, f64), k = randn({1, 1, 3, 4}, f64), v = randn({1, 1, 3, 4}, f64);
  const Tensor keep = ne(from_vector(std::vector<int32_t>{0, 0, 0, 1, 0, 1}, {2, 3}, i32), 0.0);
  const Tensor fused = scaled_dot_product_attention(q, k, v, keep, false, 0.0, AttentionImpl::Fused);
  const Tensor composed = scaled_dot_product_attention(q, k, v, keep, false, 0.0, AttentionImpl::Composed);
  for (const Tensor& y : {fused, composed}) {
    const std::vector<double> values = y.to_vector<double>();
    CHECK(std::all_of(values.begin(), values.begin() + 4, [](double x) { return std::isnan(x); }));
  }
  CHECK(max(abs(fused.narrow(2, 1, 1) - composed.narrow(2, 1, 1))).item() < 1e-12);
}

TEST_CASE("fused attention keeps O(B H T D) for backward where the composed path keeps the B H T T probabilities") {
  const int64_t B = 2, H = 4, T = 256, D = 64;
  manual_seed(12);
  const Tensor q = randn({B, H, T, D}, f32).requires_grad_(), k = randn({B, H, T, D}, f32).requires_grad_();
  const Tensor v = randn({B, H, T, D}, f32).requires_grad_();
  auto kept = [&](AttentionImpl impl) {
    const int64_t before = memory_stats(kCPU).allocated_bytes;
    const Tensor out = scaled_dot_product_attention(q, k, v, true, 0.0, impl);
    return memory_stats(kCPU).allocated_bytes - before;  // the output and what the graph saved
  };
  const int64_t output = B * H * T * D * 4, probabilities = B * H * T * T * 4, lse = B * H * T * 4;
  const int64_t fused = kept(AttentionImpl::Fused), composed = kept(AttentionImpl::Composed);
  MESSAGE("kept by the forward: fused ", fused, " B, composed ", composed, " B");
  CHECK(fused >= output + lse);
  CHECK(fused <= output + lse + 4096);  // the allocator's rounding, nothing of size T x T
  CHECK(composed >= output + probabilities);
  CHECK(composed - fused >= probabilities - lse);  // the T x T share, less the fused path's log-sum-exps
}

TEST_CASE("a GPT trains the same through the fused and the composed attention (dropout on)") {
  auto step = [](AttentionImpl impl) {
    manual_seed(31);
    nn::GPT model(nn::GPTConfig().vocab_size(13).context(16).n_layer(2).n_head(2).n_embd(16).dropout(0.2).attention(impl));
    manual_seed(32);
    const Tensor ids = randint(0, 13, {3, 16}, i64), targets = randint(0, 13, {3, 16}, i64);
    manual_seed(33);
    const Tensor loss = model.loss(ids, targets);
    loss.backward();
    std::vector<Tensor> grads{loss.detach()};
    for (const Tensor& p : model.parameters()) grads.push_back(p.grad());
    return grads;
  };
  const std::vector<Tensor> fused = step(AttentionImpl::Fused), composed = step(AttentionImpl::Composed);
  REQUIRE(fused.size() == composed.size());
  for (size_t i = 0; i < fused.size(); ++i) {
    INFO("tensor ", i);
    CHECK(max_abs_diff(fused[i], composed[i]) <= 2e-5 * std::max(1.0, max_abs(composed[i])));
  }
}
