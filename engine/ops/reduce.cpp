// Reductions: sum / mean over any set of dimensions, max over one dimension.
// The kernel reduces the middle axis of a contiguous [outer, n, inner] view; reducing several
// dimensions first permutes them to the end. Backward:
//   sum:  dx = expand(g)         mean: dx = expand(g) / n
//   max:  dx = g at the first maximum of each slice, 0 elsewhere.
#include <algorithm>

#include "engine/ops.h"
#include "engine/ops/op_support.h"

namespace hg {

namespace {

std::vector<int> normalized_dims(const Tensor& x, const std::vector<int>& dims, const char* op) {
  std::vector<int> out;
  if (dims.empty()) {
    for (int d = 0; d < x.dim(); ++d) out.push_back(d);
    return out;
  }
  for (int d : dims) out.push_back(normalize_dim(d, x.dim(), op));
  std::sort(out.begin(), out.end());
  HG_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), "[", op, "] a dimension is repeated in the list");
  return out;
}

Shape reduced_shape(const Shape& shape, const std::vector<int>& dims, bool keepdim) {
  Shape out;
  for (size_t i = 0; i < shape.size(); ++i) {
    const bool reduced = std::find(dims.begin(), dims.end(), int(i)) != dims.end();
    if (!reduced)
      out.push_back(shape[i]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

// Sum (times `scale`) of x over `dims`, shaped with keepdim = true.
Tensor sum_kernel(const Tensor& x, const std::vector<int>& dims, double scale) {
  const Shape kept = reduced_shape(x.shape(), dims, /*keepdim=*/true);
  // Adjacent reduced dims of a contiguous tensor reduce in place as [outer, n, inner].
  const bool adjacent = dims.empty() || dims.back() - dims.front() + 1 == int(dims.size());
  Tensor src = x;
  int64_t outer = 1, n = 1, inner = 1;
  if (adjacent && x.is_contiguous()) {
    for (int d = 0; d < x.dim(); ++d) {
      const int64_t s = x.shape()[size_t(d)];
      if (!dims.empty() && d < dims.front())
        outer *= s;
      else if (!dims.empty() && d > dims.back())
        inner *= s;
      else
        n *= s;
    }
  } else {
    std::vector<int> order;
    for (int d = 0; d < x.dim(); ++d)
      if (std::find(dims.begin(), dims.end(), d) == dims.end()) order.push_back(d);
    for (int d : dims) order.push_back(d);
    src = x.permute(order).contiguous();
    for (int d : dims) n *= x.shape()[size_t(d)];
    outer = n == 0 ? shape_numel(kept) : x.numel() / n;
  }
  Tensor out = ops::empty_as(kept, x);
  HG_KERNEL(x.device(), reduce, kernels::ReduceOp::Sum, src.data_ptr(), out.data_ptr(), nullptr, outer, n, inner, scale,
            x.dtype());
  return out;
}

Tensor sum_or_mean(const Tensor& x, const std::vector<int>& dims_in, bool keepdim, bool is_mean) {
  const char* name = is_mean ? "mean" : "sum";
  ops::check_floating(x, name, "input");
  ops::check_backend(x, name);
  const std::vector<int> dims = normalized_dims(x, dims_in, name);
  int64_t n = 1;
  for (int d : dims) n *= x.shape()[size_t(d)];
  const double scale = is_mean ? 1.0 / double(n) : 1.0;
  Tensor out;
  {
    NoGradGuard no_grad;  // the permute/contiguous inside are implementation, not graph
    out = sum_kernel(x, dims, scale).reshape(reduced_shape(x.shape(), dims, keepdim));
  }
  if (should_record({&x})) {
    const Shape in_shape = x.shape(), kept = reduced_shape(x.shape(), dims, true);
    record_op(name, {x}, out, [in_shape, kept, scale, is_mean](const Tensor& g, const NeedsGrad&) {
      Tensor expanded = g.reshape(kept).expand(in_shape);
      return std::vector<Tensor>{is_mean ? affine(expanded, scale, 0.0) : expanded};
    });
  }
  return out;
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int>& dims, bool keepdim) { return sum_or_mean(x, dims, keepdim, false); }
Tensor mean(const Tensor& x, const std::vector<int>& dims, bool keepdim) { return sum_or_mean(x, dims, keepdim, true); }

std::pair<Tensor, Tensor> max(const Tensor& input, int dim, bool keepdim) {
  ops::check_floating(input, "max", "input");
  ops::check_backend(input, "max");
  const int d = normalize_dim(dim, input.dim(), "max");
  const int64_t n = input.shape()[size_t(d)];
  HG_CHECK(n > 0, "[max] dimension ", d, " of ", input.describe(), " is empty; expected at least one element");
  const Tensor x = input.contiguous();
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= x.shape()[size_t(i)];
  for (int i = d + 1; i < x.dim(); ++i) inner *= x.shape()[size_t(i)];
  const Shape shape = reduced_shape(x.shape(), {d}, keepdim);
  Tensor values = ops::empty_as(shape, x);
  Tensor indices = empty(shape, i64, x.device());
  HG_KERNEL(x.device(), reduce, kernels::ReduceOp::Max, x.data_ptr(), values.data_ptr(), indices.data<int64_t>(), outer,
            n, inner, 1.0, x.dtype());
  if (should_record({&input})) {
    const Shape in_shape = x.shape();
    const SavedTensor saved(indices);
    record_op("max", {input}, values, [in_shape, saved, outer, n, inner](const Tensor& g, const NeedsGrad&) {
      const Tensor saved_indices = saved.unpack();
      const Tensor dy = g.contiguous();
      Tensor dx = ops::empty_as(in_shape, dy);
      HG_KERNEL(dy.device(), scatter_along, dy.data_ptr(), saved_indices.data<int64_t>(), dx.data_ptr(), outer, n,
                inner, dy.dtype());
      return std::vector<Tensor>{dx};
    });
  }
  return {values, indices};
}

Tensor max(const Tensor& x) {
  ops::check_defined(x, "max", "input");
  return max(x.reshape({-1}), 0, false).first;
}

}  // namespace hg
