// Shape ops. All but contiguous() and cat() are views: they share the input's storage and only
// change (shape, strides, offset). Backward of a view maps the gradient back to the input's shape.
#include <algorithm>
#include <numeric>
#include <optional>

#include "engine/ops.h"
#include "engine/ops/op_support.h"

namespace hg {

namespace {

Tensor make_view(const Tensor& x, Shape shape, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = x.storage();
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = x.dtype();
  return Tensor(std::move(impl));
}

// Replaces one -1 in `shape` by the size that keeps numel; checks the element count.
Shape infer_shape(const Shape& requested, int64_t numel, const char* op, const Tensor& x) {
  Shape shape = requested;
  int infer_at = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      HG_CHECK(infer_at < 0, "[", op, "] only one dimension can be -1, got ", shape_str(requested));
      infer_at = int(i);
    } else {
      HG_CHECK(shape[i] >= 0, "[", op, "] invalid size ", shape[i], " in ", shape_str(requested));
      known *= shape[i];
    }
  }
  if (infer_at >= 0) {
    HG_CHECK(known != 0 && numel % known == 0, "[", op, "] cannot infer -1 in ", shape_str(requested), " for ",
             x.describe());
    shape[size_t(infer_at)] = numel / known;
  }
  HG_CHECK(shape_numel(shape) == numel, "[", op, "] shape ", shape_str(requested), " is invalid for ", x.describe(),
           " (", numel, " elements)");
  HG_CHECK(shape.size() <= size_t(kMaxTensorRank), "[", op, "] rank of ", shape_str(shape), " exceeds ",
           kMaxTensorRank);
  return shape;
}

std::vector<Tensor> one(Tensor g) { return std::vector<Tensor>{std::move(g)}; }

// Strides that present `x`'s elements in `shape` without copying, if any exist (empty otherwise).
// Old dimensions are grouped into runs that are contiguous among themselves (stride[i] =
// stride[i+1] * size[i+1]); each run can be re-split freely into new dimensions whose sizes
// multiply to the run's size. E.g. splitting the last dimension of a narrowed slice is a view.
std::optional<Shape> view_strides(const Tensor& x, const Shape& shape) {
  if (x.numel() == 0 || x.dim() == 0) return contiguous_strides(shape);
  Shape strides(shape.size());
  int64_t view_d = int64_t(shape.size()) - 1;
  int64_t chunk_base_stride = x.strides().back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = x.dim() - 1; d >= 0; --d) {
    tensor_numel *= x.shape()[size_t(d)];
    // At the start of a run (or its end when walking backwards), match the new dimensions.
    if (d == 0 || (x.shape()[size_t(d - 1)] != 1 && x.strides()[size_t(d - 1)] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[size_t(view_d)] == 1)) {
        strides[size_t(view_d)] = view_numel * chunk_base_stride;
        view_numel *= shape[size_t(view_d)];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = x.strides()[size_t(d - 1)];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return strides;
}

}  // namespace

Tensor view(const Tensor& x, const Shape& requested) {
  ops::check_defined(x, "view", "input");
  Shape shape = infer_shape(requested, x.numel(), "view", x);
  const std::optional<Shape> strides = view_strides(x, shape);
  HG_CHECK(strides.has_value(), "[view] input ", x.describe(), " is not contiguous in a way that allows shape ",
           shape_str(shape), "; use reshape() (which copies) or call contiguous() first");
  Tensor out = make_view(x, shape, *strides, x.offset());
  if (should_record({&x})) {
    Shape in_shape = x.shape();
    record_op("view", {x}, out, [in_shape](const Tensor& g, const NeedsGrad&) { return one(g.reshape(in_shape)); });
  }
  return out;
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  ops::check_defined(x, "reshape", "input");
  const Shape target = infer_shape(shape, x.numel(), "reshape", x);
  return view_strides(x, target).has_value() ? view(x, target) : view(contiguous(x), target);
}

Tensor transpose(const Tensor& x, int d0, int d1) {
  ops::check_defined(x, "transpose", "input");
  const int a = normalize_dim(d0, x.dim(), "transpose"), b = normalize_dim(d1, x.dim(), "transpose");
  Shape shape = x.shape(), strides = x.strides();
  std::swap(shape[size_t(a)], shape[size_t(b)]);
  std::swap(strides[size_t(a)], strides[size_t(b)]);
  Tensor out = make_view(x, shape, strides, x.offset());
  if (should_record({&x})) {
    record_op("transpose", {x}, out, [a, b](const Tensor& g, const NeedsGrad&) { return one(g.transpose(a, b)); });
  }
  return out;
}

Tensor permute(const Tensor& x, const std::vector<int>& dims) {
  ops::check_defined(x, "permute", "input");
  HG_CHECK(int(dims.size()) == x.dim(), "[permute] got ", dims.size(), " dimensions for ", x.describe(),
           "; expected one per dimension");
  std::vector<int> order(dims.size());
  std::vector<bool> seen(dims.size(), false);
  Shape shape(dims.size()), strides(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    const int d = normalize_dim(dims[i], x.dim(), "permute");
    HG_CHECK(!seen[size_t(d)], "[permute] dimension ", d, " appears twice; expected a permutation of 0..", x.dim() - 1);
    seen[size_t(d)] = true;
    order[i] = d;
    shape[i] = x.shape()[size_t(d)];
    strides[i] = x.strides()[size_t(d)];
  }
  Tensor out = make_view(x, shape, strides, x.offset());
  if (should_record({&x})) {
    std::vector<int> inverse(order.size());
    for (size_t i = 0; i < order.size(); ++i) inverse[size_t(order[i])] = int(i);
    record_op("permute", {x}, out, [inverse](const Tensor& g, const NeedsGrad&) { return one(g.permute(inverse)); });
  }
  return out;
}

Tensor narrow(const Tensor& x, int dim, int64_t start, int64_t length) {
  ops::check_defined(x, "narrow", "input");
  const int d = normalize_dim(dim, x.dim(), "narrow");
  const int64_t size = x.shape()[size_t(d)];
  HG_CHECK(start >= 0 && length >= 0 && start + length <= size, "[narrow] range [", start, ", ", start + length,
           ") is outside dimension ", d, " of ", x.describe(), "; expected 0 <= start <= start + length <= ", size);
  Shape shape = x.shape();
  shape[size_t(d)] = length;
  Tensor out = make_view(x, shape, x.strides(), x.offset() + start * x.strides()[size_t(d)]);
  if (should_record({&x})) {
    Shape in_shape = x.shape();
    record_op("narrow", {x}, out, [in_shape, d, start, length](const Tensor& g, const NeedsGrad&) {
      Tensor dx = zeros(in_shape, g.dtype(), g.device());
      dx.narrow(d, start, length).copy_(g);
      return one(dx);
    });
  }
  return out;
}

Tensor select(const Tensor& x, int dim, int64_t index) {
  ops::check_defined(x, "select", "input");
  const int d = normalize_dim(dim, x.dim(), "select");
  const int64_t size = x.shape()[size_t(d)];
  HG_CHECK(index >= -size && index < size, "[select] index ", index, " is out of range for dimension ", d, " of ",
           x.describe());
  const int64_t i = index < 0 ? index + size : index;
  Shape shape = x.shape(), strides = x.strides();
  const int64_t offset = x.offset() + i * strides[size_t(d)];
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  Tensor out = make_view(x, shape, strides, offset);
  if (should_record({&x})) {
    Shape in_shape = x.shape();
    record_op("select", {x}, out, [in_shape, d, i](const Tensor& g, const NeedsGrad&) {
      Tensor dx = zeros(in_shape, g.dtype(), g.device());
      dx.select(d, i).copy_(g);
      return one(dx);
    });
  }
  return out;
}

Tensor unsqueeze(const Tensor& x, int dim) {
  ops::check_defined(x, "unsqueeze", "input");
  const int d = normalize_dim(dim, x.dim() + 1, "unsqueeze");
  Shape shape = x.shape();
  shape.insert(shape.begin() + d, 1);
  return x.is_contiguous() ? view(x, shape) : reshape(x, shape);
}

Tensor squeeze(const Tensor& x, int dim) {
  ops::check_defined(x, "squeeze", "input");
  const int d = normalize_dim(dim, x.dim(), "squeeze");
  HG_CHECK(x.shape()[size_t(d)] == 1, "[squeeze] dimension ", d, " of ", x.describe(), " has size ",
           x.shape()[size_t(d)], "; expected 1");
  Shape shape = x.shape();
  shape.erase(shape.begin() + d);
  return reshape(x, shape);
}

Tensor expand(const Tensor& x, const Shape& target) {
  ops::check_defined(x, "expand", "input");
  HG_CHECK(target.size() >= size_t(x.dim()) && target.size() <= size_t(kMaxTensorRank), "[expand] cannot expand ",
           x.describe(), " to ", shape_str(target), "; expected at least as many dimensions");
  const size_t lead = target.size() - size_t(x.dim());
  Shape shape(target.size()), strides(target.size(), 0);
  for (size_t i = 0; i < target.size(); ++i) {
    if (i < lead) {
      HG_CHECK(target[i] >= 0, "[expand] new leading dimension ", i, " cannot be ", target[i]);
      shape[i] = target[i];
      continue;
    }
    const int64_t have = x.shape()[i - lead];
    const int64_t want = target[i] == -1 ? have : target[i];
    HG_CHECK(have == want || have == 1, "[expand] cannot expand ", x.describe(), " to ", shape_str(target),
             ": dimension ", i, " has size ", have, "; expected ", want, " or 1");
    shape[i] = want;
    strides[i] = have == want ? x.strides()[i - lead] : 0;
  }
  Tensor out = make_view(x, shape, strides, x.offset());
  if (should_record({&x})) {
    Shape in_shape = x.shape();
    record_op("expand", {x}, out, [in_shape](const Tensor& g, const NeedsGrad&) { return one(sum_to(g, in_shape)); });
  }
  return out;
}

Tensor contiguous(const Tensor& x) {
  ops::check_defined(x, "contiguous", "input");
  if (x.is_contiguous()) return x;
  ops::check_backend(x, "contiguous");
  Tensor out = ops::empty_as(x.shape(), x);
  HG_KERNEL(x.device(), copy_strided, x.data_ptr(), x.strides().data(), out.data_ptr(), out.strides().data(),
            x.shape().data(), x.dim(), x.dtype());
  if (should_record({&x})) {
    record_op("contiguous", {x}, out, [](const Tensor& g, const NeedsGrad&) { return one(g); });
  }
  return out;
}

Tensor cat(const std::vector<Tensor>& tensors, int dim) {
  HG_CHECK(!tensors.empty(), "[cat] expected at least one tensor");
  const Tensor& first = tensors[0];
  ops::check_defined(first, "cat", "tensor 0");
  const int d = normalize_dim(dim, first.dim(), "cat");
  Shape shape = first.shape();
  shape[size_t(d)] = 0;
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    ops::check_same({&first, &t}, {"tensor 0", "another tensor"}, "cat");
    bool compatible = t.dim() == first.dim();
    for (int j = 0; compatible && j < t.dim(); ++j)
      compatible = j == d || t.shape()[size_t(j)] == first.shape()[size_t(j)];
    HG_CHECK(compatible, "[cat] tensor ", i, " is ", t.describe(), " but tensor 0 is ", first.describe(),
             "; expected equal shapes except in dimension ", d);
    sizes.push_back(t.shape()[size_t(d)]);
    shape[size_t(d)] += t.shape()[size_t(d)];
  }
  Tensor out = ops::empty_as(shape, first);
  {
    NoGradGuard no_grad;
    int64_t start = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      out.narrow(d, start, sizes[i]).copy_(tensors[i]);
      start += sizes[i];
    }
  }
  if (should_record(tensors)) {
    record_op("cat", tensors, out, [d, sizes](const Tensor& g, const NeedsGrad& needs) {
      std::vector<Tensor> grads(sizes.size());
      int64_t start = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        if (needs[i]) grads[i] = g.narrow(d, start, sizes[i]);
        start += sizes[i];
      }
      return grads;
    });
  }
  return out;
}

}  // namespace hg
