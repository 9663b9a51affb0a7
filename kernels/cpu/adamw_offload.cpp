// The optimizer-offload AdamW (ZeRO-Offload's "CPU Adam"): the fp32 master weights and both moments
// live in host memory, and one pass over them per step is the whole optimizer, so its speed is the
// memory bandwidth it reaches.
//
// Math (kernels/adamw_math.h, PyTorch's AdamW), per element, at step t >= 1, with g = grad * grad_scale:
//   theta *= 1 - lr*lambda;  m = beta1 m + (1-beta1) g;  v = beta2 v + (1-beta2) g^2;
//   theta -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps);   param_out = round(theta).
// The vector code performs the scalar code's operations in the same order with fused multiply-adds
// (as the compiler contracts the scalar loops too), IEEE sqrt and division, so the paths agree with
// kernels::cpu::adamw_step to a few ulp (tests/test_adamw_offload.cpp); half conversions are rounded
// to nearest even, NaN stored as 0x7fff, exactly as half.h.
//
// One fused pass: load theta, g (f32, f16 or bf16, widened in registers), m, v; update; store theta,
// m, v and the rounded parameter (f32, f16 or bf16; optional). Traffic for f32 everything without a
// separate parameter: 16 bytes read + 12 written = 28 bytes per element.
// Parallel strategy: the n elements are cut into one contiguous range per OpenMP thread (multiples
// of 64 elements, so vector loads stay aligned when the buffers are); each thread runs the widest
// vector loop the CPU has (AVX-512: 16 lanes, AVX2+FMA+F16C: 8 lanes, chosen once at run time); the
// last partial vector runs the same vector code on zero-padded copies (vector_tail), so an element's
// bits do not depend on where its range ends. adamw_step (adamw.cpp) runs its f32 and master-weight
// updates through this pass too.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "kernels/adamw_math.h"
#include "kernels/error.h"
#include "kernels/half.h"
#include "kernels/kernels.h"

// GCC 12 reports the deliberately undefined pass-through operand of avx512fintrin.h's unmasked
// intrinsics (_mm512_undefined_*) as "may be used uninitialized" once they are inlined here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace hg::kernels::cpu {
namespace {

struct Args {
  float* master;
  const void* grad;
  DType grad_dtype;
  float* m;
  float* v;
  void* param_out;  // nullable
  DType param_dtype;
  float grad_scale;
  AdamWCoefficients<float> c;
};

float load_scalar(const void* p, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::f16: return float(static_cast<const half*>(p)[i]);
    case DType::bf16: return float(static_cast<const bfloat16*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

void store_scalar(void* p, DType dtype, int64_t i, float x) {
  switch (dtype) {
    case DType::f16: static_cast<half*>(p)[i] = half(x); break;
    case DType::bf16: static_cast<bfloat16*>(p)[i] = bfloat16(x); break;
    default: static_cast<float*>(p)[i] = x; break;
  }
}

void scalar_range(const Args& a, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    float theta = a.master[i];
    float mi = a.m[i];
    float vi = a.v[i];
    adamw_update(theta, load_scalar(a.grad, a.grad_dtype, i) * a.grad_scale, mi, vi, a.c);
    a.master[i] = theta;
    a.m[i] = mi;
    a.v[i] = vi;
    if (a.param_out) store_scalar(a.param_out, a.param_dtype, i, theta);
  }
}

// The last (end - begin < kLanes) elements of a vector path: copied into zero-padded buffers of one
// vector, run through the same vector code, and copied back. So every element takes the vector
// path's operations whatever its position, and the result does not depend on where a range ends
// (thread count, ZeRO shard size) -- the scalar code's contraction could differ by an ulp.
template <int kLanes>
void vector_tail(const Args& a, int64_t begin, int64_t end, void (*range)(const Args&, int64_t, int64_t)) {
  const int64_t count = end - begin;
  if (count <= 0) return;
  const size_t grad_size = dtype_size(a.grad_dtype), param_size = dtype_size(a.param_dtype);
  alignas(64) float master[kLanes] = {}, m[kLanes] = {}, v[kLanes] = {};
  alignas(64) unsigned char grad[kLanes * 4] = {}, param[kLanes * 4] = {};
  std::memcpy(master, a.master + begin, size_t(count) * sizeof(float));
  std::memcpy(m, a.m + begin, size_t(count) * sizeof(float));
  std::memcpy(v, a.v + begin, size_t(count) * sizeof(float));
  std::memcpy(grad, static_cast<const unsigned char*>(a.grad) + size_t(begin) * grad_size, size_t(count) * grad_size);
  Args padded = a;
  padded.master = master;
  padded.m = m;
  padded.v = v;
  padded.grad = grad;
  padded.param_out = a.param_out ? param : nullptr;
  range(padded, 0, kLanes);
  std::memcpy(a.master + begin, master, size_t(count) * sizeof(float));
  std::memcpy(a.m + begin, m, size_t(count) * sizeof(float));
  std::memcpy(a.v + begin, v, size_t(count) * sizeof(float));
  if (a.param_out) {
    auto* out = static_cast<unsigned char*>(a.param_out) + size_t(begin) * param_size;
    std::memcpy(out, param, size_t(count) * param_size);
  }
}

// ---- AVX-512: 16 lanes ---------------------------------------------------------------------------
#define HG_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c,fma")))

HG_AVX512 __m512 load16(const void* p, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::f16:
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(p) + i)));
    case DType::bf16: {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(p) + i));
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    default: return _mm512_loadu_ps(static_cast<const float*>(p) + i);
  }
}

HG_AVX512 void store16(void* p, DType dtype, int64_t i, __m512 x) {
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  switch (dtype) {
    case DType::f16: {
      __m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      h = _mm256_mask_mov_epi16(h, nan, _mm256_set1_epi16(0x7fff));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(p) + i), h);
      break;
    }
    case DType::bf16: {
      // Round to nearest even on the bits: (x + 0x7fff + ((x >> 16) & 1)) >> 16.
      const __m512i bits = _mm512_castps_si512(x);
      const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
      __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), lsb), 16);
      r = _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7fff));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(p) + i), _mm512_cvtepi32_epi16(r));
      break;
    }
    default: _mm512_storeu_ps(static_cast<float*>(p) + i, x); break;
  }
}

HG_AVX512 void avx512_range(const Args& a, int64_t begin, int64_t end) {
  const __m512 decay = _mm512_set1_ps(a.c.decay), beta1 = _mm512_set1_ps(a.c.beta1),
               one_minus_beta1 = _mm512_set1_ps(a.c.one_minus_beta1), beta2 = _mm512_set1_ps(a.c.beta2),
               one_minus_beta2 = _mm512_set1_ps(a.c.one_minus_beta2), step_size = _mm512_set1_ps(a.c.step_size),
               bias2_sqrt = _mm512_set1_ps(a.c.bias2_sqrt), eps = _mm512_set1_ps(a.c.eps),
               grad_scale = _mm512_set1_ps(a.grad_scale);
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m512 g = _mm512_mul_ps(load16(a.grad, a.grad_dtype, i), grad_scale);
    __m512 m = _mm512_loadu_ps(a.m + i);
    __m512 v = _mm512_loadu_ps(a.v + i);
    __m512 theta = _mm512_loadu_ps(a.master + i);
    m = _mm512_fmadd_ps(beta1, m, _mm512_mul_ps(one_minus_beta1, g));
    v = _mm512_fmadd_ps(beta2, v, _mm512_mul_ps(_mm512_mul_ps(one_minus_beta2, g), g));
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), bias2_sqrt), eps);
    theta = _mm512_fnmadd_ps(step_size, _mm512_div_ps(m, denom), _mm512_mul_ps(theta, decay));
    _mm512_storeu_ps(a.m + i, m);
    _mm512_storeu_ps(a.v + i, v);
    _mm512_storeu_ps(a.master + i, theta);
    if (a.param_out) store16(a.param_out, a.param_dtype, i, theta);
  }
  vector_tail<16>(a, i, end, avx512_range);
}

// ---- AVX2 + FMA + F16C: 8 lanes ------------------------------------------------------------------
#define HG_AVX2 __attribute__((target("avx2,f16c,fma")))

HG_AVX2 __m256 load8(const void* p, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::f16:
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i)));
    case DType::bf16: {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i));
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    default: return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  }
}

HG_AVX2 void store8(void* p, DType dtype, int64_t i, __m256 x) {
  const __m256 nan32 = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  // The NaN mask narrowed to 16-bit lanes (-1 / 0 saturate to themselves).
  const __m128i nan16 = _mm_packs_epi32(_mm256_castsi256_si128(_mm256_castps_si256(nan32)),
                                        _mm256_extractf128_si256(_mm256_castps_si256(nan32), 1));
  auto* out = reinterpret_cast<__m128i*>(static_cast<uint16_t*>(p) + i);
  switch (dtype) {
    case DType::f16: {
      const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm_storeu_si128(out, _mm_blendv_epi8(h, _mm_set1_epi16(0x7fff), nan16));
      break;
    }
    case DType::bf16: {
      const __m256i bits = _mm256_castps_si256(x);
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
      const __m256i r =
          _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), lsb), 16);
      const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
      _mm_storeu_si128(out, _mm_blendv_epi8(packed, _mm_set1_epi16(0x7fff), nan16));
      break;
    }
    default: _mm256_storeu_ps(static_cast<float*>(p) + i, x); break;
  }
}

HG_AVX2 void avx2_range(const Args& a, int64_t begin, int64_t end) {
  const __m256 decay = _mm256_set1_ps(a.c.decay), beta1 = _mm256_set1_ps(a.c.beta1),
               one_minus_beta1 = _mm256_set1_ps(a.c.one_minus_beta1), beta2 = _mm256_set1_ps(a.c.beta2),
               one_minus_beta2 = _mm256_set1_ps(a.c.one_minus_beta2), step_size = _mm256_set1_ps(a.c.step_size),
               bias2_sqrt = _mm256_set1_ps(a.c.bias2_sqrt), eps = _mm256_set1_ps(a.c.eps),
               grad_scale = _mm256_set1_ps(a.grad_scale);
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m256 g = _mm256_mul_ps(load8(a.grad, a.grad_dtype, i), grad_scale);
    __m256 m = _mm256_loadu_ps(a.m + i);
    __m256 v = _mm256_loadu_ps(a.v + i);
    __m256 theta = _mm256_loadu_ps(a.master + i);
    m = _mm256_fmadd_ps(beta1, m, _mm256_mul_ps(one_minus_beta1, g));
    v = _mm256_fmadd_ps(beta2, v, _mm256_mul_ps(_mm256_mul_ps(one_minus_beta2, g), g));
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), bias2_sqrt), eps);
    theta = _mm256_fnmadd_ps(step_size, _mm256_div_ps(m, denom), _mm256_mul_ps(theta, decay));
    _mm256_storeu_ps(a.m + i, m);
    _mm256_storeu_ps(a.v + i, v);
    _mm256_storeu_ps(a.master + i, theta);
    if (a.param_out) store8(a.param_out, a.param_dtype, i, theta);
  }
  vector_tail<8>(a, i, end, avx2_range);
}

using RangeFn = void (*)(const Args&, int64_t, int64_t);

RangeFn pick(AdamWIsa isa) {
  switch (isa) {
    case AdamWIsa::avx512: return avx512_range;
    case AdamWIsa::avx2: return avx2_range;
    case AdamWIsa::scalar: return scalar_range;
  }
  return scalar_range;
}

}  // namespace

AdamWIsa adamw_offload_best_isa() {
  static const AdamWIsa best = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
      return AdamWIsa::avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
      return AdamWIsa::avx2;
    return AdamWIsa::scalar;
  }();
  return best;
}

const char* adamw_isa_name(AdamWIsa isa) {
  switch (isa) {
    case AdamWIsa::avx512: return "avx512";
    case AdamWIsa::avx2: return "avx2";
    case AdamWIsa::scalar: return "scalar";
  }
  return "?";
}

void adamw_offload_step(float* master, const void* grad, DType grad_dtype, float* exp_avg, float* exp_avg_sq,
                        void* param_out, DType param_dtype, int64_t n, double lr, double beta1, double beta2,
                        double eps, double weight_decay, int64_t step, double grad_scale, AdamWIsa isa) {
  HG_CHECK(n >= 0, "[adamw_offload_step] expected n >= 0, got ", n);
  HG_CHECK(step >= 1, "[adamw_offload_step] expected step >= 1 (the first update is step 1), got ", step);
  if (n == 0) return;
  HG_CHECK(master && grad && exp_avg && exp_avg_sq, "[adamw_offload_step] null master, grad or moment pointer");
  const auto half_or_f32 = [](DType d) { return d == DType::f32 || d == DType::f16 || d == DType::bf16; };
  HG_CHECK(half_or_f32(grad_dtype) && half_or_f32(param_dtype), "[adamw_offload_step] grad and parameter must be "
           "f32, f16 or bf16, got grad ", dtype_name(grad_dtype), " and parameter ", dtype_name(param_dtype));
  HG_CHECK(int(isa) <= int(adamw_offload_best_isa()), "[adamw_offload_step] ", adamw_isa_name(isa),
           " was requested but this CPU supports at most ", adamw_isa_name(adamw_offload_best_isa()));
  const Args args{master,     grad,        grad_dtype, exp_avg, exp_avg_sq, param_out, param_dtype, float(grad_scale),
                  adamw_coefficients<float>(lr, beta1, beta2, eps, weight_decay, step)};
  const RangeFn range = pick(isa);
  constexpr int64_t kAlign = 64;
  constexpr int64_t kParallelMin = int64_t(1) << 15;
  if (n < kParallelMin) {
    range(args, 0, n);
    return;
  }
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads();
    const int64_t per = (n / threads + kAlign - 1) / kAlign * kAlign;
    const int64_t begin = std::min(n, per * omp_get_thread_num());
    const int64_t end = omp_get_thread_num() == threads - 1 ? n : std::min(n, begin + per);
    range(args, begin, end);
  }
}

}  // namespace hg::kernels::cpu
