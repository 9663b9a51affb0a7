#pragma once
// map_elements(): y[i] = fn(x0[i], x1[i], ...) over n contiguous elements, the one elementwise kernel behind
// unary_forward/backward, affine and the contiguous cases of binary_forward.
//
// Parallel strategy: a grid-stride loop of kFlatThreads-thread blocks (at most kMaxFlatBlocks).
// When every operand has the same address modulo 16 bytes, a worker owns one 16-byte pack at a
// time (4 floats, 8 halves, 2 doubles: one 128-bit load per input and one 128-bit store), and the
// few elements before the first aligned address (the head) and after the last whole pack (the
// tail) go one per worker; otherwise every element goes alone. fn works in acc_t<T> on an array of
// the K input values and returns the output value, rounded once on store.
#include "kernels/cuda/device_math.h"

namespace hg::kernels::cuda {

template <class T, int K>
struct MapInputs {
  const T* p[K];
};

template <class T, int K, class Fn>
__global__ void map_kernel(T* __restrict__ y, MapInputs<T, K> in, int64_t n, int64_t head, Fn fn) {
  using A = acc_t<T>;
  for_packs<kPack<T>>(n, head, flat_worker(), flat_workers(), [&](int64_t i, auto width) {
    constexpr int W = decltype(width)::value;
    Pack<T, W> packs[K];
    for (int j = 0; j < K; ++j) packs[j] = load_pack<W>(in.p[j] + i);
    Pack<T, W> out;
    HG_UNROLL
    for (int k = 0; k < W; ++k) {
      A v[K];
      for (int j = 0; j < K; ++j) v[j] = to_acc(packs[j].v[k]);
      out.v[k] = from_acc<T>(fn(v));
    }
    store_pack<W>(y + i, out);
  });
}

// Enqueues y = fn(inputs...) over n elements on `stream`.
template <class T, class Fn, class... In>
void map_elements(cudaStream_t stream, int64_t n, Fn fn, T* y, const In*... inputs) {
  static_assert((std::is_same_v<In, T> && ...), "map: every input has the output's type");
  if (n <= 0) return;
  constexpr int K = int(sizeof...(In));
  const MapInputs<T, K> in{{inputs...}};
  const int64_t head = pack_head<T>(n, y, inputs...);
  const int64_t units = head < 0 ? n : (n + kPack<T> - 1) / kPack<T> + 1;
  launch(map_kernel<T, K, Fn>, flat_grid(units), dim3(kFlatThreads), 0, stream, y, in, n, head, fn);
}

}  // namespace hg::kernels::cuda
