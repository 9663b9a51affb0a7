// Unary ops, forward and backward, and affine, over n contiguous elements.
//
// Math (in A = acc_t<T>; half types are converted on load and rounded once on store), the very
// lines of kernels/unary_math.h that the CPU backend runs (the op's row of HG_UNARY_OPS):
//   unary_forward:  y  = f(x)                     (UnaryMath<op>::value)
//   unary_backward: dx = dy * f'(x, y)            (UnaryMath<op>::derivative). x may be null when
//                   f' does not read it; y may be null and is then recomputed.
// unary_backward reads only what the op's derivative reads (UnaryMath<op>::kReads): dy alone (None),
// x and dy (X, even when y is given: GELU's backward moves 3 arrays, not 4), or y and dy (Y, or x and
// dy with y recomputed when y is null), so no operand is loaded only to be ignored.
//   affine:         y  = alpha * x + beta
//
// Parallel strategy: map_elements (map.h): a grid-stride loop in which a thread owns one 16-byte
// pack of every operand (128-bit loads and store) when all operands share their alignment, single
// elements for the head and tail. The op is a template argument (with_op, kernels/op_table.h), so
// each op gets its own kernel and the kernel holds no branch per element.
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/cuda/map.h"
#include "kernels/kernels_cuda.h"

namespace hg::kernels::cuda {
namespace {

template <UnaryOp kOp, class A>
struct UnaryForward {
  A s;
  HG_DEVICE A operator()(const A* v) const { return UnaryMath<kOp>::value(v[0], s); }
};

// Input (dy): the derivative reads neither x nor y.
template <UnaryOp kOp, class A>
struct UnaryBackwardNone {
  A s;
  HG_DEVICE A operator()(const A* v) const { return v[0] * UnaryMath<kOp>::derivative(A(0), A(0), s); }
};

// Inputs (x, dy): y recomputed when the derivative reads it.
template <UnaryOp kOp, class A>
struct UnaryBackwardX {
  static constexpr bool kNeedsY = UnaryMath<kOp>::kReads == DerivativeReads::Y;
  A s;
  HG_DEVICE A operator()(const A* v) const {
    const A y = kNeedsY ? UnaryMath<kOp>::value(v[0], s) : A(0);
    return v[1] * UnaryMath<kOp>::derivative(v[0], y, s);
  }
};

// Inputs (y, dy): only for the ops whose derivative reads no x.
template <UnaryOp kOp, class A>
struct UnaryBackwardY {
  A s;
  HG_DEVICE A operator()(const A* v) const { return v[1] * UnaryMath<kOp>::derivative(A(0), v[0], s); }
};

template <class A>
struct Affine {
  A alpha, beta;
  HG_DEVICE A operator()(const A* v) const { return alpha * v[0] + beta; }
};

}  // namespace

void unary_forward(UnaryOp op, const void* x, void* y, int64_t n, double scalar, DType dtype, Stream stream) {
  HG_CHECK(n >= 0, "[unary_forward] n = ", n, ", expected n >= 0");
  dispatch_floating_cuda(dtype, "unary_forward", [&]<class T>() {
    using A = acc_t<T>;
    with_op(op, [&]<UnaryOp kOp>() {
      map_elements(stream, n, UnaryForward<kOp, A>{A(scalar)}, static_cast<T*>(y), static_cast<const T*>(x));
    });
  });
}

void unary_backward(UnaryOp op, const void* x, const void* y, const void* dy, void* dx, int64_t n, double scalar,
                    DType dtype, Stream stream) {
  HG_CHECK(n >= 0, "[unary_backward] n = ", n, ", expected n >= 0");
  HG_CHECK(x != nullptr || y != nullptr, "[unary_backward] got x = nullptr and y = nullptr, expected at least one");
  dispatch_floating_cuda(dtype, "unary_backward", [&]<class T>() {
    using A = acc_t<T>;
    const T* xt = static_cast<const T*>(x);
    const T* yt = static_cast<const T*>(y);
    const T* dyt = static_cast<const T*>(dy);
    T* dxt = static_cast<T*>(dx);
    with_op(op, [&]<UnaryOp kOp>() {
      constexpr DerivativeReads kReads = UnaryMath<kOp>::kReads;
      if constexpr (kReads == DerivativeReads::None) {
        map_elements(stream, n, UnaryBackwardNone<kOp, A>{A(scalar)}, dxt, dyt);
      } else if constexpr (kReads == DerivativeReads::X) {
        HG_CHECK(x != nullptr, "[unary_backward] op ", UnaryMath<kOp>::kName,
                 " needs x for its derivative, got x = nullptr");
        map_elements(stream, n, UnaryBackwardX<kOp, A>{A(scalar)}, dxt, xt, dyt);
      } else if (y != nullptr) {
        map_elements(stream, n, UnaryBackwardY<kOp, A>{A(scalar)}, dxt, yt, dyt);
      } else {
        map_elements(stream, n, UnaryBackwardX<kOp, A>{A(scalar)}, dxt, xt, dyt);  // y recomputed from x
      }
    });
  });
}

void affine(const void* x, void* y, int64_t n, double alpha, double beta, DType dtype, Stream stream) {
  HG_CHECK(n >= 0, "[affine] n = ", n, ", expected n >= 0");
  dispatch_floating_cuda(dtype, "affine", [&]<class T>() {
    using A = acc_t<T>;
    map_elements(stream, n, Affine<A>{A(alpha), A(beta)}, static_cast<T*>(y), static_cast<const T*>(x));
  });
}

}  // namespace hg::kernels::cuda
