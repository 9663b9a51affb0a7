// resample2d: a separable linear map of [H, W] planes (the math: kernels/kernels.h; the tables:
// kernels/resample_axis.h).
//
// Parallel strategy: one OpenMP iteration per output row (p, i), static schedule. A row is made in two
// passes through a per-thread acc_t buffer of one input row:
//   1. rows: acc[w] = sum_{a in taps(h, i)} h.weight[a] x[p, h.index[a], w] over the whole input
//      width (contiguous, vectorised; half types widened a row at a time);
//   2. columns: y[p, i, j] = sum_{b in taps(w, j)} w.weight[b] acc[w.index[b]], with the weights in
//      acc_t once per call and, when every column has 1 or 2 taps (nearest, linear), without the offsets.
// Each output is summed in the same order whatever the thread count, so the result is the same bits.
// A map whose every output takes one input with weight 1 on both axes (nearest upsampling by any
// factor, nearest-exact, the identity) is a gather: its rows are copied element by element as bits,
// with no widening (PyTorch's nearest copies too; -0 stays -0 there, where 0 + 1 x made it +0).
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"

namespace hg::kernels::cpu {
namespace {

constexpr int64_t kParallelMinWork = int64_t(1) << 15;

// Whether every output of the axis takes exactly one input, with weight 1.
bool is_unit_gather(const ResampleAxis& axis) {
  for (int64_t o = 0; o < axis.out; ++o)
    if (axis.offset[o + 1] - axis.offset[o] != 1 || axis.weight[axis.offset[o]] != 1.0) return false;
  return true;
}

// y[p, i, j] = x[p, h.index[i], w.index[j]], the elements moved as E (their bits).
template <class E>
void gather_rows(const E* x, E* y, int64_t planes, const ResampleAxis& h, const ResampleAxis& w) {
  const int64_t rows = planes * h.out;
#pragma omp parallel for schedule(static) if (rows * w.out >= kParallelMinWork)
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t p = row / h.out, i = row % h.out;
    const E* in = x + (p * h.in + h.index[h.offset[i]]) * w.in;
    E* out = y + row * w.out;
    const int64_t* columns = w.index;  // offset[j] == j: one tap per column
    for (int64_t j = 0; j < w.out; ++j) out[j] = in[columns[j]];
  }
}

}  // namespace

void resample2d(const void* x, void* y, int64_t planes, ResampleAxis h, ResampleAxis w, DType dtype) {
  HG_CHECK(planes >= 0 && h.in >= 0 && h.out >= 0 && w.in >= 0 && w.out >= 0, "[resample2d] planes = ", planes,
           ", input ", h.in, "x", w.in, ", output ", h.out, "x", w.out, ", expected all >= 0");
  if (planes * h.out * w.out == 0) return;
  if (is_floating(dtype) && is_unit_gather(h) && is_unit_gather(w)) {
    switch (dtype_size(dtype)) {
      case 2:
        return gather_rows(static_cast<const uint16_t*>(x), static_cast<uint16_t*>(y), planes, h, w);
      case 4:
        return gather_rows(static_cast<const uint32_t*>(x), static_cast<uint32_t*>(y), planes, h, w);
      default:
        return gather_rows(static_cast<const uint64_t*>(x), static_cast<uint64_t*>(y), planes, h, w);
    }
  }
  dispatch_floating(dtype, "resample2d", [&]<class T>() {
    using A = acc_t<T>;
    constexpr bool widened = !std::is_same_v<T, A>;
    const T* src = static_cast<const T*>(x);
    T* dst = static_cast<T*>(y);
    const int64_t rows = planes * h.out;
    const int64_t taps_per_row = h.offset[h.out] / std::max<int64_t>(h.out, 1) + 1;
    // The column taps' weights in acc_t, once; and whether every output column has the same number of
    // taps (1: nearest, 2: linear), so the column pass can index the taps without the offsets.
    std::vector<A> column_weight(static_cast<size_t>(w.offset[w.out]));
    for (size_t t = 0; t < column_weight.size(); ++t) column_weight[t] = A(w.weight[t]);
    int64_t fixed_taps = w.out > 0 ? w.offset[1] - w.offset[0] : 0;
    for (int64_t j = 1; j < w.out && fixed_taps > 0; ++j)
      if (w.offset[j + 1] - w.offset[j] != fixed_taps) fixed_taps = 0;
    const A* cw = column_weight.data();
    const int64_t* ci = w.index;
#pragma omp parallel if (rows * taps_per_row * (w.in + w.out) >= kParallelMinWork)
    {
      std::vector<A> acc(static_cast<size_t>(w.in)), in_row(widened ? static_cast<size_t>(w.in) : 0),
          out_row(widened ? static_cast<size_t>(w.out) : 0);
#pragma omp for schedule(static)
      for (int64_t row = 0; row < rows; ++row) {
        const int64_t p = row / h.out, i = row % h.out;
        std::fill(acc.begin(), acc.end(), A(0));
        for (int64_t a = h.offset[i]; a < h.offset[i + 1]; ++a) {
          const A weight = A(h.weight[a]);
          const T* in = src + (p * h.in + h.index[a]) * w.in;
          const A* values = reinterpret_cast<const A*>(in);
          if constexpr (widened) {
            to_float(in, in_row.data(), w.in);
            values = in_row.data();
          }
          for (int64_t c = 0; c < w.in; ++c) acc[size_t(c)] += weight * values[c];
        }
        T* out = dst + row * w.out;
        A* sums = widened ? out_row.data() : reinterpret_cast<A*>(out);
        const A* a_row = acc.data();
        if (fixed_taps == 1) {
          for (int64_t j = 0; j < w.out; ++j) sums[j] = A(0) + cw[j] * a_row[ci[j]];
        } else if (fixed_taps == 2) {
          for (int64_t j = 0; j < w.out; ++j)
            sums[j] = (A(0) + cw[2 * j] * a_row[ci[2 * j]]) + cw[2 * j + 1] * a_row[ci[2 * j + 1]];
        } else {
          for (int64_t j = 0; j < w.out; ++j) {
            A sum = 0;
            for (int64_t b = w.offset[j]; b < w.offset[j + 1]; ++b) sum += cw[b] * a_row[ci[b]];
            sums[j] = sum;
          }
        }
        if constexpr (widened) from_float(out_row.data(), out, w.out);
      }
    }
  });
}

}  // namespace hg::kernels::cpu
