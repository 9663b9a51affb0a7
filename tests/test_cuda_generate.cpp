// Generation on a CUDA device (a GPU, or the SIMT emulator; without either every case skips visibly):
// GPT::forward(ids, KVCache&) against the whole forward on the device, in f32 and bf16, through the fused
// attention kernels (head dimension 64) and the composed path (16); cached against uncached generate()
// on the device; and the same sampled tokens on the device as on the CPU for one seed (the sampler runs
// on the host from the copied logits). Small on purpose (2 layers, width 64, a dozen tokens): the
// emulator runs every kernel thread as a fiber. Cache rows not yet written are NaN.
//
// Tolerances, relative to the largest |logit|: f32 2e-5 (the same sums in other orders: a prefill GEMM
// of T rows against a decode GEMM of one). bf16 rounds every activation to 8 bits of mantissa, and the
// two paths can round an intermediate value one ulp apart (2^-8 relative) when their fp32 sums differ in
// the last bits; through two blocks and the head that stays within 8 ulps of the largest logit, 8 x 2^-8.
// Random models with weights N(0, 0.1) make the top logits far apart, so f32 tokens must match exactly;
// in bf16 a greedy token may differ only where the reference's two best logits are within that tolerance.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "engine/cuda/cuda_context.h"
#include "engine/random.h"
#include "layers/generate.h"
#include "layers/init.h"
#include "layers/kv_cache.h"
#include "layers/nn.h"
#include "support/test_seed.h"

using namespace hg;
using namespace hg::nn;

namespace {

const Device kCuda = Device::cuda(0);

bool skip_without_cuda() {
  if (cuda::is_available()) return false;
  std::printf("SKIPPED (generation on CUDA): no CUDA device: %s\n", cuda::unavailable_reason().c_str());
  MESSAGE("skipped: no CUDA device: ", cuda::unavailable_reason());
  return true;
}

double tolerance(DType dtype) { return dtype == bf16 ? 8 * std::ldexp(1.0, -8) : 2e-5; }

// A random 2-layer, 64-wide GPT with `heads` heads, on the CPU in f32.
std::shared_ptr<GPT> random_model(int64_t heads, std::mt19937& rng) {
  manual_seed(rng());
  auto model = std::make_shared<GPT>(GPTConfig().vocab_size(50).context(16).n_layer(2).n_head(heads).n_embd(64));
  for (auto& [name, p] : model->named_parameters()) {
    if (name.find("ln_") == std::string::npos) init::normal_(p, 0.0, 0.1);
  }
  model->eval();
  return model;
}

std::vector<int64_t> random_ids(int64_t n, std::mt19937& rng) {
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = int64_t(rng() % 50);
  return ids;
}

double relative_error(const Tensor& reference, const Tensor& other) {
  const std::vector<double> a = reference.to_vector<double>(), b = other.to_vector<double>();
  REQUIRE(a.size() == b.size());
  double scale = 1, worst = 0;
  for (double x : a) scale = std::max(scale, std::abs(x));
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::isnan(b[i]) ? INFINITY : std::abs(a[i] - b[i]));
  return worst / scale;
}

}  // namespace

TEST_CASE("on the CUDA device the cached forward equals the whole forward (f32, bf16; fused and composed)") {
  if (skip_without_cuda()) return;
  std::mt19937 rng = testing::seeded_rng();
  for (DType dtype : {f32, bf16}) {
    for (int64_t heads : {1, 4}) {
      const std::string dtype_text = dtype_name(dtype);
      CAPTURE(dtype_text);
      CAPTURE(heads);
      auto model = random_model(heads, rng);
      model->to(kCuda);
      model->to(dtype);
      const int64_t T = 10;
      const Tensor ids = from_vector(random_ids(T, rng), {1, T}, i64, kCuda);
      // Head dimension 64 takes the fused kernels on CUDA, 16 the composed path.
      const Tensor probe = empty({1, heads, 2, 64 / heads}, dtype, kCuda);
      CHECK(attention_impl_for(probe, probe, probe) == (heads == 1 ? AttentionImpl::Fused : AttentionImpl::Composed));

      const Tensor whole = model->forward(ids);
      KVCache cache(*model, 1);
      for (int64_t l = 0; l < cache.layers(); ++l) {
        cache.keys(l).fill_(std::numeric_limits<double>::quiet_NaN());
        cache.values(l).fill_(std::numeric_limits<double>::quiet_NaN());
      }
      const Tensor prefill = model->forward(ids.narrow(1, 0, 4).contiguous(), cache);
      double worst = relative_error(whole.narrow(1, 0, 4), prefill);
      for (int64_t t = 4; t < T; ++t) {
        const Tensor logits = model->forward(ids.narrow(1, t, 1).contiguous(), cache);
        CHECK(logits.device() == kCuda);
        worst = std::max(worst, relative_error(whole.narrow(1, t, 1), logits));
      }
      MESSAGE(dtype_text, ", ", heads, " head(s): largest relative error ", worst);
      CHECK(worst < tolerance(dtype));
    }
  }
}

TEST_CASE("on the CUDA device cached and uncached generation give the same tokens, and f32 the CPU's") {
  if (skip_without_cuda()) return;
  std::mt19937 rng = testing::seeded_rng();
  for (int64_t heads : {1, 4}) {
    CAPTURE(heads);
    auto cpu_model = random_model(heads, rng);
    auto model = random_model(heads, rng);
    model->load_state_dict(cpu_model->state_dict());
    model->to(kCuda);
    for (int64_t prompt_length : {1, 4}) {
      CAPTURE(prompt_length);
      const std::vector<int64_t> prompt = random_ids(prompt_length, rng);
      for (const GenerationOptions& base : {GenerationOptions().temperature(0),
                                            GenerationOptions().temperature(1.0).top_k(20).seed(rng())}) {
        const GenerationOptions options = GenerationOptions(base).max_tokens(8);
        const std::vector<int64_t> cached = generate(*model, prompt, options);
        REQUIRE(cached.size() == 8);
        CHECK(cached == generate(*model, prompt, GenerationOptions(options).use_cache(false)));
        CHECK(cached == generate(*cpu_model, prompt, options));  // one seed, the same draws on both devices
      }
    }

    // bf16, greedy: the same tokens, or a first difference where the reference's two best logits tie
    // within the bf16 tolerance.
    model->to(bf16);
    const std::vector<int64_t> prompt = random_ids(3, rng);
    const GenerationOptions greedy = GenerationOptions().temperature(0).max_tokens(8);
    const std::vector<int64_t> cached = generate(*model, prompt, greedy);
    const std::vector<int64_t> uncached = generate(*model, prompt, GenerationOptions(greedy).use_cache(false));
    REQUIRE(cached.size() == 8);
    const size_t first = size_t(std::mismatch(cached.begin(), cached.end(), uncached.begin()).first - cached.begin());
    if (first < cached.size()) {
      std::vector<int64_t> sequence = prompt;
      sequence.insert(sequence.end(), uncached.begin(), uncached.begin() + int64_t(first));
      const Tensor ids = from_vector(sequence, {1, int64_t(sequence.size())}, i64, kCuda);
      std::vector<float> last = model->forward(ids).select(1, -1).to_vector<float>();
      double scale = 1;
      for (float x : last) scale = std::max(scale, double(std::abs(x)));
      const double gap = std::abs(double(last[size_t(cached[first])]) - double(last[size_t(uncached[first])]));
      INFO("bf16 tokens differ at ", first, " with a logit gap of ", gap);
      CHECK(gap <= tolerance(bf16) * scale);
    }
  }
}
