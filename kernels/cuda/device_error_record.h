#pragma once
// Device side of kernels/cuda/device_errors.h: how a kernel records a bad index in its device's
// error record, and the block-wide search for the first bad index. For kernels/cuda/*.cu only.
//
// Recording: the first writer wins. A thread claims the record with atomicCAS(state, 0 -> 1); only
// the claimant writes the fields, then fences and publishes state = 2. Every other writer -- of the
// same launch or a later one -- leaves the record alone, so the host sees the first error enqueued
// (in stream order) and a consistent (op, position, value, range). The search below makes "first"
// within one launch the smallest position, as the CPU backend names it.
#include "kernels/cuda/device_errors.h"
#include "kernels/cuda/device_math.h"

namespace hg::kernels::cuda {

HG_DEVICE void record_device_error(DeviceErrorRecord* record, DeviceErrorOp op, long long position,
                                   long long value, long long bound, long long ignore_index) {
  if (atomicCAS(&record->state, 0, 1) != 0) return;  // an earlier error is kept
  record->op = int(op);
  record->position = position;
  record->value = value;
  record->bound = bound;
  record->ignore_index = ignore_index;
  __threadfence();
  atomicExch(&record->state, 2);
}

struct MinOp {
  template <class V>
  HG_DEVICE V operator()(V a, V b) const {
    return b < a ? b : a;
  }
};

// The smallest i in [0, n) with bad(i), n when there is none; the same in every thread of the block
// (which all must call it: it has barriers). Each thread scans i = threadIdx.x, + blockDim.x, ...
// and stops at its first bad i (its smallest), then the block takes the minimum. `shared` holds 32.
template <class Bad>
HG_DEVICE long long block_first_bad(long long n, Bad bad, long long* shared) {
  long long first = n;
  for (long long i = threadIdx.x; i < n; i += blockDim.x) {
    if (bad(i)) {
      first = i;
      break;
    }
  }
  return block_reduce(first, MinOp{}, n, shared);
}

}  // namespace hg::kernels::cuda
