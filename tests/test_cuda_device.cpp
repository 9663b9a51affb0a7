// The engine's CUDA device layer: streams, events, the caching allocator (reuse, per-stream reuse,
// record_stream, splitting and merging, the out-of-memory path, statistics) and host<->device
// copies. Runs on a real GPU or on the SIMT emulator; without either, every case skips visibly.
#include <doctest/doctest.h>

#include <cstdio>

#include "engine/cuda/cuda_allocator.h"
#include "engine/ops.h"
#include "kernels/cuda/check.h"

using namespace hg;

namespace {

// True (and a visible note) when no CUDA device answers: the case returns early and passes.
bool skip_without_cuda() {
  if (cuda::is_available()) return false;
  static bool said = false;
  if (!said) std::printf("SKIPPED (CUDA device tests): no CUDA device: %s\n", cuda::unavailable_reason().c_str());
  said = true;
  MESSAGE("skipped: no CUDA device: ", cuda::unavailable_reason());
  return true;
}

cuda::CudaCachingAllocator& allocator() { return cuda::device_allocator(0); }

}  // namespace

TEST_CASE("the device answers with a name and streams") {
  if (skip_without_cuda()) return;
  CHECK(cuda::device_count() >= 1);
  CHECK_FALSE(cuda::device_name(0).empty());
  CHECK(cuda::compute_stream(0) != nullptr);
  CHECK(cuda::compute_stream(0) != cuda::copy_stream(0));
  CHECK(cuda::compute_stream(0) == cuda::compute_stream(0));
}

TEST_CASE("freed blocks are reused on the same stream and not across streams") {
  if (skip_without_cuda()) return;
  auto& a = allocator();
  const cuda::Stream s0 = cuda::compute_stream(0), s1 = cuda::copy_stream(0);
  void* p = a.allocate(4096, s0);
  a.deallocate(p);
  const int64_t hits = a.stats().cache_hits;
  void* q = a.allocate(4000, s0);  // same rounded size class, same stream: the same block
  CHECK(q == p);
  CHECK(a.stats().cache_hits == hits + 1);
  a.deallocate(q);
  void* r = a.allocate(4096, s1);  // another stream never takes s0's free block
  CHECK(r != p);
  a.deallocate(r);
}

TEST_CASE("record_stream defers reuse until the other stream's work is done") {
  if (skip_without_cuda()) return;
  auto& a = allocator();
  const cuda::Stream s0 = cuda::compute_stream(0), s1 = cuda::copy_stream(0);
  void* p = a.allocate(1 << 16, s0);
  a.record_stream(p, s1);
  a.deallocate(p);
  cuda::synchronize(s1);  // the event recorded on s1 at free time completes
  void* q = a.allocate(1 << 16, s0);
  CHECK(q == p);  // back in the pool after the event completed
  a.deallocate(q);
  CHECK_THROWS_WITH_AS(a.record_stream(reinterpret_cast<void*>(0x10), s1), doctest::Contains("not an allocation"),
                       Error);
}

TEST_CASE("small blocks are carved from one segment and merge back when freed") {
  if (skip_without_cuda()) return;
  auto& a = allocator();
  a.empty_cache();
  const cuda::Stream s = cuda::compute_stream(0);
  const int64_t reserved = a.stats().reserved_bytes;
  void* x = a.allocate(1000, s);
  void* y = a.allocate(1000, s);
  CHECK(a.stats().reserved_bytes == reserved + (2 << 20));  // one 2 MiB segment holds both
  CHECK(static_cast<char*>(y) - static_cast<char*>(x) == 1024);
  a.deallocate(x);
  a.deallocate(y);
  void* whole = a.allocate(1 << 20, s);  // the merged segment serves a 1 MiB request
  CHECK(whole == x);
  a.deallocate(whole);
  a.empty_cache();
  CHECK(a.stats().reserved_bytes == reserved);
}

TEST_CASE("statistics track allocated and reserved bytes and their peaks") {
  if (skip_without_cuda()) return;
  auto& a = allocator();
  a.empty_cache();
  a.reset_peak();
  const MemoryStats before = a.stats();
  {
    Tensor t = empty({1 << 20}, f32, Device::cuda(0));  // 4 MiB, large pool
    CHECK(a.stats().allocated_bytes == before.allocated_bytes + (4 << 20));
    CHECK(a.stats().reserved_bytes >= before.reserved_bytes + (4 << 20));
  }
  const MemoryStats after = a.stats();
  CHECK(after.allocated_bytes == before.allocated_bytes);
  CHECK(after.peak_allocated_bytes == before.allocated_bytes + (4 << 20));
  CHECK(memory_stats(Device::cuda(0)).peak_allocated_bytes == after.peak_allocated_bytes);
  a.empty_cache();
  CHECK(a.stats().reserved_bytes == before.reserved_bytes);
}

TEST_CASE("an impossible allocation retries once then reports out of memory with the figures") {
  if (skip_without_cuda()) return;
  auto& a = allocator();
  const MemoryStats before = a.stats();
  const size_t impossible = size_t(1) << 52;  // 4 PiB
  CHECK_THROWS_WITH_AS(a.allocate(impossible), doctest::Contains("out of memory on cuda:0"), Error);
  try {
    a.allocate(impossible);
  } catch (const Error& e) {
    const std::string message = e.what();
    CHECK(message.find("allocated by tensors") != std::string::npos);
    CHECK(message.find("reserved by the caching allocator") != std::string::npos);
    CHECK(message.find("free of") != std::string::npos);
  }
  CHECK(a.stats().oom_count == before.oom_count + 2);
  CHECK(a.stats().alloc_retries == before.alloc_retries + 2);
}

TEST_CASE("tensors move between the CPU and the device bit for bit") {
  if (skip_without_cuda()) return;
  for (DType t : {f32, f64, f16, bf16, i32, i64}) {
    const Tensor host = randn({3, 37}).to(t);
    const Tensor device = host.to(Device::cuda(0));
    CHECK(device.device() == Device::cuda(0));
    const Tensor back = device.to(kCPU);
    CHECK(back.to_vector<double>() == host.to_vector<double>());
  }
  // A strided view is made contiguous on the way.
  const Tensor m = randn({4, 5});
  CHECK(m.t().to(Device::cuda(0)).to(kCPU).to_vector<float>() == m.t().contiguous().to_vector<float>());
}

TEST_CASE("u8 tensors are filled, copied, cast and moved on the device byte for byte") {
  if (skip_without_cuda()) return;
  const Device gpu = Device::cuda(0);
  const Tensor host = randint(0, 256, {7, 37}, i64).to(u8);  // odd row length: unaligned heads and tails
  const std::vector<uint8_t> codes = host.to_vector<uint8_t>();
  const Tensor device = host.to(gpu);
  CHECK(device.dtype() == u8);
  CHECK(device.to(kCPU).to_vector<uint8_t>() == codes);
  // A strided device-side copy (the transpose made contiguous on the device) and a clone.
  CHECK(device.t().contiguous().to(kCPU).to_vector<uint8_t>() == host.t().contiguous().to_vector<uint8_t>());
  CHECK(device.clone().to(kCPU).to_vector<uint8_t>() == codes);
  // fill (full / zeros) on the device, narrowed to an odd offset.
  Tensor filled = full({3, 37}, 200, u8, gpu);
  filled.narrow(1, 5, 17).fill_(7.0);
  std::vector<uint8_t> expected(3 * 37, 200);
  for (int r = 0; r < 3; ++r)
    for (int c = 5; c < 22; ++c) expected[size_t(r * 37 + c)] = 7;
  CHECK(filled.to(kCPU).to_vector<uint8_t>() == expected);
  CHECK(zeros({1000}, u8, gpu).to(kCPU).to_vector<uint8_t>() == std::vector<uint8_t>(1000, 0));
  // Casts on the device follow the CPU's rules (exact for bytes; saturating from floating).
  CHECK(device.to(f32).to(kCPU).to_vector<float>() == host.to(f32).to_vector<float>());
  const Tensor wide = from_vector(std::vector<float>{-5.0f, 3.7f, 255.9f, 1e6f}, {4}).to(gpu);
  CHECK(wide.to(u8).to(kCPU).to_vector<uint8_t>() == std::vector<uint8_t>{0, 3, 255, 255});
}

TEST_CASE("gradients flow back across a device move") {
  if (skip_without_cuda()) return;
  Tensor x = randn({6}).requires_grad_();
  Tensor y = x.to(Device::cuda(0));
  CHECK(y.requires_grad());
  y.to(kCPU).backward(ones({6}));
  CHECK(x.grad().to_vector<float>() == std::vector<float>(6, 1.0f));
}

TEST_CASE("events order and time work on a stream") {
  if (skip_without_cuda()) return;
  cuda::Event start, stop;
  const cuda::Stream s = cuda::compute_stream(0);
  start.record(s);
  const Tensor t = randn({1000}).to(Device::cuda(0));
  stop.record(s);
  stop.synchronize();
  CHECK(stop.query());
  CHECK(stop.elapsed_ms_since(start) >= 0.0f);
  stop.block(cuda::copy_stream(0));
  cuda::synchronize(0);
}

TEST_CASE("pinned host memory is cached") {
  if (skip_without_cuda()) return;
  auto& pinned = cuda::pinned_allocator();
  void* p = pinned.allocate(9100);
  pinned.deallocate(p);
  void* q = pinned.allocate(9000);  // the same size class (9216 B)
  CHECK(q == p);
  pinned.deallocate(q);
  pinned.empty_cache();
  CHECK(pinned.stats().reserved_bytes == pinned.stats().allocated_bytes);
}

TEST_CASE("host-to-device copies are staged in pinned memory and the staging is released when done") {
  if (skip_without_cuda()) return;
  auto& pinned = cuda::pinned_allocator();
  const int64_t allocations = pinned.stats().allocation_count;
  std::vector<Tensor> hosts, devices;
  for (int i = 0; i < 8; ++i) {
    hosts.push_back(randn({1000 + i}));
    devices.push_back(hosts.back().to(Device::cuda(0)));
  }
  for (size_t i = 0; i < hosts.size(); ++i) CHECK(devices[i].to(kCPU).to_vector<float>() == hosts[i].to_vector<float>());
  CHECK(pinned.stats().allocation_count >= allocations + 8);
  cuda::synchronize(0);
  const Tensor last = randn({10}).to(Device::cuda(0));  // finds the earlier copies done and releases them
  CHECK(pinned.stats().allocated_bytes <= int64_t(CpuCachingAllocator::size_class(10 * sizeof(float))));
}
