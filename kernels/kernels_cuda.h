#pragma once
// The CUDA backend's kernels, kernels::cuda: every kernel of kernels/kernels.h with the same
// arguments plus the stream it is enqueued on (HG_DECLARE_KERNEL declares both backends at once;
// read the math and the CUDA notes there). Implemented by kernels/cuda/*.cu, compiled by nvcc
// (normal build) or as C++ on the SIMT emulator (kernels/emu, the emulated build); linked only when
// the build has a CUDA backend (HALFGRAD_HAS_CUDA). CUDA code includes this header.
#include "kernels/kernels.h"
