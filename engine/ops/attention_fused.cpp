// The fused path of scaled_dot_product_attention: the FlashAttention-2 kernels of
// kernels/attention_problem.h (kernels/cpu/attention.cpp, kernels/cuda/attention_*.cu).
//
// Operands are seen as [batch, heads, T, D] views (rank 2 and 3 get leading ones; rank > 4 has its
// leading dimensions merged) and passed with their strides, so the GPT's q, k and v -- strided slices
// of one [B, T, 3C] projection -- are read in place. A rank-4 output is allocated [B, Tq, H, D] and
// returned through a transpose: the heads merge back into [B, Tq, H D] as a view.
//
// Saved for backward: q, k, v, O and the row log-sum-exp (B H Tq values in fp32): O(B H T D), where the
// composed path keeps the B H Tq Tk probabilities; an attn_mask is read through broadcast strides by the
// CPU and CUDA kernels and kept as given (a key-padding mask [B, 1, 1, Tk] stays B Tk values). Dropout saves only its
// Philox state; the backward kernels regenerate the mask.
#include <cmath>

#include "engine/ops.h"
#include "engine/ops/attention_internal.h"
#include "engine/ops/op_support.h"
#include "engine/random.h"
#include "kernels/philox.h"

namespace hg::ops {
namespace {

// t (no history) as [batch, heads, T, D] with the head-dimension axis contiguous.
Tensor as_heads(const Tensor& t) {
  Tensor r;
  switch (t.dim()) {
    case 2: r = t.unsqueeze(0).unsqueeze(0); break;
    case 3: r = t.unsqueeze(1); break;
    case 4: r = t; break;
    default: r = t.reshape({-1, 1, t.size(-2), t.size(-1)}); break;
  }
  return r.size(3) > 1 && r.strides()[3] != 1 ? r.contiguous() : r;
}

kernels::AttentionTensor operand(const Tensor& heads) {
  return kernels::AttentionTensor{heads.data_ptr(), heads.strides()[0], heads.strides()[1], heads.strides()[2]};
}

Shape leading(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); }

// attn_mask broadcast to the scores q.shape()[:-1] + [Tk] and seen as [batch, heads, Tq, Tk] the way
// as_heads sees q (broadcast dimensions keep stride 0: nothing is materialised unless rank > 4 needs a
// reshape), as the kernels' mask descriptor. `view` keeps the viewed tensor alive.
kernels::AttentionMask mask_operand(const Tensor& attn_mask, const Tensor& q_in, int64_t tk, Tensor& view) {
  kernels::AttentionMask m;
  if (!attn_mask.defined()) return m;
  Shape scores = q_in.shape();
  scores.back() = tk;
  Tensor t = attn_mask.detach().expand(scores);
  switch (t.dim()) {
    case 2: t = t.unsqueeze(0).unsqueeze(0); break;
    case 3: t = t.unsqueeze(1); break;
    case 4: break;
    default: t = t.reshape({-1, 1, t.size(-2), t.size(-1)}); break;
  }
  view = t;
  m.data = t.data_ptr();
  m.additive = t.dtype() != b8;
  m.batch_stride = t.strides()[0], m.head_stride = t.strides()[1];
  m.row_stride = t.strides()[2], m.key_stride = t.strides()[3];
  return m;
}

}  // namespace

std::string attention_fused_refusal(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask) {
  const int64_t d = q.size(-1);
  if (attn_mask.defined() && attn_mask.requires_grad())
    return "the additive attn_mask requires a gradient, which the fused kernels do not compute";
  if (v.size(-1) != d) {
    return "the value head dimension Dv = " + std::to_string(v.size(-1)) + " differs from D = " + std::to_string(d) +
           "; the fused kernels need Dv == D";
  }
  if (leading(k) != leading(q) || leading(v) != leading(q)) {
    return "q, k and v have different leading (batch, head) dimensions; the fused kernels do not broadcast them";
  }
  if (q.numel() == 0 || k.numel() == 0) return "an operand is empty";
  if (q.device().is_cuda() && !kernels::cuda_attention_supports(d, q.dtype())) {
    return "on CUDA the fused kernels take head dimension 64 or 128 in f16, bf16 or f32, got D = " +
           std::to_string(d) + " in " + dtype_name(q.dtype());
  }
  return {};
}

Tensor attention_fused(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, bool causal, double dropout_p,
                       const Tensor& attn_mask) {
  const Tensor q = as_heads(q_in.detach()), k = as_heads(k_in.detach()), v = as_heads(v_in.detach());
  kernels::AttentionProblem p;
  p.batch = q.size(0);
  p.heads = q.size(1);
  p.tq = q.size(2);
  p.tk = k.size(2);
  p.d = q.size(3);
  p.scale = 1.0 / std::sqrt(double(p.d));
  p.causal = causal;
  Tensor mask_view;  // alive while the kernels read it: saved for backward below
  p.mask = mask_operand(attn_mask, q_in, p.tk, mask_view);
  p.dropout_p = dropout_p;
  if (dropout_p > 0.0) {
    const GeneratorState state = default_generator().reserve(philox_blocks(uint64_t(p.rows() * p.tk)));
    p.seed = state.seed;
    p.offset = state.offset;
  }

  // The output: [B, Tq, H, D] seen as [B, H, Tq, D] for rank 4; q's shape, contiguous, otherwise.
  Tensor out, out_heads;
  if (q_in.dim() == 4) {
    out = ops::empty_as({p.batch, p.tq, p.heads, p.d}, q).transpose(1, 2);
    out_heads = out;
  } else {
    out = ops::empty_as(q_in.shape(), q);
    out_heads = as_heads(out);
  }
  Tensor lse = empty({p.rows()}, accumulate_dtype(q.dtype()), q.device());
  HG_KERNEL(q.device(), attention_forward, p, operand(q), operand(k), operand(v), operand(out_heads), lse.data_ptr(),
            q.dtype());

  if (should_record({&q_in, &k_in, &v_in})) {
    const SavedTensor saved_q(q_in), saved_k(k_in), saved_v(v_in), saved_o(out), saved_lse(lse);
    record_op("scaled_dot_product_attention", {q_in, k_in, v_in}, out,
              [p, saved_q, saved_k, saved_v, saved_o, saved_lse, mask_view](const Tensor& g, const NeedsGrad&) {
                const Tensor q_full = saved_q.unpack(), k_full = saved_k.unpack(), v_full = saved_v.unpack();
                const Tensor q = as_heads(q_full), k = as_heads(k_full), v = as_heads(v_full);
                HG_CHECK(g.dtype() == q.dtype() && g.device() == q.device(), "[scaled_dot_product_attention] the "
                         "gradient of the output is ", g.describe(), "; expected ", dtype_name(q.dtype()), " on ",
                         q.device().str(), " like the output");
                const Tensor o = as_heads(saved_o.unpack()), dout = as_heads(g);
                const Tensor lse = saved_lse.unpack();
                Tensor delta = empty({p.rows()}, lse.dtype(), q.device());
                Tensor dq = ops::empty_as(q.shape(), q), dk = ops::empty_as(k.shape(), k);
                Tensor dv = ops::empty_as(v.shape(), v);
                HG_KERNEL(q.device(), attention_backward, p, operand(q), operand(k), operand(v), operand(o),
                          operand(dout), lse.data_ptr(), delta.data_ptr(), operand(dq), operand(dk), operand(dv),
                          q.dtype());
                return std::vector<Tensor>{dq.view(q_full.shape()), dk.view(k_full.shape()),
                                           dv.view(v_full.shape())};
              });
  }
  return out;
}

}  // namespace hg::ops
