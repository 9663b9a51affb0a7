// topk along a dimension: the kernel sorts contiguous rows (kernels/kernels.h: topk), so dim is moved
// last (a transpose, copied contiguous when it is not already last) and the results are moved back.
// The backward pass scatters the values' gradient into zeros at the chosen positions (the positions of
// a row are distinct, so scatter_add is a plain scatter).
#include "engine/ops.h"
#include "engine/ops/op_support.h"

namespace hg {

std::pair<Tensor, Tensor> topk(const Tensor& input, int64_t k, int dim_in, bool largest, bool /*sorted*/) {
  const char* op = "topk";
  ops::check_floating(input, op, "input");
  ops::check_backend(input, op);
  const Tensor x = input.dim() == 0 ? input.reshape({1}) : input;
  const int dim = normalize_dim(dim_in, x.dim(), op);
  const int last = x.dim() - 1;
  const int64_t n = x.size(dim);
  HG_CHECK(k >= 0 && k <= n, "[topk] k = ", k, " for dimension ", dim, " of ", input.describe(),
           "; expected 0 <= k <= ", n);
  const Tensor rows = (dim == last ? x : x.transpose(dim, last)).contiguous();
  Shape out_shape = rows.shape();
  out_shape[size_t(last)] = k;
  Tensor values = ops::empty_as(out_shape, rows), indices = empty(out_shape, i64, x.device());
  const int64_t row_count = n == 0 ? 0 : rows.numel() / n;
  const Device device = x.device();
  const size_t bytes = HG_KERNEL(device, topk_workspace_bytes, row_count, n);
  const Tensor workspace = bytes > 0 ? empty({int64_t((bytes + 7) / 8)}, i64, device) : Tensor();
  if (row_count * k > 0)
    HG_KERNEL(device, topk, rows.data_ptr(), values.data_ptr(), static_cast<int64_t*>(indices.data_ptr()), row_count, n,
              k, largest, workspace.defined() ? workspace.data_ptr() : nullptr, bytes, x.dtype());
  if (dim != last) {
    values = values.transpose(dim, last);
    indices = indices.transpose(dim, last);
  }
  if (input.dim() == 0) values = values.reshape({}), indices = indices.reshape({});
  if (should_record({&input})) {
    record_op(op, {input}, values, [indices, dim, in_shape = input.shape()](const Tensor& g, const NeedsGrad&) {
      const Tensor g1 = g.dim() == 0 ? g.reshape({1}) : g, i1 = indices.dim() == 0 ? indices.reshape({1}) : indices;
      const Shape shape = in_shape.empty() ? Shape{1} : in_shape;
      const Tensor dx = scatter_add(zeros(shape, g.dtype(), g.device()), dim, i1, g1);
      return std::vector<Tensor>{dx.reshape(in_shape)};
    });
  }
  return {values, indices};
}

}  // namespace hg
