// Embedding lookup over weight [vocab, dim] and ids [n_ids].
//   forward:  y[i, :] = weight[ids[i], :]
//   backward: dweight[v, :] = sum over i with ids[i] == v of dy[i, :], in increasing i, in acc_t;
//             rows no id points at are 0 (dweight is written, not accumulated into).
//
// Ids are validated first, serially, so the error names the first bad position and nothing throws
// inside an OpenMP region.
//
// Parallel strategy: forward copies one row per OpenMP iteration. Backward first groups positions by
// id with a stable counting sort (positions of each id stay in increasing order), then gives each
// vocabulary row to one iteration: that row's sum is computed by one thread in a fixed order, so
// the result is deterministic and needs no atomics.
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

template <class I>
void check_ids(const char* op, const I* ids, int64_t n_ids, int64_t vocab) {
  for (int64_t i = 0; i < n_ids; ++i) {
    const int64_t id = int64_t(ids[i]);
    HG_CHECK(id >= 0 && id < vocab, "[", op, "] id ", id, " at position ", i, " is out of range, expected 0 <= id < ",
             vocab);
  }
}

// CSR grouping of positions by id: positions of id v are order[start[v] .. start[v + 1]), increasing.
struct PositionsById {
  std::vector<int64_t> start, order;
};

template <class I>
PositionsById group_positions(const I* ids, int64_t n_ids, int64_t vocab) {
  PositionsById out;
  out.start.assign(size_t(vocab + 1), 0);
  for (int64_t i = 0; i < n_ids; ++i) ++out.start[size_t(ids[i]) + 1];
  for (int64_t v = 0; v < vocab; ++v) out.start[v + 1] += out.start[v];
  std::vector<int64_t> next(out.start.begin(), out.start.end() - 1);
  out.order.resize(size_t(n_ids));
  for (int64_t i = 0; i < n_ids; ++i) out.order[next[size_t(ids[i])]++] = i;
  return out;
}

template <class T, class I>
void backward_typed(const T* dy, const I* ids, T* dweight, int64_t n_ids, int64_t vocab, int64_t dim) {
  using A = acc_t<T>;
  const PositionsById groups = group_positions(ids, n_ids, vocab);
#pragma omp parallel if ((n_ids + vocab) * dim >= kParallelMinElements && vocab > 1)
  {
    std::vector<A> acc(static_cast<size_t>(dim));
    std::vector<A> staged(std::is_same_v<T, A> ? 0 : static_cast<size_t>(dim));
#pragma omp for schedule(static)
    for (int64_t v = 0; v < vocab; ++v) {
      std::fill(acc.begin(), acc.end(), A(0));
      for (int64_t k = groups.start[v]; k < groups.start[v + 1]; ++k) {
        const T* __restrict row_t = dy + groups.order[k] * dim;
        const A* __restrict row;
        if constexpr (std::is_same_v<T, A>) {
          row = row_t;
        } else {  // f16/bf16 rows widened (and the sums narrowed) by convert.h
          to_float(row_t, staged.data(), dim);
          row = staged.data();
        }
        A* __restrict sum = acc.data();
        for (int64_t c = 0; c < dim; ++c) sum[c] += row[c];
      }
      T* out = dweight + v * dim;
      if constexpr (std::is_same_v<T, A>) {
        std::copy(acc.begin(), acc.end(), out);
      } else {
        from_float(acc.data(), out, dim);
      }
    }
  }
}

}  // namespace

void embedding_forward(const void* weight, const void* ids, DType index_dtype, void* y, int64_t n_ids, int64_t vocab,
                       int64_t dim, DType dtype) {
  HG_CHECK(n_ids >= 0 && vocab >= 0 && dim >= 0, "[embedding_forward] n_ids = ", n_ids, ", vocab = ", vocab,
           ", dim = ", dim, ", expected all >= 0");
  HG_CHECK(is_floating(dtype), "[embedding_forward] expected a floating dtype, got ", dtype_name(dtype));
  const size_t row_bytes = size_t(dim) * dtype_size(dtype);
  dispatch_index(index_dtype, "embedding_forward", [&]<class I>() {
    const I* id = static_cast<const I*>(ids);
    check_ids("embedding_forward", id, n_ids, vocab);
    const char* w = static_cast<const char*>(weight);
    char* out = static_cast<char*>(y);
#pragma omp parallel for schedule(static) if (n_ids * dim >= kParallelMinElements)
    for (int64_t i = 0; i < n_ids; ++i) std::memcpy(out + i * row_bytes, w + int64_t(id[i]) * row_bytes, row_bytes);
  });
}

void embedding_backward(const void* dy, const void* ids, DType index_dtype, void* dweight, int64_t n_ids, int64_t vocab,
                        int64_t dim, DType dtype) {
  HG_CHECK(n_ids >= 0 && vocab >= 0 && dim >= 0, "[embedding_backward] n_ids = ", n_ids, ", vocab = ", vocab,
           ", dim = ", dim, ", expected all >= 0");
  dispatch_floating(dtype, "embedding_backward", [&]<class T>() {
    dispatch_index(index_dtype, "embedding_backward", [&]<class I>() {
      const I* id = static_cast<const I*>(ids);
      check_ids("embedding_backward", id, n_ids, vocab);
      backward_typed(static_cast<const T*>(dy), id, static_cast<T*>(dweight), n_ids, vocab, dim);
    });
  });
}

}  // namespace hg::kernels::cpu
