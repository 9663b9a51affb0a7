#pragma once
// The row kernels' launch bounds: __launch_bounds__(kMaxRowThreads, kRowMinBlocks).
//
// kMaxRowThreads (device_math.h) is the largest block row_launch gives a row kernel; kRowMinBlocks = 1
// states the register budget that implies, 65536 / 1024 = 64 registers per thread, to ptxas in so
// many words. With __launch_bounds__(1024) alone, ptxas (CUDA 13.0, sm_90) gave most instances up to
// 64 registers but held some fp64 ones at 32 and spilled them to local memory
// (cross_entropy_backward<double, *, false>, sum_rows<double, true>, softmax_backward<double, false>);
// with the minimum stated, those compile to 60-64 registers and no spill, and the other instances
// are unchanged (the sm_90 resource gate, tests/test_kernel_resources.cpp, fails on any spill).
#include "kernels/cuda/device_math.h"

namespace hg::kernels::cuda {

inline constexpr int kRowMinBlocks = 1;

}  // namespace hg::kernels::cuda
