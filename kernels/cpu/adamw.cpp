// The fused AdamW step on the CPU: one pass over parameter, gradient and both moments.
//
// Math (kernels/adamw_math.h, PyTorch's AdamW), at step t >= 1:
//   theta *= 1 - lr*lambda;  m = beta1 m + (1-beta1) g;  v = beta2 v + (1-beta2) g^2;
//   theta -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps).
// Everything is computed in acc_t (float; double for f64). The moments are stored in acc_t; theta
// comes from the parameter (converted on load, rounded once on store) or, when a master copy is
// given, from the master copy (the parameter then receives the master's rounding).
//
// Where the CPU has AVX2 or AVX-512, f32 parameters and half parameters with a master copy run
// instead through adamw_offload_step's fused vector pass (the same math; see adamw_step below).
//
// Parallel strategy of the staged loop: the n elements are cut into chunks of kChunk and OpenMP
// spreads the chunks over threads (above kParallelMinElements). Elements are independent, so the
// result is the same whatever the thread count. Half types are staged through float buffers a chunk
// at a time, so the update loop is a plain float loop the compiler vectorises (sqrt and division).
#include <algorithm>
#include <type_traits>

#include "kernels/adamw_math.h"
#include "kernels/cpu/convert.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "kernels/step_kernels.h"

namespace hg::kernels::cpu {
namespace {

constexpr int64_t kChunk = 2048;
constexpr int64_t kParallelMinElements = int64_t(1) << 15;

template <class T, bool kMaster>
void adamw_chunk(T* __restrict param, acc_t<T>* __restrict master, const T* __restrict grad, acc_t<T>* __restrict m,
                 acc_t<T>* __restrict v, int64_t count, const AdamWCoefficients<acc_t<T>>& coefficients) {
  using A = acc_t<T>;
  const AdamWCoefficients<A> c = coefficients;
  if constexpr (std::is_same_v<T, A>) {
    for (int64_t i = 0; i < count; ++i) {
      A theta = kMaster ? master[i] : param[i];
      A mi = m[i];
      A vi = v[i];
      adamw_update(theta, grad[i], mi, vi, c);
      m[i] = mi;
      v[i] = vi;
      if constexpr (kMaster) master[i] = theta;
      param[i] = theta;
    }
  } else {
    // f16/bf16 loads and stores through convert.h's SIMD conversions. With master weights the update
    // runs on the master copy in place; without, on the parameters widened into `widened`.
    A widened[kChunk];
    A g[kChunk];
    A* theta = kMaster ? master : widened;
    if constexpr (!kMaster) to_float(param, widened, count);
    to_float(grad, g, count);
    for (int64_t i = 0; i < count; ++i) {
      A mi = m[i];
      A vi = v[i];
      adamw_update(theta[i], g[i], mi, vi, c);
      m[i] = mi;
      v[i] = vi;
    }
    from_float(theta, param, count);
  }
}

template <class T, bool kMaster>
void adamw_all(T* param, acc_t<T>* master, const T* grad, acc_t<T>* m, acc_t<T>* v, int64_t n,
               const AdamWCoefficients<acc_t<T>>& c) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t k = 0; k < chunks; ++k) {
    const int64_t begin = k * kChunk;
    const int64_t count = std::min(kChunk, n - begin);
    adamw_chunk<T, kMaster>(param + begin, kMaster ? master + begin : nullptr, grad + begin, m + begin, v + begin,
                            count, c);
  }
}

}  // namespace

void adamw_step(void* param, void* master, const void* grad, void* exp_avg, void* exp_avg_sq, int64_t n, double lr,
                double beta1, double beta2, double eps, double weight_decay, int64_t step, DType dtype) {
  HG_CHECK(n >= 0, "[adamw_step] expected n >= 0, got ", n);
  HG_CHECK(step >= 1, "[adamw_step] expected step >= 1 (the first update is step 1), got ", step);
  if (n == 0) return;
  HG_CHECK(param && grad && exp_avg && exp_avg_sq, "[adamw_step] null param, grad or moment pointer for n = ", n);
  // f32 parameters, and half ones with a master copy, take the optimizer-offload kernel's one fused
  // SIMD pass (adamw_offload.cpp) when the CPU has AVX2 or AVX-512: the gradient widened and the
  // parameter rounded in registers. The staged loop below keeps f64, half parameters without a master
  // copy and CPUs without those vectors. (Staged, a bf16 step with a master copy took 1.9x the f32
  // step's time for the same 28 bytes per parameter: the conversion passes and the update pass took
  // turns at the memory instead of overlapping.)
  const bool fused = adamw_offload_best_isa() != AdamWIsa::scalar &&
                     (dtype == DType::f32 || ((dtype == DType::f16 || dtype == DType::bf16) && master != nullptr));
  if (fused) {
    adamw_offload_step(master ? static_cast<float*>(master) : static_cast<float*>(param), grad, dtype,
                       static_cast<float*>(exp_avg), static_cast<float*>(exp_avg_sq), master ? param : nullptr, dtype,
                       n, lr, beta1, beta2, eps, weight_decay, step);
    return;
  }
  dispatch_floating(dtype, "adamw_step", [&]<class T>() {
    using A = acc_t<T>;
    const auto c = adamw_coefficients<A>(lr, beta1, beta2, eps, weight_decay, step);
    auto* p = static_cast<T*>(param);
    auto* g = static_cast<const T*>(grad);
    auto* m = static_cast<A*>(exp_avg);
    auto* v = static_cast<A*>(exp_avg_sq);
    if (master) {
      adamw_all<T, true>(p, static_cast<A*>(master), g, m, v, n, c);
    } else {
      adamw_all<T, false>(p, nullptr, g, m, v, n, c);
    }
  });
}

}  // namespace hg::kernels::cpu

namespace hg::kernels::cpu {

// The capturable form (kernels/adamw_math.h): the scalars are read from (host) memory when called,
// and the update is adamw_step's, so the two give the same bits.
void adamw_step_device(void* param, void* master, const void* grad, void* exp_avg, void* exp_avg_sq, int64_t n,
                       const AdamWStepScalars& s, double beta1, double beta2, double eps, double weight_decay,
                       DType dtype) {
  HG_CHECK(n >= 0, "[adamw_step_device] expected n >= 0, got ", n);
  HG_CHECK(s.step != nullptr && (s.parity == 0 || s.parity == 1), "[adamw_step_device] expected a step count "
           "and parity 0 or 1, got ", s.step == nullptr ? "a null step pointer" : "parity ", s.parity);
  if (!adamw_skips(s) && n > 0)
    adamw_step(param, master, grad, exp_avg, exp_avg_sq, n, adamw_lr(s), beta1, beta2, eps, weight_decay,
               adamw_next_step(s), dtype);
  adamw_record_step(s);
  if (s.blocks_done != nullptr) adamw_settle_step(s);
}

}  // namespace hg::kernels::cpu
