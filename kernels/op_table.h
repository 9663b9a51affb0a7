#pragma once
// What the op tables (kernels/unary_math.h, kernels/binary_math.h: one X-macro row per op, from
// which the enum and the per-op math struct are generated) have in common.
//
// HG_OP_ENUM(Op, kEnumerators, TABLE): enum class Op with one enumerator per row of TABLE (its
// first column), and kEnumerators, a constexpr std::array of them in row order.
// OpTable<Op>, specialised by each table for its enum with HG_OP_TABLE: kOps, every enumerator in
// row order; Math<kOp>, the row's generated struct (kName and the math); kEnumName, for errors.
// with_op(op, body): the one dispatch from a run-time op to a compile-time one: calls
// body.template operator()<kOp>() for the kOp equal to op and returns its result, so a kernel
// instantiated for kOp holds no switch per element. Host code.
// op_name(op): the row's name (error messages, autograd node names).
#include <array>
#include <cstddef>
#include <iterator>
#include <utility>

#include "kernels/error.h"

namespace hg::kernels {

namespace detail {
template <class Op, size_t kCount>
constexpr std::array<Op, kCount> enumerators() {
  std::array<Op, kCount> all{};
  for (size_t i = 0; i < kCount; ++i) all[i] = Op(i);
  return all;
}
}  // namespace detail

#define HG_OP_ENUMERATOR(op, ...) op,
#define HG_OP_COUNT_ROW(...) +1
#define HG_OP_ENUM(Op, kEnumerators, TABLE)  \
  enum class Op { TABLE(HG_OP_ENUMERATOR) }; \
  inline constexpr auto kEnumerators = ::hg::kernels::detail::enumerators<Op, 0 TABLE(HG_OP_COUNT_ROW)>()

template <class Op>
struct OpTable;

#define HG_OP_TABLE(Op, kEnumerators, MathTemplate)   \
  template <>                                         \
  struct OpTable<Op> {                                \
    static constexpr const auto& kOps = kEnumerators; \
    template <Op kOp>                                 \
    using Math = MathTemplate<kOp>;                   \
    static constexpr const char* kEnumName = #Op;     \
  }

namespace detail {
template <size_t kIndex, class Op, class F>
auto with_op_from(Op op, F&& body) -> decltype(body.template operator()<OpTable<Op>::kOps[0]>()) {
  constexpr const auto& kOps = OpTable<Op>::kOps;
  if constexpr (kIndex == std::size(kOps)) {
    HG_FAIL("[", OpTable<Op>::kEnumName, "] unknown op ", int(op));
  } else {
    if (op == kOps[kIndex]) return body.template operator()<kOps[kIndex]>();
    return with_op_from<kIndex + 1>(op, std::forward<F>(body));
  }
}
}  // namespace detail

template <class Op, class F>
decltype(auto) with_op(Op op, F&& body) {
  return detail::with_op_from<0>(op, std::forward<F>(body));
}

template <class Op>
const char* op_name(Op op) {
  return with_op(op, [&]<Op kOp>() { return OpTable<Op>::template Math<kOp>::kName; });
}

}  // namespace hg::kernels
