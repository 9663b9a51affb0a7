#pragma once
// The launch bounds of the row kernels that need a register budget stated:
// __launch_bounds__(kMaxRowThreads, kRowMinBlocks<T>).
//
// kMaxRowThreads (device_math.h) is the largest block row_launch gives a row kernel. With
// __launch_bounds__(1024) alone, ptxas (CUDA 13.0, sm_90) picks each instance's register count by its
// own heuristic, up to 64; it held some fp64 instances at 32 and spilled them to local memory
// (cross_entropy_backward<double, *, false>, sum_rows<double, true>, softmax_backward<double, false>).
// kRowMinBlocks<double> = 1 states the budget a 1024-thread block has, 65536 / 1024 = 64 registers per
// thread (.minnctapersm 1): those instances then compile to 60-64 registers and no spill (fp64 row
// kernels are for tests and checks, not a training path; their occupancy follows from the registers).
// For every other dtype it is 0, which nvcc takes as unstated (no .minnctapersm): the same code as
// __launch_bounds__(1024) -- stating 1 there would let ptxas spend up to 64 registers on the 16/32-bit
// instances too and cut the occupancy of the warp-per-row launches, stating 2 would cap them at 32 and
// spill. The sm_90 resource gate (tests/test_kernel_resources.cpp) fails on any spill.
#include <type_traits>

#include "kernels/cuda/device_math.h"

namespace hg::kernels::cuda {

template <class T>
inline constexpr int kRowMinBlocks = std::is_same_v<T, double> ? 1 : 0;

}  // namespace hg::kernels::cuda
