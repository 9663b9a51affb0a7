// predict_memory: the bytes one rank's allocator holds at the peak of a training step, added up from
// the model's shape and the configuration, in the allocator's own units (rounded requests).
//
//   device peak = parameters + gradients + optimizer state      (model state, sharded by ZeRO)
//               + activations + workspace                        (plan/activation_bytes.cpp)
//               + rounding                                       (every request rounded by the allocator)
//
// Model state, per parameter tensor of n elements, e bytes per element of the precision:
//   parameters   n e                     (ZeRO 3: the rank's shard of each unit + the gathered units)
//   gradients    n g, g = 4 with fp32_grads, else e   (ZeRO 2/3: the rank's shard, plus buckets in flight)
//   optimizer    m, v: 4 + 4 per element (fp32), + 4 master for a half model with master weights;
//                the AdamW step count: i64[3] per tensor (optim/adamw.cpp). ZeRO 1-3 keep these over the
//                rank's partition of a flat buffer padded to N partitions of multiples of 32 elements.
//                Optimizer offload: all of it in host memory.
#include <algorithm>
#include <bit>

#include "layers/gpt.h"
#include "plan/memory_internal.h"

namespace hg::plan {

const char* name(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
  }
  return "?";
}

const char* name(ActivationOffload o) {
  switch (o) {
    case ActivationOffload::off: return "off";
    case ActivationOffload::inputs: return "inputs";
    case ActivationOffload::all: return "all";
  }
  return "?";
}

ModelShape ModelShape::of(const nn::GPTConfig& config) {
  ModelShape s;
  s.vocab = config.vocab_size();
  s.context = config.context();
  s.layers = config.n_layer();
  s.heads = config.n_head();
  s.dim = config.n_embd();
  s.fused_attention = config.attention() != AttentionImpl::Composed;
  s.fused_classifier = config.fused_classifier();
  s.dropout = config.dropout();
  return s;
}

int64_t ModelShape::parameters() const {
  int64_t total = 0;
  for (int64_t n : detail::parameter_numels(*this)) total += n;
  return total;
}

namespace detail {

int64_t allocator_bytes(int64_t bytes, DeviceKind kind) {
  if (kind == DeviceKind::cuda) {
    constexpr int64_t kRound = 512;
    return std::max(kRound, (bytes + kRound - 1) / kRound * kRound);
  }
  constexpr int64_t kAlignment = 64, kSmallLimit = 4096;
  if (bytes <= kSmallLimit) return std::max(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  const int64_t step = int64_t(std::bit_floor(uint64_t(bytes))) >> 3;
  return (bytes + step - 1) / step * step;
}

std::vector<int64_t> parameter_numels(const ModelShape& m) {
  const int64_t C = m.dim;
  std::vector<int64_t> n = {m.vocab * C, m.context * C};
  for (int64_t l = 0; l < m.layers; ++l) {
    const std::vector<int64_t> block = {C, C,                  // ln_1
                                        3 * C * C, 3 * C,      // attn.c_attn
                                        C * C, C,              // attn.c_proj
                                        C, C,                  // ln_2
                                        4 * C * C, 4 * C,      // mlp.c_fc
                                        4 * C * C, C};         // mlp.c_proj
    n.insert(n.end(), block.begin(), block.end());
  }
  n.push_back(C);
  n.push_back(C);  // ln_f
  return n;
}

}  // namespace detail

MemoryPrediction predict_memory(const ModelShape& model, const TrainingConfig& config, int world, DeviceKind kind) {
  using detail::allocator_bytes;
  const int64_t e = detail::element_bytes(config.precision);
  const bool half = config.precision != Precision::fp32;
  const int64_t g = half && config.fp32_grads ? 4 : e;
  const int64_t state_per_element = 8 + (half && config.master_weights ? 4 : 0);
  const std::vector<int64_t> numels = detail::parameter_numels(model);
  const int N = std::max(world, 1);

  MemoryPrediction p;
  int64_t requested = 0, booked = 0;
  auto add = [&](int64_t& field, int64_t bytes, int64_t count = 1) {
    field += bytes * count;
    requested += bytes * count;
    booked += allocator_bytes(bytes, kind) * count;
  };

  if (config.zero_stage < 0) {  // local AdamW: one tensor of each kind per parameter
    for (int64_t n : numels) {
      add(p.parameters, n * e);
      add(p.gradients, n * g);
      if (!config.offload_optimizer) {
        add(p.optimizer_state, n * 4, half && config.master_weights ? 3 : 2);
        add(p.optimizer_state, 3 * 8);
      }
    }
  } else {  // ZeRO: flat buffers padded to N partitions of multiples of 32 elements
    int64_t total = 0;
    for (int64_t n : numels) total += n;
    const int64_t align = 32 * N;
    const int64_t padded = (total + align - 1) / align * align;
    const int64_t partition = padded / N;
    add(p.parameters, config.zero_stage == 3 ? partition * e : padded * e);
    add(p.gradients, config.zero_stage >= 2 ? partition * g : padded * g);
    if (!config.offload_optimizer) add(p.optimizer_state, partition * state_per_element);
  }
  if (config.offload_optimizer) {  // ZeRO-Offload: master, m, v of the rank's partition in host memory
    int64_t total = 0;
    for (int64_t n : numels) total += n;
    p.host += (total + N - 1) / N * 12;
  }

  const detail::ActivationBytes a = detail::activation_bytes(model, config, kind);
  p.activations = a.activations;
  p.workspace = a.workspace;
  p.host += a.host;
  p.rounding = (booked - requested) + a.rounding;
  // Gradients created by set_to_none backward grow toward the peak; count the part alive there.
  const int64_t gradient_share = int64_t(double(p.gradients) * (1.0 - a.gradients_alive));
  p.gradients -= gradient_share;
  return p;
}

}  // namespace hg::plan
