// copy_strided: dst[idx . dst_strides] = src[idx . src_strides] for every index of `shape`.
//
// The copy only moves bits, so it is templated on the element size (uint16_t, uint32_t, uint64_t),
// not on the dtype. The layout is simplified on the host exactly as the CPU backend does (size-1
// dimensions dropped, neighbours merged when both views step over them as one, so a contiguous
// tensor of any rank becomes one row) and handed to the kernel by value (PairLayout, rank <=
// kMaxRank): no host array is read on the device.
//
// Parallel strategy:
//   - one unit-stride row on both sides (a plain copy): a grid-stride loop over 16-byte packs
//     (uint4-sized Pack of 8, 4 or 2 elements; 128-bit load and store) when source and destination
//     share their alignment, single elements for the head and tail;
//   - anything else: a grid-stride loop with one element per thread; the thread unravels its flat
//     index (innermost dimension fastest) into both offsets. Views must not overlap.
#include "kernels/cuda/device_math.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/kernels_cuda.h"
#include "kernels/pair_layout.h"
#include "kernels/strided_layout.h"

namespace hg::kernels::cuda {
namespace {

template <class E>
__global__ void copy_contiguous_kernel(const E* __restrict__ src, E* __restrict__ dst, int64_t n, int64_t head) {
  for_packs<kPack<E>>(n, head, flat_worker(), flat_workers(), [&](int64_t i, auto width) {
    constexpr int W = decltype(width)::value;
    store_pack<W>(dst + i, load_pack<W>(src + i));
  });
}

template <class E>
__global__ void copy_strided_kernel(const E* __restrict__ src, E* __restrict__ dst, PairLayout layout, int64_t total) {
  for (int64_t i = flat_worker(); i < total; i += flat_workers()) {
    int64_t rest = i, src_offset = 0, dst_offset = 0;
    for (int d = layout.rank - 1; d >= 0; --d) {
      const int64_t index = rest % layout.shape[d];
      rest /= layout.shape[d];
      src_offset += index * layout.first[d];
      dst_offset += index * layout.second[d];
    }
    dst[dst_offset] = src[src_offset];
  }
}

}  // namespace

void copy_strided(const void* src, const int64_t* src_strides, void* dst, const int64_t* dst_strides,
                  const int64_t* shape, int rank, DType dtype, Stream stream) {
  if (!strided_shape_has_elements("copy_strided", shape, rank)) return;
  const PairLayout layout = collapse_dimensions(shape, src_strides, dst_strides, rank);
  int64_t total = 1;
  for (int d = 0; d < layout.rank; ++d) total *= layout.shape[d];
  dispatch_bits_cuda(dtype, "copy_strided", [&]<class E>() {
    const E* s = static_cast<const E*>(src);
    E* t = static_cast<E*>(dst);
    if (layout.rank == 1 && layout.first[0] == 1 && layout.second[0] == 1) {
      const int64_t head = pack_head<E>(total, s, t);
      const int64_t units = head < 0 ? total : (total + kPack<E> - 1) / kPack<E> + 1;
      launch(copy_contiguous_kernel<E>, flat_grid(units), dim3(kFlatThreads), 0, stream, s, t, total, head);
      return;
    }
    launch(copy_strided_kernel<E>, flat_grid(total), dim3(kFlatThreads), 0, stream, s, t, layout, total);
  });
}

}  // namespace hg::kernels::cuda
