// activation_bytes: what the forward of one micro-batch keeps for backward and what the backward holds
// at its worst point, counted from the ops layers/gpt.cpp and layers/transformer.cpp run, with
// N = B T tokens, C channels, H heads, V vocabulary, e bytes per activation element.
//
// Per block (pre-LN, engine/ops saved tensors):
//   ln_1 out N C, qkv 3 N C (the attention's q, k, v are views of it), attention out N C, its
//   [B T C] copy for c_proj N C, h = x + attn N C, ln_2 out N C, c_fc out 4 N C, gelu out 4 N C,
//   block output N C                                                              = 17 N C e
//   LayerNorm statistics 2 x 2 N fp32; fused attention: B H T fp32 log-sum-exp; composed attention:
//   B H T T probabilities (e); dropout > 0: masks.
// Outside the blocks: the embedding sum N C, ln_f out N C and its statistics; the fused classifier
// keeps N fp32 log-sum-exps and works in chunks of rows, the composed one keeps B T V logits and
// their softmax.
// Checkpointing every K blocks keeps only the segments' inputs (N C each) and recomputes one segment
// at a time in backward. The backward's peak adds the gradients of the activations alive at its worst
// point (the MLP of the last block: 4 N C gradients of c_fc / gelu outputs).
#include <algorithm>

#include "plan/memory_internal.h"

namespace hg::plan::detail {

ActivationBytes activation_bytes(const ModelShape& m, const TrainingConfig& c, DeviceKind kind) {
  const int64_t e = element_bytes(c.precision);
  const int64_t B = c.micro_batch, T = m.context, C = m.dim, H = m.heads, V = m.vocab, L = m.layers;
  const int64_t N = B * T;
  std::vector<int64_t> block;  // requests kept by one block
  auto keep = [&](std::vector<int64_t>& into, int64_t bytes, int count = 1) {
    for (int i = 0; i < count; ++i) into.push_back(bytes);
  };
  keep(block, N * C * e);          // ln_1 out
  keep(block, N * 4, 2);           // ln_1 mean, rstd
  keep(block, 3 * N * C * e);      // qkv
  if (m.fused_attention) {
    keep(block, N * C * e);        // attention out
    keep(block, B * H * T * 4);    // log-sum-exp
  } else {
    keep(block, B * H * T * T * e);  // probabilities
    keep(block, N * C * e);          // attention out
  }
  keep(block, N * C * e);          // [B T C] copy
  keep(block, N * C * e);          // h
  keep(block, N * C * e);          // ln_2 out
  keep(block, N * 4, 2);           // ln_2 stats
  keep(block, 4 * N * C * e, 2);   // c_fc out, gelu out
  keep(block, N * C * e);          // block output
  if (m.dropout > 0) {
    keep(block, N * C, 2);         // residual dropout masks (bytes)
    if (!m.fused_attention) keep(block, B * H * T * T);
  }
  auto sum = [](const std::vector<int64_t>& v) {
    int64_t s = 0;
    for (int64_t x : v) s += x;
    return s;
  };
  auto booked = [&](const std::vector<int64_t>& v) {
    int64_t s = 0;
    for (int64_t x : v) s += allocator_bytes(x, kind);
    return s;
  };
  std::vector<int64_t> outside;
  keep(outside, N * C * e);  // embedding sum (first block input)
  keep(outside, N * C * e);  // ln_f out
  keep(outside, N * 4, 2);
  if (m.fused_classifier) {
    keep(outside, N * 4);
  } else {
    keep(outside, N * V * e, 2);
  }

  ActivationBytes a;
  int64_t req = sum(outside), got = booked(outside);
  if (c.checkpoint_every > 0) {
    const int64_t segments = (L + c.checkpoint_every - 1) / c.checkpoint_every;
    req += segments * N * C * e;
    got += segments * allocator_bytes(N * C * e, kind);
    req += std::min(c.checkpoint_every, L) * sum(block);
    got += std::min(c.checkpoint_every, L) * booked(block);
  } else {
    req += L * sum(block);
    got += L * booked(block);
  }
  // Backward transient: gradients of the MLP's activations.
  std::vector<int64_t> transient;
  keep(transient, 4 * N * C * e, 2);
  keep(transient, N * C * e, 2);
  req += sum(transient);
  got += booked(transient);
  a.activations = req;
  a.rounding = got - req;
  a.gradients_alive = 1.0;
  if (c.offload_activations != ActivationOffload::off) {
    a.host = a.activations;
  }
  return a;
}

}  // namespace hg::plan::detail
