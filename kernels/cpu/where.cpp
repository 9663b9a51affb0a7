// where_forward: y[idx] = cond[idx . cond_strides] ? a[idx . a_strides] : b[idx . b_strides] (the
// math: kernels/kernels.h). Any dtype: the kernel only moves elements, so it dispatches on the
// element's size (1, 2, 4 or 8 bytes) and copies bits, which keeps NaN payloads and -0 as they are.
//
// Parallel strategy: strided_rows.h (ranges of rows per thread, or pieces of one long row); within a
// row one branch-free select per element (bool bytes are 0 or 1: a mask of all bits from 0 - cond), a
// loop the compiler vectorises when all three operands are contiguous.
#include <cstdint>
#include <cstring>

#include "kernels/cpu/strided_rows.h"
#include "kernels/kernels.h"

namespace hg::kernels::cpu {
namespace {

// The select as bit masks (every bit set where cond is true), not a branch: a random mask would
// mispredict half the time, and the masked form vectorises.
template <class E>
inline E select_bits(uint8_t cond, E a, E b) {
  const E take_a = E(E(0) - E(cond));
  return E((a & take_a) | (b & E(~take_a)));
}

template <class E>
void where_row(const uint8_t* __restrict c, int64_t sc, const E* __restrict a, int64_t sa, const E* __restrict b,
               int64_t sb, E* __restrict y, int64_t n) {
  if (sc == 1 && sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i) y[i] = select_bits(c[i], a[i], b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = select_bits(c[i * sc], a[i * sa], b[i * sb]);
  }
}

template <class F>
void dispatch_element_size(DType dtype, F&& body) {
  switch (dtype_size(dtype)) {
    case 1: return body.template operator()<uint8_t>();
    case 2: return body.template operator()<uint16_t>();
    case 4: return body.template operator()<uint32_t>();
    case 8: return body.template operator()<uint64_t>();
    default: HG_FAIL("[where_forward] unsupported dtype ", dtype_name(dtype));
  }
}

}  // namespace

void where_forward(const bool* cond, const int64_t* cond_strides, const void* a, const int64_t* a_strides,
                   const void* b, const int64_t* b_strides, void* y, const int64_t* shape, int rank, DType dtype) {
  if (!strided_shape_has_elements("where_forward", shape, rank)) return;
  const int64_t* const strides[3] = {cond_strides, a_strides, b_strides};
  const StridedLayout<3> layout = collapse_strided<3>(shape, strides, rank);
  const uint8_t* c = reinterpret_cast<const uint8_t*>(cond);  // bool storage: one byte, 0 or 1
  dispatch_element_size(dtype, [&]<class E>() {
    const E* at = static_cast<const E*>(a);
    const E* bt = static_cast<const E*>(b);
    E* yt = static_cast<E*>(y);
    for_each_strided_row(layout, [=](const int64_t* offset, int64_t out, int64_t cols, const int64_t* inner) {
      where_row(c + offset[0], inner[0], at + offset[1], inner[1], bt + offset[2], inner[2], yt + out, cols);
    });
  });
}

}  // namespace hg::kernels::cpu
