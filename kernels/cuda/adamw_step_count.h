#pragma once
// The end of a capturable AdamW launch (adamw.cu, adamw8bit.cu) with AdamWStepScalars::blocks_done given:
// each block takes a ticket once all its threads have read step[parity], and the block that takes the last
// ticket advances step[parity] (adamw_settle_step) and re-zeroes the counter for the next call. Uses only
// what both builds provide (nvcc, and the SIMT emulator), as device_math.h does.
#include "kernels/adamw_math.h"
#include "kernels/cuda/device_math.h"

namespace hg::kernels::cuda {

// Called by every thread of every block as the kernel's last statement; without blocks_done it returns at
// once (uniformly: the same for every thread).
HG_DEVICE void adamw_settle_step_in_last_block(const AdamWStepScalars& s) {
  if (s.blocks_done == nullptr) return;  // uniform: every thread of every block returns here
  __syncthreads();                       // every thread of this block has read step[parity]
  if (threadIdx.x == 0) {
    const unsigned long long blocks = static_cast<unsigned long long>(gridDim.x) * gridDim.y * gridDim.z;
    __threadfence();  // this block's reads of step[parity] are done before its ticket is seen
    if (atomicAdd(s.blocks_done, 1ull) == blocks - 1) {  // every other block has read step[parity]
      adamw_settle_step(s);
      *s.blocks_done = 0;
    }
  }
}

}  // namespace hg::kernels::cuda
