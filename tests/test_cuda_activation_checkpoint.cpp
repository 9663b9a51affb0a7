// Activation checkpointing and activation offload on the CUDA device: offload copies run on the copy
// stream into pinned memory with events and record_stream; gradients must equal the plain run's (bit
// for bit on the emulator, whose kernels are deterministic and run in order; within a stated
// tolerance on a GPU), and device peak memory must fall as the model's sizes say. Also the CUDA
// allocator's memory limit and its out-of-memory error.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>

#include "engine/cuda/cuda_allocator.h"
#include "engine/cuda/cuda_context.h"
#include "support/check_error.h"
#include "support/memory_model.h"

using namespace hg;
using namespace hg::test;

namespace {

bool skip_without_cuda() {
  if (cuda::is_available()) return false;
  static bool said = false;
  if (!said) std::printf("SKIPPED (CUDA checkpoint tests): no CUDA device: %s\n", cuda::unavailable_reason().c_str());
  said = true;
  MESSAGE("skipped: no CUDA device: ", cuda::unavailable_reason());
  return true;
}

const Device kGPU = Device::cuda(0);

MemoryModelShape cuda_shape() {
  MemoryModelShape s;
  s.B = 4;
  s.T = 16;
  return s;
}

// Bitwise on the emulator; on a GPU, cuBLASLt may pick another algorithm for a recomputation, so
// within 1e-5 relative (f32) / 1e-2 (half) of the largest gradient element.
void check_same_gradients(const StepResult& a, const StepResult& b, const char* what) {
  INFO(what);
  for (const auto& [name, bytes] : a.grads) {
    INFO("parameter ", name);
    if (cuda::is_emulated()) {
      CHECK(bytes == b.grads.at(name));
      continue;
    }
    const std::vector<double> x = a.grad_tensors.at(name).to_vector<double>();
    const std::vector<double> y = b.grad_tensors.at(name).to_vector<double>();
    double scale = 0, worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      scale = std::max(scale, std::abs(x[i]));
      worst = std::max(worst, std::abs(x[i] - y[i]));
    }
    const double tolerance = a.grad_tensors.at(name).dtype() == f32 ? 1e-5 : 1e-2;
    CHECK(worst <= tolerance * scale);
  }
}

}  // namespace

TEST_CASE("cuda checkpointed GPT blocks give the plain gradients with dropout in f32 and bf16") {
  if (skip_without_cuda()) return;
  const MemoryModelShape s = cuda_shape();
  for (DType dtype : {f32, bf16}) {
    INFO("dtype ", dtype_name(dtype));
    const StepResult reference = memory_model_step(*make_memory_model(s, 0, dtype, kGPU), s);
    for (int64_t k : {1, 2}) {
      INFO("recompute_every = ", k);
      const StepResult r = memory_model_step(*make_memory_model(s, k, dtype, kGPU), s);
      check_same_gradients(reference, r, "checkpointed vs plain");
      CHECK(r.generator_after == reference.generator_after);
    }
  }
}

TEST_CASE("cuda activation offload goes through pinned memory and gives the plain gradients") {
  if (skip_without_cuda()) return;
  const MemoryModelShape s = cuda_shape();
  auto plain = make_memory_model(s, 0, f32, kGPU);
  const StepResult reference = memory_model_step(*plain, s);

  cuda::pinned_allocator().reset_peak();
  const MemoryStats pinned_before = pinned_memory_stats();
  const StepResult all = memory_model_step(*plain, s, true, OffloadMode::all);
  check_same_gradients(reference, all, "offload all");
  const MemoryStats pinned_after = pinned_memory_stats();
  // Every offloaded byte sat in pinned memory, and all of it was given back after the backward
  // (up to the staging buffer of the last host-to-device copy, which copy_to_device frees lazily: the
  // one counted before the step may be gone during it, so the peak is compared with zero).
  CHECK(pinned_after.peak_allocated_bytes >= all.offload.bytes_offloaded);
  const int64_t staging = int64_t(CpuCachingAllocator::size_class(size_t(s.B * s.T * 8)));
  CHECK(pinned_after.allocated_bytes <= pinned_before.allocated_bytes + staging);
  CHECK(all.offload.bytes_offloaded > staging);
  CHECK(all.offload.bytes_offloaded >= s.L * block_activation_bytes(s, 4));

  auto checkpointed = make_memory_model(s, 1, f32, kGPU);
  const StepResult inputs = memory_model_step(*checkpointed, s, true, OffloadMode::recompute_inputs);
  check_same_gradients(reference, inputs, "recompute_every = 1 with offloaded inputs");
  CHECK(inputs.offload.tensors_packed == s.L);
  CHECK(inputs.offload.bytes_offloaded == s.L * block_input_bytes(s, 4));
}

TEST_CASE("cuda device peak memory falls as the model's sizes say with checkpointing and offload") {
  if (skip_without_cuda()) return;
  // The margins of the CPU suite (tests/test_activation_checkpoint.cpp), on the device's caching allocator.
  const MemoryModelShape s;
  const int64_t a = block_activation_bytes(s, 4), x = block_input_bytes(s, 4);
  const int64_t head = 3 * 4 * s.B * s.T * s.V;
  auto peak = [&](int64_t k, bool offload, OffloadMode mode) {
    return memory_model_step(*make_memory_model(s, k, f32, kGPU), s, offload, mode, true).peak_bytes;
  };
  const int64_t none = peak(0, false, OffloadMode::all);
  CHECK(none >= s.L * (a + x));
  const int64_t k1 = peak(1, false, OffloadMode::all);
  CHECK(none - k1 >= (s.L - 1) * a - 2 * x);
  CHECK(k1 <= none / s.L + s.L * x + 2 * a + head);
  const int64_t all = peak(0, true, OffloadMode::all);
  CHECK(none - all >= (s.L - 2) * (a + x) - head);
  const int64_t inputs = peak(1, true, OffloadMode::recompute_inputs);
  CHECK(k1 - inputs >= (s.L - 2) * x);
  MESSAGE("cuda peak: none ", none, " B, K=1 ", k1, " B, offload all ", all, " B, K=1 + offloaded inputs ", inputs,
          " B (a block >= ", a, " B, its input ", x, " B)");
}

TEST_CASE("cuda memory limit: out of memory carries the summary and the advice") {
  if (skip_without_cuda()) return;
  const MemoryStats before = memory_stats(kGPU);
  set_memory_limit(kGPU, before.reserved_bytes + (int64_t(4) << 20));
  std::string message;
  try {
    (void)empty({int64_t(4) << 20}, f32, kGPU);  // 16 MiB
  } catch (const Error& e) {
    message = e.what();
  }
  set_memory_limit(kGPU, 0);
  INFO("message: ", message);
  CHECK(message.find("out of memory on cuda:0") != std::string::npos);
  CHECK(message.find("limit") != std::string::npos);
  CHECK(message.find("pinned host") != std::string::npos);
  CHECK(message.find("--recompute-every") != std::string::npos);
  CHECK(message.find("--offload-activations") != std::string::npos);
  const MemoryStats after = memory_stats(kGPU);
  CHECK(after.oom_count == before.oom_count + 1);
  CHECK(after.alloc_retries == before.alloc_retries + 1);
  const Tensor fits = empty({int64_t(4) << 20}, f32, kGPU);  // without the limit it fits
  CHECK(fits.numel() == (int64_t(4) << 20));
  CHECK(memory_summary().find("cuda:0") != std::string::npos);
}
