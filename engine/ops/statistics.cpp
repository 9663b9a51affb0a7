// min, argmax / argmin, var / std and logsumexp, composed from the reductions of engine/ops/reduce.cpp
// and elementwise ops, so their gradients are those ops' backwards (the math: engine/ops.h).
//   min(x)        = -max(-x): the first minimum, NaN as the minimum (as max treats NaN as the maximum)
//   var(x)        = sum((x - mean(x))^2) / (N - correction), two passes (the mean, then the squares)
//   logsumexp(x)  = m + log(sum(exp(x - m))), m the maximum over the reduced elements, held constant
//                   (detached: the gradient of the shift cancels), and 0 where m is infinite so that a
//                   row of -inf gives -inf, not NaN.
#include <algorithm>
#include <cmath>

#include "engine/ops.h"
#include "engine/ops/op_support.h"

namespace hg {

namespace {

// The dims `dims` of x (empty: all) moved last and merged into one: [kept..., reduced]; `kept_shape`
// receives the shape of the kept dimensions in order, and `keep_shape` the shape with the reduced ones as 1.
Tensor reduced_last(const Tensor& x, const std::vector<int>& dims_in, const char* op, Shape* kept_shape,
                    Shape* keep_shape) {
  std::vector<int> dims;
  if (dims_in.empty()) {
    for (int d = 0; d < x.dim(); ++d) dims.push_back(d);
  } else {
    for (int d : dims_in) dims.push_back(normalize_dim(d, x.dim(), op));
  }
  std::sort(dims.begin(), dims.end());
  HG_CHECK(std::adjacent_find(dims.begin(), dims.end()) == dims.end(), "[", op, "] dimension listed twice; expected "
           "distinct dims");
  std::vector<int> order;
  kept_shape->clear();
  *keep_shape = x.shape();
  for (int d = 0; d < x.dim(); ++d) {
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) {
      order.push_back(d);
      kept_shape->push_back(x.shape()[size_t(d)]);
    } else {
      (*keep_shape)[size_t(d)] = 1;
    }
  }
  for (int d : dims) order.push_back(d);
  Shape merged = *kept_shape;
  merged.push_back(-1);
  return x.permute(order).reshape(merged);
}

}  // namespace

std::pair<Tensor, Tensor> min(const Tensor& x, int dim, bool keepdim) {
  ops::check_floating(x, "min", "input");
  auto [values, indices] = max(-x, dim, keepdim);
  return {-values, indices};
}

Tensor min(const Tensor& x) {
  ops::check_defined(x, "min", "input");
  return min(x.reshape({-1}), 0, false).first;
}

Tensor argmax(const Tensor& x, int dim, bool keepdim) {
  NoGradGuard no_grad;
  return max(x, dim, keepdim).second;
}

Tensor argmin(const Tensor& x, int dim, bool keepdim) {
  NoGradGuard no_grad;
  return min(x, dim, keepdim).second;
}

Tensor var(const Tensor& x, const std::vector<int>& dims, double correction, bool keepdim) {
  ops::check_floating(x, "var", "input");
  int64_t n = dims.empty() ? x.numel() : 1;
  for (int d : dims) n *= x.size(d);
  const Tensor centered = x - mean(x, dims, /*keepdim=*/true);
  return sum(centered * centered, dims, keepdim) / std::max(0.0, double(n) - correction);
}

Tensor std(const Tensor& x, const std::vector<int>& dims, double correction, bool keepdim) {
  return sqrt(var(x, dims, correction, keepdim));
}

Tensor logsumexp(const Tensor& x, const std::vector<int>& dims, bool keepdim) {
  ops::check_floating(x, "logsumexp", "input");
  Shape kept, keep;
  const Tensor rows = reduced_last(x, dims, "logsumexp", &kept, &keep);
  if (rows.size(-1) == 0) return full(keepdim ? keep : kept, -INFINITY, x.dtype(), x.device());  // log(0)
  Tensor shift;
  {
    NoGradGuard no_grad;
    const Tensor m = max(rows, -1, /*keepdim=*/true).first;
    shift = where(logical_not(logical_or(eq(m, INFINITY), eq(m, -INFINITY))), m, 0.0);
  }
  const Tensor lse = log(sum(exp(rows - shift), {-1}, /*keepdim=*/true)) + shift;
  return lse.reshape(keepdim ? keep : kept);
}

}  // namespace hg
