// The fused 8-bit AdamW step on the CPU (bitsandbytes' block-wise 8-bit Adam): the device form
// adamw8bit_step_device and the optimizer-offload form adamw8bit_offload_step.
//
// Math (kernels/adamw8bit_math.h), per quantisation block of kAdamW8BitBlock elements: dequantise
// m = signed_map[code] * absmax_m, v = unsigned_map[code] * absmax_v; the AdamW update of adamw_step
// in fp32 (kernels/adamw_math.h adamw_update); absmax_m = max |m|, absmax_v = max v of the updated
// block; requantise each element to the nearest map entry of m / absmax_m (v / absmax_v).
//
// Strategy: a block is the unit of work (its absmax couples its elements). OpenMP spreads whole blocks
// over threads, so the result does not depend on the thread count. Per block, theta (from master or
// the parameter) and g are staged as float, the update runs over the staged block keeping the new m,
// v in two float buffers (16 KiB), then a second loop requantises them. The block step is the shared
// scalar code of adamw8bit_math.h, or its AVX-512 form (kernels/cpu/adamw8bit_avx512.cpp), chosen once
// at run time; the quantisation codes of the two are identical for identical inputs.
#include <algorithm>

#include "kernels/adamw8bit_math.h"
#include "kernels/cpu/adamw8bit_block.h"
#include "kernels/error.h"
#include "kernels/half.h"
#include "kernels/step_kernels.h"

namespace hg::kernels::cpu {
namespace {

constexpr int64_t kBlock = kAdamW8BitBlock;
// Below this many elements the call stays on the calling thread.
constexpr int64_t kParallelMinElements = int64_t(1) << 15;

AdamWIsa g_isa_override = AdamWIsa::avx512;  // the widest allowed; clamped to what the CPU has

AdamW8BitBlockFn block_function() {
  const AdamWIsa isa = std::min(g_isa_override, adamw8bit_best_isa());
  return isa == AdamWIsa::avx512 ? adamw8bit_block_avx512 : adamw8bit_block_scalar;
}

// out[i] = float(p[begin + i]) for i < count: the dtype switch once per block, so each loop is plain.
template <class T>
void widen(const T* __restrict p, float* __restrict out, int64_t count) {
  for (int64_t i = 0; i < count; ++i) out[i] = float(p[i]);
}

void load_block(const void* p, DType dtype, int64_t begin, int64_t count, float* out) {
  switch (dtype) {
    case DType::f16:
      widen(static_cast<const half*>(p) + begin, out, count);
      break;
    case DType::bf16:
      widen(static_cast<const bfloat16*>(p) + begin, out, count);
      break;
    default:
      widen(static_cast<const float*>(p) + begin, out, count);
      break;
  }
}

// p[begin + i] = round(x[i]) to the dtype (half.h's round to nearest even).
template <class T>
void narrow(const float* __restrict x, T* __restrict p, int64_t count) {
  for (int64_t i = 0; i < count; ++i) p[i] = T(x[i]);
}

void store_block(void* p, DType dtype, int64_t begin, int64_t count, const float* x) {
  switch (dtype) {
    case DType::f16:
      narrow(x, static_cast<half*>(p) + begin, count);
      break;
    case DType::bf16:
      narrow(x, static_cast<bfloat16*>(p) + begin, count);
      break;
    default:
      narrow(x, static_cast<float*>(p) + begin, count);
      break;
  }
}

bool half_or_f32(DType d) { return d == DType::f32 || d == DType::f16 || d == DType::bf16; }

// Where a call's theta comes from and goes to, and its gradient.
struct Operands {
  float* master;  // nullable: theta then comes from param
  void* param;    // nullable when master is given (the offload form's param_out)
  DType param_dtype;
  const void* grad;
  DType grad_dtype;
  float grad_scale;  // 1 in the device form (no multiply then)
};

void step_all(const Operands& o, const QuantizedMoments& q, int64_t n, const AdamWCoefficients<float>& c) {
  const AdamW8BitBlockFn block = block_function();
  const int64_t blocks = adamw8bit_blocks(n);
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kBlock;
    const int64_t count = std::min(kBlock, n - begin);
    alignas(64) float theta[kBlock];
    alignas(64) float g[kBlock];
    if (o.master) {
      load_block(o.master, DType::f32, begin, count, theta);
    } else {
      load_block(o.param, o.param_dtype, begin, count, theta);
    }
    load_block(o.grad, o.grad_dtype, begin, count, g);
    if (o.grad_scale != 1.0f)
      for (int64_t i = 0; i < count; ++i) g[i] *= o.grad_scale;
    block(theta, g, q.exp_avg + begin, q.exp_avg_sq + begin, q.absmax_exp_avg + b, q.absmax_exp_avg_sq + b, count, c);
    if (o.master) store_block(o.master, DType::f32, begin, count, theta);
    if (o.param) store_block(o.param, o.param_dtype, begin, count, theta);
  }
}

void check_moments(const char* what, const QuantizedMoments& q, int64_t n) {
  HG_CHECK(q.exp_avg && q.exp_avg_sq && q.absmax_exp_avg && q.absmax_exp_avg_sq, "[", what,
           "] null quantised moment pointer (codes of m and v, and their absmax arrays are all required) for n = ", n);
}

}  // namespace

void adamw8bit_block_scalar(float* theta, const float* g, uint8_t* code_m, uint8_t* code_v, float* absmax_m,
                            float* absmax_v, int64_t count, const AdamWCoefficients<float>& c) {
  const AdamW8BitTables& t = kAdamW8BitTables;
  alignas(64) float m[kBlock];
  alignas(64) float v[kBlock];
  const float old_m = *absmax_m, old_v = *absmax_v;
  float new_m = 0.0f, new_v = 0.0f;
  for (int64_t i = 0; i < count; ++i) {
    adamw8bit_update(theta[i], g[i], code_m[i], code_v[i], old_m, old_v, t, c, m[i], v[i]);
    new_m = adamw8bit_absmax(new_m, m[i]);
    new_v = adamw8bit_absmax(new_v, v[i]);
  }
  const float scale_m = adamw8bit_inverse_scale(new_m), scale_v = adamw8bit_inverse_scale(new_v);
  for (int64_t i = 0; i < count; ++i) {
    code_m[i] = adamw8bit_quantise(m[i] * scale_m, t.signed_search);
    code_v[i] = adamw8bit_quantise(v[i] * scale_v, t.unsigned_search);
  }
  *absmax_m = adamw8bit_stored_absmax(new_m);
  *absmax_v = adamw8bit_stored_absmax(new_v);
}

void adamw8bit_quantise_scalar(const float* x, uint8_t* codes, int64_t n, bool is_signed) {
  const float* search = is_signed ? kAdamW8BitTables.signed_search : kAdamW8BitTables.unsigned_search;
  for (int64_t i = 0; i < n; ++i) codes[i] = adamw8bit_quantise(x[i], search);
}

AdamWIsa set_adamw8bit_isa(AdamWIsa isa) {
  const AdamWIsa previous = g_isa_override;
  g_isa_override = isa;
  return previous;
}

void adamw8bit_step_device(void* param, void* master, const void* grad, const QuantizedMoments& moments, int64_t n,
                           const AdamWStepScalars& s, double beta1, double beta2, double eps, double weight_decay,
                           DType dtype) {
  HG_CHECK(n >= 0, "[adamw8bit_step_device] expected n >= 0, got ", n);
  HG_CHECK(s.step != nullptr, "[adamw8bit_step_device] expected a step count, got a null AdamWStepScalars::step");
  HG_CHECK(s.parity == 0 || s.parity == 1, "[adamw8bit_step_device] expected parity 0 or 1, got ", s.parity);
  HG_CHECK(half_or_f32(dtype), "[adamw8bit_step_device] expected a parameter dtype f32, f16 or bf16, got ",
           dtype_name(dtype));
  if (n > 0) {
    HG_CHECK(param && grad, "[adamw8bit_step_device] null param or grad pointer for n = ", n);
    check_moments("adamw8bit_step_device", moments, n);
  }
  if (!adamw_skips(s) && n > 0) {
    const auto c = adamw_coefficients<float>(adamw_lr(s), beta1, beta2, eps, weight_decay, adamw_next_step(s));
    step_all(Operands{static_cast<float*>(master), param, dtype, grad, dtype, 1.0f}, moments, n, c);
  }
  adamw_record_step(s);
  if (s.blocks_done != nullptr) adamw_settle_step(s);
}

void adamw8bit_offload_step(float* master, const void* grad, DType grad_dtype, const QuantizedMoments& moments,
                            void* param_out, DType param_dtype, int64_t n, double lr, double beta1, double beta2,
                            double eps, double weight_decay, int64_t step, double grad_scale) {
  HG_CHECK(n >= 0, "[adamw8bit_offload_step] expected n >= 0, got ", n);
  HG_CHECK(step >= 1, "[adamw8bit_offload_step] expected step >= 1 (the first update is step 1), got ", step);
  HG_CHECK(half_or_f32(grad_dtype) && half_or_f32(param_dtype),
           "[adamw8bit_offload_step] grad and parameter must "
           "be f32, f16 or bf16, got grad ",
           dtype_name(grad_dtype), " and parameter ", dtype_name(param_dtype));
  if (n == 0) return;
  HG_CHECK(master && grad, "[adamw8bit_offload_step] null master or grad pointer for n = ", n);
  check_moments("adamw8bit_offload_step", moments, n);
  const auto c = adamw_coefficients<float>(lr, beta1, beta2, eps, weight_decay, step);
  step_all(Operands{master, param_out, param_dtype, grad, grad_dtype, float(grad_scale)}, moments, n, c);
}

}  // namespace hg::kernels::cpu
