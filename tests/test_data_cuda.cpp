// The DataLoader's CUDA path: batches built in pinned host memory, copied on the copy stream and
// handed out behind an event on the compute stream. Runs on a GPU or the SIMT emulator; without
// either, every case skips visibly.
#include <doctest/doctest.h>

#include <cstdio>

#include "data/data_loader.h"
#include "data/device_stager.h"
#include "engine/cuda/cuda_allocator.h"
#include "engine/ops.h"
#include "kernels/cuda/check.h"
#include "support/check_error.h"

using namespace hg;
using namespace hg::data;

namespace {

bool skip_without_cuda() {
  if (cuda::is_available()) return false;
  static bool said = false;
  if (!said) std::printf("SKIPPED (data loader CUDA tests): no CUDA device: %s\n", cuda::unavailable_reason().c_str());
  said = true;
  MESSAGE("skipped: no CUDA device: ", cuda::unavailable_reason());
  return true;
}

// Example i: "ids" [16] i64 = hash(i, t) % 1000, "w" [4] f32 = i + t / 4.
class PatternDataset final : public Dataset {
 public:
  explicit PatternDataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  std::vector<Field> fields() const override { return {{"ids", i64, {16}}, {"w", f32, {4}}}; }
  void get(int64_t index, const std::vector<void*>& out) const override {
    for (int64_t t = 0; t < 16; ++t) static_cast<int64_t*>(out[0])[t] = int64_t(mix64(uint64_t(index * 16 + t)) % 1000);
    for (int64_t t = 0; t < 4; ++t) static_cast<float*>(out[1])[t] = float(index) + float(t) / 4;
  }

 private:
  int64_t n_;
};

}  // namespace

TEST_CASE("batches reach the CUDA device equal to the CPU loader's") {
  if (skip_without_cuda()) return;
  auto dataset = std::make_shared<PatternDataset>(300);
  const auto options = DataLoaderOptions().batch_size(32).seed(5);
  DataLoader cpu(dataset, options);
  const MemoryStats pinned_before = cuda::pinned_allocator().stats();
  for (int workers : {0, 2}) {
    DataLoader gpu(dataset, DataLoaderOptions(options).workers(workers).device(Device::cuda(0)));
    DataLoader reference(dataset, options);
    for (int i = 0; i < 25; ++i) {  // crosses two epoch boundaries (10 batches per epoch)
      const Batch want = reference.next();
      const Batch got = gpu.next();
      REQUIRE(got.tensors.size() == 2);
      CHECK(got[0].device() == Device::cuda(0));
      CHECK(got[1].device() == Device::cuda(0));
      CHECK(got.indices == want.indices);
      CHECK(got[0].to(kCPU).to_vector<int64_t>() == want[0].to_vector<int64_t>());
      CHECK(got[1].to(kCPU).to_vector<float>() == want[1].to_vector<float>());
      // Compute on the batch (compute stream, ordered after the copy by the event).
      const Tensor total = sum(got[1]);
      CHECK(total.item() == doctest::Approx(sum(want[1]).item()));
    }
  }
  // The staging buffers came from the pinned allocator and went back to its cache.
  const MemoryStats pinned_after = cuda::pinned_allocator().stats();
  CHECK(pinned_after.allocation_count > pinned_before.allocation_count);
  CHECK(pinned_after.allocated_bytes == pinned_before.allocated_bytes);
}

TEST_CASE("a CUDA loader resumes mid-epoch and shuts down with copies in flight") {
  if (skip_without_cuda()) return;
  auto dataset = std::make_shared<PatternDataset>(200);
  const auto options = DataLoaderOptions().batch_size(16).seed(8).workers(2).device(Device::cuda(0));
  DataLoader original(dataset, options);
  for (int i = 0; i < 7; ++i) original.next();
  const Tensor state = original.state();
  std::vector<std::vector<int64_t>> expected;
  for (int i = 0; i < 6; ++i) expected.push_back(original.next()[0].to(kCPU).to_vector<int64_t>());
  DataLoader resumed(dataset, options);
  resumed.next();
  resumed.load_state(state);
  for (int i = 0; i < 6; ++i) CHECK(resumed.next()[0].to(kCPU).to_vector<int64_t>() == expected[size_t(i)]);
  // Destroyed right after a next(): the following batch's copy may still be in flight.
  for (int i = 0; i < 3; ++i) {
    DataLoader short_lived(dataset, options);
    short_lived.next();
  }
}

TEST_CASE("the device stager keeps the order issue then take") {
  if (skip_without_cuda()) return;
  DeviceStager stager(Device::cuda(0));
  CHECK_ERROR(stager.take(), "no batch is staged");
  Batch host;
  host.tensors.push_back(empty_pinned({3}, f32));
  cudaPointerAttributes attributes{};
  HG_CUDA_CHECK(cudaPointerGetAttributes(&attributes, host.tensors[0].data_ptr()));
  CHECK(attributes.type == cudaMemoryTypeHost);  // page-locked, not pageable
  float* p = host.tensors[0].data<float>();
  p[0] = 1.5f, p[1] = -2.f, p[2] = 7.25f;
  host.indices = {4, 5, 6};
  stager.issue(host);
  CHECK_ERROR(stager.issue(host), "a batch is already staged");
  const Batch out = stager.take();
  CHECK(out.indices == std::vector<int64_t>{4, 5, 6});
  CHECK(out[0].to(kCPU).to_vector<float>() == std::vector<float>{1.5f, -2.f, 7.25f});
  CHECK_ERROR(DeviceStager(kCPU), "expected a CUDA device, got cpu");
}
