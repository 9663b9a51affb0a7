// unscale_and_check and scale_gradients: the loss scaler's fused pass over many gradient tensors
// (math in kernels/unscale_math.h): x *= inv_scale in place, and whether any element is inf or NaN;
// scale_gradients reads its multiplier from memory (the loss scale, or the clip coefficient from
// the sum of squares) and writes found_inf there instead of returning it (the capturable step).
//
// Parallel strategy: the tensors are cut into chunks of kChunk elements (the last chunk of a tensor
// is shorter; a chunk never spans two tensors), and the chunks of all tensors together form one
// OpenMP loop, so many small tensors and one large one spread over the threads alike. Each chunk
// ORs its own found flag; OR is associative and exact, so the result and every stored element are
// the same whatever the thread count. Arguments are validated before the parallel region (which
// must not throw); inside it a dtype switch that cannot fail picks the typed loop. f16/bf16 chunks
// are converted in registers on CPUs with AVX-512 (convert_avx512.h: load 16, scale, round and store,
// the stored values widened back for the inf/NaN test; one streaming pass, as f32's loop is);
// elsewhere widened into a float buffer and narrowed back through convert.h's SIMD conversions.
// (Through the buffer the pass alternated a read pass and a write pass and ran at about half of
// f32's bytes/s on Zen 4.) Same bits either way: each element is scaled once in float and rounded
// once, half.h's rounding.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/convert_avx512.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "kernels/step_kernels.h"
#include "kernels/unscale_math.h"

// GCC 12 reports the deliberately undefined pass-through operand of avx512fintrin.h's unmasked
// intrinsics (_mm512_undefined_*) as "(may be) used uninitialized" once they are inlined here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace hg::kernels::cpu {
namespace {

constexpr int64_t kChunk = 16384;
constexpr int64_t kParallelMinElements = int64_t(1) << 16;
constexpr int64_t kStage = 2048;  // float staging buffer of the half-type loops, on the stack

struct Chunk {
  void* data;  // first element of the chunk
  int64_t n;
  DType dtype;
};

// The f16/bf16 passes in registers, in place: the clip's x = round(fma(a, x, 0)) (the affine op's
// a x + b with b = 0 as a native build contracts it; a product that underflows to -0 is where fma's
// +0 differs from mul then add), the unscale's x = round(x * a); when `check`, whether a stored
// value is inf or NaN. The tail with a mask, so nothing past n is touched.
template <class T, bool kAffine>
HG_CVT512 int scale_half_avx512(T* __restrict x, int64_t n, float a, bool write, bool check) {
  const __m512 scale = _mm512_set1_ps(a), zero = _mm512_setzero_ps();
  const __m512 magnitude_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const __m512 infinity = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  __mmask16 found = 0;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 lanes = n - i >= 16 ? __mmask16(0xffff) : simd512::tail_mask(n - i);
    __m512 v = simd512::load16(x + i, lanes);
    if (write) {
      // The affine form as the compiler contracts the portable loop's a * x + b: one fused rounding.
      v = kAffine ? _mm512_fmadd_ps(scale, v, zero) : _mm512_mul_ps(v, scale);
      v = simd512::store16_rounded(x + i, v, lanes);
    }
    // |v| >= inf (unordered, so NaN counts): not finite.
    if (check) found |= _mm512_mask_cmp_ps_mask(lanes, _mm512_and_ps(v, magnitude_mask), infinity, _CMP_NLT_UQ);
  }
  return found != 0;
}

// One chunk of the clip pass: x = round(coef * acc(x) + 0), the affine op's formula.
template <class T>
void clip_chunk(T* __restrict x, int64_t n, double coef) {
  using A = acc_t<T>;
  const A a = A(coef), b = A(0);
  if constexpr (!std::is_same_v<T, A>) {
    if (convert_best_isa() == ConvertIsa::avx512) {
      scale_half_avx512<T, true>(x, n, a, /*write=*/true, /*check=*/false);
      return;
    }
  }
  if constexpr (std::is_same_v<T, A>) {
    for (int64_t i = 0; i < n; ++i) x[i] = a * x[i] + b;
  } else {  // f16/bf16: through a float buffer, converted by convert.h's SIMD conversions
    A staged[kStage];
    for (int64_t begin = 0; begin < n; begin += kStage) {
      const int64_t count = std::min(kStage, n - begin);
      to_float(x + begin, staged, count);
      for (int64_t i = 0; i < count; ++i) staged[i] = a * staged[i] + b;
      from_float(staged, x + begin, count);
    }
  }
}

void clip_chunk_any(const Chunk& c, double coef) {
  switch (c.dtype) {
    case DType::f32:
      return clip_chunk(static_cast<float*>(c.data), c.n, coef);
    case DType::f64:
      return clip_chunk(static_cast<double*>(c.data), c.n, coef);
    case DType::f16:
      return clip_chunk(static_cast<half*>(c.data), c.n, coef);
    case DType::bf16:
      return clip_chunk(static_cast<bfloat16*>(c.data), c.n, coef);
    default:
      return;  // unreachable: dtypes are validated before the parallel loop
  }
}

// One chunk: returns 1 when an element is inf or NaN (after scaling, as stored).
template <class T>
int unscale_chunk(T* __restrict x, int64_t n, double inv_scale) {
  using A = acc_t<T>;
  const A inv = A(inv_scale);
  int found = 0;
  if constexpr (std::is_same_v<T, A>) {
    if (inv_scale == 1.0) {  // check only: nothing changes, nothing is written
#pragma omp simd reduction(| : found)
      for (int64_t i = 0; i < n; ++i) found |= int(is_nonfinite(x[i]));
      return found;
    }
#pragma omp simd reduction(| : found)
    for (int64_t i = 0; i < n; ++i) {
      const T y = x[i] * inv;
      x[i] = y;
      found |= int(is_nonfinite(y));
    }
    return found;
  } else {
    if (convert_best_isa() == ConvertIsa::avx512)
      return scale_half_avx512<T, false>(x, n, inv, /*write=*/inv_scale != 1.0, /*check=*/true);
    // f16/bf16, a chunk at a time through convert.h: widen, scale, narrow, and test the stored
    // values widened again (with inv_scale == 1, only the test; nothing is written).
    A staged[kStage];
    for (int64_t begin = 0; begin < n; begin += kStage) {
      const int64_t count = std::min(kStage, n - begin);
      to_float(x + begin, staged, count);
      if (inv_scale != 1.0) {
        for (int64_t i = 0; i < count; ++i) staged[i] *= inv;
        from_float(staged, x + begin, count);
        to_float(x + begin, staged, count);
      }
#pragma omp simd reduction(| : found)
      for (int64_t i = 0; i < count; ++i) found |= int(is_nonfinite(staged[i]));
    }
    return found;
  }
}

int unscale_chunk_any(const Chunk& c, double inv_scale) {
  switch (c.dtype) {
    case DType::f32:
      return unscale_chunk(static_cast<float*>(c.data), c.n, inv_scale);
    case DType::f64:
      return unscale_chunk(static_cast<double*>(c.data), c.n, inv_scale);
    case DType::f16:
      return unscale_chunk(static_cast<half*>(c.data), c.n, inv_scale);
    case DType::bf16:
      return unscale_chunk(static_cast<bfloat16*>(c.data), c.n, inv_scale);
    default:
      return 0;  // unreachable: dtypes are validated before the parallel loop
  }
}

// Every tensor cut into chunks, the spans validated (an hg::Error names the bad one and `op`).
std::vector<Chunk> chunks_of(const TensorSpan* tensors, int64_t count, const char* op, int64_t& total) {
  std::vector<Chunk> chunks;
  total = 0;
  for_each_checked_span(tensors, count, op, [&](const TensorSpan& s) {
    const size_t size = dtype_size(s.dtype);
    for (int64_t begin = 0; begin < s.n; begin += kChunk) {
      chunks.push_back({static_cast<char*>(s.data) + size_t(begin) * size, std::min(kChunk, s.n - begin), s.dtype});
    }
    total += s.n;
  });
  return chunks;
}

}  // namespace

void scale_gradients(const TensorSpan* tensors, int64_t count, const GradientMultiplier& multiplier, float* found_inf) {
  const bool unscale = multiplier.kind == GradientMultiplier::unscale;
  HG_CHECK(unscale ? multiplier.scale != nullptr && found_inf != nullptr : multiplier.sum_sq != nullptr,
           "[scale_gradients] ", unscale ? "unscale needs the loss scale and found_inf" : "clip needs the sum of squares");
  HG_CHECK(unscale || (std::isfinite(multiplier.max_norm) && multiplier.max_norm > 0.0),
           "[scale_gradients] invalid max_norm ", multiplier.max_norm, ": expected a finite max_norm > 0");
  int64_t total = 0;
  const std::vector<Chunk> chunks = chunks_of(tensors, count, "scale_gradients", total);
  if (unscale) {
    const float scale = *multiplier.scale;
    HG_CHECK(std::isfinite(scale) && scale > 0.0f, "[scale_gradients] invalid loss scale ", scale,
             ": expected a finite value > 0");
  }
  bool write = false;
  const double factor = gradient_multiplier(multiplier, &write);
  const int64_t n_chunks = int64_t(chunks.size());
  if (!unscale) {
    if (!write) return;
#pragma omp parallel for schedule(static) if (total >= kParallelMinElements)
    for (int64_t k = 0; k < n_chunks; ++k) clip_chunk_any(chunks[size_t(k)], factor);
    return;
  }
  int found = 0;
#pragma omp parallel for schedule(static) reduction(| : found) if (total >= kParallelMinElements)
  for (int64_t k = 0; k < n_chunks; ++k) found |= unscale_chunk_any(chunks[size_t(k)], factor);
  *found_inf = found != 0 ? 1.0f : 0.0f;
}

bool unscale_and_check(const TensorSpan* tensors, int64_t count, double inv_scale) {
  HG_CHECK(std::isfinite(inv_scale) && inv_scale > 0.0, "[unscale_and_check] invalid inv_scale ", inv_scale,
           ": expected a finite value > 0 (1 / loss scale)");
  int64_t total = 0;
  const std::vector<Chunk> chunks = chunks_of(tensors, count, "unscale_and_check", total);
  const int64_t n_chunks = int64_t(chunks.size());
  int found = 0;
#pragma omp parallel for schedule(static) reduction(| : found) if (total >= kParallelMinElements)
  for (int64_t k = 0; k < n_chunks; ++k) found |= unscale_chunk_any(chunks[size_t(k)], inv_scale);
  return found != 0;
}

}  // namespace hg::kernels::cpu
