#pragma once
// The CUDA driver of the fused optimizer steps (kernels/optimizer_kernels.h): one launch that runs a
// per-element update rule (kernels/sgd_math.h, adam_math.h, rmsprop_math.h, adagrad_math.h, lion_math.h; the very
// functions the CPU backend runs) on theta, the gradient and K state values.
//
// Parallel strategy: a grid-stride loop of kFlatThreads-thread blocks (at most kMaxFlatBlocks), one
// element per thread per iteration: consecutive threads touch consecutive elements of every array, so each
// warp's loads and stores of the parameter, gradient, master and each state buffer are coalesced (one
// 128-byte line per fp32 array per warp). Every element is read once and written once: the kernel moves
// the minimum bytes, in one pass. Elements are independent: the result does not depend on the launch shape.
// The step's scalars (kernels/optimizer_kernels.h): every thread reads the learning rate, the skip flag
// and the count and builds the rule's coefficients itself (a few double operations per thread, not per
// element); when the flag is set no thread touches an element. Thread 0 of block 0 records the count in the
// other slot, and with blocks_done the last block to finish settles it (kernels/cuda/adamw_step_count.h).
#include "kernels/adamw_math.h"
#include "kernels/cuda/adamw_step_count.h"
#include "kernels/cuda/device_math.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/cuda/launch.h"
#include "kernels/error.h"

namespace hg::kernels::cuda {

template <class A, int K>
struct OptimizerStatePointers {
  A* p[K > 0 ? K : 1];  // K = 0: plain SGD keeps no state; p[0] unused
};

template <class T, int K, bool kMaster, class Step>
__global__ void fused_optimizer_kernel(T* __restrict__ param, acc_t<T>* __restrict__ master, const T* __restrict__ grad,
                                       OptimizerStatePointers<acc_t<T>, K> state, int64_t n, AdamWStepScalars scalars,
                                       Step step) {
  using A = acc_t<T>;
  if (blockIdx.x == 0 && threadIdx.x == 0) adamw_record_step(scalars);  // the other slot: read by nobody here
  if (!adamw_skips(scalars)) {
    const auto rule = step.template rule<A>(adamw_lr(scalars), adamw_next_step(scalars));
    for (int64_t i = flat_worker(); i < n; i += flat_workers()) {
      A theta;
      if constexpr (kMaster) {
        theta = master[i];
      } else {
        theta = to_acc(param[i]);
      }
      A v[K > 0 ? K : 1];
      HG_UNROLL
      for (int k = 0; k < K; ++k) v[k] = state.p[k][i];
      rule(theta, to_acc(grad[i]), v);
      HG_UNROLL
      for (int k = 0; k < K; ++k) state.p[k][i] = v[k];
      if constexpr (kMaster) master[i] = theta;
      param[i] = from_acc<T>(theta);
    }
  }
  adamw_settle_step_in_last_block(scalars);
}

// Launches update t = step[parity] + 1 over n elements (kernels/optimizer_kernels.h: the scalars' protocol;
// n = 0 still records the count): every thread builds step.template rule<A>(lr, t) from the scalars it
// reads. `state` holds K non-null pointers to acc_t arrays of n elements (K may be 0).
template <int K, class Step>
void fused_optimizer_launch(const char* name, void* param, void* master, const void* grad, void* const* state,
                            int64_t n, DType dtype, const AdamWStepScalars& scalars, cudaStream_t stream,
                            const Step& step) {
  HG_CHECK(n >= 0, "[", name, "] expected n >= 0, got ", n);
  HG_CHECK(scalars.step != nullptr && (scalars.parity == 0 || scalars.parity == 1), "[", name,
           "] expected a step count (two slots, three with blocks_done) and parity 0 or 1");
  HG_CHECK(n == 0 || (param != nullptr && grad != nullptr), "[", name, "] null param or grad pointer for n = ", n);
  for (int k = 0; k < K; ++k)
    HG_CHECK(n == 0 || state[k] != nullptr, "[", name, "] null state buffer ", k, " for n = ", n);
  dispatch_floating_cuda(dtype, name, [&]<class T>() {
    using A = acc_t<T>;
    constexpr bool kHalf = !std::is_same_v<T, A>;
    HG_CHECK(master == nullptr || kHalf, "[", name, "] a master copy is for f16/bf16 parameters; got one for ",
             dtype_name(dtype));
    OptimizerStatePointers<A, K> s{};
    for (int k = 0; k < K; ++k) s.p[k] = static_cast<A*>(state[k]);
    T* p = static_cast<T*>(param);
    const T* g = static_cast<const T*>(grad);
    const dim3 grid = flat_grid(n == 0 ? 1 : n);
    if (master != nullptr) {
      launch(fused_optimizer_kernel<T, K, true, Step>, grid, dim3(kFlatThreads), 0, stream, p, static_cast<A*>(master),
             g, s, n, scalars, step);
    } else {
      launch(fused_optimizer_kernel<T, K, false, Step>, grid, dim3(kFlatThreads), 0, stream, p,
             static_cast<A*>(nullptr), g, s, n, scalars, step);
    }
  });
}

}  // namespace hg::kernels::cuda
