// The gradients of maximum, minimum and pow (declared and explained in binary_grads.h), composed from
// comparisons, where and arithmetic: backward-only code, so clarity over fusion.
#include "engine/ops/binary_grads.h"

#include "engine/ops.h"

namespace hg {

namespace {
Tensor as_values(const Tensor& mask, const Tensor& like) { return cast(mask, like.dtype()); }
}  // namespace

Tensor maximum_share(const Tensor& a, const Tensor& b) {
  return 1.0 - as_values(lt(a, b), a) - 0.5 * as_values(eq(a, b), a);
}

Tensor minimum_share(const Tensor& a, const Tensor& b) {
  return 1.0 - as_values(gt(a, b), a) - 0.5 * as_values(eq(a, b), a);
}

Tensor pow_grad_base(const Tensor& g, const Tensor& a, const Tensor& b) {
  return where(eq(b, 0.0), 0.0, g * b * pow(a, b - 1.0));
}

Tensor pow_grad_exponent(const Tensor& g, const Tensor& a, const Tensor& b) {
  return where(logical_and(eq(a, 0.0), ge(b, 0.0)), 0.0, g * pow(a, b) * log(a));
}

}  // namespace hg
