#pragma once
// The comparison and logical ops, one row each in HG_COMPARE_OPS below: y = a op b, a bool. From the
// row come the CompareOp enum and kCompareOps, the name (error messages) and CompareMath<op>::value,
// the per-element test both backends run (kernels/cpu/compare.cpp, kernels/cuda/compare.cu), and the
// cases of with_op (kernels/op_table.h).
//
// `a` and `b` are compared in their own type (integers as integers, never through float, so i64 values
// above 2^24 compare exactly), except f16/bf16, which compare as the float they widen to (exact).
// IEEE rules hold: every comparison with NaN is false except ne, which is true. The logical rows
// take any value as true when it is nonzero (NaN is nonzero: true), as PyTorch's logical_and/or/xor.
// None of these ops has a gradient (their results are bool).
#include "kernels/host_device.h"
#include "kernels/op_table.h"

namespace hg::kernels {

// clang-format off
#define HG_COMPARE_OPS(row)                                                     \
  /*  enumerator  name            a op b                                     */ \
  row(Eq,         "eq",           a == b)                                       \
  row(Ne,         "ne",           a != b)                                       \
  row(Lt,         "lt",           a < b)                                        \
  row(Le,         "le",           a <= b)                                       \
  row(Gt,         "gt",           a > b)                                        \
  row(Ge,         "ge",           a >= b)                                       \
  row(And,        "logical_and",  (a != V(0)) && (b != V(0)))                   \
  row(Or,         "logical_or",   (a != V(0)) || (b != V(0)))                   \
  row(Xor,        "logical_xor",  (a != V(0)) != (b != V(0)))
// clang-format on

// ---- generated from the table ----

HG_OP_ENUM(CompareOp, kCompareOps, HG_COMPARE_OPS);

template <CompareOp kOp>
struct CompareMath;

#define HG_COMPARE_MATH(op, op_name, value_expr) \
  template <>                                    \
  struct CompareMath<CompareOp::op> {            \
    static constexpr const char* kName = op_name; \
    template <class V>                           \
    static HG_HOST_DEVICE bool value(V a, V b) { \
      return value_expr;                         \
    }                                            \
  };
HG_COMPARE_OPS(HG_COMPARE_MATH)
#undef HG_COMPARE_MATH

HG_OP_TABLE(CompareOp, kCompareOps, CompareMath);

}  // namespace hg::kernels
