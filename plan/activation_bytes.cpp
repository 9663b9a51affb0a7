// step_phases: the points of one training step at which the allocator's peak can fall, with the
// activation bytes alive at each, counted from what the ops of layers/gpt.cpp and
// layers/transformer.cpp save for backward. N = B T tokens of a micro-batch, C channels, H heads,
// V vocabulary, e bytes per activation element, a = N C e.
//
// Saved by one pre-LN block (engine/ops; measured on the CPU device, tests/test_plan.cpp):
//   ln_1 out a, qkv 3a (q, k, v are views of it), attention out a (c_proj's input: the fused kernels
//   write [B T H D], so the transpose back is a view), h = x + attn a, ln_2 out a, c_fc out 4a,
//   gelu out 4a                                                                  = 15a
//   + the two LayerNorms' mean and rstd (4 x N fp32)
//   + fused attention: the B H T fp32 log-sum-exp; composed: the B H T T probabilities (e), and with
//     dropout the dropped probabilities as well (the fused kernels and Dropout regenerate their masks
//     from a Philox seed: nothing kept)
//   + its input a (the embedding sum, or the block before's output).
// Outside the blocks: ln_f's statistics, the batch (ids, targets: 2 N i64), and the classifier:
//   fused (engine/ops/linear_cross_entropy.cpp): its forward already computes dx a and dW (V C, fp32
//   for half models) and keeps them; its scratch is one chunk of R rows: logits and P (R V e each;
//   half: + R C and R V fp32 copies) and two N-float row buffers.
//   composed: ln_f out a, the B T V logits (e) and their log-sum-exps; its backward adds B T V e.
//
// Phases:
//   forward end, at the classifier: every block's saved tensors + the classifier's scratch
//   backward of block i, in its MLP (the worst point of a block: gelu's backward holds the gradients
//     of the gelu and c_fc outputs, 4a each, while both outputs are still saved), with the residual
//     stream's gradient a, and the blocks <= i still saved; the gradients of blocks > i exist
//   backward of block i's composed attention: 2 B H T T (the probabilities' and the scores' gradients)
//     beside the probabilities -- more than the MLP's 8a once H T > 4 C
//   the end of block i's backward: its saved tensors freed, its gradients complete
//   end of the backward: every gradient, the embedding's dense wte gradient (V C) and dx a.
// Checkpointing every K blocks keeps only the segments' inputs (a each) and the last output; the
// backward of segment s recomputes its K blocks (saved tensors + outputs) before going through them.
// Activation offload "all" keeps saved tensors on the host (engine/activation_offload.h): at block
// i's backward, groups i and i - 1 (block i and the one before, each a group) are back on the device;
// "inputs" does so only for the checkpoints' saved segment inputs.
#include <algorithm>

#include "plan/memory_internal.h"

namespace hg::plan::detail {

namespace {

struct Shape {
  int64_t B, T, C, H, V, L, N, e;
};

// What one block saves for backward besides its input.
Bytes block_saved(const ModelShape& m, const Shape& s, DeviceKind kind) {
  Bytes b;
  const int64_t a = s.N * s.C * s.e;
  b.add(a, kind, 4);        // ln_1 out, attention out, h, ln_2 out
  b.add(3 * a, kind);       // qkv
  b.add(4 * a, kind, 2);    // c_fc out, gelu out
  b.add(s.N * 4, kind, 4);  // LayerNorm mean and rstd, twice
  if (m.fused_attention) {
    b.add(s.B * s.H * s.T * 4, kind);  // log-sum-exp
  } else {
    const int64_t probabilities = s.B * s.H * s.T * s.T * s.e;
    b.add(probabilities, kind, m.dropout > 0 ? 2 : 1);
  }
  return b;
}

}  // namespace

std::vector<Phase> step_phases(const ModelShape& m, const TrainingConfig& c, DeviceKind kind) {
  Shape s{c.micro_batch, m.context, m.dim, m.heads, m.vocab, m.layers, 0, element_bytes(c.precision)};
  s.N = s.B * s.T;
  const int64_t a = s.N * s.C * s.e;
  const bool half = c.precision != Precision::fp32;
  Bytes one_a;
  one_a.add(a, kind);
  const Bytes saved = block_saved(m, s, kind);
  const int64_t K = c.recompute_every;
  const bool offload_all = c.offload_activations == OffloadMode::all;
  const bool offload_inputs = c.offload_activations == OffloadMode::recompute_inputs;

  Bytes batch;  // ids and targets of the micro-batch
  batch.add(s.N * 8, kind, 2);
  Bytes ln_f_stats;
  ln_f_stats.add(s.N * 4, kind, 2);

  std::vector<Phase> phases;

  // ---- the forward's end, at the classifier ----
  {
    Phase p;
    p.where = "forward: classifier";
    p.activations = batch;
    p.activations += ln_f_stats;
    if (offload_all) {
      p.activations += one_a;  // the last block's output (still referenced)
    } else if (K > 0) {
      const int64_t segments = (s.L + K - 1) / K;
      if (!offload_inputs) p.activations += one_a.times(segments);
      p.activations += one_a;  // the last output (ln_f's input)
    } else {
      p.activations += (saved + one_a).times(s.L);
      p.activations += one_a;
    }
    p.activations += one_a;  // ln_f out (the classifier's input)
    if (m.fused_classifier) {
      const int64_t chunk_budget = std::max<int64_t>(a, int64_t(8) << 20);
      int64_t R = std::max<int64_t>(1, chunk_budget / (s.V * s.e));
      if (R > 16) R = R / 16 * 16;
      R = std::min(R, s.N);
      p.activations.add(a, kind);               // dx, kept for backward
      p.activations.add(s.V * s.C * 4, kind);   // dW (fp32 for half models), kept for backward
      p.workspace.add(R * s.V * s.e, kind, 2);  // logits and P of one chunk
      if (half) {
        p.workspace.add(R * s.C * 4, kind);
        p.workspace.add(R * s.V * 4, kind);
      }
      p.workspace.add(s.N * 4, kind, 2);  // row losses, log-sum-exps
    } else {
      p.activations.add(s.N * s.V * s.e, kind);  // logits
      p.activations.add(s.N * 4, kind);          // log-sum-exp
    }
    phases.push_back(p);
    if (!m.fused_classifier) {  // its backward: the logits' gradient beside the logits
      Phase b = p;
      b.where = "backward: classifier";
      b.backward = true;
      b.grads_from_block = s.L;
      b.workspace.add(s.N * s.V * s.e, kind);
      b.gathered = {-1};
      phases.push_back(b);
    }
  }

  // ---- the backward of each block, in its MLP ----
  for (int64_t i = s.L - 1; i >= 0; --i) {
    Phase p;
    p.where = "backward: block " + std::to_string(i) + " MLP";
    p.backward = true;
    p.grads_from_block = i + 1;
    p.partial_block = i;
    // ZeRO 3: the block's unit and the one before it (prefetched; the root unit before block 0); under
    // checkpointing also the segment's units its recompute gathered, and the unit before the segment.
    auto unit_before = [](int64_t b) { return b > 0 ? b - 1 : int64_t(-1); };
    p.gathered = {i, unit_before(i)};
    if (K > 0) {
      const int64_t first = i / K * K;
      for (int64_t b = first; b < i; ++b)
        if (b != unit_before(i)) p.gathered.push_back(b);
      if (unit_before(first) != unit_before(i)) p.gathered.push_back(unit_before(first));
    }
    p.activations = batch;
    p.activations += one_a;                         // the residual stream's gradient
    p.workspace.add(4 * s.N * s.C * s.e, kind, 2);  // gradients of the gelu and c_fc outputs
    if (K > 0) {
      const int64_t segment = i / K, first = segment * K;
      const int64_t inputs_on_device = offload_all || offload_inputs ? std::min<int64_t>(segment + 1, 2) : segment + 1;
      p.activations += one_a.times(inputs_on_device);
      p.activations += (saved + one_a).times(i - first + 1);  // recomputed blocks first..i
    } else if (offload_all) {
      p.activations += (saved + one_a).times(std::min<int64_t>(i + 1, 2));
    } else {
      p.activations += (saved + one_a).times(i + 1);
    }
    phases.push_back(p);

    // The composed attention's backward: the probabilities' and the scores' gradients (B H T T each)
    // beside the probabilities, the MLP's saved tensors freed.
    if (!m.fused_attention) {
      Phase att = p;
      att.where = "backward: block " + std::to_string(i) + " attention";
      att.partial_from = 4;
      att.workspace = Bytes{};
      att.workspace.add(s.B * s.H * s.T * s.T * s.e, kind, 2);
      att.workspace.add(a, kind);  // the attention output's gradient
      Bytes mlp_part;
      mlp_part.add(a, kind, 2);      // h, ln_2 out
      mlp_part.add(4 * a, kind, 2);  // c_fc out, gelu out
      mlp_part.add(s.N * 4, kind, 2);
      att.activations.requested -= mlp_part.requested;
      att.activations.booked -= mlp_part.booked;
      phases.push_back(att);
    }

    // The block's backward done: its saved tensors freed, its gradients complete (ZeRO 3 packs and
    // reduce-scatters them here), the gradients of its input and of the residual stream alive.
    Phase done;
    done.where = "backward: block " + std::to_string(i) + " done";
    done.backward = true;
    done.grads_from_block = i;
    done.completed_block = i;
    done.gathered = p.gathered;
    done.activations = batch;
    done.activations += one_a.times(2);
    if (K > 0) {
      const int64_t segment = i / K, first = segment * K;
      const int64_t inputs_on_device = offload_all || offload_inputs ? std::min<int64_t>(segment, 2) : segment;
      done.activations += one_a.times(inputs_on_device);
      done.activations += (saved + one_a).times(i - first);
    } else {
      done.activations += (saved + one_a).times(offload_all ? std::min<int64_t>(i, 1) : i);
    }
    phases.push_back(done);
  }

  // ---- the end of the backward (and the optimizer step) ----
  {
    Phase p;
    p.where = "backward: embeddings";
    p.backward = true;
    p.all_grads = true;
    p.grads_from_block = 0;
    p.gathered = {-1};
    p.activations = batch;
    p.activations += one_a;
    p.workspace.add(s.V * s.C * s.e, kind);  // the embedding's dense wte gradient
    phases.push_back(p);
  }
  return phases;
}

int64_t offloaded_activation_bytes(const ModelShape& m, const TrainingConfig& c) {
  if (c.offload_activations == OffloadMode::off) return 0;
  constexpr DeviceKind host = DeviceKind::cpu;
  Shape s{c.micro_batch, m.context, m.dim, m.heads, m.vocab, m.layers, 0, element_bytes(c.precision)};
  s.N = s.B * s.T;
  const int64_t a = s.N * s.C * s.e;
  const int64_t K = c.recompute_every;
  Bytes b;
  if (c.offload_activations == OffloadMode::recompute_inputs) {
    if (K > 0) b.add(a, host, (s.L + K - 1) / K);  // the segments' inputs
    return b.booked;
  }
  if (K > 0) {
    b.add(a, host, (s.L + K - 1) / K + 1);  // segment inputs and the last output
  } else {
    Bytes one_a;
    one_a.add(a, host);
    b += (block_saved(m, s, host) + one_a).times(s.L);
    b += one_a;  // the last output, saved by ln_f
  }
  b.add(s.N * 4, host, 2);  // ln_f statistics
  b.add(s.N * 8, host);     // ids, saved by the token embedding
  b.add(s.T * 8, host);     // positions
  if (m.fused_classifier) {
    b.add(a, host);
    b.add(s.V * s.C * 4, host);  // dW: fp32 (the model's dtype, or the fp32 accumulator of a half model)
  } else {
    b.add(a, host);
    b.add(s.N * s.V * s.e, host);
    b.add(s.N * 4, host);
  }
  return b.booked;
}

}  // namespace hg::plan::detail
