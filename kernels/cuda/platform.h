#pragma once
// The one include of every kernels/cuda/*.cu file. The same source builds two ways:
//   - nvcc (normal build, HALFGRAD_CUDA=ON/AUTO with a toolkit): the real CUDA runtime and types;
//   - the host C++ compiler with HALFGRAD_EMULATED_CUDA defined (emulated build): the SIMT emulator
//     in kernels/emu supplies threadIdx/blockIdx, __syncthreads, shuffles, votes, atomics, shared
//     memory and the runtime calls, and cuda_fp16.h / cuda_bf16.h supply __half / __nv_bfloat16.
// Kernel code uses only what both provide. Dynamic shared memory is declared with
// HG_DYNAMIC_SHARED(type, name) (nvcc: extern __shared__; emulator: the block's buffer).
// Tensor cores: nvcuda::wmma (fragments, load/store_matrix_sync, mma_sync) in both builds: <mma.h>
// under nvcc, kernels/emu/wmma.h (scrambled element-to-lane mapping: see there) in the emulator.
#if defined(HALFGRAD_EMULATED_CUDA)
#include "kernels/emu/emu.h"
#include "kernels/emu/wmma.h"
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>
#define HG_DYNAMIC_SHARED(type, name) extern __shared__ __align__(128) unsigned char hg_dynamic_smem_##name[]; \
  type* name = reinterpret_cast<type*>(hg_dynamic_smem_##name)
#endif
