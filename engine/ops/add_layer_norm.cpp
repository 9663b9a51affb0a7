// add_layer_norm: a pre-LN transformer's residual add fused with the LayerNorm that follows it, one op
// with two outputs (autograd's record_op_multi): sum = x + residual, normalized = layer_norm(sum).
// The front-end of the add_layer_norm_forward / add_layer_norm_backward kernels (their math:
// kernels/kernels.h). The sum is rounded to the dtype before the statistics, so both outputs are
// bit-identical to the composed add then layer_norm forward.
//
// Saved for backward: the sum (the kernel's h), weight, and the per-row mean and rstd (fp32; f64 for
// f64) -- what layer_norm alone saves; the composed add saved nothing. Backward: one kernel call,
//   d(sum)_total = dsum + LN_backward(dnormalized)        (dsum undefined: 0)
// given to both x and residual (the same tensor); dnormalized undefined (only the sum used): the
// incoming dsum passes through and weight/bias get no gradient.
#include "engine/ops.h"
#include "engine/ops/op_support.h"

namespace hg {

AddLayerNorm add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                            double eps) {
  const char* name = "add_layer_norm";
  ops::check_floating(x, name, "x");
  ops::check_floating(residual, name, "residual");
  ops::check_backend(x, name);
  ops::check_same({&x, &residual}, {"x", "residual"}, name);
  HG_CHECK(x.shape() == residual.shape(), "[", name, "] x is ", x.describe(), " but residual is ",
           residual.describe(), "; expected equal shapes (no broadcasting)");
  HG_CHECK(x.dim() >= 1, "[", name, "] expected inputs of rank >= 1, got ", x.describe());
  HG_CHECK(eps > 0, "[", name, "] expected eps > 0, got ", eps);
  const int64_t cols = x.size(-1);
  HG_CHECK(cols > 0, "[", name, "] expected a last dimension >= 1, got ", x.describe());
  const int64_t rows = x.numel() / cols;
  for (const auto& [param, param_name] : {std::pair{&weight, "weight"}, std::pair{&bias, "bias"}}) {
    if (!param->defined()) continue;
    ops::check_same({&x, param}, {"x", param_name}, name);
    HG_CHECK(param->shape() == Shape{cols}, "[", name, "] ", param_name, " is ", param->describe(), " but x is ",
             x.describe(), "; expected ", param_name, " of shape [", cols, "]");
  }
  const Tensor xc = x.contiguous(), rc = residual.contiguous();
  const Tensor w = weight.defined() ? weight.contiguous() : Tensor();
  const Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  const DType stat = accumulate_dtype(xc.dtype());
  AddLayerNorm out{ops::empty_as(xc.shape(), xc), ops::empty_as(xc.shape(), xc)};
  Tensor mean = empty({rows}, stat, xc.device()), rstd = empty({rows}, stat, xc.device());
  HG_KERNEL(xc.device(), add_layer_norm_forward, xc.data_ptr(), rc.data_ptr(), w.defined() ? w.data_ptr() : nullptr,
            b.defined() ? b.data_ptr() : nullptr, out.sum.data_ptr(), out.normalized.data_ptr(), mean.data_ptr(),
            rstd.data_ptr(), rows, cols, eps, xc.dtype());
  if (should_record({&x, &residual, &weight, &bias})) {
    const SavedTensor saved_h(out.sum), saved_w(w), saved_mean(mean), saved_rstd(rstd);
    record_op_multi(
        name, {x, residual, weight, bias}, {&out.sum, &out.normalized},
        [saved_h, saved_w, saved_mean, saved_rstd, rows, cols](const std::vector<Tensor>& grads, const NeedsGrad& needs) {
          const Tensor& dsum = grads[0];
          const Tensor& dnormalized = grads[1];
          if (!dnormalized.defined()) return std::vector<Tensor>{dsum, dsum, Tensor(), Tensor()};
          const Tensor h = saved_h.unpack(), sw = saved_w.unpack();
          const Tensor mean = saved_mean.unpack(), rstd = saved_rstd.unpack();
          const Tensor dy = dnormalized.contiguous();
          const Tensor dh = dsum.defined() ? dsum.to(h.dtype()).contiguous() : Tensor();
          Tensor dx = empty_like(h);
          Tensor dw = needs[2] ? empty({cols}, h.dtype(), h.device()) : Tensor();
          Tensor db = needs[3] ? empty({cols}, h.dtype(), h.device()) : Tensor();
          HG_KERNEL(h.device(), add_layer_norm_backward, h.data_ptr(), sw.defined() ? sw.data_ptr() : nullptr,
                    mean.data_ptr(), rstd.data_ptr(), dy.data_ptr(), dh.defined() ? dh.data_ptr() : nullptr,
                    dx.data_ptr(), dw.defined() ? dw.data_ptr() : nullptr, db.defined() ? db.data_ptr() : nullptr,
                    rows, cols, h.dtype());
          return std::vector<Tensor>{needs[0] ? dx : Tensor(), needs[1] ? dx : Tensor(), dw, db};
        });
  }
  return out;
}

}  // namespace hg
