#pragma once
// The SIMT emulator's device side: what a kernels/cuda/*.cu file sees when it is compiled as C++
// (HALFGRAD_EMULATED_CUDA) instead of by nvcc. Included through kernels/cuda/platform.h only.
//
// What is here, with CUDA's names and signatures:
//   qualifiers    __global__ __device__ __host__ __forceinline__ __launch_bounds__(...) __restrict__
//                 __shared__ (see "Static shared memory")
//   built-ins     threadIdx blockIdx blockDim gridDim warpSize; dim3/uint3/float4/... from the
//                 toolkit's vector_types.h; __half/__nv_bfloat16 from cuda_fp16.h / cuda_bf16.h (their
//                 host implementations), plus the half math the toolkit leaves device-only (__hfma,
//                 hexp, hsqrt, ...), computed in float and rounded once
//   block sync    __syncthreads, __syncthreads_count/_and/_or
//   warp sync     __syncwarp, __shfl_sync/_up/_down/_xor (any arithmetic or half type), __ballot_sync,
//                 __any_sync, __all_sync, __activemask, __reduce_{add,min,max,and,or,xor}_sync
//   atomics       atomicAdd/Sub/Exch/Min/Max/Inc/Dec/CAS/And/Or/Xor with CUDA's overload sets
//   memory        __threadfence(_block/_system), __ldg and the cache-hint loads/stores
//   math          rsqrtf, __expf, __fdividef, __float_as_int, __popc, min/max with CUDA's overloads, ...
//   HG_DYNAMIC_SHARED(type, name)  the block's dynamic shared buffer (its size comes from the launch)
//
// How a kernel runs (kernels/emu/block.cpp): every CUDA thread of a block is a fiber on one OS thread.
// A fiber runs until it reaches __syncthreads, a warp collective or its end; then the next one runs.
// Warp collectives complete when every non-exited lane named in the mask has arrived; __syncthreads
// releases when every thread of the block has arrived. Between barriers the threads run in a varying
// order (forward, reverse or shuffled, changing per block and per barrier phase), so a missing
// __syncthreads gives wrong results instead of lucky ones.
//
// Static shared memory: `__shared__ T x[N];` inside a kernel becomes `static thread_local T x[N];`
// (or `static` in AddressSanitizer builds; see kernels/emu/config.h). This is block-local because all
// fibers of a block run on one OS thread and an OS thread runs one block at a time. Consequences:
// shared memory keeps what the previous block on that OS thread left (CUDA leaves it undefined; never
// read it before writing it), and a kernel must not rely on shared memory being zeroed.
//
// Kernel code must also follow these rules (all hold on a GPU too):
//   * every thread of a block reaches each __syncthreads, at the same call site; a thread that
//     returned early does not count as arrived (this emulator reports it);
//   * a thread never waits (spins) on another thread's or another block's progress: a fiber runs
//     uninterrupted until its next barrier or collective, and blocks run in an arbitrary order;
//   * put kernels and device helpers of a .cu file in a namespace of that file (an anonymous one or
//     the op's own): under the emulator they are ordinary C++ functions linked together.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/emu/config.h"
#include "kernels/emu/runtime.h"

// ---- qualifiers ----------------------------------------------------------------------------------
// The toolkit's host_defines.h (through cuda_runtime.h) already maps __global__, __device__, __host__,
// __constant__ to nothing and __forceinline__ to always_inline; the rest is completed here.
#ifndef __global__
#define __global__
#endif
#ifndef __device__
#define __device__
#endif
#ifndef __host__
#define __host__
#endif
#ifndef __constant__
#define __constant__
#endif
#ifndef __forceinline__
#define __forceinline__ inline __attribute__((always_inline))
#endif
#undef __launch_bounds__
#define __launch_bounds__(...)
#undef __shared__
#if HG_EMU_BLOCKS_IN_PARALLEL || HG_EMU_AUDIT
// (The kernel audit, kernels/emu/audit.h, tells static shared memory by its address: the thread-local
// block of the module that holds the kernel. It runs blocks serially, on the launching thread.)
#define __shared__ static thread_local
#else
#define __shared__ static
#endif

// ---- the running thread and block ----------------------------------------------------------------
namespace hg::emu {

// Where kernel code calls a barrier or a warp collective, for error messages: captured by default
// arguments at the call, as std::source_location would be (which clang 14 with libstdc++ 12 lacks).
struct Site {
  const char* file = "";
  unsigned line = 0;
  const char* function = "";
  static constexpr Site here(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE(),
                             const char* function = __builtin_FUNCTION()) {
    return Site{file, line, function};
  }
};

}  // namespace hg::emu

namespace hg::emu::detail {

// What a fiber exposes to kernel code (the rest of it lives in block.h).
struct ThreadBuiltins {
  uint3 thread_idx{};
};

// Set by the block scheduler on the OS thread that runs the block. initial-exec TLS: one
// fs-relative load, since the emulator is linked into executables, never dlopen'ed.
#define HG_EMU_TLS thread_local __attribute__((tls_model("initial-exec")))
inline HG_EMU_TLS ThreadBuiltins* t_thread = nullptr;
inline HG_EMU_TLS uint3 t_block_idx{};
inline HG_EMU_TLS dim3 t_block_dim{};
inline HG_EMU_TLS dim3 t_grid_dim{};
inline HG_EMU_TLS unsigned char* t_dynamic_shared = nullptr;
#undef HG_EMU_TLS

enum class WarpOp : uint8_t {
  Sync,
  Shfl,
  ShflUp,
  ShflDown,
  ShflXor,
  Ballot,
  Any,
  All,
  ReduceAddU,
  ReduceAddI,
  ReduceMinU,
  ReduceMinI,
  ReduceMaxU,
  ReduceMaxI,
  ReduceAnd,
  ReduceOr,
  ReduceXor,
  ActiveMask,
  // nvcuda::wmma (kernels/emu/wmma.h): each lane brings a pointer to its call record; every lane gets
  // a pointer to the 32 lanes' pointers and the mask of lanes that took part (WmmaResult). Unlike
  // __syncwarp they do not order memory (racecheck does not join the lanes' clocks).
  WmmaLoad,
  WmmaStore,
  WmmaMma,
};
struct WmmaResult {
  const void* const* records;  // [32], nullptr for a lane that did not take part
  unsigned lanes;
};
enum class BarrierOp : uint8_t { Sync, Count, And, Or };

// The calling lane contributes `size` bytes at `value` (size <= 16) to the collective `op` of the lanes
// in `mask`, and blocks until every non-exited lane of `mask` has arrived. Returns this lane's result
// bytes (valid until its next collective). `param` is srcLane / delta / laneMask; `width` the
// sub-warp width (a power of 2 up to 32).
const void* warp_collective(WarpOp op, unsigned mask, const void* value, unsigned size, int param, int width,
                            const Site& site);
// Blocks until every thread of the block has arrived; returns the count / and / or of `predicate`.
int block_barrier(BarrierOp op, int predicate, const Site& site);
// The lanes of the calling warp that reach this __activemask together (see block.h).
unsigned active_mask(const Site& site);
[[noreturn]] void trap(const char* what, const Site& site);

template <class T>
inline constexpr bool is_half_type_v = std::is_same_v<T, __half> || std::is_same_v<T, __half2> ||
                                       std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __nv_bfloat162>;

// The value types CUDA's __shfl_*sync overloads accept.
template <class T>
concept Shuffleable = (std::is_arithmetic_v<T> || is_half_type_v<T>)&&sizeof(T) <= 16;

template <class T>
T shuffle(WarpOp op, unsigned mask, const T& var, int param, int width, const Site& site) {
  const void* result = warp_collective(op, mask, &var, sizeof(T), param, width, site);
  T out = var;  // __half2 / __nv_bfloat162 are not trivially copyable, but are plain pairs of 16-bit values
  std::memcpy(static_cast<void*>(&out), result, sizeof(T));
  return out;
}

}  // namespace hg::emu::detail

#define threadIdx (::hg::emu::detail::t_thread->thread_idx)
#define blockIdx (::hg::emu::detail::t_block_idx)
#define blockDim (::hg::emu::detail::t_block_dim)
#define gridDim (::hg::emu::detail::t_grid_dim)
inline constexpr int warpSize = 32;

// HG_DYNAMIC_SHARED(type, name): `type* name` pointing at the block's dynamic shared memory
// (shared_bytes of the launch, 128-byte aligned, filled with 0xff bytes (NaN for every float type) at
// the start of each block; under AddressSanitizer the bytes past shared_bytes are poisoned).
#define HG_DYNAMIC_SHARED(type, name) type* name = reinterpret_cast<type*>(::hg::emu::detail::t_dynamic_shared)

// ---- block and warp synchronisation --------------------------------------------------------------
inline void __syncthreads(::hg::emu::Site site = ::hg::emu::Site::here()) {
  ::hg::emu::detail::block_barrier(::hg::emu::detail::BarrierOp::Sync, 0, site);
}
inline int __syncthreads_count(int predicate, ::hg::emu::Site site = ::hg::emu::Site::here()) {
  return ::hg::emu::detail::block_barrier(::hg::emu::detail::BarrierOp::Count, predicate, site);
}
inline int __syncthreads_and(int predicate, ::hg::emu::Site site = ::hg::emu::Site::here()) {
  return ::hg::emu::detail::block_barrier(::hg::emu::detail::BarrierOp::And, predicate, site);
}
inline int __syncthreads_or(int predicate, ::hg::emu::Site site = ::hg::emu::Site::here()) {
  return ::hg::emu::detail::block_barrier(::hg::emu::detail::BarrierOp::Or, predicate, site);
}

inline void __syncwarp(unsigned mask = 0xffffffffu, ::hg::emu::Site site = ::hg::emu::Site::here()) {
  ::hg::emu::detail::warp_collective(::hg::emu::detail::WarpOp::Sync, mask, nullptr, 0, 0, warpSize, site);
}
inline unsigned __activemask(::hg::emu::Site site = ::hg::emu::Site::here()) {
  return ::hg::emu::detail::active_mask(site);
}

template <::hg::emu::detail::Shuffleable T>
T __shfl_sync(unsigned mask, T var, int srcLane, int width = warpSize, ::hg::emu::Site site = ::hg::emu::Site::here()) {
  return ::hg::emu::detail::shuffle(::hg::emu::detail::WarpOp::Shfl, mask, var, srcLane, width, site);
}
template <::hg::emu::detail::Shuffleable T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize,
                 ::hg::emu::Site site = ::hg::emu::Site::here()) {
  return ::hg::emu::detail::shuffle(::hg::emu::detail::WarpOp::ShflUp, mask, var, int(delta), width, site);
}
template <::hg::emu::detail::Shuffleable T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize,
                   ::hg::emu::Site site = ::hg::emu::Site::here()) {
  return ::hg::emu::detail::shuffle(::hg::emu::detail::WarpOp::ShflDown, mask, var, int(delta), width, site);
}
template <::hg::emu::detail::Shuffleable T>
T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = warpSize,
                  ::hg::emu::Site site = ::hg::emu::Site::here()) {
  return ::hg::emu::detail::shuffle(::hg::emu::detail::WarpOp::ShflXor, mask, var, laneMask, width, site);
}

namespace hg::emu::detail {
inline unsigned vote(WarpOp op, unsigned mask, int predicate, const Site& site) {
  const int value = predicate != 0;
  unsigned out;
  std::memcpy(&out, warp_collective(op, mask, &value, sizeof value, 0, warpSize, site), sizeof out);
  return out;
}
template <class T>
T warp_reduce(WarpOp op, unsigned mask, T value, const Site& site) {
  T out;
  std::memcpy(&out, warp_collective(op, mask, &value, sizeof value, 0, warpSize, site), sizeof out);
  return out;
}
}  // namespace hg::emu::detail

inline unsigned __ballot_sync(unsigned mask, int predicate, ::hg::emu::Site site = ::hg::emu::Site::here()) {
  return ::hg::emu::detail::vote(::hg::emu::detail::WarpOp::Ballot, mask, predicate, site);
}
inline int __any_sync(unsigned mask, int predicate, ::hg::emu::Site site = ::hg::emu::Site::here()) {
  return int(::hg::emu::detail::vote(::hg::emu::detail::WarpOp::Any, mask, predicate, site));
}
inline int __all_sync(unsigned mask, int predicate, ::hg::emu::Site site = ::hg::emu::Site::here()) {
  return int(::hg::emu::detail::vote(::hg::emu::detail::WarpOp::All, mask, predicate, site));
}

#define HG_EMU_WARP_REDUCE(name, type, op)                                                      \
  inline type name(unsigned mask, type value, ::hg::emu::Site site = ::hg::emu::Site::here()) { \
    return ::hg::emu::detail::warp_reduce(::hg::emu::detail::WarpOp::op, mask, value, site);    \
  }
HG_EMU_WARP_REDUCE(__reduce_add_sync, unsigned, ReduceAddU)
HG_EMU_WARP_REDUCE(__reduce_add_sync, int, ReduceAddI)
HG_EMU_WARP_REDUCE(__reduce_min_sync, unsigned, ReduceMinU)
HG_EMU_WARP_REDUCE(__reduce_min_sync, int, ReduceMinI)
HG_EMU_WARP_REDUCE(__reduce_max_sync, unsigned, ReduceMaxU)
HG_EMU_WARP_REDUCE(__reduce_max_sync, int, ReduceMaxI)
HG_EMU_WARP_REDUCE(__reduce_and_sync, unsigned, ReduceAnd)
HG_EMU_WARP_REDUCE(__reduce_or_sync, unsigned, ReduceOr)
HG_EMU_WARP_REDUCE(__reduce_xor_sync, unsigned, ReduceXor)
#undef HG_EMU_WARP_REDUCE

inline void __trap(::hg::emu::Site site = ::hg::emu::Site::here()) { ::hg::emu::detail::trap("__trap()", site); }
inline void __brkpt(::hg::emu::Site site = ::hg::emu::Site::here()) { ::hg::emu::detail::trap("__brkpt()", site); }
inline void __nanosleep(unsigned) {}
// A nanosecond counter stands in for the SM cycle counter.
inline long long clock64() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// ---- memory fences and cache-hinted loads/stores ---------------------------------------------------
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
template <class T>
inline T __ldg(const T* p) {
  return *p;
}
template <class T>
inline T __ldcg(const T* p) {
  return *p;
}
template <class T>
inline T __ldca(const T* p) {
  return *p;
}
template <class T>
inline T __ldcs(const T* p) {
  return *p;
}
template <class T>
inline T __ldlu(const T* p) {
  return *p;
}
template <class T>
inline T __ldcv(const T* p) {
  return *p;
}
template <class T>
inline void __stwb(T* p, T v) {
  *p = v;
}
template <class T>
inline void __stcg(T* p, T v) {
  *p = v;
}
template <class T>
inline void __stcs(T* p, T v) {
  *p = v;
}
template <class T>
inline void __stwt(T* p, T v) {
  *p = v;
}

// ---- atomics: CUDA's overload sets, relaxed ordering (as CUDA's atomics), real atomics because blocks
// of a grid run on several OS threads ------------------------------------------------------------------
namespace hg::emu::detail {
template <class Bits, class T, class F>
T atomic_update(T* address, F update) {
  static_assert(sizeof(Bits) == sizeof(T));
  Bits* bits = reinterpret_cast<Bits*>(address);
  Bits old_bits = __atomic_load_n(bits, __ATOMIC_RELAXED);
  for (;;) {
    T old_value;
    std::memcpy(static_cast<void*>(&old_value), &old_bits, sizeof old_bits);
    const T new_value = update(old_value);
    Bits new_bits;
    std::memcpy(&new_bits, static_cast<const void*>(&new_value), sizeof new_bits);
    if (__atomic_compare_exchange_n(bits, &old_bits, new_bits, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
      return old_value;
    }
  }
}
}  // namespace hg::emu::detail

#define HG_EMU_ATOMIC_INT(type)                                                                    \
  inline type atomicAdd(type* a, type v) { return __atomic_fetch_add(a, v, __ATOMIC_RELAXED); }    \
  inline type atomicExch(type* a, type v) { return __atomic_exchange_n(a, v, __ATOMIC_RELAXED); }  \
  inline type atomicAnd(type* a, type v) { return __atomic_fetch_and(a, v, __ATOMIC_RELAXED); }    \
  inline type atomicOr(type* a, type v) { return __atomic_fetch_or(a, v, __ATOMIC_RELAXED); }      \
  inline type atomicXor(type* a, type v) { return __atomic_fetch_xor(a, v, __ATOMIC_RELAXED); }    \
  inline type atomicCAS(type* a, type compare, type v) {                                           \
    __atomic_compare_exchange_n(a, &compare, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);        \
    return compare;                                                                                \
  }                                                                                                \
  inline type atomicMin(type* a, type v) {                                                         \
    return ::hg::emu::detail::atomic_update<type>(a, [v](type old) { return v < old ? v : old; }); \
  }                                                                                                \
  inline type atomicMax(type* a, type v) {                                                         \
    return ::hg::emu::detail::atomic_update<type>(a, [v](type old) { return v > old ? v : old; }); \
  }
HG_EMU_ATOMIC_INT(int)
HG_EMU_ATOMIC_INT(unsigned int)
HG_EMU_ATOMIC_INT(unsigned long long int)
#undef HG_EMU_ATOMIC_INT
inline int atomicSub(int* a, int v) { return __atomic_fetch_sub(a, v, __ATOMIC_RELAXED); }
inline unsigned int atomicSub(unsigned int* a, unsigned int v) { return __atomic_fetch_sub(a, v, __ATOMIC_RELAXED); }
inline long long int atomicMin(long long int* a, long long int v) {
  return ::hg::emu::detail::atomic_update<long long int>(a, [v](long long int old) { return v < old ? v : old; });
}
inline long long int atomicMax(long long int* a, long long int v) {
  return ::hg::emu::detail::atomic_update<long long int>(a, [v](long long int old) { return v > old ? v : old; });
}
inline unsigned short int atomicCAS(unsigned short int* a, unsigned short int compare, unsigned short int v) {
  __atomic_compare_exchange_n(a, &compare, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return compare;
}
// ((old >= limit) ? 0 : old + 1) and (((old == 0) || (old > limit)) ? limit : old - 1), as CUDA defines them.
inline unsigned int atomicInc(unsigned int* a, unsigned int limit) {
  return ::hg::emu::detail::atomic_update<unsigned int>(
      a, [limit](unsigned int old) { return old >= limit ? 0u : old + 1u; });
}
inline unsigned int atomicDec(unsigned int* a, unsigned int limit) {
  return ::hg::emu::detail::atomic_update<unsigned int>(
      a, [limit](unsigned int old) { return (old == 0u || old > limit) ? limit : old - 1u; });
}
inline float atomicExch(float* a, float v) {
  return ::hg::emu::detail::atomic_update<uint32_t>(a, [v](float) { return v; });
}
inline float atomicAdd(float* a, float v) {
  return ::hg::emu::detail::atomic_update<uint32_t>(a, [v](float old) { return old + v; });
}
inline double atomicAdd(double* a, double v) {
  return ::hg::emu::detail::atomic_update<uint64_t>(a, [v](double old) { return old + v; });
}
inline __half atomicAdd(__half* a, __half v) {
  return ::hg::emu::detail::atomic_update<uint16_t>(a,
                                                    [v](__half old) { return __float2half_rn(float(old) + float(v)); });
}
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* a, __nv_bfloat16 v) {
  return ::hg::emu::detail::atomic_update<uint16_t>(
      a, [v](__nv_bfloat16 old) { return __float2bfloat16_rn(float(old) + float(v)); });
}

// ---- math: the device functions a host compiler lacks ------------------------------------------------
// Fast-math intrinsics are computed with the accurate host function (a GPU's __expf is an
// approximation: compare emulated results with a tolerance, as against the GPU).
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float rcbrtf(float x) { return 1.0f / std::cbrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __exp10f(float x) { return std::pow(10.0f, x); }
inline float __logf(float x) { return std::log(x); }
inline float __log2f(float x) { return std::log2(x); }
inline float __log10f(float x) { return std::log10(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __tanf(float x) { return std::tan(x); }
inline void __sincosf(float x, float* s, float* c) {
  *s = std::sin(x);
  *c = std::cos(x);
}
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __frsqrt_rn(float x) { return 1.0f / std::sqrt(x); }
inline float __fadd_rn(float x, float y) { return x + y; }
inline float __fsub_rn(float x, float y) { return x - y; }
inline float __fmul_rn(float x, float y) { return x * y; }
inline float __fdiv_rn(float x, float y) { return x / y; }
inline float __fmaf_rn(float x, float y, float z) { return std::fma(x, y, z); }
inline double __dadd_rn(double x, double y) { return x + y; }
inline double __dmul_rn(double x, double y) { return x * y; }
inline double __fma_rn(double x, double y, double z) { return std::fma(x, y, z); }
inline float __saturatef(float x) { return x >= 1.0f ? 1.0f : (x > 0.0f ? x : 0.0f); }  // NaN -> 0
inline float exp10f(float x) { return std::pow(10.0f, x); }
inline float normcdff(float x) { return 0.5f * std::erfc(-x * 0.70710678118654752f); }
inline double normcdf(double x) { return 0.5 * std::erfc(-x * 0.70710678118654752); }

inline int __float_as_int(float x) { return __builtin_bit_cast(int, x); }
inline unsigned int __float_as_uint(float x) { return __builtin_bit_cast(unsigned int, x); }
inline float __int_as_float(int x) { return __builtin_bit_cast(float, x); }
inline float __uint_as_float(unsigned int x) { return __builtin_bit_cast(float, x); }
inline long long int __double_as_longlong(double x) { return __builtin_bit_cast(long long int, x); }
inline double __longlong_as_double(long long int x) { return __builtin_bit_cast(double, x); }
inline float __double2float_rn(double x) { return static_cast<float>(x); }
// Round toward zero: the nearest float, stepped back toward zero when it rounded away.
inline float __double2float_rz(double x) {
  float f = static_cast<float>(x);
  if (std::isfinite(x) && std::fabs(static_cast<double>(f)) > std::fabs(x)) f = std::nextafter(f, 0.0f);
  return f;
}
inline int __float2int_rz(float x) { return static_cast<int>(x); }
inline int __float2int_rn(float x) { return static_cast<int>(std::nearbyint(x)); }
inline int __float2int_rd(float x) { return static_cast<int>(std::floor(x)); }
inline int __float2int_ru(float x) { return static_cast<int>(std::ceil(x)); }
inline unsigned int __float2uint_rz(float x) { return static_cast<unsigned int>(x); }
inline long long int __float2ll_rz(float x) { return static_cast<long long int>(x); }
inline long long int __double2ll_rz(double x) { return static_cast<long long int>(x); }
inline float __int2float_rn(int x) { return static_cast<float>(x); }
inline float __uint2float_rn(unsigned int x) { return static_cast<float>(x); }
inline float __ll2float_rn(long long int x) { return static_cast<float>(x); }
inline double __ll2double_rn(long long int x) { return static_cast<double>(x); }
inline double __int2double_rn(int x) { return static_cast<double>(x); }

inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long int x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned int>(x)); }
inline int __clzll(long long int x) { return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long int>(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long int x) { return __builtin_ffsll(x); }
inline unsigned int __brev(unsigned int x) {
  unsigned int r = 0;
  for (int i = 0; i < 32; ++i, x >>= 1) r = (r << 1) | (x & 1u);
  return r;
}
inline unsigned long long int __brevll(unsigned long long int x) {
  return (static_cast<unsigned long long int>(__brev(static_cast<unsigned int>(x))) << 32) |
         __brev(static_cast<unsigned int>(x >> 32));
}
inline unsigned int __umulhi(unsigned int x, unsigned int y) {
  return static_cast<unsigned int>((uint64_t(x) * y) >> 32);
}
inline int __mulhi(int x, int y) { return static_cast<int>((int64_t(x) * y) >> 32); }
inline unsigned long long int __umul64hi(unsigned long long int x, unsigned long long int y) {
  return static_cast<unsigned long long int>((static_cast<unsigned __int128>(x) * y) >> 64);
}
inline long long int __mul64hi(long long int x, long long int y) {
  return static_cast<long long int>((static_cast<__int128>(x) * y) >> 64);
}

// min/max: CUDA's overload set (mixed signed/unsigned arguments compare as unsigned; float/double
// use fmin/fmax, which return the other argument when one is NaN).
#define HG_EMU_MINMAX(ret, a_type, b_type)                                                        \
  inline ret min(a_type a, b_type b) {                                                            \
    return static_cast<ret>(a) < static_cast<ret>(b) ? static_cast<ret>(a) : static_cast<ret>(b); \
  }                                                                                               \
  inline ret max(a_type a, b_type b) {                                                            \
    return static_cast<ret>(a) > static_cast<ret>(b) ? static_cast<ret>(a) : static_cast<ret>(b); \
  }
HG_EMU_MINMAX(int, int, int)
HG_EMU_MINMAX(unsigned int, unsigned int, unsigned int)
HG_EMU_MINMAX(unsigned int, int, unsigned int)
HG_EMU_MINMAX(unsigned int, unsigned int, int)
HG_EMU_MINMAX(long int, long int, long int)
HG_EMU_MINMAX(unsigned long int, unsigned long int, unsigned long int)
HG_EMU_MINMAX(unsigned long int, long int, unsigned long int)
HG_EMU_MINMAX(unsigned long int, unsigned long int, long int)
HG_EMU_MINMAX(long long int, long long int, long long int)
HG_EMU_MINMAX(unsigned long long int, unsigned long long int, unsigned long long int)
HG_EMU_MINMAX(unsigned long long int, long long int, unsigned long long int)
HG_EMU_MINMAX(unsigned long long int, unsigned long long int, long long int)
#undef HG_EMU_MINMAX
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }
inline double min(float a, double b) { return std::fmin(double(a), b); }
inline double max(float a, double b) { return std::fmax(double(a), b); }
inline double min(double a, float b) { return std::fmin(a, double(b)); }
inline double max(double a, float b) { return std::fmax(a, double(b)); }
inline unsigned int umin(unsigned int a, unsigned int b) { return a < b ? a : b; }
inline unsigned int umax(unsigned int a, unsigned int b) { return a > b ? a : b; }
inline long long int llmin(long long int a, long long int b) { return a < b ? a : b; }
inline long long int llmax(long long int a, long long int b) { return a > b ? a : b; }
inline unsigned long long int ullmin(unsigned long long int a, unsigned long long int b) { return a < b ? a : b; }
inline unsigned long long int ullmax(unsigned long long int a, unsigned long long int b) { return a > b ? a : b; }

// ---- half math the toolkit only declares for device code -------------------------------------------
// Computed in float (double for the fused multiply-add) and rounded once to the half type: hexp,
// h2exp, ... for __half, __half2, __nv_bfloat16 and __nv_bfloat162.
namespace hg::emu::detail {
inline float f_exp(float x) { return std::exp(x); }
inline float f_exp2(float x) { return std::exp2(x); }
inline float f_exp10(float x) { return std::pow(10.0f, x); }
inline float f_log(float x) { return std::log(x); }
inline float f_log2(float x) { return std::log2(x); }
inline float f_log10(float x) { return std::log10(x); }
inline float f_sqrt(float x) { return std::sqrt(x); }
inline float f_rsqrt(float x) { return 1.0f / std::sqrt(x); }
inline float f_rcp(float x) { return 1.0f / x; }
inline float f_sin(float x) { return std::sin(x); }
inline float f_cos(float x) { return std::cos(x); }
inline float f_tanh(float x) { return std::tanh(x); }
inline float f_ceil(float x) { return std::ceil(x); }
inline float f_floor(float x) { return std::floor(x); }
inline float f_trunc(float x) { return std::trunc(x); }
inline float f_rint(float x) { return std::nearbyint(x); }
}  // namespace hg::emu::detail
#define HG_EMU_HALF_UNARY(suffix, fn)                                                                            \
  inline __half h##suffix(__half x) { return __float2half_rn(::hg::emu::detail::fn(__half2float(x))); }          \
  inline __nv_bfloat16 h##suffix(__nv_bfloat16 x) {                                                              \
    return __float2bfloat16_rn(::hg::emu::detail::fn(__bfloat162float(x)));                                      \
  }                                                                                                              \
  inline __half2 h2##suffix(__half2 x) {                                                                         \
    return __floats2half2_rn(::hg::emu::detail::fn(__low2float(x)), ::hg::emu::detail::fn(__high2float(x)));     \
  }                                                                                                              \
  inline __nv_bfloat162 h2##suffix(__nv_bfloat162 x) {                                                           \
    return __floats2bfloat162_rn(::hg::emu::detail::fn(__low2float(x)), ::hg::emu::detail::fn(__high2float(x))); \
  }
HG_EMU_HALF_UNARY(exp, f_exp)
HG_EMU_HALF_UNARY(exp2, f_exp2)
HG_EMU_HALF_UNARY(exp10, f_exp10)
HG_EMU_HALF_UNARY(log, f_log)
HG_EMU_HALF_UNARY(log2, f_log2)
HG_EMU_HALF_UNARY(log10, f_log10)
HG_EMU_HALF_UNARY(sqrt, f_sqrt)
HG_EMU_HALF_UNARY(rsqrt, f_rsqrt)
HG_EMU_HALF_UNARY(rcp, f_rcp)
HG_EMU_HALF_UNARY(sin, f_sin)
HG_EMU_HALF_UNARY(cos, f_cos)
HG_EMU_HALF_UNARY(tanh, f_tanh)
HG_EMU_HALF_UNARY(ceil, f_ceil)
HG_EMU_HALF_UNARY(floor, f_floor)
HG_EMU_HALF_UNARY(trunc, f_trunc)
HG_EMU_HALF_UNARY(rint, f_rint)
#undef HG_EMU_HALF_UNARY

inline __half __hfma(__half a, __half b, __half c) {
  return __double2half(double(__half2float(a)) * double(__half2float(b)) + double(__half2float(c)));
}
inline __nv_bfloat16 __hfma(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c) {
  return __double2bfloat16(double(__bfloat162float(a)) * double(__bfloat162float(b)) + double(__bfloat162float(c)));
}
inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) {
  return __halves2half2(__hfma(__low2half(a), __low2half(b), __low2half(c)),
                        __hfma(__high2half(a), __high2half(b), __high2half(c)));
}
inline __nv_bfloat162 __hfma2(__nv_bfloat162 a, __nv_bfloat162 b, __nv_bfloat162 c) {
  return __halves2bfloat162(__hfma(__low2bfloat16(a), __low2bfloat16(b), __low2bfloat16(c)),
                            __hfma(__high2bfloat16(a), __high2bfloat16(b), __high2bfloat16(c)));
}

#include "kernels/emu/launch.h"
