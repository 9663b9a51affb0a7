// difference_loss_forward / _backward on CUDA (the math: kernels/difference_loss.h).
//
// Parallel strategy: map_elements (map.h): a grid-stride loop in which a thread owns one 16-byte pack
// of every operand (128-bit loads and store) when all share their alignment, single elements for the
// head and tail; the loss kind is a template argument, so each kind is its own kernel with no branch
// per element. A reduced loss's upstream gradient is one device value, g[0], read by every thread (a
// broadcast load served from L1), so the backward makes no host read and stays capturable. dx and dt
// both wanted: dt = -dx is a second map over dx (the engine asks for it only when the target needs a
// gradient).
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/cuda/map.h"
#include "kernels/difference_loss.h"
#include "kernels/kernels_cuda.h"

namespace hg::kernels::cuda {
namespace {

template <DifferenceLoss kKind, class A>
struct LossValues {
  A delta, scale;
  HG_DEVICE A operator()(const A* v) const { return scale * difference_loss_value<kKind>(v[0] - v[1], delta); }
};

// Inputs (x, t, g): one gradient per element.
template <DifferenceLoss kKind, class A>
struct LossDerivativesPerElement {
  A delta, scale;
  HG_DEVICE A operator()(const A* v) const {
    return scale * v[2] * difference_loss_derivative<kKind>(v[0] - v[1], delta);
  }
};

// Inputs (x, t); g[0] the reduced loss's gradient, in device memory.
template <DifferenceLoss kKind, class T>
struct LossDerivativesOfScalar {
  acc_t<T> delta, scale;
  const T* g;
  HG_DEVICE acc_t<T> operator()(const acc_t<T>* v) const {
    return scale * to_acc(g[0]) * difference_loss_derivative<kKind>(v[0] - v[1], delta);
  }
};

template <class A>
struct Negated {
  HG_DEVICE A operator()(const A* v) const { return -v[0]; }
};

}  // namespace

void difference_loss_forward(DifferenceLoss kind, double delta, double scale, const void* x, const void* t, void* y,
                             int64_t n, DType dtype, Stream stream) {
  HG_CHECK(n >= 0, "[difference_loss_forward] n = ", n, ", expected n >= 0");
  dispatch_floating_cuda(dtype, "difference_loss_forward", [&]<class T>() {
    using A = acc_t<T>;
    with_difference_loss(kind, [&]<DifferenceLoss kKind>() {
      map_elements(stream, n, LossValues<kKind, A>{A(delta), A(scale)}, static_cast<T*>(y), static_cast<const T*>(x),
                   static_cast<const T*>(t));
    });
  });
}

void difference_loss_backward(DifferenceLoss kind, double delta, double scale, const void* x, const void* t,
                              const void* g, bool g_per_element, void* dx, void* dt, int64_t n, DType dtype,
                              Stream stream) {
  HG_CHECK(n >= 0, "[difference_loss_backward] n = ", n, ", expected n >= 0");
  HG_CHECK(dx != nullptr || dt != nullptr, "[difference_loss_backward] dx and dt are both null; expected one");
  dispatch_floating_cuda(dtype, "difference_loss_backward", [&]<class T>() {
    using A = acc_t<T>;
    const T* xt = static_cast<const T*>(x);
    const T* tt = static_cast<const T*>(t);
    const T* gt = static_cast<const T*>(g);
    T* out = static_cast<T*>(dx != nullptr ? dx : dt);
    const A signed_scale = A(dx != nullptr ? scale : -scale);
    with_difference_loss(kind, [&]<DifferenceLoss kKind>() {
      if (g_per_element) {
        map_elements(stream, n, LossDerivativesPerElement<kKind, A>{A(delta), signed_scale}, out, xt, tt, gt);
      } else {
        map_elements(stream, n, LossDerivativesOfScalar<kKind, T>{A(delta), signed_scale, gt}, out, xt, tt);
      }
    });
    if (dx != nullptr && dt != nullptr)
      map_elements(stream, n, Negated<A>{}, static_cast<T*>(dt), static_cast<const T*>(dx));
  });
}

}  // namespace hg::kernels::cuda
