// pointwise_loss_forward / _backward on CUDA (the math: kernels/pointwise_loss.h).
//
// pointwise_loss_sum is that forward into a workspace (workspace.h: the caching allocator, no runtime
// call) and the reduce kernel over it: two launches, where the CPU makes one pass.
//
// Parallel strategy: map_elements (map.h): a grid-stride loop in which a thread owns one 16-byte pack
// of every operand (128-bit loads and store) when all share their alignment, single elements for the
// head and tail; the loss kind is a template argument, so each kind is its own kernel with no branch
// per element. A reduced loss's upstream gradient is one device value, g[0], read by every thread (a
// broadcast load served from L1), so the backward makes no host read and stays capturable. dx and dt
// are one map each (the engine asks for dt only when the target needs a gradient).
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/cuda/map.h"
#include "kernels/cuda/workspace.h"
#include "kernels/kernels_cuda.h"
#include "kernels/pointwise_loss.h"

namespace hg::kernels::cuda {
namespace {

template <PointwiseLoss kKind, class A>
struct LossValues {
  A delta, scale;
  HG_DEVICE A operator()(const A* v) const { return scale * pointwise_loss_value<kKind>(v[0], v[1], delta); }
};

// Inputs (x, t, g): one gradient per element.
template <PointwiseLoss kKind, bool kTarget, class A>
struct LossDerivativesPerElement {
  A delta, scale;
  HG_DEVICE A operator()(const A* v) const {
    return scale * v[2] * pointwise_loss_derivative<kKind, kTarget>(v[0], v[1], delta);
  }
};

// Inputs (x, t); g[0] the reduced loss's gradient, in device memory.
template <PointwiseLoss kKind, bool kTarget, class T>
struct LossDerivativesOfScalar {
  acc_t<T> delta, scale;
  const T* g;
  HG_DEVICE acc_t<T> operator()(const acc_t<T>* v) const {
    return scale * to_acc(g[0]) * pointwise_loss_derivative<kKind, kTarget>(v[0], v[1], delta);
  }
};

template <PointwiseLoss kKind, bool kTarget, class T>
void enqueue_derivatives(const T* x, const T* t, const T* g, bool g_per_element, T* out, int64_t n, double delta,
                         double scale, Stream stream) {
  using A = acc_t<T>;
  if (g_per_element) {
    map_elements(stream, n, LossDerivativesPerElement<kKind, kTarget, A>{A(delta), A(scale)}, out, x, t, g);
  } else {
    map_elements(stream, n, LossDerivativesOfScalar<kKind, kTarget, T>{A(delta), A(scale), g}, out, x, t);
  }
}

}  // namespace

void pointwise_loss_forward(PointwiseLoss kind, double delta, double scale, const void* x, const void* t, void* y,
                            int64_t n, DType dtype, Stream stream) {
  HG_CHECK(n >= 0, "[pointwise_loss_forward] n = ", n, ", expected n >= 0");
  dispatch_floating_cuda(dtype, "pointwise_loss_forward", [&]<class T>() {
    using A = acc_t<T>;
    with_pointwise_loss(kind, [&]<PointwiseLoss kKind>() {
      map_elements(stream, n, LossValues<kKind, A>{A(delta), A(scale)}, static_cast<T*>(y), static_cast<const T*>(x),
                   static_cast<const T*>(t));
    });
  });
}

void pointwise_loss_sum(PointwiseLoss kind, double delta, double scale, const void* x, const void* t, void* y,
                        int64_t n, DType dtype, Stream stream) {
  HG_CHECK(n >= 1, "[pointwise_loss_sum] n = ", n, ", expected n >= 1");
  const Workspace values(size_t(n) * dtype_size(dtype), stream);
  pointwise_loss_forward(kind, delta, 1.0, x, t, values.as<void>(), n, dtype, stream);
  reduce(ReduceOp::Sum, values.as<void>(), y, nullptr, 1, n, 1, scale, dtype, stream);
}

void pointwise_loss_backward(PointwiseLoss kind, double delta, double scale, const void* x, const void* t,
                             const void* g, bool g_per_element, void* dx, void* dt, int64_t n, DType dtype,
                             Stream stream) {
  HG_CHECK(n >= 0, "[pointwise_loss_backward] n = ", n, ", expected n >= 0");
  HG_CHECK(dx != nullptr || dt != nullptr, "[pointwise_loss_backward] dx and dt are both null; expected one");
  dispatch_floating_cuda(dtype, "pointwise_loss_backward", [&]<class T>() {
    const T* xt = static_cast<const T*>(x);
    const T* tt = static_cast<const T*>(t);
    const T* gt = static_cast<const T*>(g);
    with_pointwise_loss(kind, [&]<PointwiseLoss kKind>() {
      if (dx != nullptr)
        enqueue_derivatives<kKind, false>(xt, tt, gt, g_per_element, static_cast<T*>(dx), n, delta, scale, stream);
      if (dt != nullptr)
        enqueue_derivatives<kKind, true>(xt, tt, gt, g_per_element, static_cast<T*>(dt), n, delta, scale, stream);
    });
  });
}

}  // namespace hg::kernels::cuda
