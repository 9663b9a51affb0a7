// Unary ops, forward and backward, and affine, over n contiguous elements.
//
// Math (in A = acc_t<T>; half types are converted on load and rounded once on store), the very
// lines of kernels/unary_math.h that the CPU backend runs:
//   unary_forward:  y  = f(x)                     (unary_value)
//   unary_backward: dx = dy * f'(x, y)            (unary_derivative). x may be null when f' needs
//                   only y (Neg, Exp, Sqrt, Tanh, Sigmoid); y may be null and is then recomputed.
//   affine:         y  = alpha * x + beta
//
// Parallel strategy: map_elements (map.h): a grid-stride loop in which a thread owns one 16-byte
// pack of every operand (128-bit loads and store) when all operands share their alignment, single
// elements for the head and tail. The op is a template argument (a functor per UnaryOp), so the
// switch of unary_value folds away at compile time and the kernel holds no branch per element.
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/cuda/map.h"
#include "kernels/kernels_cuda.h"

namespace hg::kernels::cuda {
namespace {

template <UnaryOp kOp, class A>
struct UnaryForward {
  A s;
  HG_DEVICE A operator()(const A* v) const { return unary_value<A>(kOp, v[0], s); }
};

// Inputs (x, y, dy).
template <UnaryOp kOp, class A>
struct UnaryBackwardXY {
  A s;
  HG_DEVICE A operator()(const A* v) const { return v[2] * unary_derivative<A>(kOp, v[0], v[1], s); }
};

constexpr bool derivative_uses_y(UnaryOp op) {
  return op == UnaryOp::Exp || op == UnaryOp::Sqrt || op == UnaryOp::Tanh || op == UnaryOp::Sigmoid;
}
constexpr bool derivative_uses_x(UnaryOp op) { return op != UnaryOp::Neg && !derivative_uses_y(op); }

// Inputs (x, dy): y recomputed when the derivative needs it.
template <UnaryOp kOp, class A>
struct UnaryBackwardX {
  static constexpr bool kNeedsY = derivative_uses_y(kOp);
  A s;
  HG_DEVICE A operator()(const A* v) const {
    const A y = kNeedsY ? unary_value<A>(kOp, v[0], s) : A(0);
    return v[1] * unary_derivative<A>(kOp, v[0], y, s);
  }
};

// Inputs (y, dy): only for the ops whose derivative needs no x.
template <UnaryOp kOp, class A>
struct UnaryBackwardY {
  A s;
  HG_DEVICE A operator()(const A* v) const { return v[1] * unary_derivative<A>(kOp, A(0), v[0], s); }
};

template <class A>
struct Affine {
  A alpha, beta;
  HG_DEVICE A operator()(const A* v) const { return alpha * v[0] + beta; }
};

// Calls body.template operator()<kOp>() with op as a compile-time constant.
template <class F>
void with_unary_op(UnaryOp op, F&& body) {
  switch (op) {
    case UnaryOp::Neg:
      return body.template operator()<UnaryOp::Neg>();
    case UnaryOp::Exp:
      return body.template operator()<UnaryOp::Exp>();
    case UnaryOp::Log:
      return body.template operator()<UnaryOp::Log>();
    case UnaryOp::Sqrt:
      return body.template operator()<UnaryOp::Sqrt>();
    case UnaryOp::Tanh:
      return body.template operator()<UnaryOp::Tanh>();
    case UnaryOp::Sigmoid:
      return body.template operator()<UnaryOp::Sigmoid>();
    case UnaryOp::Relu:
      return body.template operator()<UnaryOp::Relu>();
    case UnaryOp::GeluTanh:
      return body.template operator()<UnaryOp::GeluTanh>();
    case UnaryOp::GeluErf:
      return body.template operator()<UnaryOp::GeluErf>();
    case UnaryOp::Silu:
      return body.template operator()<UnaryOp::Silu>();
    case UnaryOp::Pow:
      return body.template operator()<UnaryOp::Pow>();
    case UnaryOp::Abs:
      return body.template operator()<UnaryOp::Abs>();
  }
  HG_FAIL("[unary] unknown UnaryOp ", int(op));
}

}  // namespace

void unary_forward(UnaryOp op, const void* x, void* y, int64_t n, double scalar, DType dtype, Stream stream) {
  HG_CHECK(n >= 0, "[unary_forward] n = ", n, ", expected n >= 0");
  dispatch_floating_cuda(dtype, "unary_forward", [&]<class T>() {
    using A = acc_t<T>;
    with_unary_op(op, [&]<UnaryOp kOp>() {
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
    with_unary_op(op, [&]<UnaryOp kOp>() {
      if (x != nullptr && y != nullptr) {
        map_elements(stream, n, UnaryBackwardXY<kOp, A>{A(scalar)}, dxt, xt, yt, dyt);
      } else if (x != nullptr) {
        map_elements(stream, n, UnaryBackwardX<kOp, A>{A(scalar)}, dxt, xt, dyt);
      } else {
        HG_CHECK(!derivative_uses_x(kOp), "[unary_backward] op ", int(kOp),
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
