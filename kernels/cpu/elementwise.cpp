// Elementwise kernels: unary ops (forward and backward), affine, and binary ops with broadcasting.
//
// Math (in acc_t, the dtype's accumulation type; half types are converted on load and store):
//   unary_forward:  y = f(x)                  (UnaryMath<op>::value, the op's row in unary_math.h)
//   unary_backward: dx = dy * f'(x, y)        (UnaryMath<op>::derivative). x may be null when f' does
//                   not read it; y may be null and is then recomputed from x.
//   affine:         y = alpha * x + beta
//   binary_forward: y[idx] = a[idx . a_strides] op b[idx . b_strides], a stride of 0 broadcasts
//                   (BinaryMath<op>::value, the op's row in binary_math.h).
//   accumulate:     y += x in place (binary_forward(Add)'s bits for y + x).
//
// Speed: the op is resolved once per call into a compile-time constant (with_op, op_table.h: a
// template argument), so the inner loops hold no switch and the compiler
// vectorises them. tanh and erf are declared to the compiler as having SIMD variants (glibc's
// libmvec), so GELU/Tanh loops vectorise through the very unary_math.h lines the CUDA backend uses;
// exp, sigmoid, silu, softplus and log_sigmoid take unary_math_cpu.h's form of their rows (the same
// formulas through simd_math.h's vexp and vlog1p), which vectorises the same way.
// Half types are staged through small float buffers in chunks, so the math loop is a plain float
// loop: f16 (and bf16 in baseline builds) widened and narrowed by convert.h's SIMD conversions, bf16
// on AVX2+ builds converted inline in the same loops (convert.h, kFuseConversion).
// GELU (tanh and erf) in f32/bf16/f16 on a CPU with AVX-512 (vector_math.h) runs gelu_avx512.h's
// explicit loops instead, over the same chunks: half values converted in registers, the math from
// simd_math_avx512.h; bf16 GELU there is looked up in tables those loops fill (gelu_table.h),
// since bf16 has only 2^16 values: the same bits without the tanh / erf arithmetic.
//
// Parallel strategy: contiguous work is cut into fixed chunks of kChunk elements and OpenMP spreads
// the chunks over threads (only above kParallelMinElements). A chunk is computed the same way
// whatever the thread count, so results do not depend on it. Strided binary ops are split into one
// range of outer rows per thread, each walking its rows with an odometer.

// GCC 12 warns that the undefined vectors inside its own AVX-512 intrinsics may be uninitialised
// (before any include: the warnings point into avx512fintrin.h).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/gelu_avx512.h"
#include "kernels/cpu/gelu_table.h"
#include "kernels/cpu/unary_math_cpu.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "kernels/pair_layout.h"
#include "kernels/strided_layout.h"

#include <omp.h>

// Tell GCC that glibc's libmvec has SIMD versions of these (math-vector.h only says so under
// -ffast-math; the functions are there regardless, accurate to a few ulp). tanh/erf never set errno,
// so loops calling them can be vectorised without -fno-math-errno.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(_OPENMP) && defined(__GLIBC__)
#if __GLIBC_PREREQ(2, 35)
#define HG_ELEMENTWISE_LIBMVEC 1
#endif
#endif
#ifdef HG_ELEMENTWISE_LIBMVEC
extern "C" {
#pragma omp declare simd notinbranch
float tanhf(float) noexcept;
#pragma omp declare simd notinbranch
double tanh(double) noexcept;
#pragma omp declare simd notinbranch
float erff(float) noexcept;
#pragma omp declare simd notinbranch
double erf(double) noexcept;
}
#endif

namespace hg::kernels::cpu {
namespace {

constexpr int64_t kChunk = 2048;
constexpr int64_t kParallelMinElements = int64_t(1) << 15;

template <class T>
constexpr bool is_staged_v = !std::is_same_v<T, acc_t<T>>;

// ---- contiguous map: out[i] = fn(in[i]...) -------------------------------------------------------

// Half types: the inputs are widened into float buffers and the results narrowed from one, both
// through convert.h's SIMD conversions (bit-identical to T(float) and float(T)).
// bf16 on AVX2+ builds (kFuseConversion): widened inline and narrowed in the math loop itself.
template <class T, class Fn, class... In, size_t... K>
void map_chunk_staged(int64_t count, Fn& fn, T* out, std::index_sequence<K...>, const In*... in) {
  using A = acc_t<T>;
  A staged_in[sizeof...(In)][kChunk];
  if constexpr (kFuseConversion<T>) {
    ((void)[&] { for (int64_t i = 0; i < count; ++i) staged_in[K][i] = A(in[i]); }(), ...);
    for (int64_t i = 0; i < count; ++i) out[i] = T(fn(staged_in[K][i]...));
  } else {
    A staged_out[kChunk];
    (to_float(in, staged_in[K], count), ...);
    for (int64_t i = 0; i < count; ++i) staged_out[i] = fn(staged_in[K][i]...);
    from_float(staged_out, out, count);
  }
}

template <class T, class Fn, class... In>
void map_chunk(int64_t count, Fn& fn, T* __restrict out, const In* __restrict... in) {
  if constexpr (is_staged_v<T>) {
    map_chunk_staged(count, fn, out, std::index_sequence_for<In...>{}, in...);
  } else {
    for (int64_t i = 0; i < count; ++i) out[i] = fn(in[i]...);
  }
}

// out[i] = T(fn(acc(in[i])...)) for i < n, chunked and parallel.
template <class T, class Fn, class... In>
void map_elements(int64_t n, Fn fn, T* out, const In*... in) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk;
    const int64_t count = std::min(kChunk, n - begin);
    map_chunk(count, fn, out + begin, (in + begin)...);
  }
}

// ---- unary ---------------------------------------------------------------------------------------

template <class T>
constexpr bool kHasAvx512Gelu = std::is_same_v<T, float> || std::is_same_v<T, bfloat16> || std::is_same_v<T, half>;

// bf16 GELU is looked up (gelu_table.h: the same bits, without the tanh / erf arithmetic; f16's
// tables outgrow L1 and measured no faster, so f16 evaluates).
template <class T>
constexpr bool kHasGeluTable = std::is_same_v<T, bfloat16>;

// body(begin, count) over [0, n) in kChunk-element chunks, on OpenMP threads from kParallelMinElements
// elements on: the GELU fast paths' split, as map_elements'.
template <class Body>
void for_each_gelu_chunk(int64_t n, const Body& body) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk;
    body(begin, std::min(kChunk, n - begin));
  }
}

// GELU through gelu_avx512.h (bf16: its results looked up, gelu_table.h) when the op is GELU, T has an AVX-512 span and the CPU runs it; false
// when the caller should take the generic path. Chunks and threshold as map_elements.
template <class T>
bool gelu_forward_avx512(UnaryOp op, const T* x, T* y, int64_t n) {
  if constexpr (kHasAvx512Gelu<T>) {
    if ((op != UnaryOp::GeluTanh && op != UnaryOp::GeluErf) || vector_math_active() != VectorMath::avx512) return false;
    const bool erf = op == UnaryOp::GeluErf;
    [[maybe_unused]] const bool lookup = gelu_lookup_enabled();
    for_each_gelu_chunk(n, [&](int64_t begin, int64_t count) {
      if constexpr (kHasGeluTable<T>) {
        if (lookup) {
          gelu_forward_lookup(erf, x + begin, y + begin, count);
          return;
        }
      }
      if (erf) simd512::gelu_forward_span<T, true, false>(x + begin, nullptr, y + begin, count);
      else simd512::gelu_forward_span<T, false, false>(x + begin, nullptr, y + begin, count);
    });
    return true;
  } else {
    return false;
  }
}

template <class T>
bool gelu_backward_avx512(UnaryOp op, const T* x, const T* dy, T* dx, int64_t n) {
  if constexpr (kHasAvx512Gelu<T>) {
    if ((op != UnaryOp::GeluTanh && op != UnaryOp::GeluErf) || x == nullptr ||
        vector_math_active() != VectorMath::avx512)
      return false;
    const bool erf = op == UnaryOp::GeluErf;
    [[maybe_unused]] const bool lookup = gelu_lookup_enabled();
    for_each_gelu_chunk(n, [&](int64_t begin, int64_t count) {
      if constexpr (kHasGeluTable<T>) {
        if (lookup) {
          gelu_backward_lookup(erf, x + begin, dy + begin, dx + begin, count);
          return;
        }
      }
      if (erf) simd512::gelu_backward_span<T, true, false>(x + begin, nullptr, dy + begin, dx + begin, nullptr, count);
      else simd512::gelu_backward_span<T, false, false>(x + begin, nullptr, dy + begin, dx + begin, nullptr, count);
    });
    return true;
  } else {
    return false;
  }
}

// y = nullptr is recomputed from x when the derivative reads it.
template <UnaryOp kOp>
constexpr bool kDerivativeReadsY = UnaryMath<kOp>::kReads == DerivativeReads::Y;

template <UnaryOp kOp, class T>
void unary_backward_typed(const T* x, const T* y, const T* dy, T* dx, int64_t n, acc_t<T> s) {
  using A = acc_t<T>;
  if (y != nullptr && x != nullptr) {
    map_elements(
        n, [s](A xv, A yv, A g) { return g * CpuUnaryMath<kOp>::derivative(xv, yv, s); }, dx, x, y, dy);
  } else if (x != nullptr) {  // y not given: recompute it when the derivative needs it
    map_elements(
        n,
        [s](A xv, A g) {
          const A yv = kDerivativeReadsY<kOp> ? CpuUnaryMath<kOp>::value(xv, s) : A(0);
          return g * CpuUnaryMath<kOp>::derivative(xv, yv, s);
        },
        dx, x, dy);
  } else {
    HG_CHECK(UnaryMath<kOp>::kReads != DerivativeReads::X, "[unary_backward] op ", UnaryMath<kOp>::kName,
             " needs x for its derivative, got x = nullptr");
    map_elements(
        n, [s](A yv, A g) { return g * CpuUnaryMath<kOp>::derivative(A(0), yv, s); }, dx, y, dy);
  }
}

// ---- binary --------------------------------------------------------------------------------------

// The op of a binary row as a functor for the loops below.
template <BinaryOp kOp>
struct BinaryFn {
  template <class A>
  A operator()(A a, A b) const {
    return BinaryMath<kOp>::value(a, b);
  }
};

// y[i] = a[i * sa] op b[i * sb]; the common stride patterns get their own loop so each vectorises.
template <class T, class Op>
void binary_row_direct(const T* __restrict a, int64_t sa, const T* __restrict b, int64_t sb, T* __restrict y, int64_t n,
                Op op) {
  using A = acc_t<T>;
  if (sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i) y[i] = T(op(A(a[i]), A(b[i])));
  } else if (sa == 1 && sb == 0) {
    const A bv = A(b[0]);
    for (int64_t i = 0; i < n; ++i) y[i] = T(op(A(a[i]), bv));
  } else if (sa == 0 && sb == 1) {
    const A av = A(a[0]);
    for (int64_t i = 0; i < n; ++i) y[i] = T(op(av, A(b[i])));
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = T(op(A(a[i * sa]), A(b[i * sb])));
  }
}

// Half types: the row goes through float buffers kChunk elements at a time, contiguous operands
// widened and the result narrowed by convert.h, broadcast operands widened once, other strides
// element by element; the float loop in between is binary_row_direct's.
template <class T, class Op>
void binary_row(const T* __restrict a, int64_t sa, const T* __restrict b, int64_t sb, T* __restrict y, int64_t n,
                Op op) {
  if constexpr (!is_staged_v<T> || kFuseConversion<T>) {
    binary_row_direct(a, sa, b, sb, y, n, op);
  } else {
    using A = acc_t<T>;
    A fa[kChunk], fb[kChunk], fy[kChunk];
    const auto stage = [](const T* p, int64_t stride, A* out, int64_t count) -> int64_t {
      if (stride == 1) {
        to_float(p, out, count);
        return 1;
      }
      if (stride == 0) {
        out[0] = A(p[0]);
        return 0;
      }
      for (int64_t i = 0; i < count; ++i) out[i] = A(p[i * stride]);
      return 1;
    };
    for (int64_t begin = 0; begin < n; begin += kChunk) {
      const int64_t count = std::min(kChunk, n - begin);
      const int64_t ua = stage(a + begin * sa, sa, fa, count);
      const int64_t ub = stage(b + begin * sb, sb, fb, count);
      binary_row_direct(fa, ua, fb, ub, fy, count, op);
      from_float(fy, y + begin, count);
    }
  }
}

// Rows [row_begin, row_end) of the layout's outer dimensions; y is contiguous.
template <class T, class Op>
void binary_rows(const T* a, const T* b, T* y, const PairLayout& layout, int64_t row_begin, int64_t row_end, Op op) {
  const int outer_rank = layout.rank - 1;
  const int64_t cols = layout.shape[outer_rank];
  int64_t index[kMaxRank] = {};
  int64_t a_offset = 0, b_offset = 0;
  int64_t rest = row_begin;
  for (int d = outer_rank - 1; d >= 0; --d) {
    index[d] = rest % layout.shape[d];
    rest /= layout.shape[d];
    a_offset += index[d] * layout.first[d];
    b_offset += index[d] * layout.second[d];
  }
  for (int64_t row = row_begin; row < row_end; ++row) {
    binary_row(a + a_offset, layout.first[outer_rank], b + b_offset, layout.second[outer_rank], y + row * cols, cols, op);
    for (int d = outer_rank - 1; d >= 0; --d) {  // odometer step
      a_offset += layout.first[d];
      b_offset += layout.second[d];
      if (++index[d] < layout.shape[d]) break;
      a_offset -= layout.first[d] * layout.shape[d];
      b_offset -= layout.second[d] * layout.shape[d];
      index[d] = 0;
    }
  }
}

template <class T, class Op>
void binary_typed(const T* a, const T* b, T* y, const PairLayout& layout, Op op) {
  using A = acc_t<T>;
  if (layout.rank == 1) {  // flat: both contiguous, or one side a scalar
    const int64_t n = layout.shape[0];
    const int64_t sa = layout.first[0], sb = layout.second[0];
    if (sa == 1 && sb == 1)
      return map_elements(
          n, [op](A av, A bv) { return op(av, bv); }, y, a, b);
    if (sa == 1 && sb == 0) {
      const A bv = A(b[0]);
      return map_elements(
          n, [op, bv](A av) { return op(av, bv); }, y, a);
    }
    if (sa == 0 && sb == 1) {
      const A av = A(a[0]);
      return map_elements(
          n, [op, av](A bv) { return op(av, bv); }, y, b);
    }
  }
  int64_t rows = 1;
  for (int d = 0; d + 1 < layout.rank; ++d) rows *= layout.shape[d];
  const int64_t total = rows * layout.shape[layout.rank - 1];
  if (rows == 1 || total < kParallelMinElements) return binary_rows(a, b, y, layout, 0, rows, op);
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), thread = omp_get_thread_num();
    binary_rows(a, b, y, layout, rows * thread / threads, rows * (thread + 1) / threads, op);
  }
}

// y[i] = y[i] + x[i] in place, chunked and parallel as map_elements. No __restrict anywhere: y is an
// input and the output, and x may be y. Each chunk reads all of its inputs before it writes (half types
// through map_chunk_staged's float buffers), so the sum is BinaryFn<Add>'s, rounded once, as
// binary_forward's.
template <class T>
void accumulate_typed(T* y, const T* x, int64_t n) {
  BinaryFn<BinaryOp::Add> add;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, count = std::min(kChunk, n - begin);
    T* out = y + begin;
    const T* in = x + begin;
    if constexpr (is_staged_v<T>) {
      map_chunk_staged(count, add, out, std::index_sequence<0, 1>{}, static_cast<const T*>(out), in);
    } else {
      for (int64_t i = 0; i < count; ++i) out[i] = add(out[i], in[i]);
    }
  }
}

}  // namespace

void unary_forward(UnaryOp op, const void* x, void* y, int64_t n, double scalar, DType dtype) {
  HG_CHECK(n >= 0, "[unary_forward] n = ", n, ", expected n >= 0");
  dispatch_floating(dtype, "unary_forward", [&]<class T>() {
    using A = acc_t<T>;
    const A s = A(scalar);
    if (gelu_forward_avx512(op, static_cast<const T*>(x), static_cast<T*>(y), n)) return;
    with_op(op, [&]<UnaryOp kOp>() {
      map_elements(
          n, [s](A v) { return CpuUnaryMath<kOp>::value(v, s); }, static_cast<T*>(y), static_cast<const T*>(x));
    });
  });
}

void unary_backward(UnaryOp op, const void* x, const void* y, const void* dy, void* dx, int64_t n, double scalar,
                    DType dtype) {
  HG_CHECK(n >= 0, "[unary_backward] n = ", n, ", expected n >= 0");
  HG_CHECK(x != nullptr || y != nullptr, "[unary_backward] got x = nullptr and y = nullptr, expected at least one");
  dispatch_floating(dtype, "unary_backward", [&]<class T>() {
    if (gelu_backward_avx512(op, static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<T*>(dx), n)) return;
    with_op(op, [&]<UnaryOp kOp>() {
      unary_backward_typed<kOp>(static_cast<const T*>(x), static_cast<const T*>(y), static_cast<const T*>(dy),
                                static_cast<T*>(dx), n, acc_t<T>(scalar));
    });
  });
}

void affine(const void* x, void* y, int64_t n, double alpha, double beta, DType dtype) {
  HG_CHECK(n >= 0, "[affine] n = ", n, ", expected n >= 0");
  dispatch_floating(dtype, "affine", [&]<class T>() {
    using A = acc_t<T>;
    const A a = A(alpha), b = A(beta);
    map_elements(
        n, [a, b](A v) { return a * v + b; }, static_cast<T*>(y), static_cast<const T*>(x));
  });
}

void binary_forward(BinaryOp op, const void* a, const int64_t* a_strides, const void* b, const int64_t* b_strides,
                    void* y, const int64_t* shape, int rank, DType dtype) {
  if (!strided_shape_has_elements("binary_forward", shape, rank)) return;
  const PairLayout layout = collapse_dimensions(shape, a_strides, b_strides, rank);
  dispatch_floating(dtype, "binary_forward", [&]<class T>() {
    with_op(op, [&]<BinaryOp kOp>() {
      binary_typed(static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y), layout, BinaryFn<kOp>{});
    });
  });
}

void accumulate(void* y, const void* x, int64_t n, DType dtype) {
  HG_CHECK(n >= 0, "[accumulate] n = ", n, ", expected n >= 0");
  dispatch_floating(dtype, "accumulate",
                    [&]<class T>() { accumulate_typed(static_cast<T*>(y), static_cast<const T*>(x), n); });
}

}  // namespace hg::kernels::cpu
