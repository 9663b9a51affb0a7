// Activation checkpointing, saved-tensor hooks, activation offload and memory monitoring on the CPU.
// Gradients with checkpointing or offload must equal those without, bit for bit (the CPU kernels are
// deterministic, and checkpoint replays dropout's Philox state); peak memory must drop by at least
// what the model's sizes say it should.
#include <doctest/doctest.h>

#include <cmath>

#include "engine/activation_offload.h"
#include "engine/allocator.h"
#include "engine/recompute.h"
#include "engine/ops.h"
#include "engine/random.h"
#include "engine/saved_tensor.h"
#include "support/check_error.h"
#include "support/memory_model.h"

using namespace hg;
using namespace hg::test;

namespace {

void check_same_gradients(const StepResult& a, const StepResult& b, const char* what) {
  INFO(what);
  CHECK(a.loss_bytes == b.loss_bytes);
  REQUIRE(a.grads.size() == b.grads.size());
  for (const auto& [name, bytes] : a.grads) {
    INFO("parameter ", name);
    CHECK(bytes == b.grads.at(name));
  }
}

}  // namespace

TEST_CASE("checkpointed GPT blocks give bitwise-equal loss and gradients in f32 with dropout") {
  const MemoryModelShape s;
  REQUIRE(s.dropout > 0);
  auto plain = make_memory_model(s, 0, f32, kCPU);
  const StepResult reference = memory_model_step(*plain, s);
  for (int64_t k : {1, 2, 3}) {
    auto model = make_memory_model(s, k, f32, kCPU);
    const StepResult r = memory_model_step(*model, s);
    INFO("recompute_every = ", k);
    check_same_gradients(reference, r, "checkpointed vs plain");
    // The backward's replay leaves the generator where the forward left it.
    CHECK(r.generator_after == reference.generator_after);
  }
}

TEST_CASE("the gradient comparison can fail: another dropout seed changes the gradients") {
  const MemoryModelShape s;
  auto model = make_memory_model(s, 1, f32, kCPU);
  const StepResult a = memory_model_step(*model, s);
  // Same step, but the dropout masks drawn from a different state.
  auto other = make_memory_model(s, 1, f32, kCPU);
  manual_seed(99);
  const Tensor ids = randint(0, s.V, {s.B, s.T}, i64), targets = randint(0, s.V, {s.B, s.T}, i64);
  manual_seed(8);
  other->loss(ids, targets).backward();
  CHECK(raw_bytes(other->wte->weight.grad()) != a.grads.at("wte.weight"));
}

TEST_CASE("checkpoint replays dropout masks and leaves the generator where the forward left it") {
  manual_seed(3);
  const Tensor w = randn({16, 16}).requires_grad_();
  const Tensor x0 = randn({8, 16}).requires_grad_();
  auto fn = [&](const Tensor& x) { return gelu(dropout(matmul(x, w), 0.5, true)) * 2.0; };

  manual_seed(11);
  sum(fn(x0)).backward();
  const GeneratorState plain_after = default_generator().state();
  const std::vector<float> gx = x0.grad().to_vector<float>(), gw = w.grad().to_vector<float>();
  x0.set_grad(Tensor());
  w.set_grad(Tensor());

  manual_seed(11);
  const Tensor y = recompute(fn, x0);
  CHECK(y.requires_grad());
  const GeneratorState after_forward = default_generator().state();
  sum(y).backward();
  CHECK(default_generator().state() == after_forward);
  CHECK(after_forward == plain_after);
  CHECK(x0.grad().to_vector<float>() == gx);
  CHECK(w.grad().to_vector<float>() == gw);
}

TEST_CASE("nested checkpoints equal the plain computation") {
  manual_seed(5);
  const Tensor w1 = randn({12, 12}).requires_grad_(), w2 = randn({12, 12}).requires_grad_();
  const Tensor x0 = randn({6, 12}).requires_grad_();
  auto inner = [&](const Tensor& x) { return dropout(tanh(matmul(x, w2)), 0.25, true); };
  auto outer_plain = [&](const Tensor& x) { return inner(gelu(matmul(x, w1))) + x; };
  auto outer_nested = [&](const Tensor& x) { return recompute(inner, gelu(matmul(x, w1))) + x; };

  // One region, used twice: two uses of separate regions would sum x0's gradient contributions in
  // another order (floating-point addition is not associative), which is not what is tested here.
  manual_seed(21);
  const Tensor plain = outer_plain(x0);
  sum(plain * plain).backward();
  const std::vector<float> gx = x0.grad().to_vector<float>(), g1 = w1.grad().to_vector<float>(),
                           g2 = w2.grad().to_vector<float>();
  for (const Tensor* t : {&x0, &w1, &w2}) t->set_grad(Tensor());

  manual_seed(21);
  const Tensor nested = recompute(outer_nested, x0);
  sum(nested * nested).backward();
  CHECK(x0.grad().to_vector<float>() == gx);
  CHECK(w1.grad().to_vector<float>() == g1);
  CHECK(w2.grad().to_vector<float>() == g2);
}

TEST_CASE("checkpoint with several inputs returns each input's gradient") {
  manual_seed(6);
  const Tensor a = randn({4, 5}).requires_grad_(), b = randn({4, 5}).requires_grad_(), c = randn({4, 5});
  auto fn = [](const std::vector<Tensor>& in) { return exp(in[0] * in[1] + in[2]); };
  sum(fn({a, b, c})).backward();
  const std::vector<float> ga = a.grad().to_vector<float>(), gb = b.grad().to_vector<float>();
  a.set_grad(Tensor());
  b.set_grad(Tensor());
  sum(recompute(fn, std::vector<Tensor>{a, b, c})).backward();
  CHECK(a.grad().to_vector<float>() == ga);
  CHECK(b.grad().to_vector<float>() == gb);
  CHECK_FALSE(c.grad().defined());
}

TEST_CASE("checkpoint without grad mode just runs the function") {
  const Tensor x = randn({3, 3}).requires_grad_();
  NoGradGuard no_grad;
  int calls = 0;
  const Tensor y = recompute(
      [&](const Tensor& t) {
        ++calls;
        return t * 2.0;
      },
      x);
  CHECK(calls == 1);
  CHECK_FALSE(y.requires_grad());
}

TEST_CASE("checkpoint rejects an empty function and undefined inputs") {
  Tensor x = randn({2});
  x.requires_grad_();
  CHECK_ERROR(recompute(std::function<Tensor(const Tensor&)>(), x), "expected a function to run");
  CHECK_ERROR(recompute([](const std::vector<Tensor>& in) { return in[0]; }, {x, Tensor()}),
              "input 1 is an undefined tensor");
  CHECK_ERROR(recompute([](const Tensor&) { return Tensor(); }, x), "returned an undefined tensor");
  const auto config = nn::GPTConfig().recompute_every(-1);
  CHECK_ERROR(nn::GPT{config}, "expected recompute_every >= 0");
}

TEST_CASE("checkpointed GPT blocks give bitwise-equal gradients in bf16 and f16") {
  MemoryModelShape s;
  s.B = 4;
  s.T = 16;
  for (DType dtype : {bf16, f16}) {
    INFO("dtype ", dtype_name(dtype));
    auto plain = make_memory_model(s, 0, dtype, kCPU);
    const StepResult reference = memory_model_step(*plain, s);
    for (const auto& [name, g] : reference.grad_tensors) CHECK(g.dtype() == dtype);
    auto model = make_memory_model(s, 1, dtype, kCPU);
    check_same_gradients(reference, memory_model_step(*model, s), "recompute_every = 1");
    check_same_gradients(reference, memory_model_step(*model, s, true, OffloadMode::recompute_inputs),
                         "recompute_every = 1 with offloaded inputs");
    auto offloaded = make_memory_model(s, 0, dtype, kCPU);
    check_same_gradients(reference, memory_model_step(*offloaded, s, true, OffloadMode::all), "offload all");
  }
}

TEST_CASE("offloaded activations give bitwise-equal gradients in both modes") {
  const MemoryModelShape s;
  auto plain = make_memory_model(s, 0, f32, kCPU);
  const StepResult reference = memory_model_step(*plain, s);
  const StepResult all = memory_model_step(*plain, s, true, OffloadMode::all);
  check_same_gradients(reference, all, "offload all");
  // Every block is its own group, plus the embeddings' and the head's saves.
  CHECK(all.offload.groups >= s.L);
  CHECK(all.offload.bytes_offloaded >= s.L * block_activation_bytes(s, 4));
  // Views of one storage (q, k, v of one qkv) are copied out once.
  CHECK(all.offload.storages_offloaded < all.offload.tensors_packed);

  auto checkpointed = make_memory_model(s, 1, f32, kCPU);
  const StepResult inputs = memory_model_step(*checkpointed, s, true, OffloadMode::recompute_inputs);
  check_same_gradients(reference, inputs, "recompute_every = 1 with offloaded inputs");
  CHECK(inputs.offload.tensors_packed == s.L);  // one input per block, nothing else
  CHECK(inputs.offload.bytes_offloaded == s.L * block_input_bytes(s, 4));
  // Outside a checkpoint the inputs mode keeps every saved tensor where it is.
  const StepResult nothing = memory_model_step(*plain, s, true, OffloadMode::recompute_inputs);
  CHECK(nothing.offload.tensors_packed == 0);
  check_same_gradients(reference, nothing, "inputs mode without checkpoints");
}

TEST_CASE("peak memory falls as the model's sizes say with checkpointing and offload") {
  const MemoryModelShape s;
  const int64_t a = block_activation_bytes(s, 4), x = block_input_bytes(s, 4);
  // The head's logits, their gradient and the softmax inside cross-entropy (N V elements each).
  const int64_t head = 3 * 4 * s.B * s.T * s.V;
  // Gradients exist before each step, so peaks are where the most activations are alive.
  auto peak = [&](int64_t k, bool offload, OffloadMode mode) {
    return memory_model_step(*make_memory_model(s, k, f32, kCPU), s, offload, mode, true).peak_bytes;
  };
  const int64_t none = peak(0, false, OffloadMode::all);
  // The baseline really keeps every block's activations and input.
  CHECK(none >= s.L * (a + x));
  // K = 1: the forward keeps the L block inputs; the backward recomputes one block at a time. At
  // least (L - 1) blocks' activations are saved (the inputs were kept before too), less what the
  // nested backward adds: the replayed input's gradient and its copy handed back (2 N C).
  const int64_t k1 = peak(1, false, OffloadMode::all);
  CHECK(none - k1 >= (s.L - 1) * a - 2 * x);
  // "Near 1/L of the baseline plus one block": above 1/L of the baseline, only the kept inputs and
  // one block's working set (its activations and their gradients: 2 a) and the head.
  CHECK(k1 <= none / s.L + s.L * x + 2 * a + head);
  // K = 2: segments of two blocks, so L / 2 inputs kept and two blocks recomputed at a time.
  const int64_t k2 = peak(2, false, OffloadMode::all);
  CHECK(none - k2 >= (s.L - 2) * a - 2 * x);
  CHECK(k2 > k1);
  // Offloading every saved tensor: the device holds at most two groups (the one in use and the one
  // being prefetched), which coincide with the head's logits when the backward starts.
  const int64_t all = peak(0, true, OffloadMode::all);
  CHECK(none - all >= (s.L - 2) * (a + x) - head);
  // Offloading the checkpoint inputs: all but the two groups in flight leave the device.
  const int64_t inputs = peak(1, true, OffloadMode::recompute_inputs);
  CHECK(k1 - inputs >= (s.L - 2) * x);
  MESSAGE("peak above parameters and gradients: none ", none, " B, K=1 ", k1, " B, K=2 ", k2, " B, offload all ", all,
          " B, K=1 + offloaded inputs ", inputs, " B (one block's activations >= ", a, " B, its input ", x, " B)");
}

TEST_CASE("saved-tensor hooks see activations but not parameters and restore views") {
  struct CountingHooks : SavedTensorHooks {
    struct Kept : PackedTensor {
      explicit Kept(Tensor t) : t(std::move(t)) {}
      Tensor unpack() override {
        ++unpacked;
        return t;
      }
      Tensor t;
      int unpacked = 0;
    };
    std::shared_ptr<PackedTensor> pack(const Tensor& t, SavedRole) override {
      CHECK_FALSE((t.requires_grad() && t.is_leaf()));
      ++packed;
      auto k = std::make_shared<Kept>(t.detach());
      kept.push_back(k);
      return k;
    }
    int packed = 0;
    std::vector<std::shared_ptr<Kept>> kept;
  };
  auto hooks = std::make_shared<CountingHooks>();
  const Tensor w = randn({4, 4}).requires_grad_();
  const Tensor x = randn({3, 4}).requires_grad_();
  Tensor y;
  {
    SavedTensorHooksGuard guard(hooks);
    CHECK(current_saved_tensor_hooks() == hooks.get());
    y = tanh(matmul(x * 3.0, w));  // affine saves nothing; matmul saves x*3 (not w); tanh its in and out
  }
  CHECK(current_saved_tensor_hooks() == nullptr);
  CHECK(hooks->packed == 3);
  sum(y).backward();
  int unpacked = 0;
  for (auto& k : hooks->kept) unpacked += k->unpacked;
  CHECK(unpacked == 3);
}

TEST_CASE("an offload mode parses from its name") {
  CHECK(parse_offload_mode("inputs") == OffloadMode::recompute_inputs);
  CHECK(parse_offload_mode("all") == OffloadMode::all);
  CHECK(parse_offload_mode("off") == OffloadMode::off);
  CHECK_ERROR(parse_offload_mode("some"), "expected \"off\", \"inputs\"");
  CHECK_ERROR(ActivationOffload(OffloadMode::off), "[ActivationOffload] mode off offloads nothing");
}

TEST_CASE("memory_summary lists every allocator and an out-of-memory error carries it with advice") {
  const std::string summary = memory_summary();
  CHECK(summary.find("peak alloc") != std::string::npos);
  CHECK(summary.find("cpu") != std::string::npos);

  // A budget enforced through the allocator: 1 MiB above what is in use now (no cached blocks
  // that could serve the request without reserving).
  empty_cache(kCPU);
  const MemoryStats before = memory_stats(kCPU);
  const int64_t budget = before.reserved_bytes + (int64_t(1) << 20);
  set_memory_limit(kCPU, budget);
  CHECK(memory_stats(kCPU).limit_bytes == budget);
  try {
    const Tensor fits = empty({1 << 16});  // 256 KiB
    CHECK(fits.numel() == (1 << 16));
    CHECK_ERROR(empty({1 << 20}), "out of host memory");  // 4 MiB
    bool threw = false;
    try {
      (void)empty({1 << 20});
    } catch (const Error& e) {
      threw = true;
      const std::string message = e.what();
      CHECK(message.find("limit") != std::string::npos);
      CHECK(message.find("peak alloc") != std::string::npos);  // the summary table
      for (const char* flag : {"--precision bf16", "--grad-accum", "--recompute-every", "--offload-activations",
                               "--zero", "--offload-optimizer"})
        CHECK(message.find(flag) != std::string::npos);
    }
    CHECK(threw);
  } catch (...) {
    set_memory_limit(kCPU, 0);
    throw;
  }
  set_memory_limit(kCPU, 0);
  const MemoryStats after = memory_stats(kCPU);
  CHECK(after.oom_count == before.oom_count + 2);
  CHECK(after.alloc_retries >= before.alloc_retries + 2);
  const Tensor large = empty({1 << 20});  // without the limit it fits again
  CHECK(large.numel() == (1 << 20));
  CHECK_ERROR(set_memory_limit(kCPU, -1), "negative");
}
