// sum_of_squares: the reduction behind global gradient-norm clipping, sum_i x[i]^2.
//
// Accumulated in double (a gradient norm over 1e9 float elements keeps ~16 digits; an fp32 sum
// would lose several). Determinism: the input is cut into fixed chunks of kChunk elements; each
// chunk's partial sum is computed by one thread with a fixed (compile-time) vectorised order, and
// the partials are then added sequentially in chunk order. So the result is bit-identical whatever
// the number of OpenMP threads. inf/NaN elements propagate into the result (the caller decides).
//
// The chunk loop, on CPUs with AVX-512 (convert.h's tier) for f32, f16 and bf16: 16 elements loaded
// and widened to float in registers (convert_avx512.h; the tail with a mask, its empty lanes 0), each
// half of them widened to 8 doubles and squared into its own double accumulator, 32 elements per
// iteration into four (four independent FMA chains), then the four added pairwise and the 8 lanes
// reduced. A fixed order, so still thread-count independent; it differs from the
// compiler-vectorised loop (f64, no AVX-512) only in rounding (positive terms: relative <= n 2^-53).
// Fused so: the half types used to be widened into a buffer first, and the loop that alternated a
// read pass and a sum pass ran at 45% of f32's bytes/s; one streaming pass runs at the memory's rate.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/convert_avx512.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "kernels/step_kernels.h"

// GCC 12 reports the deliberately undefined pass-through operand of avx512fintrin.h's unmasked
// intrinsics (_mm512_undefined_*) as "(may be) used uninitialized" once they are inlined here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace hg::kernels::cpu {
namespace {

constexpr int64_t kChunk = 8192;
constexpr int64_t kParallelMinElements = int64_t(1) << 16;

// v's 16 floats as doubles, squared into a (lanes 0..7) and b (lanes 8..15).
HG_CVT512 inline void add_squares(__m512 v, __m512d& a, __m512d& b) {
  const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
  const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  a = _mm512_fmadd_pd(lo, lo, a);
  b = _mm512_fmadd_pd(hi, hi, b);
}

// The AVX-512 chunk loop (header comment) for T = float, half, bfloat16.
template <class T>
HG_CVT512 double chunk_sum_of_squares_avx512(const T* __restrict x, int64_t count) {
  __m512d a0 = _mm512_setzero_pd(), b0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd(), b1 = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 32 <= count; i += 32) {
    add_squares(simd512::load16(x + i), a0, b0);
    add_squares(simd512::load16(x + i + 16), a1, b1);
  }
  if (i + 16 <= count) {
    add_squares(simd512::load16(x + i), a0, b0);
    i += 16;
  }
  if (i < count) add_squares(simd512::load16(x + i, simd512::tail_mask(count - i)), a1, b1);
  return _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(a0, b0), _mm512_add_pd(a1, b1)));
}

template <class T>
double chunk_sum_of_squares(const T* __restrict x, int64_t count) {
  if constexpr (!std::is_same_v<T, double>) {
    if (convert_best_isa() == ConvertIsa::avx512) return chunk_sum_of_squares_avx512(x, count);
  }
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
    // Without AVX-512: widened through convert.h's SIMD conversions (exact), then summed as the f32
    // chunks are (the scalar f16 conversion in the loop kept it from vectorising).
    float widened[kChunk];
    to_float(x, widened, count);
    return chunk_sum_of_squares(static_cast<const float*>(widened), count);
  } else {
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < count; ++i) {
      const double value = static_cast<double>(static_cast<acc_t<T>>(x[i]));
      sum += value * value;
    }
    return sum;
  }
}

}  // namespace

double sum_of_squares(const void* x, int64_t n, DType dtype) {
  HG_CHECK(n >= 0, "[sum_of_squares] expected n >= 0, got ", n);
  if (n == 0) return 0.0;
  HG_CHECK(x != nullptr, "[sum_of_squares] null input for n = ", n);
  return dispatch_floating(dtype, "sum_of_squares", [&]<class T>() {
    const T* data = static_cast<const T*>(x);
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    std::vector<double> partial(static_cast<size_t>(chunks));
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
    for (int64_t k = 0; k < chunks; ++k) {
      const int64_t begin = k * kChunk;
      partial[static_cast<size_t>(k)] = chunk_sum_of_squares(data + begin, std::min(kChunk, n - begin));
    }
    double total = 0.0;
    for (const double p : partial) total += p;
    return total;
  });
}

}  // namespace hg::kernels::cpu

namespace hg::kernels::cpu {

void sum_of_squares_into(const void* x, int64_t n, DType dtype, double* accumulator) {
  HG_CHECK(accumulator != nullptr, "[sum_of_squares_into] null accumulator");
  *accumulator += sum_of_squares(x, n, dtype);
}

}  // namespace hg::kernels::cpu
