// reduce: x viewed as contiguous [outer, n, inner].
//   Sum: y[o, i] = scale * sum_j x[o, j, i], accumulated in acc_t.
//   Max: y[o, i] = max_j x[o, j, i]; argmax[o, i] (nullable) = the first j holding that maximum.
//        NaN propagates: a NaN is larger than every number, so the first NaN is the max.
//
// Two layouts, two strategies:
//   inner == 1 (reducing the last dimension): each row of n is cut into fixed blocks of kBlock
//     elements. Every (row, block) pair is a task that OpenMP spreads over threads; a block's
//     partial (sum, or max and its index) is computed with a vectorised loop, then each row combines
//     its partials in block order. Block boundaries depend only on n, never on the thread count, so
//     results are bitwise identical for any number of threads, and one long row still uses all cores.
//   inner > 1: tasks are (o, chunk of kInnerChunk columns); a task walks j in order and keeps one
//     accumulator per column, so the inner loop is contiguous and vectorises.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"

namespace hg::kernels::cpu {
namespace {

constexpr int64_t kBlock = 8192;
constexpr int64_t kInnerChunk = 512;
constexpr int64_t kParallelMinElements = int64_t(1) << 15;

template <class A>
struct MaxPartial {
  A value;
  int64_t index;
};

// True when `candidate` should replace `current` as the maximum found so far (NaN beats numbers).
template <class A>
bool beats(A candidate, A current) {
  return candidate > current || (std::isnan(candidate) && !std::isnan(current));
}

template <class T>
constexpr bool is_staged_v = !std::is_same_v<T, acc_t<T>>;

template <class T>
acc_t<T> sum_block(const T* __restrict x, int64_t count) {
  using A = acc_t<T>;
  if constexpr (is_staged_v<T>) {  // f16/bf16: widened by convert.h, then the float loop below
    A staged[kBlock];
    to_float(x, staged, count);
    return sum_block(static_cast<const A*>(staged), count);
  }
  A acc = 0;
#pragma omp simd reduction(+ : acc)
  for (int64_t j = 0; j < count; ++j) acc += A(x[j]);
  return acc;
}

// The maximum of x[0, count) and the first index holding it (first NaN if any). The first pass keeps
// kLanes independent running maxima and NaN flags so it vectorises (GCC does not vectorise a float
// max reduction without -ffinite-math-only); the second pass finds the first index holding the result.
template <class T>
MaxPartial<acc_t<T>> max_block(const T* __restrict x, int64_t count) {
  using A = acc_t<T>;
  if constexpr (is_staged_v<T>) {  // f16/bf16: widened by convert.h, then the float loop below
    A staged[kBlock];
    to_float(x, staged, count);
    return max_block(static_cast<const A*>(staged), count);
  }
  constexpr int64_t kLanes = 64 / sizeof(A);
  A lanes[kLanes];
  uint8_t nan_lanes[kLanes] = {};
  for (int64_t k = 0; k < kLanes; ++k) lanes[k] = A(x[0]);
  int64_t j = 0;
  for (; j + kLanes <= count; j += kLanes) {
    for (int64_t k = 0; k < kLanes; ++k) {
      const A v = A(x[j + k]);
      lanes[k] = v > lanes[k] ? v : lanes[k];
      nan_lanes[k] |= v != v;
    }
  }
  A best = lanes[0];
  bool saw_nan = false;
  for (int64_t k = 0; k < kLanes; ++k) {
    best = lanes[k] > best ? lanes[k] : best;
    saw_nan |= nan_lanes[k] != 0;
  }
  for (; j < count; ++j) {
    const A v = A(x[j]);
    best = v > best ? v : best;
    saw_nan |= v != v;
  }
  j = 0;
  if (saw_nan) {
    while (!std::isnan(A(x[j]))) ++j;
    return {A(x[j]), j};
  }
  while (A(x[j]) != best) ++j;
  return {best, j};
}

template <class T>
void reduce_last_dim(ReduceOp op, const T* x, T* y, int64_t* argmax, int64_t outer, int64_t n, acc_t<T> scale) {
  using A = acc_t<T>;
  const int64_t blocks = std::max<int64_t>(1, (n + kBlock - 1) / kBlock);
  const int64_t tasks = outer * blocks;
  const bool parallel = outer * n >= kParallelMinElements;
  if (op == ReduceOp::Sum) {
    std::vector<A> partial(size_t(tasks), A(0));
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t begin = (t % blocks) * kBlock;
      if (begin < n) partial[t] = sum_block(x + (t / blocks) * n + begin, std::min(kBlock, n - begin));
    }
#pragma omp parallel for schedule(static) if (parallel && outer > 1)
    for (int64_t o = 0; o < outer; ++o) {
      A acc = 0;
      for (int64_t b = 0; b < blocks; ++b) acc += partial[o * blocks + b];
      y[o] = T(acc * scale);
    }
    return;
  }
  std::vector<MaxPartial<A>> partial{size_t(tasks)};
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t begin = (t % blocks) * kBlock;
    partial[t] = max_block(x + (t / blocks) * n + begin, std::min(kBlock, n - begin));
    partial[t].index += begin;
  }
#pragma omp parallel for schedule(static) if (parallel && outer > 1)
  for (int64_t o = 0; o < outer; ++o) {
    MaxPartial<A> best = partial[o * blocks];
    for (int64_t b = 1; b < blocks; ++b) {
      if (beats(partial[o * blocks + b].value, best.value)) best = partial[o * blocks + b];
    }
    y[o] = T(best.value);
    if (argmax) argmax[o] = best.index;
  }
}

// One task of the inner > 1 layout: columns [c0, c0 + count) of outer slice o.
template <class T>
void reduce_columns(ReduceOp op, const T* x, T* y, int64_t* argmax, int64_t n, int64_t inner, int64_t count,
                    acc_t<T> scale) {
  using A = acc_t<T>;
  // f16/bf16 rows are widened into `staged` (and results narrowed) by convert.h.
  A acc[kInnerChunk], staged[is_staged_v<T> ? kInnerChunk : 1];
  const auto row_as_acc = [&](const T* row) -> const A* {
    if constexpr (is_staged_v<T>) {
      to_float(row, staged, count);
      return staged;
    } else {
      return row;
    }
  };
  const auto store = [&](A* values) {
    if constexpr (is_staged_v<T>) {
      from_float(values, y, count);
    } else {
      std::copy(values, values + count, y);
    }
  };
  const A* first = row_as_acc(x);
  std::copy(first, first + count, acc);
  if (op == ReduceOp::Sum) {
    for (int64_t j = 1; j < n; ++j) {
      const A* __restrict row = row_as_acc(x + j * inner);
      for (int64_t i = 0; i < count; ++i) acc[i] += row[i];
    }
    for (int64_t i = 0; i < count; ++i) acc[i] = acc[i] * scale;
    store(acc);
    return;
  }
  int64_t index[kInnerChunk] = {};
  for (int64_t j = 1; j < n; ++j) {
    const A* __restrict row = row_as_acc(x + j * inner);
    for (int64_t i = 0; i < count; ++i) {
      const A v = row[i];
      const bool take = v > acc[i] || (v != v && acc[i] == acc[i]);
      acc[i] = take ? v : acc[i];
      index[i] = take ? j : index[i];
    }
  }
  store(acc);
  if (argmax) std::copy(index, index + count, argmax);
}

template <class T>
void reduce_inner(ReduceOp op, const T* x, T* y, int64_t* argmax, int64_t outer, int64_t n, int64_t inner,
                  acc_t<T> scale) {
  const int64_t chunks = (inner + kInnerChunk - 1) / kInnerChunk;
  const int64_t tasks = outer * chunks;
#pragma omp parallel for schedule(static) if (outer * n * inner >= kParallelMinElements && tasks > 1)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t o = t / chunks, c0 = (t % chunks) * kInnerChunk;
    const int64_t count = std::min(kInnerChunk, inner - c0);
    reduce_columns(op, x + o * n * inner + c0, y + o * inner + c0, argmax ? argmax + o * inner + c0 : nullptr, n, inner,
                   count, scale);
  }
}

}  // namespace

void reduce(ReduceOp op, const void* x, void* y, int64_t* argmax, int64_t outer, int64_t n, int64_t inner, double scale,
            DType dtype) {
  HG_CHECK(outer >= 0 && n >= 0 && inner >= 0, "[reduce] sizes outer = ", outer, ", n = ", n, ", inner = ", inner,
           ", expected all >= 0");
  if (outer == 0 || inner == 0) return;
  HG_CHECK(op != ReduceOp::Max || n > 0, "[reduce] Max over an empty dimension (n = 0) of [", outer, ", 0, ", inner,
           "], expected n >= 1");
  dispatch_floating(dtype, "reduce", [&]<class T>() {
    using A = acc_t<T>;
    const T* xt = static_cast<const T*>(x);
    T* yt = static_cast<T*>(y);
    if (n == 0) {  // an empty sum
      std::fill(yt, yt + outer * inner, T(A(0)));
      return;
    }
    if (inner == 1) {
      reduce_last_dim(op, xt, yt, argmax, outer, n, A(scale));
    } else {
      reduce_inner(op, xt, yt, argmax, outer, n, inner, A(scale));
    }
  });
}

}  // namespace hg::kernels::cpu
