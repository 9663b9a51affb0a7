// Fused log-softmax + negative log-likelihood over logits [rows, cols] and targets [rows].
//
// Math, per row r with target t (in acc_t; loss, lse and dloss are acc_t = accumulate_dtype):
//   m = max_c x[c],  lse = m + log(sum_c exp(x[c] - m)),  loss = lse - x[t]
//   dlogits[c] = dloss * (exp(x[c] - lse) - [c == t])
// Rows whose target is ignore_index get loss = 0 and dlogits = 0 (their lse is still written).
// The forward pass never stores probabilities: the sum of exponentials lives in a register, so the
// logits are read twice (max, then sum; the second read hits cache) and only two numbers per row
// are written.
//
// Targets are validated before any work, serially, so the error names the first bad row and no
// exception is thrown inside an OpenMP region.
//
// The mean over the counted rows (mean = sum * inv_count, inv_count = 1 / count, NaN for no rows) is
// summed serially in row order after the parallel loop, the CUDA backend's contract on the host.
//
// Parallel strategy: one row per OpenMP iteration (static schedule) once rows * cols is large.
// f16 rows (and bf16 rows in builds below AVX2) are widened into a per-thread float row and dlogits
// narrowed from one, through convert.h's SIMD conversions; bf16 on AVX2+ builds converts inside the
// loops (convert.h, kFuseConversion).
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "kernels/cpu/simd_math.h"

namespace hg::kernels::cpu {
namespace {

constexpr int64_t kParallelMinElements = int64_t(1) << 15;

template <class I>
void check_targets(const char* op, const I* targets, int64_t rows, int64_t cols, int64_t ignore_index) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = int64_t(targets[r]);
    HG_CHECK(t == ignore_index || (t >= 0 && t < cols), "[", op, "] target ", t, " at row ", r,
             " is out of range, expected 0 <= target < ", cols, " (or ignore_index = ", ignore_index, ")");
  }
}

// The row's maximum in acc_t, with kLanes independent running maxima so the loop vectorises (GCC
// does not vectorise a float max reduction without -ffinite-math-only). A NaN may or may not be
// picked; either way it reaches the sum and the row's loss comes out NaN.
template <class T>
acc_t<T> row_max(const T* __restrict x, int64_t n) {
  using A = acc_t<T>;
  constexpr int64_t kLanes = 64 / sizeof(A);
  A lanes[kLanes];
  for (int64_t k = 0; k < kLanes; ++k) lanes[k] = -std::numeric_limits<A>::infinity();
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes) {
    for (int64_t k = 0; k < kLanes; ++k) lanes[k] = A(x[c + k]) > lanes[k] ? A(x[c + k]) : lanes[k];
  }
  A m = -std::numeric_limits<A>::infinity();
  for (int64_t k = 0; k < kLanes; ++k) m = lanes[k] > m ? lanes[k] : m;
  for (; c < n; ++c) m = A(x[c]) > m ? A(x[c]) : m;
  return m;
}

template <class T>
constexpr bool is_staged_v = !std::is_same_v<T, acc_t<T>>;

// The row in acc_t: itself for f32/f64; f16/bf16 widened into `staged` by convert.h.
template <class T>
const acc_t<T>* staged_row(const T* row, std::vector<acc_t<T>>& staged, int64_t cols) {
  if constexpr (is_staged_v<T>) {
    to_float(row, staged.data(), cols);
    return staged.data();
  } else {
    return row;
  }
}

template <class T>
acc_t<T> row_logsumexp(const T* __restrict x, int64_t cols) {
  using A = acc_t<T>;
  const A m = row_max(x, cols);
  A s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < cols; ++c) s += vexp(A(x[c]) - m);
  return m + std::log(s);
}

template <class T, class I>
void forward_typed(const T* x, const I* targets, acc_t<T>* loss, acc_t<T>* lse, acc_t<T>* mean, acc_t<T>* inv_count,
                   int64_t rows, int64_t cols, int64_t ignore_index) {
  using A = acc_t<T>;
  check_targets("cross_entropy_forward", targets, rows, cols, ignore_index);
  int64_t counted = 0;
#pragma omp parallel reduction(+ : counted) if (rows * cols >= kParallelMinElements)
  {
    std::vector<A> staged(is_staged_v<T> ? size_t(cols) : 0);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t t = int64_t(targets[r]);
      A row_lse, target_logit = 0;
      if constexpr (kFuseConversion<T>) {  // bf16 on AVX2+ builds: converted inside the loops
        row_lse = row_logsumexp(x + r * cols, cols);
        if (t != ignore_index) target_logit = A(x[r * cols + t]);
      } else {
        const A* row = staged_row(x + r * cols, staged, cols);
        row_lse = row_logsumexp(row, cols);
        if (t != ignore_index) target_logit = row[t];
      }
      lse[r] = row_lse;
      if (t == ignore_index) {
        loss[r] = A(0);
      } else {
        loss[r] = row_lse - target_logit;
        ++counted;
      }
    }
  }
  A sum = 0;
  for (int64_t r = 0; r < rows; ++r) sum += loss[r];  // ignored rows hold 0
  const A inv = counted > 0 ? A(1) / A(counted) : std::numeric_limits<A>::quiet_NaN();
  *inv_count = inv;
  *mean = sum * inv;
}

template <class T, class I>
void backward_typed(const T* x, const I* targets, const acc_t<T>* lse, const acc_t<T>* dloss, T* dx, int64_t rows,
                    int64_t cols, int64_t ignore_index) {
  using A = acc_t<T>;
  check_targets("cross_entropy_backward", targets, rows, cols, ignore_index);
#pragma omp parallel if (rows * cols >= kParallelMinElements)
  {
    std::vector<A> staged(is_staged_v<T> ? size_t(cols) : 0), staged_dx(staged.size());
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      T* __restrict drow = dx + r * cols;
      const int64_t t = int64_t(targets[r]);
      if (t == ignore_index) {
        for (int64_t c = 0; c < cols; ++c) drow[c] = T(A(0));
        continue;
      }
      const A g = dloss[r], row_lse = lse[r];
      if constexpr (kFuseConversion<T>) {  // bf16 on AVX2+ builds: converted inside the loop
        const T* __restrict row = x + r * cols;
        for (int64_t c = 0; c < cols; ++c) drow[c] = T(g * vexp(A(row[c]) - row_lse));
        drow[t] = T(g * (vexp(A(row[t]) - row_lse) - A(1)));
      } else {
        const A* __restrict row = staged_row(x + r * cols, staged, cols);
        A* __restrict d = staged_dx.data();
        if constexpr (!is_staged_v<T>) d = drow;
        for (int64_t c = 0; c < cols; ++c) d[c] = g * vexp(row[c] - row_lse);
        d[t] = g * (vexp(row[t] - row_lse) - A(1));
        if constexpr (is_staged_v<T>) from_float(d, drow, cols);
      }
    }
  }
}

}  // namespace

void cross_entropy_forward(const void* logits, const void* targets, DType index_dtype, void* loss, void* lse,
                           void* mean, void* inv_count, int64_t rows, int64_t cols, int64_t ignore_index, DType dtype) {
  HG_CHECK(rows >= 0 && cols > 0, "[cross_entropy_forward] rows = ", rows, ", cols = ", cols,
           ", expected rows >= 0 and cols >= 1");
  dispatch_floating(dtype, "cross_entropy_forward", [&]<class T>() {
    dispatch_index(index_dtype, "cross_entropy_forward", [&]<class I>() {
      using A = acc_t<T>;
      forward_typed(static_cast<const T*>(logits), static_cast<const I*>(targets), static_cast<A*>(loss),
                    static_cast<A*>(lse), static_cast<A*>(mean), static_cast<A*>(inv_count), rows, cols, ignore_index);
    });
  });
}

void cross_entropy_backward(const void* logits, const void* targets, DType index_dtype, const void* lse,
                            const void* dloss, void* dlogits, int64_t rows, int64_t cols, int64_t ignore_index,
                            DType dtype) {
  HG_CHECK(rows >= 0 && cols > 0, "[cross_entropy_backward] rows = ", rows, ", cols = ", cols,
           ", expected rows >= 0 and cols >= 1");
  dispatch_floating(dtype, "cross_entropy_backward", [&]<class T>() {
    dispatch_index(index_dtype, "cross_entropy_backward", [&]<class I>() {
      backward_typed(static_cast<const T*>(logits), static_cast<const I*>(targets), static_cast<const acc_t<T>*>(lse),
                     static_cast<const acc_t<T>*>(dloss), static_cast<T*>(dlogits), rows, cols, ignore_index);
    });
  });
}

}  // namespace hg::kernels::cpu
