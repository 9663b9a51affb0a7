// unscale_and_check: the loss scaler's fused pass over many gradient tensors (math in
// kernels/unscale_math.h): x *= inv_scale in place, and whether any element is inf or NaN.
//
// Parallel strategy: the tensors are cut into chunks of kChunk elements (the last chunk of a tensor
// is shorter; a chunk never spans two tensors), and the chunks of all tensors together form one
// OpenMP loop, so many small tensors and one large one spread over the threads alike. Each chunk
// ORs its own found flag; OR is associative and exact, so the result and every stored element are
// the same whatever the thread count. Arguments are validated before the parallel region (which
// must not throw); inside it a dtype switch that cannot fail picks the typed loop.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "kernels/unscale_math.h"

namespace hg::kernels::cpu {
namespace {

constexpr int64_t kChunk = 16384;
constexpr int64_t kParallelMinElements = int64_t(1) << 16;

struct Chunk {
  void* data;  // first element of the chunk
  int64_t n;
  DType dtype;
};

// One chunk: returns 1 when an element is inf or NaN (after scaling, as stored).
template <class T>
int unscale_chunk(T* __restrict x, int64_t n, double inv_scale) {
  using A = acc_t<T>;
  const A inv = A(inv_scale);
  int found = 0;
  if (inv_scale == 1.0) {  // check only: nothing changes, nothing is written
#pragma omp simd reduction(| : found)
    for (int64_t i = 0; i < n; ++i) found |= int(is_nonfinite(A(x[i])));
    return found;
  }
#pragma omp simd reduction(| : found)
  for (int64_t i = 0; i < n; ++i) {
    const T y = T(A(x[i]) * inv);
    x[i] = y;
    found |= int(is_nonfinite(A(y)));
  }
  return found;
}

int unscale_chunk_any(const Chunk& c, double inv_scale) {
  switch (c.dtype) {
    case DType::f32:
      return unscale_chunk(static_cast<float*>(c.data), c.n, inv_scale);
    case DType::f64:
      return unscale_chunk(static_cast<double*>(c.data), c.n, inv_scale);
    case DType::f16:
      return unscale_chunk(static_cast<half*>(c.data), c.n, inv_scale);
    case DType::bf16:
      return unscale_chunk(static_cast<bfloat16*>(c.data), c.n, inv_scale);
    default:
      return 0;  // unreachable: dtypes are validated before the parallel loop
  }
}

}  // namespace

bool unscale_and_check(const TensorSpan* tensors, int64_t count, double inv_scale) {
  HG_CHECK(count >= 0, "[unscale_and_check] expected count >= 0 tensors, got ", count);
  HG_CHECK(count == 0 || tensors != nullptr, "[unscale_and_check] null tensor list for count = ", count);
  HG_CHECK(std::isfinite(inv_scale) && inv_scale > 0.0, "[unscale_and_check] invalid inv_scale ", inv_scale,
           ": expected a finite value > 0 (1 / loss scale)");
  std::vector<Chunk> chunks;
  int64_t total = 0;
  for (int64_t t = 0; t < count; ++t) {
    const TensorSpan& s = tensors[t];
    HG_CHECK(s.n >= 0, "[unscale_and_check] tensor ", t, " has n = ", s.n, "; expected n >= 0");
    HG_CHECK(is_floating(s.dtype), "[unscale_and_check] tensor ", t, " is ", dtype_name(s.dtype),
             "; expected a floating dtype (f32, f64, f16, bf16)");
    if (s.n == 0) continue;
    HG_CHECK(s.data != nullptr, "[unscale_and_check] tensor ", t, " is null with n = ", s.n);
    const size_t size = dtype_size(s.dtype);
    for (int64_t begin = 0; begin < s.n; begin += kChunk) {
      chunks.push_back({static_cast<char*>(s.data) + size_t(begin) * size, std::min(kChunk, s.n - begin), s.dtype});
    }
    total += s.n;
  }
  const int64_t n_chunks = int64_t(chunks.size());
  int found = 0;
#pragma omp parallel for schedule(static) reduction(| : found) if (total >= kParallelMinElements)
  for (int64_t k = 0; k < n_chunks; ++k) found |= unscale_chunk_any(chunks[size_t(k)], inv_scale);
  return found != 0;
}

}  // namespace hg::kernels::cpu
