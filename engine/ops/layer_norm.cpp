// layer_norm over the last dimension (and, reshaped, over several trailing ones), the front-end of
// the layer_norm_forward / layer_norm_backward kernels (their math, forward and backward:
// kernels/kernels.h). The statistics (mean, rstd) are in
// fp32 (f64 for f64) and saved for the backward, which is one layer_norm_backward call.
#include <string>

#include "engine/ops.h"
#include "engine/ops/op_support.h"

namespace hg {

Tensor layer_norm(const Tensor& input, const Tensor& weight, const Tensor& bias, double eps) {
  const char* name = "layer_norm";
  ops::check_floating(input, name, "input");
  ops::check_backend(input, name);
  HG_CHECK(input.dim() >= 1, "[", name, "] expected an input of rank >= 1, got ", input.describe());
  HG_CHECK(eps > 0, "[", name, "] expected eps > 0, got ", eps);
  const int64_t cols = input.size(-1);
  const int64_t rows = cols == 0 ? 0 : input.numel() / cols;
  for (const auto& [param, param_name] : {std::pair{&weight, "weight"}, std::pair{&bias, "bias"}}) {
    if (!param->defined()) continue;
    ops::check_same({&input, param}, {"input", param_name}, name);
    HG_CHECK(param->shape() == Shape{cols}, "[", name, "] ", param_name, " is ", param->describe(), " but input is ",
             input.describe(), "; expected ", param_name, " of shape [", cols, "]");
  }
  const Tensor x = input.contiguous();
  const Tensor w = weight.defined() ? weight.contiguous() : Tensor();
  const Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  const DType stat = accumulate_dtype(x.dtype());
  Tensor y = ops::empty_as(x.shape(), x);
  Tensor mean = empty({rows}, stat, x.device()), rstd = empty({rows}, stat, x.device());
  HG_KERNEL(x.device(), layer_norm_forward, x.data_ptr(), w.defined() ? w.data_ptr() : nullptr,
            b.defined() ? b.data_ptr() : nullptr, y.data_ptr(), mean.data_ptr(), rstd.data_ptr(), rows, cols, eps,
            x.dtype());
  if (should_record({&input, &weight, &bias})) {
    const SavedTensor saved_x(x), saved_w(w), saved_mean(mean), saved_rstd(rstd);
    record_op(name, {input, weight, bias}, y,
              [saved_x, saved_w, saved_mean, saved_rstd, rows, cols](const Tensor& g, const NeedsGrad& needs) {
                const Tensor sx = saved_x.unpack(), sw = saved_w.unpack();
                const Tensor mean = saved_mean.unpack(), rstd = saved_rstd.unpack();
                const Tensor dy = g.contiguous();
                Tensor dx = empty_like(sx);
                Tensor dw = needs[1] ? empty({cols}, sx.dtype(), sx.device()) : Tensor();
                Tensor db = needs[2] ? empty({cols}, sx.dtype(), sx.device()) : Tensor();
                HG_KERNEL(sx.device(), layer_norm_backward, sx.data_ptr(), sw.defined() ? sw.data_ptr() : nullptr,
                          mean.data_ptr(), rstd.data_ptr(), dy.data_ptr(), dx.data_ptr(),
                          dw.defined() ? dw.data_ptr() : nullptr, db.defined() ? db.data_ptr() : nullptr, rows, cols,
                          sx.dtype());
                return std::vector<Tensor>{dx, dw, db};
              });
  }
  return y;
}

Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  const char* name = "layer_norm";
  ops::check_defined(input, name, "input");
  const int k = int(normalized_shape.size());
  bool fits = k >= 1 && input.dim() >= k;
  for (int d = 0; fits && d < k; ++d) fits = input.size(input.dim() - k + d) == normalized_shape[size_t(d)];
  std::string wanted;
  for (int64_t s : normalized_shape) wanted += (wanted.empty() ? "" : ", ") + std::to_string(s);
  HG_CHECK(fits, "[", name, "] input ", input.describe(), " does not end in normalized_shape [", wanted,
           "]; expected its last ", k, " dimension(s) to equal it (and normalized_shape not empty)");
  for (const auto& [param, param_name] : {std::pair{&weight, "weight"}, std::pair{&bias, "bias"}})
    HG_CHECK(!param->defined() || param->shape() == normalized_shape, "[", name, "] ", param_name, " is ",
             param->describe(), "; expected the normalized_shape [", wanted, "]");
  int64_t cols = 1;
  for (int64_t s : normalized_shape) cols *= s;
  Shape rows_shape(input.shape().begin(), input.shape().end() - k);
  rows_shape.push_back(cols);
  const Tensor w = weight.defined() ? weight.reshape({cols}) : Tensor();
  const Tensor b = bias.defined() ? bias.reshape({cols}) : Tensor();
  return layer_norm(input.reshape(rows_shape), w, b, eps).reshape(input.shape());
}

}  // namespace hg
