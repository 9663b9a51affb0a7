// The fused AdamW step: one pass over parameter, gradient and both moments (and the master copy).
//
// Math (kernels/adamw_math.h, PyTorch's AdamW), at step t >= 1:
//   theta *= 1 - lr*lambda;  m = beta1 m + (1-beta1) g;  v = beta2 v + (1-beta2) g^2;
//   theta -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps).
// The step's scalars are computed once on the host in double (adamw_coefficients) and passed by
// value; each element then runs adamw_update, the very function the CPU backend runs, in A =
// acc_t<T>. The moments (and the master copy) are in A; theta comes from the parameter (converted on
// load, rounded once on store) or, when master is given (mixed precision), from master, and the
// parameter receives master's rounding. nvcc may fuse the multiply-adds of adamw_update into fma, so
// results agree with the CPU's to an ulp or so, not always to the bit.
//
// adamw_step_device (the capturable form, kernels/adamw_math.h AdamWStepScalars): every thread reads
// lr, found_inf and the step count from device memory and builds the coefficients itself (a few
// double operations per thread, not per element); when found_inf != 0 no thread touches an element.
// Thread 0 of block 0 writes the count after this call to the other slot, which no thread of this
// launch reads. With a blocks_done counter, each block takes a ticket when it is done (after a barrier:
// its threads have read the current count), and the block that takes the last one writes the new
// count into the current slot itself (step[parity] + 1, or unchanged when skipped: it depends on no
// other block's write) and re-zeroes the counter: the count is settled in the same launch (the step of a
// GPT used to spend one extra copy launch per parameter on it).
//
// Parallel strategy: a grid-stride loop in which a thread owns four consecutive elements. When every
// array is aligned to four of its elements, each is moved with one load and one store per array
// (128-bit for f32 and for the fp32 moments of half parameters, 64-bit for half parameters and
// gradients); otherwise element by element. Elements are independent: the result does not depend
// on the launch shape.
#include "kernels/adamw_math.h"
#include "kernels/cuda/adamw_step_count.h"
#include "kernels/cuda/device_math.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/kernels_cuda.h"
#include "kernels/step_kernels.h"

namespace hg::kernels::cuda {
namespace {

constexpr int kGroup = 4;

template <class T, bool kMaster>
HG_DEVICE void adamw_elements(T* __restrict__ param, acc_t<T>* __restrict__ master, const T* __restrict__ grad,
                              acc_t<T>* __restrict__ exp_avg, acc_t<T>* __restrict__ exp_avg_sq, int64_t n,
                              const AdamWCoefficients<acc_t<T>>& c, bool packed) {
  using A = acc_t<T>;
  const int64_t groups = (n + kGroup - 1) / kGroup;
  for (int64_t q = flat_worker(); q < groups; q += flat_workers()) {
    const int64_t i = q * kGroup;
    if (packed && i + kGroup <= n) {
      Pack<T, kGroup> p = load_pack<kGroup>(param + i);
      const Pack<T, kGroup> g = load_pack<kGroup>(grad + i);
      Pack<A, kGroup> m = load_pack<kGroup>(exp_avg + i), v = load_pack<kGroup>(exp_avg_sq + i);
      Pack<A, kGroup> theta;
      if constexpr (kMaster) theta = load_pack<kGroup>(master + i);
      HG_UNROLL
      for (int k = 0; k < kGroup; ++k) {
        if constexpr (!kMaster) theta.v[k] = to_acc(p.v[k]);
        adamw_update(theta.v[k], to_acc(g.v[k]), m.v[k], v.v[k], c);
        p.v[k] = from_acc<T>(theta.v[k]);
      }
      store_pack<kGroup>(param + i, p);
      store_pack<kGroup>(exp_avg + i, m);
      store_pack<kGroup>(exp_avg_sq + i, v);
      if constexpr (kMaster) store_pack<kGroup>(master + i, theta);
    } else {
      for (int64_t k = i; k < n && k < i + kGroup; ++k) {
        A theta = kMaster ? master[k] : to_acc(param[k]);
        A mk = exp_avg[k], vk = exp_avg_sq[k];
        adamw_update(theta, to_acc(grad[k]), mk, vk, c);
        exp_avg[k] = mk;
        exp_avg_sq[k] = vk;
        if constexpr (kMaster) master[k] = theta;
        param[k] = from_acc<T>(theta);
      }
    }
  }
}

template <class T, bool kMaster>
__global__ void adamw_kernel(T* __restrict__ param, acc_t<T>* __restrict__ master, const T* __restrict__ grad,
                             acc_t<T>* __restrict__ exp_avg, acc_t<T>* __restrict__ exp_avg_sq, int64_t n,
                             AdamWCoefficients<acc_t<T>> c, bool packed) {
  adamw_elements<T, kMaster>(param, master, grad, exp_avg, exp_avg_sq, n, c, packed);
}

struct AdamWHyper {
  double beta1, beta2, eps, weight_decay;
};

template <class T, bool kMaster>
__global__ void adamw_device_kernel(T* __restrict__ param, acc_t<T>* __restrict__ master, const T* __restrict__ grad,
                                    acc_t<T>* __restrict__ exp_avg, acc_t<T>* __restrict__ exp_avg_sq, int64_t n,
                                    AdamWStepScalars s, AdamWHyper h, bool packed) {
  if (blockIdx.x == 0 && threadIdx.x == 0) adamw_record_step(s);  // the other slot: read by nobody here
  if (!adamw_skips(s)) {
    const AdamWCoefficients<acc_t<T>> c =
        adamw_coefficients<acc_t<T>>(adamw_lr(s), h.beta1, h.beta2, h.eps, h.weight_decay, adamw_next_step(s));
    adamw_elements<T, kMaster>(param, master, grad, exp_avg, exp_avg_sq, n, c, packed);
  }
  adamw_settle_step_in_last_block(s);
}

bool all_aligned(const void* param, const void* master, const void* grad, const void* m, const void* v, size_t t,
                 size_t a) {
  const auto aligned = [](const void* p, size_t element) {
    return p == nullptr || reinterpret_cast<uintptr_t>(p) % (kGroup * element) == 0;
  };
  return aligned(param, t) && aligned(grad, t) && aligned(m, a) && aligned(v, a) && aligned(master, a);
}

}  // namespace

void adamw_step(void* param, void* master, const void* grad, void* exp_avg, void* exp_avg_sq, int64_t n, double lr,
                double beta1, double beta2, double eps, double weight_decay, int64_t step, DType dtype, Stream stream) {
  HG_CHECK(n >= 0, "[adamw_step] expected n >= 0, got ", n);
  HG_CHECK(step >= 1, "[adamw_step] expected step >= 1 (the first update is step 1), got ", step);
  if (n == 0) return;
  HG_CHECK(param && grad && exp_avg && exp_avg_sq, "[adamw_step] null param, grad or moment pointer for n = ", n);
  dispatch_floating_cuda(dtype, "adamw_step", [&]<class T>() {
    using A = acc_t<T>;
    const AdamWCoefficients<A> c = adamw_coefficients<A>(lr, beta1, beta2, eps, weight_decay, step);
    const auto aligned = [](const void* p, size_t element) {
      return p == nullptr || reinterpret_cast<uintptr_t>(p) % (kGroup * element) == 0;
    };
    const bool packed = aligned(param, sizeof(T)) && aligned(grad, sizeof(T)) && aligned(exp_avg, sizeof(A)) &&
                        aligned(exp_avg_sq, sizeof(A)) && aligned(master, sizeof(A));
    const dim3 grid = flat_grid((n + kGroup - 1) / kGroup);
    T* p = static_cast<T*>(param);
    const T* g = static_cast<const T*>(grad);
    A* m = static_cast<A*>(exp_avg);
    A* v = static_cast<A*>(exp_avg_sq);
    if (master != nullptr) {
      launch(adamw_kernel<T, true>, grid, dim3(kFlatThreads), 0, stream, p, static_cast<A*>(master), g, m, v, n, c,
             packed);
    } else {
      launch(adamw_kernel<T, false>, grid, dim3(kFlatThreads), 0, stream, p, static_cast<A*>(nullptr), g, m, v, n, c,
             packed);
    }
  });
}

void adamw_step_device(void* param, void* master, const void* grad, void* exp_avg, void* exp_avg_sq, int64_t n,
                       const AdamWStepScalars& scalars, double beta1, double beta2, double eps, double weight_decay,
                       DType dtype, Stream stream) {
  HG_CHECK(n >= 0, "[adamw_step_device] expected n >= 0, got ", n);
  HG_CHECK(scalars.step != nullptr && (scalars.parity == 0 || scalars.parity == 1),
           "[adamw_step_device] expected a step count (two slots, three with blocks_done) and parity 0 or 1");
  HG_CHECK(n == 0 || (param && grad && exp_avg && exp_avg_sq),
           "[adamw_step_device] null param, grad or moment pointer for n = ", n);
  dispatch_floating_cuda(dtype, "adamw_step_device", [&]<class T>() {
    using A = acc_t<T>;
    const bool packed = all_aligned(param, master, grad, exp_avg, exp_avg_sq, sizeof(T), sizeof(A));
    const dim3 grid = flat_grid(n == 0 ? 1 : (n + kGroup - 1) / kGroup);  // n = 0 still records the count
    T* p = static_cast<T*>(param);
    const T* g = static_cast<const T*>(grad);
    A* m = static_cast<A*>(exp_avg);
    A* v = static_cast<A*>(exp_avg_sq);
    const AdamWHyper h{beta1, beta2, eps, weight_decay};
    if (master != nullptr) {
      launch(adamw_device_kernel<T, true>, grid, dim3(kFlatThreads), 0, stream, p, static_cast<A*>(master), g, m, v, n,
             scalars, h, packed);
    } else {
      launch(adamw_device_kernel<T, false>, grid, dim3(kFlatThreads), 0, stream, p, static_cast<A*>(nullptr), g, m, v,
             n, scalars, h, packed);
    }
  });
}

}  // namespace hg::kernels::cuda
