#pragma once
// The CUDA runtime for the emulated build. Declarations are the toolkit's own (cuda_runtime.h, which a
// host compiler reads fine), so host code compiles unchanged against the real runtime or this one;
// runtime.cpp implements the subset the project uses on the host. A function outside that subset is a
// link error, never a silent stub.
//
// The emulated device: one device, "halfgrad SIMT emulator", compute capability 9.0, 132 SMs,
// 48 KiB shared memory per block (227 KiB opt-in via cudaFuncSetAttribute), 1024 threads per block,
// device memory = host memory (total: the host's physical memory, or set_malloc_limit).
//
// Implemented: cudaGetErrorName/String, cudaGetLastError/PeekAtLastError, cudaGetDeviceCount,
// cudaSetDevice/GetDevice, cudaGetDeviceProperties, cudaDeviceGetAttribute, cudaDeviceSynchronize,
// cudaDeviceReset, cudaDeviceGetStreamPriorityRange, cudaMemGetInfo, cudaMalloc/Free,
// cudaMallocHost/FreeHost/HostAlloc, cudaPointerGetAttributes, cudaMemcpy(Async) (all kinds),
// cudaMemset(Async), cudaStreamCreate(WithFlags/WithPriority)/Destroy/Synchronize/Query/WaitEvent,
// cudaLaunchHostFunc, cudaEventCreate(WithFlags)/Record/Synchronize/Query/ElapsedTime/Destroy,
// cudaFuncSetAttribute (MaxDynamicSharedMemorySize, PreferredSharedMemoryCarveout); stream capture and
// graphs (graph.cpp): cudaStreamBeginCapture (Global / ThreadLocal / Relaxed), cudaStreamEndCapture,
// cudaStreamIsCapturing, cudaStreamGetCaptureInfo, cudaThreadExchangeStreamCaptureMode,
// cudaGraphInstantiate (flags 0), cudaGraphLaunch, cudaGraphExecDestroy, cudaGraphDestroy,
// cudaGraphGetNodes, cudaGraphNodeGetType.
//
// Work runs synchronously when it is enqueued: a kernel launch or cudaMemcpyAsync has finished when
// the call returns, whatever the stream. So stream-ordering bugs (a missing cudaStreamWaitEvent, a
// buffer freed while a kernel still reads it) do not show under emulation; the real-GPU run of the
// CUDA suite (scripts/gpu-check) and record_stream tests of the allocator are what catch them.
//
// Runtime accounting: every call above that costs the GPU or the host time is counted into
// kernels/runtime_counters.h when it is made, whatever it returns (as the nvcc build's link-time
// wrappers count): cudaMalloc/cudaFree (cudaFree also a device sync), cudaMallocHost/HostAlloc/FreeHost,
// cudaDeviceSynchronize and the synchronous cudaMemcpy/cudaMemset (device syncs), cudaStreamSynchronize,
// cudaEventSynchronize, event creates and records, stream waits, copies and bytes by direction
// (cudaMemcpyDefault resolved by where the pointers point), kernel launches (hg::emu::launch), graph
// launches. A graph launch counts only itself: its nodes were counted when they were captured.
//
// Stream capture (CUDA's semantics, see graph.cpp): on a captured stream, kernel launches (with a copy
// of their arguments), cudaMemcpyAsync, cudaMemsetAsync, cudaLaunchHostFunc, enqueue_host_work and
// cudaGraphLaunch are recorded as graph nodes and run when the graph is launched, in capture order;
// cudaEventRecord / cudaStreamWaitEvent build the cross-stream edges (a stream waiting on an event
// recorded in the capture joins it and must be joined back before EndCapture, else
// cudaErrorStreamCaptureUnjoined). What CUDA forbids fails with CUDA's error and invalidates the
// capture (EndCapture then returns cudaErrorStreamCaptureInvalidated): synchronising or querying a
// capturing stream (cudaErrorStreamCaptureUnsupported, in every mode); cudaMalloc, cudaFree,
// cudaMallocHost/HostAlloc/FreeHost, cudaDeviceSynchronize, synchronous cudaMemcpy/cudaMemset from
// the capturing thread (Global, ThreadLocal) or from any thread whose interaction mode is Global while
// a Global capture runs (cudaErrorStreamCaptureUnsupported); the legacy stream while a capture holds a
// blocking stream (cudaErrorStreamCaptureImplicit); cudaEventSynchronize/Query of an event recorded in
// a running capture (cudaErrorCapturedEvent); waiting on an event recorded outside the capture without
// cudaEventWaitExternal (cudaErrorStreamCaptureIsolation) or in another capture
// (cudaErrorStreamCaptureMerge). The legacy stream itself and cudaStreamPerThread cannot be captured.
//
// Checks a GPU would not always make, so that host-side mistakes fail here rather than corrupt memory:
// cudaMemcpy/cudaMemset check that device ranges lie inside one live cudaMalloc allocation and that the
// pointers match the copy kind (a host pointer passed as a device one is cudaErrorInvalidValue);
// cudaFree/cudaFreeHost/cudaStreamDestroy/cudaEventDestroy reject handles they did not hand out.
// Fresh cudaMalloc and cudaMallocHost memory is filled with 0xff bytes (NaN in every float type), so
// reading memory nobody wrote shows up.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>

// CUDA's opaque handle types, defined by the emulator (the toolkit only declares them).
struct CUstream_st;
struct CUevent_st;

// The C++ overload nvcc's cuda_runtime.h adds (for nvcc only): cudaFuncSetAttribute(kernel, ...).
template <class T>
inline cudaError_t cudaFuncSetAttribute(T* entry, cudaFuncAttribute attr, int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(entry), attr, value);
}

namespace hg::emu {

// Device memory the emulated device reports (cudaMemGetInfo, totalGlobalMem) and cudaMalloc allows in
// total; past it cudaMalloc returns cudaErrorMemoryAllocation. 0 restores the default (the host's
// physical memory). For out-of-memory tests of allocators.
void set_malloc_limit(size_t bytes);
// Bytes currently allocated with cudaMalloc.
size_t device_bytes_in_use();

// Seed of the block and thread orders (default: HG_EMU_SEED from the environment, else a fixed value).
// Each launch derives its own orders from the seed and a launch counter, so a run is reproducible.
void set_seed(uint64_t seed);
// OS threads that run blocks of one grid (default: OpenMP's maximum). Ignored when blocks run serially
// (AddressSanitizer builds, see config.h).
void set_num_threads(int threads);

// Work the emulated libraries (cuBLASLt, cuDNN, NCCL emulations) do on a stream: run now, as every
// emulated operation runs when it is enqueued -- or, while `stream` is being captured into a CUDA
// graph, recorded into the graph and run when the graph is launched. Returns what CUDA would return
// for an operation enqueued on `stream` (cudaErrorInvalidResourceHandle for a dead stream; an
// exception thrown by `work` propagates).
cudaError_t enqueue_host_work(cudaStream_t stream, std::function<void()> work);

namespace detail {
// The kernel's dynamic shared memory limit: 48 KiB unless raised with cudaFuncSetAttribute.
size_t kernel_max_dynamic_shared(const void* kernel);
// Whether `stream` is 0, cudaStreamLegacy, cudaStreamPerThread or a live stream.
bool is_valid_stream(cudaStream_t stream);
}  // namespace detail

// The emulated device's limits.
inline constexpr int kMaxThreadsPerBlock = 1024;
inline constexpr unsigned kMaxBlockDim[3] = {1024, 1024, 64};
inline constexpr unsigned kMaxGridDim[3] = {2147483647u, 65535u, 65535u};
inline constexpr size_t kSharedMemPerBlock = 48 * 1024;
inline constexpr size_t kSharedMemPerBlockOptin = 227 * 1024;
inline constexpr int kMultiProcessorCount = 132;
inline constexpr size_t kMaxKernelArgumentBytes = 32764;

}  // namespace hg::emu
