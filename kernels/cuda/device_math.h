#pragma once
// Kernel-internal helpers shared by kernels/cuda/*.cu: storage <-> accumulation conversion, 128-bit
// packs, the split of an array into a scalar head, 16-byte packs and a scalar tail, warp and block
// reductions, and small host-side launch helpers (scratch memory: kernels/cuda/workspace.h). Everything here uses only what both
// builds provide (nvcc, and the SIMT emulator of kernels/emu compiling the same lines as C++):
// threadIdx/blockIdx/blockDim/gridDim, __syncthreads, __shfl_xor_sync, the cuda_fp16/cuda_bf16
// conversion intrinsics and <cmath>.
//
// Conventions of the .cu files:
//   - T is the storage type (float, double, __half, __nv_bfloat16), A = acc_t<T> the accumulation
//     type (double for double, float otherwise). Loads convert T -> A, stores round A -> T once.
//   - Blocks are multiples of 32 threads, so every warp is full and shuffles use the full mask.
//   - Kernel arguments are device pointers and by-value scalars/structs; host arrays (shapes,
//     strides) are copied into a by-value struct first.
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/cuda/launch.h"
#include "kernels/dtype.h"
#include "kernels/error.h"
#include "kernels/host_device.h"

#if defined(__CUDACC__)
#define HG_DEVICE __device__ __forceinline__
#define HG_UNROLL _Pragma("unroll")
#else
#define HG_DEVICE inline
#define HG_UNROLL
#endif

namespace hg::kernels::cuda {

inline constexpr unsigned kFullMask = 0xffffffffu;
inline constexpr int kWarpSize = 32;

// ---- storage <-> accumulation ------------------------------------------------------------------

template <class T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class T>
HG_DEVICE acc_t<T> to_acc(T v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half2float(v);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(v);
  } else {
    return v;
  }
}

// Rounds the accumulator to the storage type (round to nearest even, as hg::half / hg::bfloat16).
template <class T>
HG_DEVICE T from_acc(acc_t<T> v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(v);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(v);
  } else {
    return v;
  }
}

template <class A>
HG_DEVICE A neg_infinity() {
  return A(-INFINITY);
}

template <class A>
HG_DEVICE A exp_acc(A x) {
  if constexpr (std::is_same_v<A, double>) {
    return exp(x);
  } else {
    return expf(x);
  }
}

template <class A>
HG_DEVICE A log_acc(A x) {
  if constexpr (std::is_same_v<A, double>) {
    return log(x);
  } else {
    return logf(x);
  }
}

template <class A>
HG_DEVICE A sqrt_acc(A x) {
  if constexpr (std::is_same_v<A, double>) {
    return sqrt(x);
  } else {
    return sqrtf(x);
  }
}

// a * b and a + b each rounded on its own: nvcc would otherwise contract a * b + c into one fma,
// which changes the last bit. Used where the CPU result must be met bit for bit.
template <class A>
HG_DEVICE A mul_rn(A a, A b) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<A, double>) {
    return __dmul_rn(a, b);
  } else {
    return __fmul_rn(a, b);
  }
#else
  return a * b;
#endif
}

template <class A>
HG_DEVICE A add_rn(A a, A b) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<A, double>) {
    return __dadd_rn(a, b);
  } else {
    return __fadd_rn(a, b);
  }
#else
  return a + b;
#endif
}

template <class A>
HG_DEVICE bool is_nan(A x) {
  return x != x;
}

// ---- 128-bit packs -----------------------------------------------------------------------------

// N elements of T moved by one load/store instruction (16 bytes for N = kPack<T>).
template <class T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

template <class T>
inline constexpr int kPack = int(16 / sizeof(T));

template <int N, class T>
HG_DEVICE Pack<T, N> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T, N>*>(p);
}

template <int N, class T>
HG_DEVICE void store_pack(T* p, const Pack<T, N>& v) {
  *reinterpret_cast<Pack<T, N>*>(p) = v;
}

template <int N>
using Width = std::integral_constant<int, N>;

// The number of leading elements of an array of T to process one by one before its address is
// 16-byte aligned, when every pointer given shares that alignment (their packs line up); -1 when
// they do not (the caller then processes everything element by element).
template <class T, class... P>
HG_HOST_DEVICE inline int64_t pack_head(int64_t n, const P*... ptrs) {
  const uintptr_t address[] = {reinterpret_cast<uintptr_t>(static_cast<const void*>(ptrs))...};
  const uintptr_t misalignment = address[0] & 15u;
  for (const uintptr_t a : address) {
    if ((a & 15u) != misalignment) return -1;
  }
  if (misalignment % sizeof(T) != 0) return -1;
  const int64_t head = int64_t(((16u - misalignment) & 15u) / sizeof(T));
  return head < n ? head : n;
}

// Visits every index of [0, n) once, spread over `size` workers of which this is `worker`: calls
// body(i, Width<N>{}) for the 16-byte-aligned packs i, i + N of the middle, and body(i, Width<1>{})
// for the elements of the head and the tail (or for every element when head < 0).
template <int N, class Body>
HG_DEVICE void for_packs(int64_t n, int64_t head, int64_t worker, int64_t size, Body&& body) {
  if (head < 0) {
    for (int64_t i = worker; i < n; i += size) body(i, Width<1>{});
    return;
  }
  const int64_t packs = (n - head) / N;
  const int64_t body_end = head + packs * N;
  for (int64_t p = worker; p < packs; p += size) body(head + p * N, Width<N>{});
  const int64_t scalars = head + (n - body_end);
  for (int64_t k = worker; k < scalars; k += size) body(k < head ? k : body_end + (k - head), Width<1>{});
}

// ---- warp and block reductions -----------------------------------------------------------------

// A value every lane can exchange with __shfl_xor_sync; overloads for the pair types of the
// reductions live next to them.
template <class V>
HG_DEVICE V shuffle_xor(V v, int lane_mask) {
  return __shfl_xor_sync(kFullMask, v, lane_mask);
}

// The same result in every lane of the warp: a butterfly of a fixed shape, so the result does not
// depend on scheduling, and with a commutative op (all of ours) every lane ends with the same bits.
template <class V, class Op>
HG_DEVICE V warp_reduce(V v, Op op) {
  for (int mask = kWarpSize / 2; mask > 0; mask >>= 1) v = op(v, shuffle_xor(v, mask));
  return v;
}

// The same result in every thread of the block. `shared` holds one V per warp (32 V's suffice for
// 1024 threads). Starts and ends with a barrier-safe pattern: `shared` may be reused right after.
template <class V, class Op>
HG_DEVICE V block_reduce(V v, Op op, V identity, V* shared) {
  const int lane = int(threadIdx.x) % kWarpSize, warp = int(threadIdx.x) / kWarpSize;
  const int warps = int(blockDim.x) / kWarpSize;
  v = warp_reduce(v, op);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : identity;
  v = warp_reduce(v, op);
  __syncthreads();
  return v;
}

struct SumOp {
  template <class V>
  HG_DEVICE V operator()(V a, V b) const {
    return a + b;
  }
};

// ---- rows: a warp per row, or a block per row --------------------------------------------------

// Row kernels (softmax, cross entropy, LayerNorm, reduce over the last dimension) give each row to
// a warp when rows are short (kRowsPerWarpBlock rows per block of 256 threads) and to a whole block
// when they are long; kWarpRows is a template parameter of the kernel, so the reduction is
// resolved at compile time.
inline constexpr int kWarpRowThreads = 256;
inline constexpr int kWarpRowLimit = 1024;  // cols <= this: a warp per row
// The largest block of a row kernel; the kernels declare it in __launch_bounds__, so nvcc keeps them
// within the 64 registers per thread a 1024-thread block can have.
inline constexpr int kMaxRowThreads = 1024;

template <bool kWarpRows>
struct RowGroup {
  int64_t row;     // the row this thread works on
  int64_t worker;  // index of this thread within its row's group
  int64_t size;    // threads per row

  HG_DEVICE static RowGroup make() {
    if constexpr (kWarpRows) {
      return {int64_t(blockIdx.x) * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize, threadIdx.x % kWarpSize,
              kWarpSize};
    } else {
      return {int64_t(blockIdx.x), threadIdx.x, blockDim.x};
    }
  }

  // The reduction over the row's group; `shared` (block per row only) holds 32 V's.
  template <class V, class Op>
  HG_DEVICE V reduce(V v, Op op, V identity, V* shared) const {
    if constexpr (kWarpRows) {
      return warp_reduce(v, op);
    } else {
      return block_reduce(v, op, identity, shared);
    }
  }
};

// Launch shape of a row kernel over `rows` rows of `cols` elements.
struct RowLaunch {
  bool warp_rows;
  dim3 grid;
  dim3 block;
};

inline RowLaunch row_launch(int64_t rows, int64_t cols) {
  if (cols <= kWarpRowLimit) {
    const int64_t rows_per_block = kWarpRowThreads / kWarpSize;
    return {true, dim3(unsigned((rows + rows_per_block - 1) / rows_per_block)), dim3(kWarpRowThreads)};
  }
  HG_CHECK(rows < (int64_t(1) << 31), "[cuda] ", rows, " rows exceed the grid (one block per row)");
  const unsigned threads = cols >= 8192 ? unsigned(kMaxRowThreads) : 512u;
  return {false, dim3(unsigned(rows)), dim3(threads)};
}

// ---- flat launches -----------------------------------------------------------------------------

inline constexpr int kFlatThreads = 256;
inline constexpr int64_t kMaxFlatBlocks = 4096;  // kernels loop over the rest (grid-stride)

// A grid of kFlatThreads-thread blocks for `units` independent work items.
inline dim3 flat_grid(int64_t units) {
  const int64_t blocks = (units + kFlatThreads - 1) / kFlatThreads;
  return dim3(unsigned(blocks < kMaxFlatBlocks ? blocks : kMaxFlatBlocks));
}

HG_DEVICE int64_t flat_worker() { return int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
HG_DEVICE int64_t flat_workers() { return int64_t(gridDim.x) * blockDim.x; }

}  // namespace hg::kernels::cuda
