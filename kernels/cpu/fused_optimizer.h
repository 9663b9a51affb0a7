#pragma once
// The CPU driver of the fused optimizer steps (kernels/optimizer_kernels.h): one pass over n elements that
// runs a per-element update rule (kernels/sgd_math.h, adam_math.h, rmsprop_math.h, adagrad_math.h, lion_math.h) on
// theta, the gradient and K state values, as kernels/cpu/adamw.cpp's staged loop does for AdamW.
//
// The step's scalars (learning rate, skip flag, update count) follow kernels/optimizer_kernels.h.
// Parallel strategy: the n elements are cut into chunks of kOptimizerChunk and OpenMP spreads the chunks
// over threads (above kOptimizerParallelMin elements). Elements are independent, so the result is the
// same whatever the thread count. f32/f64 parameters are updated in place in one plain loop the compiler
// vectorises (AVX-512 with -march=native; each state array a restrict pointer read and written once per element);
// f16/bf16 ones are staged through float buffers a chunk at a time (convert.h's SIMD conversions): the
// gradient widened, theta taken from the master copy (or the parameter widened), and the result rounded
// to nearest even into the parameter.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/adamw_math.h"
#include "kernels/cpu/convert.h"
#include "kernels/dispatch.h"
#include "kernels/error.h"

namespace hg::kernels::cpu {

inline constexpr int64_t kOptimizerChunk = 2048;
inline constexpr int64_t kOptimizerParallelMin = int64_t(1) << 15;

template <class T, int K, class Rule>
void fused_optimizer_chunk(T* param, acc_t<T>* master, const T* grad, acc_t<T>* const* state, int64_t begin,
                           int64_t count, const Rule& rule) {
  using A = acc_t<T>;
  // The arrays never overlap: restrict pointers, one per state buffer, and `ivdep` on the loops. With three
  // state buffers GCC 12 left the loop scalar despite the restrict pointers ("no vectype for stmt" on the
  // parameter's load): AMSGrad and centered RMSprop with momentum ran at 14 cycles per element, 0.4x of
  // the stream triad; with ivdep they vectorise like the others.
  A* __restrict s0 = K > 0 ? state[0] + begin : nullptr;
  A* __restrict s1 = K > 1 ? state[1] + begin : nullptr;
  A* __restrict s2 = K > 2 ? state[2] + begin : nullptr;
  const auto element = [&](A& theta, A g, int64_t i) {
    A v[K > 0 ? K : 1];
    if constexpr (K > 0) v[0] = s0[i];
    if constexpr (K > 1) v[1] = s1[i];
    if constexpr (K > 2) v[2] = s2[i];
    rule(theta, g, v);
    if constexpr (K > 0) s0[i] = v[0];
    if constexpr (K > 1) s1[i] = v[1];
    if constexpr (K > 2) s2[i] = v[2];
  };
  if constexpr (std::is_same_v<T, A>) {
    T* __restrict p = param + begin;
    const T* __restrict g = grad + begin;
#pragma GCC ivdep
    for (int64_t i = 0; i < count; ++i) {
      A theta = p[i];
      element(theta, g[i], i);
      p[i] = theta;
    }
  } else {
    A widened[kOptimizerChunk];
    A g[kOptimizerChunk];
    A* __restrict theta = master != nullptr ? master + begin : widened;
    if (master == nullptr) to_float(param + begin, widened, count);
    to_float(grad + begin, g, count);
#pragma GCC ivdep
    for (int64_t i = 0; i < count; ++i) element(theta[i], g[i], i);
    from_float(theta, param + begin, count);
  }
}

// Update t = step[parity] + 1 of n elements (kernels/optimizer_kernels.h: the scalars' protocol): unless
// found_inf is set, rule = step.template rule<A>(lr, t), then rule(theta, g, v[K]) on every element; the
// count is recorded either way. `state` holds K non-null pointers to acc_t arrays of n elements (K may be
// 0: plain SGD keeps no state).
template <int K, class Step>
void fused_optimizer_step(const char* name, void* param, void* master, const void* grad, void* const* state, int64_t n,
                          DType dtype, const AdamWStepScalars& scalars, const Step& step) {
  HG_CHECK(n >= 0, "[", name, "] expected n >= 0, got ", n);
  HG_CHECK(scalars.step != nullptr && (scalars.parity == 0 || scalars.parity == 1), "[", name,
           "] expected a step count and parity 0 or 1, got ",
           scalars.step == nullptr ? "a null step pointer" : "parity ", scalars.parity);
  if (n > 0 && !adamw_skips(scalars)) {
    HG_CHECK(param != nullptr && grad != nullptr, "[", name, "] null param or grad pointer for n = ", n);
    for (int k = 0; k < K; ++k) HG_CHECK(state[k] != nullptr, "[", name, "] null state buffer ", k, " for n = ", n);
    dispatch_floating(dtype, name, [&]<class T>() {
      using A = acc_t<T>;
      constexpr bool kHalf = !std::is_same_v<T, A>;
      HG_CHECK(master == nullptr || kHalf, "[", name, "] a master copy is for f16/bf16 parameters; got one for ",
               dtype_name(dtype));
      const auto rule = step.template rule<A>(adamw_lr(scalars), adamw_next_step(scalars));
      A* s[K > 0 ? K : 1] = {};
      for (int k = 0; k < K; ++k) s[k] = static_cast<A*>(state[k]);
      auto* p = static_cast<T*>(param);
      auto* m = static_cast<A*>(master);
      auto* g = static_cast<const T*>(grad);
      const int64_t chunks = (n + kOptimizerChunk - 1) / kOptimizerChunk;
#pragma omp parallel for schedule(static) if (n >= kOptimizerParallelMin)
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t begin = c * kOptimizerChunk;
        fused_optimizer_chunk<T, K>(p, m, g, s, begin, std::min(kOptimizerChunk, n - begin), rule);
      }
    });
  }
  adamw_record_step(scalars);
  if (scalars.blocks_done != nullptr) adamw_settle_step(scalars);
}

}  // namespace hg::kernels::cpu
