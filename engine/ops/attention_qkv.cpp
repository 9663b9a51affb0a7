// attention_qkv: causal self-attention straight from the packed projection qkv [B, T, 3C] (the GPT's
// c_attn output, q | k | v along the last axis, H heads of D = C / H) to y [B, T, C], heads merged.
// The same FlashAttention-2 kernels as scaled_dot_product_attention's fused path (kernels/
// attention_problem.h), called with strides, so no head-split or merge copy exists either way:
//   forward:  q, k, v are read in place out of qkv (row stride 3C); O is written as [B, T, H, D],
//             which is y [B, T, C] without a copy.
//   backward: dq, dk and dv are written in place into ONE [B, T, 3C] gradient, the gradient of qkv.
// The view path (three narrow views of qkv into scaled_dot_product_attention) reaches the same
// kernels, but its backward materialises each narrow's gradient as a zero-filled [B, T, 3C] tensor
// with the slice copied in, and autograd sums the three: 3 fills, 3 copies and 2 additions of
// [B, T, 3C] per block (docs/cpu_step.md). Saved for backward: qkv, O and the row log-sum-exp.
// Where the fused kernels refuse the operands (attention_fused_refusal: e.g. CUDA with D not 64 or
// 128) it runs the view path with Auto, so the result is defined everywhere.
#include <cmath>

#include "engine/ops.h"
#include "engine/ops/attention_internal.h"
#include "engine/ops/op_support.h"
#include "engine/random.h"
#include "kernels/philox.h"

namespace hg {

namespace {

// One third of qkv-shaped t ([B, T, 3C]) as [B, H, T, D] with its strides.
Tensor heads_of(const Tensor& t, int64_t which, int64_t n_head) {
  const int64_t B = t.size(0), T = t.size(1), C = t.size(2) / 3;
  return t.narrow(2, which * C, C).view({B, T, n_head, C / n_head}).transpose(1, 2);
}

kernels::AttentionTensor operand(const Tensor& heads) {
  return kernels::AttentionTensor{heads.data_ptr(), heads.strides()[0], heads.strides()[1], heads.strides()[2]};
}

}  // namespace

Tensor attention_qkv(const Tensor& qkv_in, int64_t n_head, bool causal, double dropout_p) {
  const char* name = "attention_qkv";
  ops::check_floating(qkv_in, name, "qkv");
  ops::check_backend(qkv_in, name);
  HG_CHECK(qkv_in.dim() == 3 && n_head > 0 && qkv_in.size(2) % (3 * n_head) == 0 && qkv_in.size(2) > 0, "[", name,
           "] expected qkv [B, T, 3 C] with C divisible by n_head = ", n_head, ", got ", qkv_in.describe());
  HG_CHECK(dropout_p >= 0 && dropout_p < 1, "[", name, "] dropout_p ", dropout_p, " is outside [0, 1)");
  const int64_t B = qkv_in.size(0), T = qkv_in.size(1), C = qkv_in.size(2) / 3, D = C / n_head;
  const Tensor qkv = qkv_in.detach().contiguous();
  const std::string refusal = ops::attention_fused_refusal(heads_of(qkv, 0, n_head), heads_of(qkv, 1, n_head),
                                                           heads_of(qkv, 2, n_head));
  if (!refusal.empty() || T == 0 || B == 0) {
    const Tensor y = scaled_dot_product_attention(heads_of(qkv_in, 0, n_head), heads_of(qkv_in, 1, n_head),
                                                  heads_of(qkv_in, 2, n_head), causal, dropout_p, AttentionImpl::Auto);
    return y.transpose(1, 2).reshape({B, T, C});
  }
  kernels::AttentionProblem p;
  p.batch = B;
  p.heads = n_head;
  p.tq = T;
  p.tk = T;
  p.d = D;
  p.scale = 1.0 / std::sqrt(double(D));
  p.causal = causal;
  p.dropout_p = dropout_p;
  if (dropout_p > 0.0) {
    const GeneratorState state = default_generator().reserve(philox_blocks(uint64_t(p.rows() * p.tk)));
    p.seed = state.seed;
    p.offset = state.offset;
  }
  Tensor y = ops::empty_as({B, T, C}, qkv);  // [B, T, H, D]: O seen as [B, H, T, D] through a transpose
  const Tensor o_heads = y.view({B, T, n_head, D}).transpose(1, 2);
  Tensor lse = empty({p.rows()}, accumulate_dtype(qkv.dtype()), qkv.device());
  HG_KERNEL(qkv.device(), attention_forward, p, operand(heads_of(qkv, 0, n_head)), operand(heads_of(qkv, 1, n_head)),
            operand(heads_of(qkv, 2, n_head)), operand(o_heads), lse.data_ptr(), qkv.dtype());
  if (should_record({&qkv_in})) {
    const SavedTensor saved_qkv(qkv), saved_y(y), saved_lse(lse);
    record_op(name, {qkv_in}, y, [p, n_head, saved_qkv, saved_y, saved_lse](const Tensor& g, const NeedsGrad&) {
      const Tensor qkv = saved_qkv.unpack(), y = saved_y.unpack(), lse = saved_lse.unpack();
      HG_CHECK(g.dtype() == qkv.dtype() && g.device() == qkv.device(), "[attention_qkv] the gradient of the output is ",
               g.describe(), "; expected ", dtype_name(qkv.dtype()), " on ", qkv.device().str(), " like the output");
      const int64_t B = y.size(0), T = y.size(1), C = y.size(2), D = C / n_head;
      const Tensor dy = g.contiguous();
      auto merged_heads = [&](const Tensor& t) { return t.view({B, T, n_head, D}).transpose(1, 2); };
      Tensor delta = empty({p.rows()}, lse.dtype(), qkv.device());
      Tensor dqkv = ops::empty_as(qkv.shape(), qkv);  // every element is written: dq | dk | dv
      HG_KERNEL(qkv.device(), attention_backward, p, operand(heads_of(qkv, 0, n_head)),
                operand(heads_of(qkv, 1, n_head)), operand(heads_of(qkv, 2, n_head)), operand(merged_heads(y)),
                operand(merged_heads(dy)), lse.data_ptr(), delta.data_ptr(), operand(heads_of(dqkv, 0, n_head)),
                operand(heads_of(dqkv, 1, n_head)), operand(heads_of(dqkv, 2, n_head)), qkv.dtype());
      return std::vector<Tensor>{dqkv};
    });
  }
  return y;
}

}  // namespace hg
