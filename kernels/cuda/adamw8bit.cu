// The fused 8-bit AdamW step (bitsandbytes' block-wise 8-bit Adam, Dettmers et al. 2022).
//
// Math (kernels/adamw8bit_math.h), per quantisation block of kAdamW8BitBlock = 2048 elements:
//   m_i = signed_map[code_m_i] * absmax_m,  v_i = unsigned_map[code_v_i] * absmax_v      dequantise
//   theta_i, m_i, v_i <- adamw_update (kernels/adamw_math.h, fp32)                        AdamW at step t
//   absmax_m' = max_i |m_i|,  absmax_v' = max_i v_i                                       of the new block
//   code_m_i = quantise(m_i * (1 / absmax_m')), code_v_i likewise                         nearest map entry
// The per-element pieces are adamw8bit_math.h's HG_HOST_DEVICE functions, the very lines the CPU kernel
// runs; nvcc may fuse adamw_update's multiply-adds into fma where the CPU compiler does otherwise, so a
// new moment can differ by an ulp and, when it sits on a midpoint of the map, take the neighbouring code.
//
// Parallel strategy: one CUDA block of 256 threads per quantisation block. Thread x owns 8 elements, as
// two groups of 4 consecutive ones, at 4x and 1024 + 4x of the block: every warp access of a group is a
// contiguous 512 bytes (f32), 256 bytes (f16/bf16) or 128 bytes (codes), moved by one 128-, 64- or 32-bit
// load per thread when the arrays are aligned to 4 elements (else element by element). The four tables
// (two maps, two midpoint heaps: 4 KiB) are copied from global memory into shared memory by the block
// (4 floats per thread); the 8-step descent of the quantisation reads them there: its first five steps
// read within 32 consecutive floats (no bank conflict); the dequantisation's map reads are
// data-dependent. The new m, v of a thread's 8 elements stay in registers between the update and the
// requantisation; the two absmax are block reductions (warp butterflies + one shared slot per warp), a
// max, so independent of order. adamw8bit_update zeroes the moments of an element whose new m or v is
// not finite (theta kept), so the reductions see finite values; a block whose absmax is below FLT_MIN is
// stored as zero codes with absmax 0 (adamw8bit_inverse_scale, adamw8bit_stored_absmax).
//
// Capturable form (kernels/adamw_math.h AdamWStepScalars), exactly as adamw.cu: every thread reads lr,
// found_inf and the step count from device memory; when found_inf != 0 no element, code or absmax is
// touched. Thread 0 of block 0 writes the count after the call to the other slot; with blocks_done each
// block takes a ticket after a barrier and the last settles step[parity] and re-zeroes the counter.
// n = 0 launches one block, which only records the count.
#include <type_traits>

#include "kernels/adamw8bit_math.h"
#include "kernels/adamw_math.h"
#include "kernels/cuda/adamw_step_count.h"
#include "kernels/cuda/device_math.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/kernels_cuda.h"
#include "kernels/step_kernels.h"

namespace hg::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kGroup = 4;                        // consecutive elements a thread moves at once
constexpr int kGroups = 2;                       // groups per thread
constexpr int kGroupStride = kThreads * kGroup;  // 1024: from a thread's first group to its second
static_assert(kThreads * kGroup * kGroups == kAdamW8BitBlock, "a CUDA block is one quantisation block");
constexpr int kTableFloats = int(sizeof(AdamW8BitTables) / sizeof(float));
static_assert(kTableFloats % kThreads == 0, "the tables are copied in whole rounds of the block");

// The maps and their midpoints, built by the same constexpr function as the CPU's copy (same bits).
__device__ const AdamW8BitTables kDeviceTables = make_adamw8bit_tables();

struct AdamWHyper {
  double beta1, beta2, eps, weight_decay;
};

struct MaxOp {
  HG_DEVICE float operator()(float a, float b) const { return adamw8bit_absmax(a, b); }
};

template <class T>
struct Operands {
  T* param;
  float* master;  // nullable
  const T* grad;
  QuantizedMoments q;
  int64_t n;
  bool packed;  // every array aligned to kGroup elements: one load/store per group and array
};

template <class T, bool kMaster>
HG_DEVICE void adamw8bit_block(const Operands<T>& o, const AdamW8BitTables& t, const AdamWCoefficients<float>& c,
                               float* reduce_slots) {
  const int64_t block = blockIdx.x;
  const int64_t base = block * kAdamW8BitBlock;
  const float old_m = o.q.absmax_exp_avg[block], old_v = o.q.absmax_exp_avg_sq[block];
  float theta[kGroups][kGroup], m[kGroups][kGroup], v[kGroups][kGroup];
  float max_m = 0.0f, max_v = 0.0f;
  HG_UNROLL
  for (int q = 0; q < kGroups; ++q) {
    const int64_t i = base + q * kGroupStride + int64_t(threadIdx.x) * kGroup;
    if (o.packed && i + kGroup <= o.n) {
      const Pack<T, kGroup> g = load_pack<kGroup>(o.grad + i);
      const Pack<uint8_t, kGroup> cm = load_pack<kGroup>(o.q.exp_avg + i), cv = load_pack<kGroup>(o.q.exp_avg_sq + i);
      Pack<float, kGroup> th;
      if constexpr (kMaster) {
        th = load_pack<kGroup>(o.master + i);
      } else {
        const Pack<T, kGroup> p = load_pack<kGroup>(o.param + i);
        HG_UNROLL
        for (int k = 0; k < kGroup; ++k) th.v[k] = to_acc(p.v[k]);
      }
      HG_UNROLL
      for (int k = 0; k < kGroup; ++k) {
        theta[q][k] = th.v[k];
        adamw8bit_update(theta[q][k], to_acc(g.v[k]), cm.v[k], cv.v[k], old_m, old_v, t, c, m[q][k], v[q][k]);
        max_m = adamw8bit_absmax(max_m, m[q][k]);
        max_v = adamw8bit_absmax(max_v, v[q][k]);
      }
    } else {
      HG_UNROLL
      for (int k = 0; k < kGroup; ++k) {
        m[q][k] = v[q][k] = theta[q][k] = 0.0f;
        if (i + k >= o.n) continue;
        theta[q][k] = kMaster ? o.master[i + k] : to_acc(o.param[i + k]);
        adamw8bit_update(theta[q][k], to_acc(o.grad[i + k]), o.q.exp_avg[i + k], o.q.exp_avg_sq[i + k], old_m, old_v, t,
                         c, m[q][k], v[q][k]);
        max_m = adamw8bit_absmax(max_m, m[q][k]);
        max_v = adamw8bit_absmax(max_v, v[q][k]);
      }
    }
  }
  // Every thread has read old_m / old_v (the reductions' barriers) before thread 0 overwrites them.
  max_m = block_reduce(max_m, MaxOp{}, 0.0f, reduce_slots);
  max_v = block_reduce(max_v, MaxOp{}, 0.0f, reduce_slots);
  const float scale_m = adamw8bit_inverse_scale(max_m), scale_v = adamw8bit_inverse_scale(max_v);
  HG_UNROLL
  for (int q = 0; q < kGroups; ++q) {
    const int64_t i = base + q * kGroupStride + int64_t(threadIdx.x) * kGroup;
    if (o.packed && i + kGroup <= o.n) {
      Pack<uint8_t, kGroup> cm, cv;
      Pack<T, kGroup> p;
      Pack<float, kGroup> th;
      HG_UNROLL
      for (int k = 0; k < kGroup; ++k) {
        cm.v[k] = adamw8bit_quantise(m[q][k] * scale_m, t.signed_search);
        cv.v[k] = adamw8bit_quantise(v[q][k] * scale_v, t.unsigned_search);
        p.v[k] = from_acc<T>(theta[q][k]);
        th.v[k] = theta[q][k];
      }
      store_pack<kGroup>(o.q.exp_avg + i, cm);
      store_pack<kGroup>(o.q.exp_avg_sq + i, cv);
      store_pack<kGroup>(o.param + i, p);
      if constexpr (kMaster) store_pack<kGroup>(o.master + i, th);
    } else {
      HG_UNROLL
      for (int k = 0; k < kGroup; ++k) {
        if (i + k >= o.n) continue;
        o.q.exp_avg[i + k] = adamw8bit_quantise(m[q][k] * scale_m, t.signed_search);
        o.q.exp_avg_sq[i + k] = adamw8bit_quantise(v[q][k] * scale_v, t.unsigned_search);
        o.param[i + k] = from_acc<T>(theta[q][k]);
        if constexpr (kMaster) o.master[i + k] = theta[q][k];
      }
    }
  }
  if (threadIdx.x == 0) {
    o.q.absmax_exp_avg[block] = adamw8bit_stored_absmax(max_m);
    o.q.absmax_exp_avg_sq[block] = adamw8bit_stored_absmax(max_v);
  }
}

template <class T, bool kMaster>
__global__ void __launch_bounds__(kThreads) adamw8bit_kernel(Operands<T> o, AdamWStepScalars s, AdamWHyper h) {
  __shared__ AdamW8BitTables tables;
  __shared__ float reduce_slots[kThreads / kWarpSize];
  if (blockIdx.x == 0 && threadIdx.x == 0) adamw_record_step(s);  // the other slot: read by nobody here
  if (!adamw_skips(s) && o.n > 0) {
    const float* source = reinterpret_cast<const float*>(&kDeviceTables);
    float* target = reinterpret_cast<float*>(&tables);
    HG_UNROLL
    for (int k = 0; k < kTableFloats / kThreads; ++k)
      target[k * kThreads + threadIdx.x] = source[k * kThreads + threadIdx.x];
    const AdamWCoefficients<float> c =
        adamw_coefficients<float>(adamw_lr(s), h.beta1, h.beta2, h.eps, h.weight_decay, adamw_next_step(s));
    __syncthreads();
    adamw8bit_block<T, kMaster>(o, tables, c, reduce_slots);
  }
  adamw_settle_step_in_last_block(s);
}

bool aligned(const void* p, size_t element) {
  return p == nullptr || reinterpret_cast<uintptr_t>(p) % (kGroup * element) == 0;
}

}  // namespace

void adamw8bit_step_device(void* param, void* master, const void* grad, const QuantizedMoments& moments, int64_t n,
                           const AdamWStepScalars& scalars, double beta1, double beta2, double eps, double weight_decay,
                           DType dtype, Stream stream) {
  HG_CHECK(n >= 0, "[adamw8bit_step_device] expected n >= 0, got ", n);
  HG_CHECK(scalars.step != nullptr && (scalars.parity == 0 || scalars.parity == 1),
           "[adamw8bit_step_device] expected a step count (two slots, three with blocks_done) and parity 0 or 1");
  HG_CHECK(dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16,
           "[adamw8bit_step_device] expected a parameter dtype f32, f16 or bf16, got ", dtype_name(dtype));
  HG_CHECK(n == 0 || (param && grad), "[adamw8bit_step_device] null param or grad pointer for n = ", n);
  HG_CHECK(n == 0 || (moments.exp_avg && moments.exp_avg_sq && moments.absmax_exp_avg && moments.absmax_exp_avg_sq),
           "[adamw8bit_step_device] null quantised moment pointer (codes of m and v, and their absmax arrays are all "
           "required) for n = ",
           n);
  constexpr int64_t kMaxGrid = 2147483647;  // gridDim.x's limit
  HG_CHECK(adamw8bit_blocks(n) <= kMaxGrid, "[adamw8bit_step_device] n = ", n, " needs ", adamw8bit_blocks(n),
           " quantisation blocks of ", kAdamW8BitBlock, " elements, one CUDA block each; expected at most ", kMaxGrid,
           " (n <= ", kMaxGrid * kAdamW8BitBlock, ")");
  dispatch_floating_cuda(dtype, "adamw8bit_step_device", [&]<class T>() {
    if constexpr (!std::is_same_v<T, double>) {
      const bool packed = aligned(param, sizeof(T)) && aligned(grad, sizeof(T)) && aligned(master, sizeof(float)) &&
                          aligned(moments.exp_avg, 1) && aligned(moments.exp_avg_sq, 1);
      const Operands<T> o{
          static_cast<T*>(param), static_cast<float*>(master), static_cast<const T*>(grad), moments, n, packed};
      const AdamWHyper h{beta1, beta2, eps, weight_decay};
      const dim3 grid(unsigned(n == 0 ? 1 : adamw8bit_blocks(n)));  // n = 0 still records the count
      if (master != nullptr) {
        launch(adamw8bit_kernel<T, true>, grid, dim3(kThreads), 0, stream, o, scalars, h);
      } else {
        launch(adamw8bit_kernel<T, false>, grid, dim3(kThreads), 0, stream, o, scalars, h);
      }
    }
  });
}

}  // namespace hg::kernels::cuda
