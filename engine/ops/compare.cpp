// Comparisons, logical ops, any / all, where and masked_fill: the ops that make and use bool masks.
// Comparisons and logical ops run the compare_forward kernel (one row per op in
// kernels/compare_math.h) and have no gradient; where runs where_forward, and its backward is where
// again (kernels/kernels.h states the math).
#include <cmath>

#include "engine/ops.h"
#include "engine/ops/op_support.h"

namespace hg {

namespace {

using kernels::CompareOp;

Tensor compare_kernel(CompareOp op, const Tensor& a, const Tensor& b) {
  const char* name = kernels::op_name(op);
  ops::check_defined(a, name, "a");
  ops::check_defined(b, name, "b");
  ops::check_same({&a, &b}, {"a", "b"}, name);
  ops::check_backend(a, name);
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = empty(shape, b8, a.device());
  const Shape as = ops::broadcast_strides(a, shape), bs = ops::broadcast_strides(b, shape);
  HG_KERNEL(a.device(), compare_forward, op, a.data_ptr(), as.data(), b.data_ptr(), bs.data(), out.data<bool>(),
            shape.data(), int(shape.size()), a.dtype());
  return out;
}

// Whether a non-floating dtype holds `value` exactly.
bool holds_exactly(DType dtype, double value) {
  if (!std::isfinite(value) || std::trunc(value) != value) return false;
  switch (dtype) {
    case DType::b8: return value == 0 || value == 1;
    case DType::u8: return value >= 0 && value <= 255;
    case DType::i32: return value >= -2147483648.0 && value <= 2147483647.0;
    case DType::i64: return value >= -9223372036854775808.0 && value < 9223372036854775808.0;
    default: return false;
  }
}

// `a` op `value`: in a's dtype when that holds the value exactly (a floating dtype rounds it, as
// PyTorch does); otherwise a is widened to f64 (an i32 compared with 2.5, a bool with 2).
Tensor compare_scalar(CompareOp op, const Tensor& a, double value) {
  ops::check_defined(a, kernels::op_name(op), "a");
  if (is_floating(a.dtype()) || holds_exactly(a.dtype(), value))
    return compare_kernel(op, a, scalar_tensor(value, a.dtype(), a.device()));
  return compare_kernel(op, cast(a, f64), scalar_tensor(value, f64, a.device()));
}

// The logical ops read any dtype; operands of two dtypes are compared as bools.
Tensor logical(CompareOp op, const Tensor& a, const Tensor& b) {
  const char* name = kernels::op_name(op);
  ops::check_defined(a, name, "a");
  ops::check_defined(b, name, "b");
  if (a.dtype() == b.dtype()) return compare_kernel(op, a, b);
  return compare_kernel(op, cast(a, b8), cast(b, b8));
}

Tensor where_kernel(const Tensor& cond, const Tensor& a, const Tensor& b) {
  const Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = empty(shape, a.dtype(), a.device());
  const Shape cs = ops::broadcast_strides(cond, shape), as = ops::broadcast_strides(a, shape),
              bs = ops::broadcast_strides(b, shape);
  HG_KERNEL(a.device(), where_forward, cond.data<bool>(), cs.data(), a.data_ptr(), as.data(), b.data_ptr(), bs.data(),
            out.data_ptr(), shape.data(), int(shape.size()), a.dtype());
  return out;
}

}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) { return compare_kernel(CompareOp::Eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare_kernel(CompareOp::Ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare_kernel(CompareOp::Lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare_kernel(CompareOp::Le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare_kernel(CompareOp::Gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare_kernel(CompareOp::Ge, a, b); }
Tensor eq(const Tensor& a, double b) { return compare_scalar(CompareOp::Eq, a, b); }
Tensor ne(const Tensor& a, double b) { return compare_scalar(CompareOp::Ne, a, b); }
Tensor lt(const Tensor& a, double b) { return compare_scalar(CompareOp::Lt, a, b); }
Tensor le(const Tensor& a, double b) { return compare_scalar(CompareOp::Le, a, b); }
Tensor gt(const Tensor& a, double b) { return compare_scalar(CompareOp::Gt, a, b); }
Tensor ge(const Tensor& a, double b) { return compare_scalar(CompareOp::Ge, a, b); }
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator==(const Tensor& a, double b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, double b) { return ne(a, b); }
Tensor operator<(const Tensor& a, double b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, double b) { return le(a, b); }
Tensor operator>(const Tensor& a, double b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, double b) { return ge(a, b); }

Tensor logical_and(const Tensor& a, const Tensor& b) { return logical(CompareOp::And, a, b); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return logical(CompareOp::Or, a, b); }
Tensor logical_xor(const Tensor& a, const Tensor& b) { return logical(CompareOp::Xor, a, b); }
// x == 0 in x's own dtype: NaN is nonzero, so logical_not(NaN) is false, as in PyTorch.
Tensor logical_not(const Tensor& x) {
  ops::check_defined(x, "logical_not", "x");
  return compare_kernel(CompareOp::Eq, x, scalar_tensor(0.0, x.dtype(), x.device()));
}

namespace {
Tensor check_bool_operand(const Tensor& t, const char* op, const char* what) {
  ops::check_defined(t, op, what);
  HG_CHECK(t.dtype() == b8, "[", op, "] ", what, " is ", t.describe(),
           "; expected a bool tensor (for other dtypes call logical_and / logical_or / logical_xor)");
  return t;
}
}  // namespace

Tensor operator&(const Tensor& a, const Tensor& b) {
  return logical_and(check_bool_operand(a, "operator&", "a"), check_bool_operand(b, "operator&", "b"));
}
Tensor operator|(const Tensor& a, const Tensor& b) {
  return logical_or(check_bool_operand(a, "operator|", "a"), check_bool_operand(b, "operator|", "b"));
}
Tensor operator^(const Tensor& a, const Tensor& b) {
  return logical_xor(check_bool_operand(a, "operator^", "a"), check_bool_operand(b, "operator^", "b"));
}

// The count of nonzero elements (a sum of the bools in f32: exact for the answer, which only asks
// whether the count is zero).
Tensor any(const Tensor& x, const std::vector<int>& dims, bool keepdim) {
  ops::check_defined(x, "any", "x");
  const Tensor truth = x.dtype() == b8 ? x : ne(x, 0.0);
  return gt(sum(cast(truth, f32), dims, keepdim), 0.0);
}
Tensor all(const Tensor& x, const std::vector<int>& dims, bool keepdim) {
  ops::check_defined(x, "all", "x");
  return logical_not(any(logical_not(x), dims, keepdim));
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  ops::check_defined(cond, "where", "cond");
  ops::check_defined(a, "where", "a");
  ops::check_defined(b, "where", "b");
  HG_CHECK(cond.dtype() == b8, "[where] cond is ", cond.describe(), "; expected a bool tensor (compare first: x > 0)");
  ops::check_same({&a, &b}, {"a", "b"}, "where");
  HG_CHECK(cond.device() == a.device(), "[where] cond is ", cond.describe(), " but a is ", a.describe(),
           "; expected one device");
  ops::check_backend(a, "where");
  Tensor out = where_kernel(cond, a, b);
  if (should_record({&a, &b})) {
    const SavedTensor saved_cond(cond);
    record_op("where", {a, b}, out,
              [saved_cond, a_shape = a.shape(), b_shape = b.shape()](const Tensor& g, const NeedsGrad& needs) {
                const Tensor c = saved_cond.unpack();
                const Tensor zero = scalar_tensor(0.0, g.dtype(), g.device());
                return std::vector<Tensor>{needs[0] ? sum_to(where(c, g, zero), a_shape) : Tensor(),
                                           needs[1] ? sum_to(where(c, zero, g), b_shape) : Tensor()};
              });
  }
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, double b) {
  ops::check_defined(a, "where", "a");
  return where(cond, a, scalar_tensor(b, a.dtype(), a.device()));
}

Tensor where(const Tensor& cond, double a, const Tensor& b) {
  ops::check_defined(b, "where", "b");
  return where(cond, scalar_tensor(a, b.dtype(), b.device()), b);
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  ops::check_defined(x, "masked_fill", "x");
  ops::check_defined(mask, "masked_fill", "mask");
  HG_CHECK(mask.dtype() == b8, "[masked_fill] mask is ", mask.describe(), "; expected a bool tensor");
  HG_CHECK(broadcast_shapes(x.shape(), mask.shape(), "masked_fill") == x.shape(), "[masked_fill] mask ",
           shape_str(mask.shape()), " does not broadcast to x ", shape_str(x.shape()),
           "; expected a mask whose shape broadcasts to x's");
  return where(mask, scalar_tensor(value, x.dtype(), x.device()), x);
}

}  // namespace hg
