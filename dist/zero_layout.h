#pragma once
// Index arithmetic and parameter re-pointing shared by ZeroOptimizer's flat layout (stages 0-2,
// dist/zero_optimizer.cpp) and its per-unit layout (stage 3, dist/zero_stage3.cpp). Internal.
//
// 8-bit AdamW state (AdamWOptions().state_bits(8); kernels/adamw8bit_math.h) quantises m and v in
// blocks of kAdamW8BitBlock = 2048 elements counted from each PARAMETER's first element, each block
// with its own absmax, exactly as the single-process AdamW does. A rank's update hands the kernel its
// slice of each parameter, and the kernel's blocks start at the slice's first element; so every
// slice of a quantised parameter (numel >= kAdamW8BitMinElements, decided on the whole parameter)
// must start on a block boundary of that parameter, i.e. no block may straddle two ranks. The layout
// guarantees it in two steps:
//   1. in the flat space each quantised parameter starts at a multiple of 2048 (the parameter before
//      it is followed by up to 2047 elements of padding), and
//   2. the partitions (stage 3: the shards of a unit holding a quantised parameter) are multiples of
//      2048 elements long, so every partition boundary is a multiple of 2048 too.
// A boundary inside a quantised parameter is then a multiple of 2048 from its start. Cost: at most
// 2047 elements before each quantised parameter (none when the one before ends on a multiple of 2048,
// as GPT-2's 768-wide matrices do), and the round-up of the buffer (stage 3: of each such unit) to
// N x 2048 instead of N x 32 elements. With 32-bit state nothing changes.
#include <algorithm>
#include <cstdint>

#include "engine/tensor.h"
#include "kernels/adamw8bit_math.h"

namespace hg::dist::layout {

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// The overlap of [begin, end) with [lo, hi), as a count (0 when disjoint).
inline int64_t overlap(int64_t begin, int64_t end, int64_t lo, int64_t hi) {
  return std::max<int64_t>(0, std::min(end, hi) - std::max(begin, lo));
}

// Whether a parameter of `numel` elements keeps 8-bit moments under `state_bits` (8 or 32); the
// smaller ones keep fp32 moments, as in the single-process AdamW.
inline bool quantized_state(int64_t numel, int state_bits) {
  return state_bits == 8 && numel >= kernels::kAdamW8BitMinElements;
}

// Where the next parameter starts in the flat space, `at` being the end of the one before.
inline int64_t place(int64_t at, int64_t numel, int state_bits) {
  return quantized_state(numel, state_bits) ? round_up(at, kernels::kAdamW8BitBlock) : at;
}

// Points `param` (same TensorImpl, so every handle sees it) at `view`'s memory.
inline void rebind(const Tensor& param, const Tensor& view) {
  TensorImpl* impl = param.impl();
  impl->storage = view.impl()->storage;
  impl->offset = view.offset();
  impl->strides = view.strides();
}

}  // namespace hg::dist::layout
