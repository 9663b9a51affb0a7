// GELU by table lookup for bf16 (the why, the tables and the loops: gelu_table.h).

// GCC 12 warns that the undefined vectors inside its own AVX-512 intrinsics may be uninitialised
// (before any include: the warnings point into avx512fintrin.h).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/cpu/gelu_table.h"

#include <atomic>
#include <memory>

#include "kernels/cpu/convert_avx512.h"
#include "kernels/cpu/gelu_avx512.h"

namespace hg::kernels::cpu {
namespace {

constexpr int64_t kPatterns = int64_t(1) << 16;

struct GeluTable {
  uint16_t y[kPatterns];
  alignas(64) float slope[kPatterns];
};

// Every bit pattern of T through the evaluating kernel (16 at a time, as it runs on tensors).
template <class T, bool kErf>
HG_SIMD512 void fill(GeluTable& table) {
  alignas(64) uint16_t patterns[16];
  alignas(64) float x[16];
  for (int64_t base = 0; base < kPatterns; base += 16) {
    for (int i = 0; i < 16; ++i) patterns[i] = uint16_t(base + i);
    const T* as_t = reinterpret_cast<const T*>(patterns);
    _mm512_store_ps(x, simd512::load16(as_t));
    simd512::gelu_forward_span<T, kErf, false>(as_t, nullptr, reinterpret_cast<T*>(table.y + base), 16);
    _mm512_store_ps(table.slope + base, simd512::gelu_slope<kErf>(_mm512_load_ps(x)));
  }
}

template <class T, bool kErf>
const GeluTable& table() {
  static const std::unique_ptr<GeluTable> built = [] {
    auto t = std::make_unique<GeluTable>();
    fill<T, kErf>(*t);
    return t;
  }();
  return *built;
}

template <class T>
const GeluTable& table_for(bool erf) {
  return erf ? table<T, true>() : table<T, false>();
}

const uint16_t* bits_of(const void* p) { return static_cast<const uint16_t*>(p); }

std::atomic<bool> g_lookup{true};

// The lookups are scalar on purpose: vectorised, GCC emulates the gather with element inserts and
// extracts (measured 2x slower than scalar loads here), and vpgatherdd is no faster on Zen 4.
#if defined(__clang__)
#define HG_SCALAR_LOOP _Pragma("clang loop vectorize(disable) interleave(disable)")
#define HG_NO_VECTORIZE
#else
#define HG_SCALAR_LOOP _Pragma("GCC unroll 8")
#define HG_NO_VECTORIZE __attribute__((optimize("no-tree-vectorize")))
#endif

// out[i] = tab[in[i]] (out may be in: each element is read before it is written).
HG_NO_VECTORIZE void look_up(const uint16_t* __restrict tab, const uint16_t* in, uint16_t* out, int64_t n) {
  HG_SCALAR_LOOP
  for (int64_t i = 0; i < n; ++i) out[i] = tab[in[i]];
}
HG_NO_VECTORIZE void look_up(const float* __restrict tab, const uint16_t* in, float* __restrict out, int64_t n) {
  HG_SCALAR_LOOP
  for (int64_t i = 0; i < n; ++i) out[i] = tab[in[i]];
}

// dx = T(dy * slope[x]) over 64-element blocks: the block's slopes looked up into a stack row first
// (so dx may be x or dy: a block is read before it is written).
template <class T>
HG_SIMD512 void backward_blocks(const float* __restrict slope, const T* x, const T* dy, T* dx, int64_t n) {
  constexpr int64_t kBlock = 64;
  const uint16_t* in = bits_of(x);
  alignas(64) float s[kBlock];
  for (int64_t j = 0; j < n; j += kBlock) {
    const int64_t count = n - j < kBlock ? n - j : kBlock;
    look_up(slope, in + j, s, count);
    int64_t i = 0;
    for (; i + 16 <= count; i += 16)
      simd512::store16(dx + j + i, _mm512_mul_ps(simd512::load16(dy + j + i), _mm512_load_ps(s + i)));
    if (i < count) {
      const __mmask16 k = simd512::tail_mask(count - i);
      simd512::store16(dx + j + i, _mm512_mul_ps(simd512::load16(dy + j + i, k), _mm512_maskz_load_ps(k, s + i)), k);
    }
  }
}

}  // namespace

template <class T>
void gelu_forward_lookup(bool erf, const T* x, T* y, int64_t n) {
  look_up(table_for<T>(erf).y, bits_of(x), reinterpret_cast<uint16_t*>(y), n);
}

template <class T>
void gelu_backward_lookup(bool erf, const T* x, const T* dy, T* dx, int64_t n) {
  backward_blocks(table_for<T>(erf).slope, x, dy, dx, n);
}

template void gelu_forward_lookup<bfloat16>(bool, const bfloat16*, bfloat16*, int64_t);
template void gelu_backward_lookup<bfloat16>(bool, const bfloat16*, const bfloat16*, bfloat16*, int64_t);

bool gelu_lookup_enabled() { return g_lookup.load(std::memory_order_relaxed); }
void gelu_lookup_enable(bool enabled) { g_lookup.store(enabled, std::memory_order_relaxed); }

}  // namespace hg::kernels::cpu
