// topk over the rows of contiguous x [rows, n] (the math and the order: kernels/kernels.h,
// kernels/topk_key.h).
//
// Parallel strategy: one OpenMP iteration per row, static schedule. For k <= 32 the row is scanned
// once, keeping its k first (key, index) pairs so far in a sorted per-thread buffer. An element enters
// only when it comes before the last of them, by insertion. Once the buffer is full, the row goes by
// blocks of kBlock values: a vectorised comparison against the last held value marks the values that
// can enter, turning away whole blocks (after the first few hundred values, nearly all of them), and
// only the marked values are checked in the exact order. For larger k the row's pairs go
// to a per-thread buffer and std::partial_sort brings the k first to the front (n log k comparisons).
// Either way they are written out in topk's order. The order is total (ties by index), so the result
// does not depend on the thread count or on the sort's stability.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "kernels/topk_key.h"

namespace hg::kernels::cpu {
namespace {

constexpr int64_t kParallelMinElements = int64_t(1) << 14;
// Up to this k a row is scanned once, keeping the k first in a sorted buffer; beyond, partial_sort.
constexpr int64_t kStreamingMaxK = 32;
// Values compared at once against the last held one.
constexpr int64_t kBlock = 64;

// Marks in flag[0, len) the values of v[0, len) that can come before a held value `last`: a larger
// value, or a NaN while `last` is a number (largest); a smaller value, or any number while `last` is
// NaN (smallest). An equal value never does (it comes later, and ties go by index). Returns whether
// any is marked. Conservative is enough: the caller re-checks each marked value in the exact order.
template <class E, class A>
bool mark_candidates(const E* v, int64_t len, A last, bool largest, uint8_t* flag) {
  const bool last_nan = last != last;
  if (largest && last_nan) return false;
  // The flags are OR-ed as they are made: reading them back wide right after the narrow stores would
  // stall on store forwarding.
  uint8_t any = 0;
  if (largest) {
    for (int64_t i = 0; i < len; ++i) {
      const uint8_t f = uint8_t(A(v[i]) > last) | uint8_t(A(v[i]) != A(v[i]));
      flag[i] = f, any |= f;
    }
  } else if (last_nan) {
    for (int64_t i = 0; i < len; ++i) {
      const uint8_t f = uint8_t(A(v[i]) == A(v[i]));
      flag[i] = f, any |= f;
    }
  } else {
    for (int64_t i = 0; i < len; ++i) {
      const uint8_t f = uint8_t(A(v[i]) < last);
      flag[i] = f, any |= f;
    }
  }
  return any != 0;
}

}  // namespace

size_t topk_workspace_bytes(int64_t, int64_t) { return 0; }

void topk(const void* x, void* values, int64_t* indices, int64_t rows, int64_t n, int64_t k, bool largest, void*,
          size_t, DType dtype) {
  HG_CHECK(rows >= 0 && n >= 0 && k >= 0 && k <= n, "[topk] rows = ", rows, ", n = ", n, ", k = ", k,
           ", expected rows >= 0 and 0 <= k <= n");
  if (rows * k == 0) return;
  dispatch_floating(dtype, "topk", [&]<class T>() {
    using A = acc_t<T>;
    const T* src = static_cast<const T*>(x);
    T* out = static_cast<T*>(values);
#pragma omp parallel if (rows * n >= kParallelMinElements)
    {
      std::vector<std::pair<uint64_t, int64_t>> row(static_cast<size_t>(k <= kStreamingMaxK ? k : n));
      std::vector<float> block(std::is_same_v<T, half> ? kBlock : 0);  // f16 values widened for the test
      uint8_t flag[kBlock];
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        const T* in = src + r * n;
        if (k <= kStreamingMaxK) {
          // The k first so far, in order; an element enters only when it comes before the last of them
          // (most are turned away by that one comparison), by insertion.
          int64_t held = 0;
          auto offer = [&](int64_t i) {
            const uint64_t key = topk_key(double(in[i]), largest);
            if (held == k && !topk_before(key, i, row[size_t(k - 1)].first, row[size_t(k - 1)].second)) return;
            int64_t at = held < k ? held++ : k - 1;
            while (at > 0 && topk_before(key, i, row[size_t(at - 1)].first, row[size_t(at - 1)].second)) {
              row[size_t(at)] = row[size_t(at - 1)];
              --at;
            }
            row[size_t(at)] = {key, i};
          };
          int64_t i = 0;
          for (; i < n && held < k; ++i) offer(i);
          for (; i < n; i += kBlock) {
            const int64_t len = std::min(kBlock, n - i);
            const A last = A(in[row[size_t(k - 1)].second]);
            bool any = false;
            if constexpr (std::is_same_v<T, half>) {
              to_float(in + i, block.data(), len);
              any = mark_candidates(block.data(), len, last, largest, flag);
            } else {
              any = mark_candidates(in + i, len, last, largest, flag);
            }
            if (!any) continue;
            std::fill(flag + len, flag + kBlock, uint8_t(0));
            for (int64_t w = 0; w < kBlock; w += 8) {  // the marked values, eight flags at a time
              uint64_t word;
              std::memcpy(&word, flag + w, sizeof word);
              for (; word != 0; word &= word - 1) offer(i + w + __builtin_ctzll(word) / 8);
            }
          }
        } else {
          for (int64_t i = 0; i < n; ++i) row[size_t(i)] = {topk_key(double(in[i]), largest), i};
          std::partial_sort(row.begin(), row.begin() + k, row.end(), [](const auto& a, const auto& b) {
            return topk_before(a.first, a.second, b.first, b.second);
          });
        }
        for (int64_t j = 0; j < k; ++j) {
          const int64_t i = row[size_t(j)].second;
          out[r * k + j] = in[i];
          indices[r * k + j] = i;
        }
      }
    }
  });
}

}  // namespace hg::kernels::cpu
