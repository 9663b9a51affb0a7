// Mixed precision on a CUDA device (a GPU, or the SIMT emulator in CI): the stochastic-rounding
// kernel equals the CPU's bit for bit, AdamW with fp32 master weights on the device follows the
// CPU, a tiny GPT trained in bf16 and f16 on the device tracks the f32 run, and an fp16 step with a
// planted overflow taken on the device skips bit for bit without a host read.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "engine/cuda/cuda_context.h"
#include "engine/host_reads.h"
#include "engine/ops.h"
#include "engine/random.h"
#include "kernels/kernels.h"
#include "kernels/kernels_cuda.h"
#include "kernels/runtime_counters.h"
#include "layers/nn.h"
#include "optim/optim.h"

using namespace hg;

namespace {

bool skip_without_cuda() {
  if (cuda::is_available()) return false;
  std::printf("SKIPPED (CUDA mixed precision): no CUDA device: %s\n", cuda::unavailable_reason().c_str());
  MESSAGE("skipped: no CUDA device: ", cuda::unavailable_reason());
  return true;
}

const Device kGpu = Device::cuda(0);

std::vector<uint16_t> bits_of(const Tensor& t) {
  const Tensor c = t.to(kCPU).contiguous();
  const auto* data = static_cast<const uint16_t*>(c.data_ptr());
  return std::vector<uint16_t>(data, data + c.numel());
}

}  // namespace

TEST_CASE("cuda stochastic_round equals the CPU bit for bit") {
  if (skip_without_cuda()) return;
  std::mt19937_64 rng(77);
  std::uniform_real_distribution<double> exponent(-30.0, 20.0), unit(0.0, 1.0);
  // offset 1 starts x and y one element into their buffers: not aligned to the kernel's 4-element
  // packs, so it takes the element-by-element path (offset 0: the packed path and a scalar tail).
  for (DType dtype : {DType::f16, DType::bf16}) {
    for (int64_t n : {1, 3, 4, 1000, 4099}) {
      for (int64_t offset : {0, 1}) {
        CAPTURE(dtype_name(dtype));
        CAPTURE(n);
        CAPTURE(offset);
        std::vector<float> x(static_cast<size_t>(n + offset));
        for (float& v : x) v = float((unit(rng) < 0.5 ? -1.0 : 1.0) * std::exp2(exponent(rng)));
        std::vector<uint16_t> want(x.size(), 0xffffu);
        want[0] = bits_of(full({1}, NAN, dtype))[0];  // before the range: stays poisoned
        kernels::cpu::stochastic_round(x.data() + offset, want.data() + offset, n, 1234, 17, dtype);
        const Tensor x_gpu = from_vector(x, {n + offset}, DType::f32).to(kGpu);
        Tensor y_gpu = full({n + offset}, NAN, dtype, kGpu);  // poisoned
        kernels::cuda::stochastic_round(static_cast<const float*>(x_gpu.data_ptr()) + offset,
                                        static_cast<uint16_t*>(y_gpu.data_ptr()) + offset, n, 1234, 17, dtype,
                                        cuda::compute_stream(0));
        CHECK(bits_of(y_gpu) == want);
      }
    }
  }
}

TEST_CASE("cuda AdamW with fp32 master weights follows the CPU") {
  if (skip_without_cuda()) return;
  for (DType dtype : {DType::f16, DType::bf16}) {
    for (bool stochastic : {false, true}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(stochastic);
      manual_seed(5);
      Tensor on_cpu = randn({33, 7}).to(dtype);
      on_cpu.requires_grad_();
      Tensor on_gpu = on_cpu.detach().to(kGpu);
      on_gpu.requires_grad_();
      const auto options = optim::AdamWOptions().lr(1e-2).weight_decay(0.1);
      const auto precision = optim::MixedPrecisionOptions().stochastic_rounding(stochastic).rounding_seed(3);
      optim::AdamW a({on_cpu}, options), b({on_gpu}, options);
      a.set_mixed_precision(precision);
      b.set_mixed_precision(precision);
      for (int step = 0; step < 4; ++step) {
        manual_seed(90 + uint64_t(step));
        const Tensor g = randn({33, 7}).to(dtype);
        on_cpu.set_grad(g.clone());
        on_gpu.set_grad(g.to(kGpu));
        a.step();
        b.step();
      }
      // The master copies agree to a few fp32 ulps (nvcc may contract the moment updates into fmas);
      // the parameter on each device is its own master's rounding.
      const std::vector<float> master_cpu = a.state(0).buffers.at("master").to_vector<float>();
      const Tensor master_gpu_tensor = b.state(0).buffers.at("master");
      CHECK(master_gpu_tensor.device() == kGpu);
      const std::vector<float> master_gpu = master_gpu_tensor.to(kCPU).to_vector<float>();
      for (size_t i = 0; i < master_cpu.size(); ++i)
        CHECK(std::abs(master_cpu[i] - master_gpu[i]) <= 1e-6f * (1.0f + std::abs(master_cpu[i])));
      if (!stochastic) CHECK(bits_of(on_gpu) == bits_of(master_gpu_tensor.to(dtype)));
    }
  }
}

TEST_CASE("a tiny GPT trained on the CUDA device in bf16 and f16 tracks f32") {
  if (skip_without_cuda()) return;
  // 40 steps overfitting one batch of 4 x 12 tokens over 16 classes: the loss falls from ln 16 =
  // 2.77 to ~0.3 in f32. Half precision rounds activations to 8 (bf16) or 11 (f16) bits, which
  // moves each step's loss by well under 0.1 here; the bound below leaves room for that, and a run
  // that did not learn (or diverged) would miss it by more than 1.
  auto train = [](DType dtype) {
    manual_seed(11);
    const auto config = nn::GPTConfig().vocab_size(16).context(12).n_layer(1).n_head(2).n_embd(32);
    nn::GPT model(config);
    model.to(dtype);
    model.to(kGpu);
    optim::AdamW adamw(model.parameters(), optim::AdamWOptions().lr(1e-2).weight_decay(0.0));
    const Tensor ids = randint(0, 16, {4, 12}).to(kGpu), targets = randint(0, 16, {4, 12}).to(kGpu);
    std::vector<double> losses;
    for (int step = 0; step < 40; ++step) {
      const Tensor loss = model.loss(ids, targets);
      loss.backward();
      adamw.step();
      adamw.zero_grad();
      losses.push_back(loss.item());
    }
    return losses;
  };
  const std::vector<double> f32 = train(DType::f32);
  CHECK(f32.front() == doctest::Approx(std::log(16.0)).epsilon(0.1));
  CHECK(f32.back() < 1.0);
  for (DType dtype : {DType::bf16, DType::f16}) {
    CAPTURE(dtype_name(dtype));
    const std::vector<double> half = train(dtype);
    CHECK(half.back() < 1.0);
    CHECK(std::abs(half.back() - f32.back()) < 0.15);
    CHECK(std::abs(half.front() - f32.front()) < 0.02);
  }
}

TEST_CASE("cuda: an fp16 step with a planted overflow, on the device, leaves the weights bit for bit and reads nothing") {
  if (skip_without_cuda()) return;
  // The capturable step of optim/loss_scaler.h: scale(loss) with S from device memory, the unscale
  // pass setting found_inf, AdamW's kernel skipping on it with lr and t from device memory, the
  // policy kernel backing S off -- all under a HostReadGuard (any host read throws) and with no host
  // wait counted by the runtime.
  manual_seed(21);
  Tensor w = randn({40, 24}).to(DType::f16).to(kGpu);
  w.requires_grad_();
  optim::AdamW adamw({w}, optim::AdamWOptions().lr(1e-2));
  optim::LossScaler scaler = optim::LossScaler::dynamic(optim::DynamicLossScaleOptions().init_scale(1024));
  const Tensor lr = scalar_tensor(1e-2, DType::f64).reshape({1}).to(kGpu);
  const Tensor x = randn({8, 40}).to(DType::f16).to(kGpu);
  REQUIRE(adamw.device_step() != nullptr);
  auto step = [&](bool overflow) {
    HostReadGuard no_reads("a test's device step");
    const RuntimeCounters before = runtime_counters();
    Tensor loss = mean(matmul(x, w).to(DType::f32));
    if (overflow) loss = loss * std::numeric_limits<double>::infinity();
    scaler.scale(loss).backward();
    scaler.unscale_on_device(adamw);
    adamw.device_step()->clip_grad_norm(1.0, zeros({1}, DType::f64, kGpu));
    scaler.step_on_device(adamw, lr);
    scaler.update();
    adamw.zero_grad();
    CHECK((runtime_counters() - before).host_waits() == 0);
  };
  step(false);  // warm-up: state created
  const std::vector<uint16_t> weights = bits_of(w);
  const std::vector<float> master = adamw.state(0).buffers.at("master").to(kCPU).to_vector<float>();
  const std::vector<float> moment = adamw.state(0).buffers.at("exp_avg").to(kCPU).to_vector<float>();
  step(true);
  CHECK(bits_of(w) == weights);
  CHECK(adamw.state(0).buffers.at("master").to(kCPU).to_vector<float>() == master);
  CHECK(adamw.state(0).buffers.at("exp_avg").to(kCPU).to_vector<float>() == moment);
  CHECK(scaler.scale_value() == 512);
  CHECK(scaler.skipped_steps() == 1);
  CHECK(adamw.state_tensors().front().second.item() == 1);  // t did not advance
  step(false);
  CHECK(bits_of(w) != weights);
  CHECK(adamw.state_tensors().front().second.item() == 2);
}
