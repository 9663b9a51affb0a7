// scaled_dot_product_attention on a CUDA device: the fused path (kernels/cuda/attention_*.cu) against
// the CPU's fused path, forward and backward, f16/bf16/f32, with the GPT's strided operands, with
// dropout (the same Philox masks on both devices) and with bool and additive attn_masks; the fallback to the composed
// path where the CUDA kernels refuse; a GPT step through either path on the device. Runs on a real GPU or on the SIMT
// emulator; without either it skips visibly. Device buffers come from a cache first filled with NaN.
//
// Tolerances, relative to the largest CPU value: both devices compute in fp32 from the same rounded
// inputs and round O, dQ, dK, dV once. They differ in summation order, in exp (CUDA's vs libm), and on
// the device the f16/bf16 probabilities (and dS) are rounded to the dtype before their tensor-core
// products where the CPU keeps them in fp32: about one rounding (eps/2) of terms summed over keys, so
// 4 eps (eps = 2^-10 f16, 2^-7 bf16); f32 2e-5.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "engine/cuda/cuda_context.h"
#include "engine/ops.h"
#include "engine/random.h"
#include "layers/nn.h"
#include "support/check_error.h"

using namespace hg;

namespace {

const Device kCuda = Device::cuda(0);

bool skip_without_cuda() {
  if (cuda::is_available()) return false;
  std::printf("SKIPPED (attention op on CUDA): no CUDA device: %s\n", cuda::unavailable_reason().c_str());
  MESSAGE("skipped: no CUDA device: ", cuda::unavailable_reason());
  return true;
}

// Fills the device cache with NaN blocks and frees them: the op's outputs reuse poisoned memory.
void poison_device_cache() {
  std::vector<Tensor> blocks;
  for (int64_t n : {1 << 12, 1 << 14, 1 << 16, 1 << 18})
    blocks.push_back(full({n}, std::numeric_limits<double>::quiet_NaN(), f32, kCuda));
}

double rel_error(const Tensor& cpu, const Tensor& cuda) {
  const std::vector<double> a = cpu.to_vector<double>(), b = cuda.to(kCPU).to_vector<double>();
  REQUIRE(a.size() == b.size());
  double scale = 1, worst = 0;
  for (double x : a) scale = std::max(scale, std::abs(x));
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::isnan(b[i]) ? INFINITY : std::abs(a[i] - b[i]));
  return worst / scale;
}

double tolerance(DType dtype) {
  return dtype == f16 ? 4 * std::ldexp(1.0, -10) : dtype == bf16 ? 4 * std::ldexp(1.0, -7) : 2e-5;
}

struct Run {
  Tensor out, dqkv;
};

// q, k, v: the GPT's heads, strided slices of one [B, T, 3C] projection.
Run attention_step(const Tensor& qkv_values, int64_t H, bool causal, double p, AttentionImpl impl) {
  const int64_t B = qkv_values.size(0), T = qkv_values.size(1), C = qkv_values.size(2) / 3, D = C / H;
  const Tensor qkv = qkv_values.detach().requires_grad_();
  auto heads = [&](int64_t which) { return qkv.narrow(2, which * C, C).view({B, T, H, D}).transpose(1, 2); };
  manual_seed(77);
  Run r;
  r.out = scaled_dot_product_attention(heads(0), heads(1), heads(2), causal, p, impl);
  manual_seed(78);
  r.out.backward(randn(r.out.shape(), f32).to(qkv.dtype()).to(qkv.device()));
  r.dqkv = qkv.grad();
  return r;
}

}  // namespace

TEST_CASE("fused attention on CUDA equals the CPU's, forward and backward, strided heads, with dropout") {
  if (skip_without_cuda()) return;
  for (DType dtype : {bf16, f16, f32}) {
    for (int64_t T : {17, 64}) {
      for (bool causal : {true, false}) {
        for (double p : {0.0, 0.2}) {
          const int64_t B = 2, H = 2, D = 64;
          manual_seed(uint64_t(T * 3 + causal));
          const Tensor qkv = randn({B, T, 3 * H * D}, f32).to(dtype);
          const Run cpu = attention_step(qkv, H, causal, p, AttentionImpl::Fused);
          poison_device_cache();
          const Run cuda = attention_step(qkv.to(kCuda), H, causal, p, AttentionImpl::Fused);
          INFO(std::string(dtype_name(dtype)), " T = ", T, " causal = ", causal, " p = ", p);
          CHECK(cuda.out.device() == kCuda);
          CHECK(cuda.out.transpose(1, 2).is_contiguous());
          CHECK(rel_error(cpu.out, cuda.out) <= tolerance(dtype));
          CHECK(rel_error(cpu.dqkv, cuda.dqkv) <= tolerance(dtype));
        }
      }
    }
  }
}

TEST_CASE("fused attention on CUDA applies bool and additive masks in its tiles: the CPU's values and gradients") {
  // Tq != Tk over several 64 x 64 tiles, with and without causal. The bool mask is a key padding mask
  // [B, 1, 1, Tk] (broadcast: stride 0 over heads and queries) whose batch 0 hides every key of the first
  // key tile (the online softmax starts from no key seen); the additive one is per query and key [Tq, Tk]
  // plus that padding as -inf, and is also read transposed (key stride != 1: the element-wise path).
  if (skip_without_cuda()) return;
  struct Case {
    int64_t tq, tk;
    bool causal;
  };
  for (DType dtype : {bf16, f16, f32})
    for (const Case c : {Case{70, 130, false}, Case{70, 130, true}})
      for (int kind = 0; kind < 3; ++kind) {  // bool, additive, additive read transposed
        const int64_t B = 2, H = 1, D = dtype == f32 ? 128 : 64;
        manual_seed(uint64_t(c.causal * 10 + kind));
        const Tensor q0 = randn({B, H, c.tq, D}, f32).to(dtype), k0 = randn({B, H, c.tk, D}, f32).to(dtype);
        const Tensor v0 = randn({B, H, c.tk, D}, f32).to(dtype), g = randn({B, H, c.tq, D}, f32).to(dtype);
        const double first = c.causal ? 30.0 : 64.0;
        const Tensor key = arange(0.0, double(c.tk), 1.0, f32, kCPU).view({1, c.tk});
        Tensor mask = ge(key, from_vector(std::vector<float>{float(first), 1.0f}, {2, 1}, f32)).view({B, 1, 1, c.tk});
        const Tensor padding = masked_fill(zeros({B, 1, 1, c.tk}, f32), logical_not(mask), -INFINITY);
        if (kind == 1) mask = (randn({c.tq, c.tk}, f32) + padding).to(dtype);
        // Stored [B, 1, Tk, Tq] and transposed on each device below: key stride Tq.
        if (kind == 2) mask = (randn({c.tk, c.tq}, f32) + padding.transpose(-1, -2)).to(dtype);
        auto on = [&](const Device& device) {
          const Tensor m = mask.to(device);
          return kind == 2 ? m.transpose(-1, -2) : m;
        };
        std::vector<Tensor> results[2];
        for (int on_cuda = 0; on_cuda < 2; ++on_cuda) {
          const Device device = on_cuda ? kCuda : kCPU;
          if (on_cuda) poison_device_cache();
          const Tensor q = q0.to(device).detach().requires_grad_(), k = k0.to(device).detach().requires_grad_();
          const Tensor v = v0.to(device).detach().requires_grad_();
          const Tensor y = scaled_dot_product_attention(q, k, v, on(device), c.causal, 0.0, AttentionImpl::Fused);
          y.backward(g.to(device));
          results[on_cuda] = {y, q.grad(), k.grad(), v.grad()};
        }
        INFO(std::string(dtype_name(dtype)), " causal = ", c.causal, " mask kind = ", kind);
        for (size_t i = 0; i < 4; ++i) {
          CAPTURE(i);
          CHECK(rel_error(results[0][i], results[1][i]) <= tolerance(dtype));
        }
      }
}

TEST_CASE("masked fused attention on CUDA: a query that sees no key is NaN, as on the CPU; the others are not") {
  if (skip_without_cuda()) return;
  manual_seed(9);
  const Tensor q = randn({1, 1, 3, 64}, f32), k = randn({1, 1, 5, 64}, f32), v = randn({1, 1, 5, 64}, f32);
  // Row 0 hides every key; rows 1 and 2 see some.
  const Tensor keep =
      ne(from_vector(std::vector<int32_t>{0, 0, 0, 0, 0, 1, 0, 1, 0, 1, 1, 1, 1, 1, 0}, {3, 5}, i32), 0.0);
  poison_device_cache();
  const Tensor on_cuda = scaled_dot_product_attention(q.to(kCuda), k.to(kCuda), v.to(kCuda), keep.to(kCuda), false, 0.0,
                                                      AttentionImpl::Fused)
                             .to(kCPU);
  const Tensor on_cpu = scaled_dot_product_attention(q, k, v, keep, false, 0.0, AttentionImpl::Fused);
  const std::vector<double> values = on_cuda.to_vector<double>();
  CHECK(std::all_of(values.begin(), values.begin() + 64, [](double x) { return std::isnan(x); }));
  CHECK(std::none_of(values.begin() + 64, values.end(), [](double x) { return std::isnan(x); }));
  CHECK(rel_error(on_cpu.narrow(2, 1, 2), on_cuda.narrow(2, 1, 2)) <= 2e-5);
}

TEST_CASE("attention on CUDA: head dimensions the kernels refuse run composed under Auto; Fused says why") {
  if (skip_without_cuda()) return;
  manual_seed(5);
  const Tensor q = randn({2, 2, 9, 16}, f32, kCuda), k = randn({2, 2, 9, 16}, f32, kCuda);
  std::string why;
  CHECK(attention_impl_for(q, k, k, &why) == AttentionImpl::Composed);
  CHECK(why.find("head dimension 64 or 128") != std::string::npos);
  CHECK_ERROR(scaled_dot_product_attention(q, k, k, true, 0.0, AttentionImpl::Fused), "got D = 16 in f32");
  const Tensor automatic = scaled_dot_product_attention(q, k, k, true);
  const Tensor on_cpu = scaled_dot_product_attention(q.to(kCPU), k.to(kCPU), k.to(kCPU), true);
  CHECK(rel_error(on_cpu, automatic) <= 2e-5);
  // f64 is the composed path's on CUDA too.
  const Tensor q64 = randn({1, 1, 5, 64}, f64, kCuda);
  CHECK(attention_impl_for(q64, q64, q64) == AttentionImpl::Composed);
}

TEST_CASE("a GPT step on CUDA gives the same loss and gradients through the fused and composed attention") {
  if (skip_without_cuda()) return;
  auto step = [](AttentionImpl impl) {
    manual_seed(31);
    nn::GPT model(nn::GPTConfig().vocab_size(13).context(16).n_layer(1).n_head(1).n_embd(64).dropout(0.1).attention(impl));
    model.to(kCuda);
    manual_seed(32);
    const Tensor ids = randint(0, 13, {2, 16}, i64).to(kCuda), targets = randint(0, 13, {2, 16}, i64).to(kCuda);
    manual_seed(33);
    const Tensor loss = model.loss(ids, targets);
    loss.backward();
    std::vector<Tensor> out{loss.detach()};
    for (const Tensor& p : model.parameters()) out.push_back(p.grad());
    return out;
  };
  const std::vector<Tensor> fused = step(AttentionImpl::Fused), composed = step(AttentionImpl::Composed);
  REQUIRE(fused.size() == composed.size());
  for (size_t i = 0; i < fused.size(); ++i) {
    INFO("tensor ", i);
    CHECK(rel_error(composed[i].to(kCPU), fused[i]) <= 5e-5);
  }
}
