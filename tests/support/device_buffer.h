#pragma once
// DeviceBuffer: n elements of a dtype in CUDA device memory, for the suites that call kernels::cuda::*
// directly and compare with HostBuffer results (test_cuda_kernels, test_cuda_attention,
// test_cuda_attention_backward). Poisoned with 0xff bytes (NaN in every float type) when made, so an
// element a kernel forgets to write shows; `offset` elements into the allocation (offset 1 gives a pointer
// that is not 16-byte aligned). Transfers and the poison wait for cuda_test_stream() first.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/dtype.h"
#include "support/cuda_device.h"
#include "support/host_buffer.h"

namespace hg::testing {

class DeviceBuffer {
 public:
  DeviceBuffer(DType dtype, int64_t n, int64_t offset = 0) : dtype_(dtype), n_(n), offset_(offset) {
    allocated_ = size_t(std::max<int64_t>(n + offset, 1)) * hg::dtype_size(dtype);
    HG_CUDA_CHECK(cudaMalloc(&base_, allocated_));
    poison();
  }
  explicit DeviceBuffer(const HostBuffer& host, int64_t offset = 0) : DeviceBuffer(host.dtype(), host.size(), offset) {
    upload(host);
  }
  ~DeviceBuffer() { (void)cudaFree(base_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() { return static_cast<char*>(base_) + offset_ * int64_t(hg::dtype_size(dtype_)); }
  template <class T>
  T* as() {
    return static_cast<T*>(data());
  }
  void poison() {
    HG_CUDA_CHECK(cudaStreamSynchronize(cuda_test_stream()));
    HG_CUDA_CHECK(cudaMemset(base_, 0xff, allocated_));
  }
  void upload(const HostBuffer& host) {
    REQUIRE(host.size() == n_);
    HG_CUDA_CHECK(cudaMemcpy(data(), host.data(), host.bytes(), cudaMemcpyHostToDevice));
  }
  HostBuffer download() {
    HG_CUDA_CHECK(cudaStreamSynchronize(cuda_test_stream()));
    HostBuffer host(dtype_, n_);
    HG_CUDA_CHECK(cudaMemcpy(host.data(), data(), host.bytes(), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  DType dtype_;
  int64_t n_, offset_;
  size_t allocated_ = 0;
  void* base_ = nullptr;
};

}  // namespace hg::testing
