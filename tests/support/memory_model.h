#pragma once
// Shared by the checkpoint/offload suites (CPU and CUDA): a small GPT whose activations dominate its
// parameters, one training step that records gradients and the device's peak memory, and the
// analytic sizes those peaks are checked against.
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "engine/activation_offload.h"
#include "engine/allocator.h"
#include "engine/random.h"
#include "layers/nn.h"

namespace hg::test {

struct MemoryModelShape {
  int64_t B = 8, T = 32, C = 32, H = 2, L = 4, V = 64;
  double dropout = 0.1;
  AttentionImpl attention = AttentionImpl::Auto;  // Auto: the fused kernels (they take every CPU shape)
};

// Bytes of the activations one pre-LN block certainly keeps for backward besides its input, counted
// from what its ops save (a lower bound: layer-norm statistics and the dropout seeds are left out),
// with N = B T tokens and e bytes per element: ln_1 out, attention output, h = x + attn, ln_2 out
// (N C each), qkv (3 N C), c_fc out and gelu out (4 N C each), and with the composed attention its
// probabilities (B H T T; the fused kernels keep B H T fp32 log-sum-exps instead, left out).
inline int64_t block_activation_bytes(const MemoryModelShape& s, int64_t e) {
  const int64_t N = s.B * s.T;
  const int64_t probabilities = s.attention == AttentionImpl::Composed ? s.B * s.H * s.T * s.T : 0;
  return e * (N * s.C * (4 + 3 + 4 + 4) + probabilities);
}
// Bytes of one block's input (what a checkpoint keeps): N C elements.
inline int64_t block_input_bytes(const MemoryModelShape& s, int64_t e) { return e * s.B * s.T * s.C; }

inline std::shared_ptr<nn::GPT> make_memory_model(const MemoryModelShape& s, int64_t recompute_every, DType dtype,
                                                  const Device& device) {
  manual_seed(1234);
  const auto config = nn::GPTConfig()
                          .vocab_size(s.V)
                          .context(s.T)
                          .n_layer(s.L)
                          .n_head(s.H)
                          .n_embd(s.C)
                          .dropout(s.dropout)
                          .attention(s.attention)
                          .recompute_every(recompute_every);
  auto model = std::make_shared<nn::GPT>(config);
  model->to(dtype);
  model->to(device);
  model->train();
  return model;
}

struct StepResult {
  std::vector<uint8_t> loss_bytes;
  std::map<std::string, std::vector<uint8_t>> grads;  // raw bytes of every parameter's gradient
  std::map<std::string, Tensor> grad_tensors;         // the same, as CPU tensors
  int64_t peak_bytes = 0;                             // device peak above what was allocated before
  GeneratorState generator_after;
  OffloadStats offload;
};

inline std::vector<uint8_t> raw_bytes(const Tensor& t) {
  const Tensor c = t.to(kCPU).contiguous();
  std::vector<uint8_t> bytes(size_t(c.numel()) * c.element_size());
  std::memcpy(bytes.data(), c.data_ptr(), bytes.size());
  return bytes;
}

// One forward + backward from a fixed generator state, optionally under activation offload. With
// zeroed_grads the gradients exist (zeros) before the step, as after zero_grad(set_to_none = false),
// so they do not grow during the backward and the peak is where the most activations are alive.
inline StepResult memory_model_step(nn::GPT& model, const MemoryModelShape& s, bool offload = false,
                                    OffloadMode mode = OffloadMode::all, bool zeroed_grads = false) {
  const Device device = model.parameters()[0].device();
  manual_seed(99);
  const Tensor ids = randint(0, s.V, {s.B, s.T}, i64).to(device);
  const Tensor targets = randint(0, s.V, {s.B, s.T}, i64).to(device);
  for (const Tensor& p : model.parameters()) p.set_grad(zeroed_grads ? zeros_like(p) : Tensor());
  manual_seed(7);
  const int64_t before = memory_stats(device).allocated_bytes;
  reset_peak_memory(device);
  StepResult r;
  Tensor loss;
  if (offload) {
    ActivationOffload scope(mode);
    loss = model.loss(ids, targets);
    r.offload = scope.stats();
  } else {
    loss = model.loss(ids, targets);
  }
  loss.backward();
  r.peak_bytes = memory_stats(device).peak_allocated_bytes - before;
  r.loss_bytes = raw_bytes(loss);
  r.generator_after = default_generator().state();
  for (auto& [name, p] : model.named_parameters()) {
    r.grads[name] = raw_bytes(p.grad());
    r.grad_tensors[name] = p.grad().to(kCPU);
  }
  return r;
}

}  // namespace hg::test
