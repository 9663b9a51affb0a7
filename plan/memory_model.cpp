// predict_memory: the bytes one rank's allocator holds at the peak of a training step, added up from
// the model's shape and the configuration, in the allocator's own units (rounded requests).
//
//   device peak = max over the step's phases of                 (plan/activation_bytes.cpp: forward end,
//                   parameters + gradients alive there           each block's backward, the end)
//                 + optimizer state
//                 + activations + workspace alive there
//                 + rounding                                     (every request rounded by the allocator)
// Gradients set to none by zero_grad() grow during the backward while activations are freed, so the
// peak is not the sum of the largest of each. The phase model was derived from the ops' code and
// checked against traces of the allocator (tests/test_plan.cpp, docs/planner.md "Validation").
//
// Model state, per parameter tensor of n elements, e bytes per element of the precision:
//   parameters   n e                     (ZeRO 3: the rank's shard of each unit + the gathered units)
//   gradients    n g, g = 4 with fp32_grads, else e   (ZeRO 0/1: a flat buffer, always; ZeRO 2/3: the
//                rank's shard, plus the full-size gradients in flight and their packed reduce-scatter copy)
//   optimizer    m, v: 4 + 4 per element (fp32), + 4 master for a half model with master weights;
//                8-bit state: 1 + 1 per element + 4 + 4 per block of 2048 (tensors >= 4096 elements);
//                the AdamW step count: i64[3] per tensor (optim/adamw.cpp). ZeRO 1-3 keep these over the
//                rank's partition of a flat buffer padded to N partitions of multiples of 32 elements.
//                Optimizer offload: all of it in host memory.
#include <algorithm>
#include <bit>

#include "kernels/adamw8bit_math.h"
#include "kernels/error.h"
#include "layers/gpt.h"
#include "plan/memory_internal.h"

namespace hg::plan {

const char* name(Precision p) {
  switch (p) {
    case Precision::fp32:
      return "fp32";
    case Precision::bf16:
      return "bf16";
    case Precision::fp16:
      return "fp16";
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
  for (const auto& t : detail::parameter_tensors(*this)) total += t.numel;
  return total;
}

namespace detail {

int64_t allocator_bytes(int64_t bytes, DeviceKind kind) {
  if (kind == DeviceKind::cuda) {
    // Multiples of 512 B; a request over 1 MiB takes a segment rounded to 2 MiB, split only when the
    // remainder is over 1 MiB -- else the whole segment is the block (and is booked).
    constexpr int64_t kRound = 512, kSmallLimit = int64_t(1) << 20, kLargeRound = int64_t(2) << 20;
    const int64_t size = std::max(kRound, (bytes + kRound - 1) / kRound * kRound);
    if (size <= kSmallLimit) return size;
    const int64_t segment = (size + kLargeRound - 1) / kLargeRound * kLargeRound;
    return segment - size > kSmallLimit ? size : segment;
  }
  constexpr int64_t kAlignment = 64, kSmallLimit = 4096;
  if (bytes <= kSmallLimit) return std::max(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  const int64_t step = int64_t(std::bit_floor(uint64_t(bytes))) >> 3;
  return (bytes + step - 1) / step * step;
}

std::vector<ParamTensor> parameter_tensors(const ModelShape& m) {
  const int64_t C = m.dim;
  std::vector<ParamTensor> t = {{m.vocab * C, -1, true, 0}, {m.context * C, -1, false, 0}};
  for (int64_t l = 0; l < m.layers; ++l) {
    int position = 0;  // ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj: weight, bias
    for (int64_t n : {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C})
      t.push_back({n, l, false, position++});
  }
  t.push_back({C, -1, true, 0});  // ln_f
  t.push_back({C, -1, true, 0});
  return t;
}

}  // namespace detail

namespace {

// The model state of one rank: what stays allocated through the step, and the gradients and
// gathered ZeRO-3 units of each phase.
struct ModelState {
  const ModelShape& model;
  const TrainingConfig& config;
  int world;
  DeviceKind kind;
  std::vector<detail::ParamTensor> tensors;
  int64_t e, g, total = 0;
  enum class Grads { growing, persistent, unit } grads;  // how gradients live through a backward
  detail::Bytes params, grad_buffers, optimizer;         // allocated through the whole step
  int64_t host = 0;

  ModelState(const ModelShape& m, const TrainingConfig& c, int N, DeviceKind k)
      : model(m), config(c), world(N), kind(k), tensors(detail::parameter_tensors(m)) {
    using detail::Bytes;
    e = detail::element_bytes(c.precision);
    const bool half = c.precision != Precision::fp32;
    g = half && c.fp32_grads && c.zero_stage < 0 ? 4 : e;
    for (const auto& t : tensors) total += t.numel;
    if (c.zero_stage < 0) {  // local AdamW: one tensor of each kind per parameter
      for (const auto& t : tensors) {
        params.add(t.numel * e, kind);
        if (half && c.master_weights) optimizer.add(t.numel * 4, kind);  // the fp32 master
        add_moments(t.numel);
        optimizer.add(3 * 8, kind);  // the step count (i64[3])
      }
      grads = c.grad_accum > 1 ? Grads::persistent : Grads::growing;
      if (grads == Grads::persistent)
        for (const auto& t : tensors) grad_buffers.add(t.numel * g, kind);
      return;
    }
    // ZeroOptimizer (dist/zero_optimizer.h): flat buffers padded to N partitions of multiples of 32
    // elements; the optimizer state over this rank's partition (stage 0: all of it).
    const int stage = std::max(c.zero_stage, 0);
    const int64_t align = int64_t(32) * N;
    auto round_up = [](int64_t x, int64_t m) { return (std::max<int64_t>(x, 1) + m - 1) / m * m; };
    int64_t owned = 0;
    if (stage < 3) {
      const int64_t padded = round_up(total, align);
      padded_total = padded;
      owned = stage == 0 ? padded : padded / N;
      params.add(padded * e, kind);
      if (stage < 2) {
        grad_buffers.add(padded * e, kind);
        grads = Grads::persistent;
      } else {
        grad_buffers.add(owned * e, kind);
        grads = c.grad_accum > 1 ? Grads::persistent : Grads::growing;
        // Buckets of about 25 MiB (ZeroOptions::bucket_bytes) cut from the last parameter backwards;
        // the first bucket also covers the padding (dist/zero_optimizer.cpp layout_flat).
        const int64_t bucket_elements = std::max<int64_t>(1, (int64_t(25) << 20) / e);
        std::vector<int64_t> offsets(tensors.size());
        for (size_t k = 1; k < tensors.size(); ++k) offsets[k] = offsets[k - 1] + tensors[k - 1].numel;
        bucket_of.assign(tensors.size(), 0);
        int64_t begin = padded;
        for (size_t k = tensors.size(); k-- > 0;) {
          if (buckets.empty() || begin_end - offsets[k] > bucket_elements) {
            begin_end = buckets.empty() ? padded : begin;
            buckets.push_back(0);
          }
          begin = offsets[k];
          buckets.back() = begin_end - begin;
          bucket_of[k] = buckets.size() - 1;
        }
      }
    } else {
      // Units: the root (wte, wpe), one per block, and the persistent unit of tensors of at most
      // 4 C elements (train_gpt's persistence threshold), whole on every rank.
      int64_t root = 0, block = 0, persistent = 0;
      for (const auto& t : tensors) {
        if (t.numel <= 4 * m.dim)
          persistent += t.numel;
        else if (t.block < 0)
          root += t.numel;
        else if (t.block == 0)
          block += t.numel;
      }
      owned = round_up(root, align) / N + m.layers * (round_up(block, align) / N) + round_up(persistent, align) / N;
      params.add(owned * e, kind);                        // this rank's shards
      params.add(round_up(persistent, align) * e, kind);  // the persistent unit, whole
      grad_buffers.add(owned * e, kind);
      grads = c.grad_accum > 1 ? Grads::persistent : Grads::unit;
      unit_root = round_up(root, align) * e;
      unit_block = round_up(block, align) * e;
    }
    if (grads == Grads::persistent && stage >= 2) grad_buffers.add(total * e, kind);  // accumulation micro-steps
    const bool master = half || c.offload_optimizer;                                  // a separate fp32 master
    if (c.offload_optimizer) {
      if (master) host += detail::allocator_bytes(owned * 4, DeviceKind::cpu);
      if (c.state_bits == 8 && owned >= kernels::kAdamW8BitMinElements)
        host += 2 * (detail::allocator_bytes(owned, DeviceKind::cpu) +
                     detail::allocator_bytes(kernels::adamw8bit_blocks(owned) * 4, DeviceKind::cpu));
      else
        host += 2 * detail::allocator_bytes(owned * 4, DeviceKind::cpu);
      // From a CUDA device the update reads a pinned copy of this rank's gradients and writes a pinned
      // copy of its parameters (dist/zero_offload.cpp); from the CPU device it works in place.
      if (kind == DeviceKind::cuda) host += detail::allocator_bytes(owned * e, DeviceKind::cpu) * 2;
    } else {
      if (master) optimizer.add(owned * 4, kind);
      add_moments(owned);
      optimizer.add(2 * 8, kind);  // the device step count
    }
  }
  int64_t unit_root = 0, unit_block = 0, padded_total = 0;
  std::vector<int64_t> buckets;   // ZeRO 2: elements of each gradient bucket
  std::vector<size_t> bucket_of;  // ZeRO 2: each tensor's bucket
  int64_t begin_end = 0;          // (layout scratch: the end of the bucket being cut)

  // exp_avg and exp_avg_sq of n elements: fp32, or with 8-bit state (kernels/adamw8bit_math.h) one
  // byte each plus an fp32 absmax per block of 2048 -- tensors under 4096 elements stay fp32.
  void add_moments(int64_t n) {
    if (config.state_bits == 8 && n >= kernels::kAdamW8BitMinElements) {
      optimizer.add(n, kind, 2);
      optimizer.add(kernels::adamw8bit_blocks(n) * 4, kind, 2);
    } else {
      optimizer.add(n * 4, kind, 2);
    }
  }

  // Gradients alive at a phase (beyond grad_buffers).
  detail::Bytes gradients(const detail::Phase& p) const {
    detail::Bytes b;
    if (!p.backward || grads == Grads::persistent) return b;
    const bool stage2 = grads == Grads::growing && config.zero_stage == 2;
    std::vector<bool> alive(tensors.size());
    for (size_t k = 0; k < tensors.size(); ++k) {
      const auto& t = tensors[k];
      alive[k] = p.all_grads || t.head || (t.block >= p.grads_from_block) ||
                 (t.block == p.partial_block && t.position >= p.partial_from);
      if (grads == Grads::unit && t.block >= 0 && (p.all_grads || t.block >= p.grads_from_block))
        alive[k] = t.numel <= 4 * model.dim;  // reduce-scattered with their unit; the persistent ones stay
      if (grads == Grads::unit && t.block == p.completed_block) alive[k] = true;
    }
    if (stage2) {
      // ZeRO 2: a bucket whose gradients are all there is packed into one buffer, reduce-scattered and
      // its full-size gradients freed; the packed buffer lives until its collective completes. At the
      // end of the backward: the last bucket (wte's) at its launch, its gradients beside its packed copy.
      std::vector<bool> complete(buckets.size(), true);
      for (size_t k = 0; k < tensors.size(); ++k)
        if (!alive[k]) complete[bucket_of[k]] = false;
      int64_t packed = 0;
      for (size_t k = 0; k < tensors.size(); ++k) {
        const size_t bucket = bucket_of[k];
        const bool launching = p.all_grads && bucket == bucket_of[0];
        if (alive[k] && (!complete[bucket] || launching)) b.add(tensors[k].numel * g, kind);
      }
      for (size_t u = 0; u < buckets.size(); ++u)
        if (complete[u] && (!p.all_grads || u == bucket_of[0])) packed = std::max(packed, buckets[u] * e);
      if (packed > 0) b.add(packed, kind);
      return b;
    }
    for (size_t k = 0; k < tensors.size(); ++k)
      if (alive[k]) b.add(tensors[k].numel * g, kind);
    // ZeRO 3: a completed unit's gradients packed for the reduce-scatter beside them (at the end of the
    // backward: the root unit's).
    if (grads == Grads::unit && p.completed_block >= 0) b.add(unit_block, kind);
    if (grads == Grads::unit && p.all_grads) b.add(unit_root, kind);
    return b;
  }
  // ZeRO 3: the units gathered at a phase.
  detail::Bytes gathered(const detail::Phase& p) const {
    detail::Bytes b;
    if (grads != Grads::unit && !(config.zero_stage == 3)) return b;
    for (int64_t u : p.gathered) b.add(u < 0 ? unit_root : unit_block, kind);
    if (!p.backward) b.add(unit_root, kind);  // the root unit encloses the forward
    return b;
  }
  // ZeRO 3: a FITTED term, not derived from the code's op shapes: the allocators' peaks
  // (tests/test_plan.cpp, test_dist_plan) show the fused classifier's dW (V C fp32) held through the
  // backward until the root unit's gradients complete, at the end. Counted as workspace (it is the
  // classifier's scratch, not a parameter).
  detail::Bytes stage3_classifier_dw(const detail::Phase& p) const {
    detail::Bytes b;
    if (config.zero_stage == 3 && p.backward && !p.all_grads && model.fused_classifier)
      b.add(model.vocab * model.dim * 4, kind);
    return b;
  }
};

}  // namespace

MemoryPrediction predict_memory(const ModelShape& model, const TrainingConfig& config, int world, DeviceKind kind) {
  HG_CHECK(world >= 1, "[plan::predict_memory] expected world >= 1, got ", world);
  HG_CHECK(config.micro_batch >= 1 && config.grad_accum >= 1,
           "[plan::predict_memory] expected micro_batch >= 1 and "
           "grad_accum >= 1, got ",
           config.micro_batch, " and ", config.grad_accum);
  HG_CHECK(config.state_bits == 32 || config.state_bits == 8,
           "[plan::predict_memory] expected state_bits 32 or 8, got ", config.state_bits);
  // The fused attention kernels take every CPU shape; on CUDA head dimensions 64 and 128 only, and
  // AttentionImpl::Auto falls back to the composed path for the others (engine/ops/attention.cpp).
  ModelShape shape = model;
  const int64_t head_dim = model.dim / std::max<int64_t>(model.heads, 1);
  if (kind == DeviceKind::cuda && head_dim != 64 && head_dim != 128) shape.fused_attention = false;
  // dist::DataParallel: several ranks, or optimizer offload, without a ZeRO stage run stage 0.
  TrainingConfig effective = config;
  if (effective.zero_stage < 0 && (world > 1 || effective.offload_optimizer)) effective.zero_stage = 0;
  const ModelState state(shape, effective, world, kind);
  MemoryPrediction best;
  int64_t best_booked = -1;
  for (const detail::Phase& phase : detail::step_phases(shape, effective, kind)) {
    const detail::Bytes grads = state.gradients(phase) + state.grad_buffers;
    const detail::Bytes params = state.params + state.gathered(phase);
    const detail::Bytes workspace = phase.workspace + state.stage3_classifier_dw(phase);
    const int64_t booked =
        params.booked + grads.booked + state.optimizer.booked + phase.activations.booked + workspace.booked;
    if (booked <= best_booked) continue;
    best_booked = booked;
    best = MemoryPrediction{};
    best.parameters = params.requested;
    best.gradients = grads.requested;
    best.optimizer_state = state.optimizer.requested;
    best.activations = phase.activations.requested;
    best.workspace = workspace.requested;
    best.rounding = booked - (params.requested + grads.requested + state.optimizer.requested +
                              phase.activations.requested + workspace.requested);
  }
  best.host = state.host + detail::offloaded_activation_bytes(shape, effective);
  return best;
}

}  // namespace hg::plan
