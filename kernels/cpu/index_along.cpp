// index_gather and index_scatter_add: gather / index_select and scatter_add / index_add along one
// dimension of [outer, size, inner] (the math and the index layouts: kernels/kernels.h).
//
// The indices are validated first, serially, so the error names the first bad position and nothing
// throws inside an OpenMP region.
//
// index_gather, parallel strategy: one OpenMP iteration per output row (o, i) of `inner` elements.
// Per slice, the row is one memcpy of x's row idx(i); per element, each element reads its own row;
// per element with inner 1 (along the last dimension), one iteration per plane o.
//
// index_scatter_add, per slice (index_add): whole rows; a task owns a chunk of output rows (add_rows
// below). Per element (scatter_add): the output is split into tasks (o, block of up to kBlock columns
// k); a task owns those columns of y[o, :, :] outright, so no two threads write one element. It walks
// i = 0, 1, ..., m - 1 and adds alpha * src[o, i, k] to the running sum of row idx(o, i, k). Either
// way every output element is summed by one thread in increasing i (deterministic, no atomics). f32
// and f64 sum in y itself; f16 / bf16 sum in an fp32 buffer of at most kBufferElements that is rounded
// into y at the end. Per element with inner 1 (along the last dimension): one plane o per iteration,
// its n sums in a buffer, the same order.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"

namespace hg::kernels::cpu {
namespace {

constexpr int64_t kParallelMinElements = int64_t(1) << 15;
constexpr int64_t kBlock = 512;
constexpr int64_t kBufferElements = int64_t(1) << 20;
constexpr int64_t kChunkElements = int64_t(1) << 18;
constexpr int64_t kPrefetchPlaneBytes = int64_t(256) << 10;
constexpr int64_t kCacheLine = 64;

template <class I>
void check_indices(const char* op, const I* index, int64_t count, int64_t n) {
  for (int64_t p = 0; p < count; ++p) {
    const int64_t v = int64_t(index[p]);
    HG_CHECK(v >= 0 && v < n, "[", op, "] index ", v, " at position ", p, " is out of range, expected 0 <= index < ",
             n);
  }
}

void check_sizes(const char* op, int64_t outer, int64_t n, int64_t m, int64_t inner) {
  HG_CHECK(outer >= 0 && n >= 0 && m >= 0 && inner >= 0, "[", op, "] outer = ", outer, ", n = ", n, ", m = ", m,
           ", inner = ", inner, ", expected all >= 0");
}

// index_add: y[o, j, :] = base[o, j, :] + alpha * sum over i with idx(i) = j of src[o, i, :], in
// increasing i. The output rows of a plane are cut into chunks of up to kChunkElements elements (1 MB
// of fp32 sums: L2-resident while sources are added in); a task owns one (plane, chunk) and adds into
// it every source row aimed at it, whole rows at a time.
// The positions i aimed at each chunk are listed once (a stable counting sort of the index), so each
// source row is read once, by the one task that needs it. f32 / f64 sum in y itself; the half types
// in the task's fp32 buffer, rounded into y at the end.
template <class T, class I, class A = acc_t<T>>
void add_rows(const T* base, const T* src, const I* idx, T* out, int64_t outer, int64_t n, int64_t m, int64_t inner,
              A scale) {
  constexpr bool in_place = std::is_same_v<T, A>;
  const int64_t chunk_rows = std::max<int64_t>(1, kChunkElements / std::max<int64_t>(inner, 1));
  const int64_t chunks = (n + chunk_rows - 1) / chunk_rows;
  // by_chunk[start[c], start[c + 1]) are the positions i aimed at chunk c, increasing.
  std::vector<int64_t> start(static_cast<size_t>(chunks + 1), 0), by_chunk(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) ++start[size_t(int64_t(idx[i]) / chunk_rows + 1)];
  for (int64_t c = 0; c < chunks; ++c) start[size_t(c + 1)] += start[size_t(c)];
  {
    std::vector<int64_t> next(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < m; ++i) by_chunk[size_t(next[size_t(int64_t(idx[i]) / chunk_rows)]++)] = i;
  }
  const int64_t tasks = outer * chunks;
#pragma omp parallel if (outer * (n + m) * inner >= kParallelMinElements && tasks > 1)
  {
    std::vector<A> buffer(in_place ? 0 : size_t(std::min(n, chunk_rows) * inner));
    std::vector<float> scratch(std::is_same_v<T, half> ? size_t(inner) : 0);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t o = task / chunks, c = task % chunks, j0 = c * chunk_rows, rows = std::min(chunk_rows, n - j0);
      T* out_rows = out + (o * n + j0) * inner;
      A* acc = nullptr;
      if constexpr (in_place) {
        acc = out_rows;
        if (base == nullptr) {
          std::fill(acc, acc + rows * inner, A(0));
        } else if (base + (o * n + j0) * inner != out_rows) {
          std::copy(base + (o * n + j0) * inner, base + (o * n + j0 + rows) * inner, acc);
        }
      } else {
        acc = buffer.data();
        if (base == nullptr) {
          std::fill(acc, acc + rows * inner, A(0));
        } else {
          to_float(base + (o * n + j0) * inner, acc, rows * inner);
        }
      }
      for (int64_t p = start[size_t(c)]; p < start[size_t(c + 1)]; ++p) {
        const int64_t i = by_chunk[size_t(p)];
        const T* src_row = src + (o * m + i) * inner;
        A* row = acc + (int64_t(idx[i]) - j0) * inner;
        if constexpr (std::is_same_v<T, half>) {  // f16 widens through a buffer; the others inline
          to_float(src_row, scratch.data(), inner);
          const float* add = scratch.data();
#pragma omp simd
          for (int64_t k = 0; k < inner; ++k) row[k] += scale * add[k];
        } else {
#pragma omp simd
          for (int64_t k = 0; k < inner; ++k) row[k] += scale * A(src_row[k]);
        }
      }
      if constexpr (!in_place) from_float(acc, out_rows, rows * inner);
    }
  }
}

}  // namespace

void index_gather(const void* x, const void* index, DType index_dtype, void* y, int64_t outer, int64_t n, int64_t m,
                  int64_t inner, bool per_element, DType dtype) {
  const char* op = per_element ? "gather" : "index_select";
  check_sizes(op, outer, n, m, inner);
  dispatch_index(index_dtype, op, [&]<class I>() {
    const I* idx = static_cast<const I*>(index);
    check_indices(op, idx, per_element ? outer * m * inner : m, n);
    dispatch_all(dtype, op, [&]<class T>() {
      const T* src = static_cast<const T*>(x);
      T* dst = static_cast<T*>(y);
      if (per_element && inner == 1) {  // along the last dimension: one plane (o) per iteration
        // Random picks in a plane miss the cache one line at a time, in no order the hardware
        // prefetcher follows. When the picks are at least half as many as the plane's cache lines (so
        // most lines are read anyway), a plane of up to kPrefetchPlaneBytes is prefetched into L2 line
        // by line while the one before it is gathered (a static schedule gives each thread consecutive
        // planes). A few picks per plane (nll_loss's one) prefetch nothing: the lines would be waste.
        const int64_t plane_bytes = n * int64_t(sizeof(T));
        const bool prefetch = plane_bytes <= kPrefetchPlaneBytes && 2 * m * kCacheLine >= plane_bytes;
#pragma omp parallel for schedule(static) if (outer * m >= kParallelMinElements)
        for (int64_t o = 0; o < outer; ++o) {
          const T* plane = src + o * n;
          if (prefetch && o + 1 < outer) {
            const char* next = reinterpret_cast<const char*>(plane + n);
            for (int64_t b = 0; b < plane_bytes; b += kCacheLine) __builtin_prefetch(next + b, 0, 2);
          }
          const I* plane_index = idx + o * m;
          T* out = dst + o * m;
          for (int64_t i = 0; i < m; ++i) out[i] = plane[int64_t(plane_index[i])];
        }
        return;
      }
      const int64_t rows = outer * m;
#pragma omp parallel for schedule(static) if (rows * inner >= kParallelMinElements)
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t o = r / m, i = r % m;
        T* out = dst + r * inner;
        if (!per_element) {
          std::memcpy(static_cast<void*>(out), src + (o * n + int64_t(idx[i])) * inner, size_t(inner) * sizeof(T));
          continue;
        }
        const I* row_index = idx + r * inner;
        const T* plane = src + o * n * inner;
        for (int64_t k = 0; k < inner; ++k) out[k] = plane[int64_t(row_index[k]) * inner + k];
      }
    });
  });
}

void index_scatter_add(const void* base, const void* src, const void* index, DType index_dtype, void* y, int64_t outer,
                       int64_t n, int64_t m, int64_t inner, bool per_element, double alpha, DType dtype) {
  const char* op = per_element ? "scatter_add" : "index_add";
  check_sizes(op, outer, n, m, inner);
  dispatch_index(index_dtype, op, [&]<class I>() {
    const I* idx = static_cast<const I*>(index);
    check_indices(op, idx, per_element ? outer * m * inner : m, n);
    dispatch_floating(dtype, op, [&]<class T>() {
      using A = acc_t<T>;
      constexpr bool in_place = std::is_same_v<T, A>;
      const T* b = static_cast<const T*>(base);
      const T* s = static_cast<const T*>(src);
      T* out = static_cast<T*>(y);
      const A scale = A(alpha);
      if (per_element && inner == 1) {  // along the last dimension: one plane (o) per iteration, whole rows
#pragma omp parallel if (outer * (n + m) >= kParallelMinElements)
        {
          std::vector<A> acc(static_cast<size_t>(n)), widened(in_place ? 0 : static_cast<size_t>(m));
#pragma omp for schedule(static)
          for (int64_t o = 0; o < outer; ++o) {
            if (b == nullptr) {
              std::fill(acc.begin(), acc.end(), A(0));
            } else if constexpr (in_place) {
              std::copy(b + o * n, b + (o + 1) * n, acc.begin());
            } else {
              to_float(b + o * n, acc.data(), n);
            }
            const A* src_row = nullptr;
            if constexpr (in_place) {
              src_row = s + o * m;
            } else {
              to_float(s + o * m, widened.data(), m);
              src_row = widened.data();
            }
            const I* plane_index = idx + o * m;
            for (int64_t i = 0; i < m; ++i) acc[size_t(plane_index[i])] += scale * src_row[i];
            if constexpr (in_place) {
              std::copy(acc.begin(), acc.end(), out + o * n);
            } else {
              from_float(acc.data(), out + o * n, n);
            }
          }
        }
        return;
      }
      if (!per_element) {
        add_rows<T>(b, s, idx, out, outer, n, m, inner, scale);
        return;
      }
      int64_t block = std::min(kBlock, std::max<int64_t>(inner, 1));
      if (!in_place) block = std::max<int64_t>(1, std::min(block, kBufferElements / std::max<int64_t>(n, 1)));
      const int64_t blocks = (inner + block - 1) / block;
      const int64_t tasks = outer * blocks;
#pragma omp parallel if (outer * (n + m) * inner >= kParallelMinElements)
      {
        std::vector<A> buffer(in_place ? 0 : size_t(n * block)), scratch(in_place ? 0 : size_t(block));
        // Row p[0, width) as A: p itself for f32 / f64, converted into `scratch` for the half types.
        auto widen = [&](const T* p, int64_t width) -> const A* {
          if constexpr (in_place) {
            return p;
          } else {
            to_float(p, scratch.data(), width);
            return scratch.data();
          }
        };
#pragma omp for schedule(static)
        for (int64_t task = 0; task < tasks; ++task) {
          const int64_t o = task / blocks, k0 = (task % blocks) * block, width = std::min(block, inner - k0);
          // acc[j * acc_stride + c] is the running sum of y[o, j, k0 + c].
          A* acc = nullptr;
          int64_t acc_stride = 0;
          if constexpr (in_place) {
            acc = out + o * n * inner + k0;
            acc_stride = inner;
          } else {
            acc = buffer.data();
            acc_stride = width;
          }
          for (int64_t j = 0; j < n; ++j) {
            A* row = acc + j * acc_stride;
            if (b == nullptr) {
              std::fill(row, row + width, A(0));
            } else {
              const A* base_row = widen(b + (o * n + j) * inner + k0, width);
              if (base_row != row) std::copy(base_row, base_row + width, row);
            }
          }
          for (int64_t i = 0; i < m; ++i) {
            const A* src_row = widen(s + (o * m + i) * inner + k0, width);
            if (!per_element) {
              A* row = acc + int64_t(idx[i]) * acc_stride;
              for (int64_t c = 0; c < width; ++c) row[c] += scale * src_row[c];
              continue;
            }
            const I* index_row = idx + (o * m + i) * inner + k0;
            for (int64_t c = 0; c < width; ++c) acc[int64_t(index_row[c]) * acc_stride + c] += scale * src_row[c];
          }
          if constexpr (!in_place) {
            for (int64_t j = 0; j < n; ++j) from_float(acc + j * acc_stride, out + (o * n + j) * inner + k0, width);
          }
        }
      }
    });
  });
}

}  // namespace hg::kernels::cpu
