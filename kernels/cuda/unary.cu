// Unary ops, forward and backward, and affine, over n contiguous elements.
//
// Math (in A = acc_t<T>; half types are converted on load and rounded once on store), the very
// lines of kernels/unary_math.h that the CPU backend runs (the op's row of HG_UNARY_OPS):
//   unary_forward:  y  = f(x)                     (UnaryMath<op>::value)
//   unary_backward: dx = dy * f'(x, y)            (UnaryMath<op>::derivative). x may be null when
//                   f' does not read it; y may be null and is then recomputed.
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

// Inputs (x, y, dy).
template <UnaryOp kOp, class A>
struct UnaryBackwardXY {
  A s;
  HG_DEVICE A operator()(const A* v) const { return v[2] * UnaryMath<kOp>::derivative(v[0], v[1], s); }
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
      if (x != nullptr && y != nullptr) {
        map_elements(stream, n, UnaryBackwardXY<kOp, A>{A(scalar)}, dxt, xt, yt, dyt);
      } else if (x != nullptr) {
        map_elements(stream, n, UnaryBackwardX<kOp, A>{A(scalar)}, dxt, xt, dyt);
      } else {
        HG_CHECK(UnaryMath<kOp>::kReads != DerivativeReads::X, "[unary_backward] op ", UnaryMath<kOp>::kName,
                 " needs x for its derivative, got x = nullptr");
        map_elements(stream, n, UnaryBackwardY<kOp, A>{A(scalar)}, dxt, yt, dyt);
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
