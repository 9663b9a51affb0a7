#pragma once
// The online (max, sum of exponentials) pair of softmax and cross entropy (Milakov & Gimelshein,
// "Online normalizer calculation for softmax", 2018): one pass over a row gives
//   m = max_c x[c]  and  s = sum_c exp(x[c] - m)
// by rescaling the running sum whenever a larger value arrives, and two partial pairs merge as
//   m = max(m_a, m_b),  s = s_a exp(m_a - m) + s_b exp(m_b - m).
// In A = acc_t<T> (fp32 for half types). NaN is never taken as the maximum but poisons s, so a NaN
// in a row makes its result NaN, as on the CPU.
#include "kernels/cuda/device_math.h"

namespace hg::kernels::cuda {

template <class A>
struct MaxSum {
  A m;
  A s;
};

template <class A>
HG_DEVICE MaxSum<A> max_sum_identity() {
  return {neg_infinity<A>(), A(0)};
}

template <class A>
HG_DEVICE MaxSum<A> shuffle_xor(MaxSum<A> v, int lane_mask) {
  return {shuffle_xor(v.m, lane_mask), shuffle_xor(v.s, lane_mask)};
}

// exp(from - to) for from <= to; exactly 1 when equal (also for two infinities of one sign, where
// the difference would be NaN).
template <class A>
HG_DEVICE A rescale(A from, A to) {
  return from == to ? A(1) : exp_acc(from - to);
}

struct MaxSumOp {
  template <class A>
  HG_DEVICE MaxSum<A> operator()(MaxSum<A> a, MaxSum<A> b) const {
    const A m = a.m > b.m ? a.m : b.m;
    return {m, a.s * rescale(a.m, m) + b.s * rescale(b.m, m)};
  }
};

// Adds one value to a running pair. -inf adds exp(-inf) = 0 (and must not meet m = -inf, which
// would give exp(NaN)).
template <class A>
HG_DEVICE void online_add(MaxSum<A>& acc, A v) {
  if (v > acc.m) {
    acc.s = acc.s * rescale(acc.m, v) + A(1);
    acc.m = v;
  } else if (v != neg_infinity<A>()) {
    acc.s += exp_acc(v - acc.m);
  }
}

}  // namespace hg::kernels::cuda
