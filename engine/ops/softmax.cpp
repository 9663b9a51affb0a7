// softmax / log_softmax over one dimension (moved last when it isn't), stable by max-subtraction,
// in fp32 (f64 for f64). Backward from the saved output y:
//   softmax: dx = y (dy - sum(dy y))      log_softmax: dx = dy - exp(y) sum(dy)
#include "engine/ops.h"
#include "engine/ops/op_support.h"
#include "engine/ops/softmax_internal.h"

namespace hg {

namespace ops {

Tensor softmax_last_dim(const Tensor& input, bool log, int64_t causal_rows) {
  const char* name = log ? "log_softmax" : "softmax";
  HG_CHECK(!(log && causal_rows > 0), "[", name, "] the causal mask is only supported for softmax");
  const Tensor x = input.contiguous();
  const int64_t cols = x.dim() == 0 ? 1 : x.size(-1);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  Tensor y = empty_as(x.shape(), x);
  HG_KERNEL(x.device(), softmax_forward, x.data_ptr(), y.data_ptr(), rows, cols, log, causal_rows, x.dtype());
  if (should_record({&input})) {
    const SavedTensor saved_y(y);
    record_op(name, {input}, y, [saved_y, rows, cols, log](const Tensor& g, const NeedsGrad&) {
      const Tensor sy = saved_y.unpack();
      const Tensor dy = g.contiguous();
      Tensor dx = empty_as(dy.shape(), dy);
      HG_KERNEL(dy.device(), softmax_backward, sy.data_ptr(), dy.data_ptr(), dx.data_ptr(), rows, cols, log,
                dy.dtype());
      return std::vector<Tensor>{dx};
    });
  }
  return y;
}

}  // namespace ops

namespace {

Tensor softmax_any_dim(const Tensor& x, int dim, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  ops::check_floating(x, name, "input");
  ops::check_backend(x, name);
  if (x.dim() == 0) return ops::softmax_last_dim(x, log, 0);
  const int d = normalize_dim(dim, x.dim(), name);
  if (d == x.dim() - 1) return ops::softmax_last_dim(x, log, 0);
  return ops::softmax_last_dim(x.transpose(d, -1), log, 0).transpose(d, -1);
}

}  // namespace

Tensor softmax(const Tensor& x, int dim) { return softmax_any_dim(x, dim, false); }
Tensor log_softmax(const Tensor& x, int dim) { return softmax_any_dim(x, dim, true); }

}  // namespace hg
