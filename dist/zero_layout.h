#pragma once
// Index arithmetic and parameter re-pointing shared by ZeroOptimizer's flat layout (stages 0-2,
// dist/zero_optimizer.cpp) and its per-unit layout (stage 3, dist/zero_stage3.cpp). Internal.
#include <algorithm>
#include <cstdint>

#include "engine/tensor.h"

namespace hg::dist::layout {

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// The overlap of [begin, end) with [lo, hi), as a count (0 when disjoint).
inline int64_t overlap(int64_t begin, int64_t end, int64_t lo, int64_t hi) {
  return std::max<int64_t>(0, std::min(end, hi) - std::max(begin, lo));
}

// Points `param` (same TensorImpl, so every handle sees it) at `view`'s memory.
inline void rebind(const Tensor& param, const Tensor& view) {
  TensorImpl* impl = param.impl();
  impl->storage = view.impl()->storage;
  impl->offset = view.offset();
  impl->strides = view.strides();
}

}  // namespace hg::dist::layout
