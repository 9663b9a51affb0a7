#pragma once
// HG_HOST_DEVICE marks per-element math shared by the CPU and CUDA backends, so the CPU tests
// exercise the very lines the GPU runs.
#if defined(__CUDACC__)
#define HG_HOST_DEVICE __host__ __device__
#else
#define HG_HOST_DEVICE
#endif
