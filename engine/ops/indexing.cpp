// Indexing along one dimension: gather, scatter_add, index_select, index_add, flip, and the scan
// cumsum. Each is one kernel each way (kernels/kernels.h: index_gather, index_scatter_add, cumsum):
// gather and scatter_add are each other's backward, as are index_select and index_add, and cumsum's
// backward is the reverse cumsum. An index outside its dimension is an hg::Error naming the op, the
// flat position in the index and the bound: thrown by the call on the CPU, at the next host read on
// CUDA (kernels/cuda/device_errors.h), as embedding.
#include <algorithm>
#include <string>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "engine/ops/op_support.h"

namespace hg {
namespace {

// A tensor seen as [outer, size(dim), inner].
struct AroundDim {
  int64_t outer = 1, inner = 1;
};

AroundDim around(const Shape& shape, int dim) {
  AroundDim a;
  for (int d = 0; d < int(shape.size()); ++d) {
    if (d < dim) a.outer *= shape[size_t(d)];
    if (d > dim) a.inner *= shape[size_t(d)];
  }
  return a;
}

// x narrowed to `sizes` along every dimension but `skip` (-1: none), starting at 0: a view.
Tensor narrow_to(const Tensor& x, const Shape& sizes, int skip) {
  Tensor out = x;
  for (int d = 0; d < x.dim(); ++d)
    if (d != skip && out.size(d) != sizes[size_t(d)]) out = out.narrow(d, 0, sizes[size_t(d)]);
  return out;
}

// t zero-padded at the end of every dimension up to `shape` (the backward of narrow_to).
Tensor pad_to(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  std::vector<int64_t> amounts;
  for (int d = t.dim() - 1; d >= 0; --d) {
    amounts.push_back(0);
    amounts.push_back(shape[size_t(d)] - t.size(d));
  }
  return pad(t, amounts);
}

void check_index_operand(const char* op, const Tensor& self, const Tensor& index) {
  ops::check_defined(self, op, "input");
  ops::check_index(index, op, "index");
  ops::check_backend(self, op);
  HG_CHECK(index.device() == self.device(), "[", op, "] input ", self.describe(), " and index ", index.describe(),
           " are on different devices");
}

// The kernels' per-element (gather / scatter_add) and per-slice (index_select / index_add) calls.
Tensor run_gather(const Tensor& x, int dim, const Tensor& index, bool per_element, const Shape& out_shape) {
  const Tensor xc = x.contiguous(), ic = index.contiguous();
  Tensor y = ops::empty_as(out_shape, xc);
  const AroundDim a = around(out_shape, dim);
  HG_KERNEL(xc.device(), index_gather, xc.data_ptr(), ic.data_ptr(), ic.dtype(), y.data_ptr(), a.outer, xc.size(dim),
            out_shape[size_t(dim)], a.inner, per_element, xc.dtype());
  return y;
}

// base (undefined: zeros) + alpha * src scattered along dim into out_shape.
Tensor run_scatter_add(const Tensor& base, const Tensor& src, int dim, const Tensor& index, bool per_element,
                       double alpha, const Shape& out_shape) {
  const Tensor bc = base.defined() ? base.contiguous() : Tensor(), sc = src.contiguous(), ic = index.contiguous();
  Tensor y = ops::empty_as(out_shape, sc);
  const AroundDim a = around(out_shape, dim);
  HG_KERNEL(sc.device(), index_scatter_add, bc.defined() ? bc.data_ptr() : nullptr, sc.data_ptr(), ic.data_ptr(),
            ic.dtype(), y.data_ptr(), a.outer, out_shape[size_t(dim)], sc.size(dim), a.inner, per_element, alpha,
            sc.dtype());
  return y;
}

// A 0-d tensor is indexed as [1] (PyTorch's rule for gather and friends).
Tensor at_least_1d(const Tensor& t) { return t.dim() == 0 ? t.reshape({1}) : t; }

}  // namespace

Tensor gather(const Tensor& input, int dim_in, const Tensor& index_in) {
  const char* op = "gather";
  check_index_operand(op, input, index_in);
  const Tensor x = at_least_1d(input), index = at_least_1d(index_in);
  const int dim = normalize_dim(dim_in, x.dim(), op);
  HG_CHECK(index.dim() == x.dim(), "[gather] index ", index_in.describe(), " and input ", input.describe(),
           " have different numbers of dimensions; expected equal");
  for (int d = 0; d < x.dim(); ++d)
    HG_CHECK(d == dim || index.size(d) <= x.size(d), "[gather] index ", index_in.describe(), " is larger than input ",
             input.describe(), " in dimension ", d, "; expected index.size(d) <= input.size(d) for d != dim (", dim,
             ")");
  const Tensor xv = narrow_to(x, index.shape(), dim);
  Tensor y = run_gather(xv, dim, index, true, index.shape());
  if (index_in.dim() == 0) y = y.reshape({});
  if (should_record({&input}) && is_floating(input.dtype())) {
    const SavedTensor saved_index(index.contiguous());
    record_op(op, {input}, y,
              [saved_index, dim, x_shape = x.shape(), xv_shape = xv.shape(), in_shape = input.shape()](
                  const Tensor& g, const NeedsGrad&) {
                const Tensor idx = saved_index.unpack();
                const Tensor part = run_scatter_add(Tensor(), g.reshape(idx.shape()), dim, idx, true, 1.0, xv_shape);
                return std::vector<Tensor>{pad_to(part, x_shape).reshape(in_shape)};
              });
  }
  return y;
}

Tensor scatter_add(const Tensor& self_in, int dim_in, const Tensor& index_in, const Tensor& src_in) {
  const char* op = "scatter_add";
  check_index_operand(op, self_in, index_in);
  ops::check_floating(self_in, op, "input");
  ops::check_same({&self_in, &src_in}, {"input", "src"}, op);
  const Tensor self = at_least_1d(self_in), index = at_least_1d(index_in), src = at_least_1d(src_in);
  const int dim = normalize_dim(dim_in, self.dim(), op);
  HG_CHECK(index.dim() == self.dim() && src.dim() == self.dim(), "[scatter_add] input ", self_in.describe(), ", index ",
           index_in.describe(), " and src ", src_in.describe(),
           " have different numbers of dimensions; expected equal");
  for (int d = 0; d < self.dim(); ++d) {
    HG_CHECK(index.size(d) <= src.size(d), "[scatter_add] index ", index_in.describe(), " is larger than src ",
             src_in.describe(), " in dimension ", d, "; expected index.size(d) <= src.size(d)");
    HG_CHECK(d == dim || index.size(d) <= self.size(d), "[scatter_add] index ", index_in.describe(),
             " is larger than input ", self_in.describe(), " in dimension ", d,
             "; expected index.size(d) <= input.size(d) for d != dim (", dim, ")");
  }
  const Tensor src_view = narrow_to(src, index.shape(), -1);
  Shape part_shape = index.shape();
  part_shape[size_t(dim)] = self.size(dim);
  Tensor y;
  if (part_shape == self.shape()) {
    y = run_scatter_add(self, src_view, dim, index, true, 1.0, self.shape());
  } else {  // the index covers a corner of the input: scatter into that corner's shape, pad, add
    NoGradGuard no_grad;
    y = (self + pad_to(run_scatter_add(Tensor(), src_view, dim, index, true, 1.0, part_shape), self.shape()))
            .contiguous();
  }
  if (self_in.dim() == 0) y = y.reshape({});
  if (should_record({&self_in, &src_in})) {
    const SavedTensor saved_index(index.contiguous());
    record_op(op, {self_in, src_in}, y,
              [saved_index, dim, part_shape, src_shape = src.shape(), src_in_shape = src_in.shape(),
               self_shape = self.shape()](const Tensor& g_in, const NeedsGrad& needs) {
                const Tensor idx = saved_index.unpack();
                const Tensor g = g_in.reshape(self_shape);
                Tensor dsrc;
                if (needs[1]) {
                  const Tensor corner = narrow_to(g, part_shape, dim);
                  dsrc = pad_to(run_gather(corner, dim, idx, true, idx.shape()), src_shape).reshape(src_in_shape);
                }
                return std::vector<Tensor>{needs[0] ? g_in : Tensor(), dsrc};
              });
  }
  return y;
}

Tensor index_select(const Tensor& input, int dim_in, const Tensor& index_in) {
  const char* op = "index_select";
  check_index_operand(op, input, index_in);
  HG_CHECK(index_in.dim() <= 1, "[index_select] index ", index_in.describe(), " has ", index_in.dim(),
           " dimensions; expected a 1-D (or 0-d) tensor of positions");
  HG_CHECK(input.dim() > 0 || index_in.numel() == 1, "[index_select] index ", index_in.describe(),
           " for a 0-d input; expected exactly one position");
  const Tensor x = at_least_1d(input), index = at_least_1d(index_in);
  const int dim = normalize_dim(dim_in, x.dim(), op);
  Shape out_shape = x.shape();
  out_shape[size_t(dim)] = index.numel();
  Tensor y = run_gather(x, dim, index, false, out_shape);
  if (input.dim() == 0) y = y.reshape({});
  if (should_record({&input}) && is_floating(input.dtype())) {
    const SavedTensor saved_index(index.contiguous());
    record_op(op, {input}, y,
              [saved_index, dim, out_shape, x_shape = x.shape(), in_shape = input.shape()](const Tensor& g,
                                                                                           const NeedsGrad&) {
                const Tensor dx =
                    run_scatter_add(Tensor(), g.reshape(out_shape), dim, saved_index.unpack(), false, 1.0, x_shape);
                return std::vector<Tensor>{dx.reshape(in_shape)};
              });
  }
  return y;
}

Tensor index_add(const Tensor& self_in, int dim_in, const Tensor& index_in, const Tensor& source_in, double alpha) {
  const char* op = "index_add";
  check_index_operand(op, self_in, index_in);
  ops::check_floating(self_in, op, "input");
  ops::check_same({&self_in, &source_in}, {"input", "source"}, op);
  HG_CHECK(index_in.dim() <= 1, "[index_add] index ", index_in.describe(), " has ", index_in.dim(),
           " dimensions; expected a 1-D (or 0-d) tensor of positions");
  const Tensor self = at_least_1d(self_in), index = at_least_1d(index_in), source = at_least_1d(source_in);
  const int dim = normalize_dim(dim_in, self.dim(), op);
  Shape expected = self.shape();
  expected[size_t(dim)] = index.numel();
  HG_CHECK(source.shape() == expected, "[index_add] source ", source_in.describe(), " does not fit input ",
           self_in.describe(), " and index ", index_in.describe(), "; expected source of shape ", shape_str(expected),
           " (the input's, with dimension ", dim, " of the index's length)");
  Tensor y = run_scatter_add(self, source, dim, index, false, alpha, self.shape());
  if (self_in.dim() == 0) y = y.reshape({});
  if (should_record({&self_in, &source_in})) {
    const SavedTensor saved_index(index.contiguous());
    record_op(op, {self_in, source_in}, y,
              [saved_index, dim, alpha, expected, self_shape = self.shape(), source_in_shape = source_in.shape()](
                  const Tensor& g, const NeedsGrad& needs) {
                Tensor dsource;
                if (needs[1]) {
                  dsource = run_gather(g.reshape(self_shape), dim, saved_index.unpack(), false, expected);
                  if (alpha != 1.0) dsource = dsource * alpha;
                  dsource = dsource.reshape(source_in_shape);
                }
                return std::vector<Tensor>{needs[0] ? g : Tensor(), dsource};
              });
  }
  return y;
}

Tensor flip(const Tensor& x, const std::vector<int>& dims) {
  const char* op = "flip";
  ops::check_defined(x, op, "input");
  std::vector<int> wrapped;
  for (int d : dims) {
    const int w = normalize_dim(d, std::max(x.dim(), 1), op);
    HG_CHECK(std::find(wrapped.begin(), wrapped.end(), w) == wrapped.end(), "[flip] dimension ", d,
             " appears more than once in dims; expected distinct dimensions");
    wrapped.push_back(w);
  }
  if (wrapped.empty() || x.dim() == 0) return x.clone();  // nothing to reverse: a copy, as PyTorch
  // One index_select per dimension, by the reversed positions n - 1, ..., 0 (its backward is the same
  // reversal: index_add of distinct positions).
  Tensor out = x;
  for (int d : wrapped) {
    const int64_t n = x.size(d);
    out = index_select(out, d, arange(double(n - 1), -1.0, -1.0, i64, x.device()));
  }
  return out;
}

Tensor cumsum(const Tensor& input, int dim_in) {
  const char* op = "cumsum";
  ops::check_floating(input, op, "input");
  ops::check_backend(input, op);
  const Tensor x = at_least_1d(input).contiguous();
  const int dim = normalize_dim(dim_in, x.dim(), op);
  const AroundDim a = around(x.shape(), dim);
  const int64_t n = x.size(dim);
  Tensor y = ops::empty_as(x.shape(), x);
  HG_KERNEL(x.device(), cumsum, x.data_ptr(), y.data_ptr(), a.outer, n, a.inner, false, x.dtype());
  if (input.dim() == 0) y = y.reshape({});
  if (should_record({&input})) {
    record_op(op, {input}, y, [a, n, in_shape = input.shape()](const Tensor& g_in, const NeedsGrad&) {
      const Tensor g = g_in.contiguous();
      Tensor dx = ops::empty_as(g.shape(), g);
      HG_KERNEL(g.device(), cumsum, g.data_ptr(), dx.data_ptr(), a.outer, n, a.inner, true, g.dtype());
      return std::vector<Tensor>{dx.reshape(in_shape)};
    });
  }
  return y;
}

}  // namespace hg
