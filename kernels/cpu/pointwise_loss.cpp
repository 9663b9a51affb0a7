// pointwise_loss_forward / _backward on the CPU (the math: kernels/pointwise_loss.h).
//
// Parallel strategy: fixed chunks of kChunk elements spread over OpenMP threads (from
// kParallelMinElements on), so the results do not depend on the thread count. f32 and f64 compute in
// place, in loops the compiler vectorises (the loss kind is a template argument: no branch per
// element; logs and exps through glibc's libmvec: simd_math.h's vlog, vexp). Half types go through
// fp32 buffers on the stack (convert.h's SIMD conversions), except that the sum widens bf16 inline on
// AVX2+ builds (convert.h kFuseConversion): one pass. Every value is rounded to the dtype once.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/simd_math.h"
#include "kernels/dispatch.h"
#include "kernels/error.h"
#include "kernels/pointwise_loss.h"

namespace hg::kernels::cpu {
namespace {

constexpr int64_t kChunk = 2048;
constexpr int64_t kParallelMinElements = int64_t(1) << 15;

// The log and exp of kernels/pointwise_loss.h's math, vectorisable.
struct VectorLogExp {
  template <class A>
  static A log(A x) {
    return vlog(x);
  }
  template <class A>
  static A exp(A x) {
    return vexp(x);
  }
};

template <class T>
constexpr bool kStaged = std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;

// body(begin, count) over [0, n) in kChunk-element chunks.
template <class Body>
void for_each_chunk(int64_t n, const Body& body) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t c = 0; c < chunks; ++c) body(c * kChunk, std::min(kChunk, n - c * kChunk));
}

// The loops below read E (the operands' type, or float for a staged chunk) and compute in A.
template <PointwiseLoss kKind, class A, class E>
A sum_of_values(const E* __restrict x, const E* __restrict t, int64_t n, A delta) {
  A sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += pointwise_loss_value<kKind, VectorLogExp>(A(x[i]), A(t[i]), delta);
  return sum;
}

template <PointwiseLoss kKind, class A, class E>
void forward_values(const E* __restrict x, const E* __restrict t, E* __restrict y, int64_t n, A delta, A scale) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = E(scale * pointwise_loss_value<kKind, VectorLogExp>(A(x[i]), A(t[i]), delta));
}

// out[i] = scale g df/dx (or df/dt) for g = g[i] (kPerElement) or g[0].
template <PointwiseLoss kKind, bool kTarget, bool kPerElement, class A, class E>
void derivative_values(const E* __restrict x, const E* __restrict t, const E* __restrict g, E* __restrict out,
                       int64_t n, A delta, A scale) {
  const A g0 = A(g[0]);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i)
    out[i] = E(scale * (kPerElement ? A(g[i]) : g0) *
               pointwise_loss_derivative<kKind, kTarget, VectorLogExp>(A(x[i]), A(t[i]), delta));
}

template <PointwiseLoss kKind, bool kTarget, class A, class E>
void derivative_values(const E* x, const E* t, const E* g, bool per_element, E* out, int64_t n, A delta, A scale) {
  if (per_element) {
    derivative_values<kKind, kTarget, true>(x, t, g, out, n, delta, scale);
  } else {
    derivative_values<kKind, kTarget, false>(x, t, g, out, n, delta, scale);
  }
}

// dx = scale g df/dx and dt = scale g df/dt; either may be null.
template <PointwiseLoss kKind, class A, class E>
void backward_values(const E* x, const E* t, const E* g, bool per_element, E* dx, E* dt, int64_t n, A delta, A scale) {
  if (dx != nullptr) derivative_values<kKind, false>(x, t, g, per_element, dx, n, delta, scale);
  if (dt != nullptr) derivative_values<kKind, true>(x, t, g, per_element, dt, n, delta, scale);
}

// Whether the sum reads T's chunks through float buffers (f16; bf16 where it does not widen inline).
// The loops that write T (the values, the gradients) always stage: rounding to bf16 inline in them
// measured 6-40x slower than from_float's pass (the narrowing did not vectorise there).
template <class T>
constexpr bool kStagedChunks = kStaged<T> && !kFuseConversion<T>;

}  // namespace

void pointwise_loss_forward(PointwiseLoss kind, double delta, double scale, const void* x, const void* t, void* y,
                            int64_t n, DType dtype) {
  HG_CHECK(n >= 0, "[pointwise_loss_forward] n = ", n, ", expected n >= 0");
  dispatch_floating(dtype, "pointwise_loss_forward", [&]<class T>() {
    using A = acc_t<T>;
    const T* xt = static_cast<const T*>(x);
    const T* tt = static_cast<const T*>(t);
    T* yt = static_cast<T*>(y);
    with_pointwise_loss(kind, [&]<PointwiseLoss kKind>() {
      for_each_chunk(n, [&](int64_t begin, int64_t count) {
        if constexpr (kStaged<T>) {
          float xs[kChunk], ts[kChunk], ys[kChunk];
          to_float(xt + begin, xs, count);
          to_float(tt + begin, ts, count);
          forward_values<kKind>(xs, ts, ys, count, float(delta), float(scale));
          from_float(ys, yt + begin, count);
        } else {
          forward_values<kKind>(xt + begin, tt + begin, yt + begin, count, A(delta), A(scale));
        }
      });
    });
  });
}

void pointwise_loss_sum(PointwiseLoss kind, double delta, double scale, const void* x, const void* t, void* y,
                        int64_t n, DType dtype) {
  HG_CHECK(n >= 1, "[pointwise_loss_sum] n = ", n, ", expected n >= 1");
  dispatch_floating(dtype, "pointwise_loss_sum", [&]<class T>() {
    using A = acc_t<T>;
    const T* xt = static_cast<const T*>(x);
    const T* tt = static_cast<const T*>(t);
    std::vector<double> partial(size_t((n + kChunk - 1) / kChunk));
    with_pointwise_loss(kind, [&]<PointwiseLoss kKind>() {
      for_each_chunk(n, [&](int64_t begin, int64_t count) {
        if constexpr (kStagedChunks<T>) {
          float xs[kChunk], ts[kChunk];
          to_float(xt + begin, xs, count);
          to_float(tt + begin, ts, count);
          partial[size_t(begin / kChunk)] = sum_of_values<kKind>(xs, ts, count, float(delta));
        } else {
          partial[size_t(begin / kChunk)] = sum_of_values<kKind>(xt + begin, tt + begin, count, A(delta));
        }
      });
    });
    double total = 0;
    for (double p : partial) total += p;
    *static_cast<T*>(y) = T(A(scale * total));
  });
}

void pointwise_loss_backward(PointwiseLoss kind, double delta, double scale, const void* x, const void* t,
                             const void* g, bool g_per_element, void* dx, void* dt, int64_t n, DType dtype) {
  HG_CHECK(n >= 0, "[pointwise_loss_backward] n = ", n, ", expected n >= 0");
  HG_CHECK(dx != nullptr || dt != nullptr, "[pointwise_loss_backward] dx and dt are both null; expected one");
  dispatch_floating(dtype, "pointwise_loss_backward", [&]<class T>() {
    using A = acc_t<T>;
    const T* xt = static_cast<const T*>(x);
    const T* tt = static_cast<const T*>(t);
    const T* gt = static_cast<const T*>(g);
    T* dxt = static_cast<T*>(dx);
    T* dtt = static_cast<T*>(dt);
    with_pointwise_loss(kind, [&]<PointwiseLoss kKind>() {
      for_each_chunk(n, [&](int64_t begin, int64_t count) {
        if constexpr (kStaged<T>) {
          float xs[kChunk], ts[kChunk], gs[kChunk], dxs[kChunk], dts[kChunk];
          to_float(xt + begin, xs, count);
          to_float(tt + begin, ts, count);
          if (g_per_element) {
            to_float(gt + begin, gs, count);
          } else {
            gs[0] = float(gt[0]);
          }
          backward_values<kKind>(xs, ts, gs, g_per_element, dxt ? dxs : nullptr, dtt ? dts : nullptr, count,
                                 float(delta), float(scale));
          if (dxt) from_float(dxs, dxt + begin, count);
          if (dtt) from_float(dts, dtt + begin, count);
        } else {
          backward_values<kKind>(xt + begin, tt + begin, gt + (g_per_element ? begin : 0), g_per_element,
                                 dxt ? dxt + begin : nullptr, dtt ? dtt + begin : nullptr, count, A(delta), A(scale));
        }
      });
    });
  });
}

}  // namespace hg::kernels::cpu
