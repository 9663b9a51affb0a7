// compare_forward: y[idx] = a[idx . a_strides] op b[idx . b_strides], a bool per element (the math:
// kernels/kernels.h and the op's row in kernels/compare_math.h).
//
// Values compare in their own type; f16/bf16 widen to float first (exact). The op is a template
// argument (with_op), so each row is one branch-free loop the compiler vectorises for the contiguous
// and scalar-broadcast strides. Parallel strategy: strided_rows.h (ranges of rows per thread).
#include <type_traits>

#include "kernels/cpu/strided_rows.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"

namespace hg::kernels::cpu {
namespace {

// The type a T compares in: float for the half types, T itself otherwise.
template <class T>
using compare_t = std::conditional_t<std::is_same_v<T, half> || std::is_same_v<T, bfloat16>, float, T>;

template <CompareOp kOp, class T>
void compare_row(const T* __restrict a, int64_t sa, const T* __restrict b, int64_t sb, bool* __restrict y, int64_t n) {
  using V = compare_t<T>;
  if (sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i) y[i] = CompareMath<kOp>::value(V(a[i]), V(b[i]));
  } else if (sa == 1 && sb == 0) {
    const V bv = V(b[0]);
    for (int64_t i = 0; i < n; ++i) y[i] = CompareMath<kOp>::value(V(a[i]), bv);
  } else if (sa == 0 && sb == 1) {
    const V av = V(a[0]);
    for (int64_t i = 0; i < n; ++i) y[i] = CompareMath<kOp>::value(av, V(b[i]));
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = CompareMath<kOp>::value(V(a[i * sa]), V(b[i * sb]));
  }
}

}  // namespace

void compare_forward(CompareOp op, const void* a, const int64_t* a_strides, const void* b, const int64_t* b_strides,
                     bool* y, const int64_t* shape, int rank, DType dtype) {
  if (!strided_shape_has_elements("compare_forward", shape, rank)) return;
  const int64_t* const strides[2] = {a_strides, b_strides};
  const StridedLayout<2> layout = collapse_strided<2>(shape, strides, rank);
  dispatch_all(dtype, "compare_forward", [&]<class T>() {
    const T* at = static_cast<const T*>(a);
    const T* bt = static_cast<const T*>(b);
    with_op(op, [&]<CompareOp kOp>() {
      for_each_strided_row(layout, [=](const int64_t* offset, int64_t out, int64_t cols, const int64_t* inner) {
        compare_row<kOp>(at + offset[0], inner[0], bt + offset[1], inner[1], y + out, cols);
      });
    });
  });
}

}  // namespace hg::kernels::cpu
