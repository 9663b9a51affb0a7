// The CUDA 8-bit AdamW kernel (kernels/cuda/adamw8bit.cu) against the CPU one (kernels/cpu/adamw8bit.cpp,
// itself checked against a float64 reference in test_adamw8bit_kernels): f32 / f16 / bf16 parameters with
// and without an fp32 master copy, sizes below, at and across block boundaries, aligned and misaligned
// arrays (the packed and the element-wise paths), over several steps each started from the CPU's state.
// Codes agree except for a new moment that sits on a midpoint of the map (an ulp from nvcc's fused
// multiply-adds), absmax and theta to a few fp32 ulp. The capturable semantics as adamw.cu: skip flag (no
// byte written), device lr, two-slot count, blocks_done settling; n = 0. Non-finite updates (inf, NaN,
// 1e30 gradients) change only their own elements; a subnormal block becomes the zero state; a grid too
// large is a named error. Device arrays are padded with canary bytes that must survive. Skips visibly
// without a device; runs under the SIMT emulator. Seeds are printed; HG_TEST_SEED repeats one.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/adamw8bit_math.h"
#include "kernels/cuda/check.h"
#include "kernels/half.h"
#include "kernels/step_kernels.h"
#include "support/adamw8bit_state.h"
#include "support/check_error.h"
#include "support/cuda_device.h"
#include "support/host_buffer.h"
#include "support/test_seed.h"

using namespace hg;
using namespace hg::kernels;
using namespace hg::testing;
using State8 = AdamW8BitState;

namespace {

constexpr double kLr = 1e-3, kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8, kDecay = 0.01;
constexpr size_t kCanary = 64;  // bytes after every device array
constexpr unsigned char kCanaryByte = 0xa5;

#define SKIP_WITHOUT_DEVICE()                                                 \
  do {                                                                        \
    if (hg::testing::skip_without_cuda_device("test_cuda_adamw8bit")) return; \
  } while (0)

// Device bytes: `offset` leading bytes (to misalign), the payload, kCanary canary bytes.
class DeviceBytes {
 public:
  DeviceBytes(const void* host, size_t bytes, size_t offset = 0) : bytes_(bytes), offset_(offset) {
    HG_CUDA_CHECK(cudaMalloc(&base_, offset + bytes + kCanary));
    HG_CUDA_CHECK(cudaMemset(base_, kCanaryByte, offset + bytes + kCanary));
    if (bytes > 0) HG_CUDA_CHECK(cudaMemcpy(data(), host, bytes, cudaMemcpyHostToDevice));
  }
  DeviceBytes(const DeviceBytes&) = delete;
  ~DeviceBytes() { cudaFree(base_); }
  void* data() { return static_cast<char*>(base_) + offset_; }
  void download(void* host) const {
    HG_CUDA_CHECK(cudaStreamSynchronize(hg::testing::cuda_test_stream()));
    if (bytes_ > 0)
      HG_CUDA_CHECK(cudaMemcpy(host, static_cast<char*>(base_) + offset_, bytes_, cudaMemcpyDeviceToHost));
  }
  bool canaries_intact() const {
    std::vector<unsigned char> all(offset_ + bytes_ + kCanary);
    HG_CUDA_CHECK(cudaMemcpy(all.data(), base_, all.size(), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < offset_; ++i)
      if (all[i] != kCanaryByte) return false;
    for (size_t i = offset_ + bytes_; i < all.size(); ++i)
      if (all[i] != kCanaryByte) return false;
    return true;
  }

 private:
  void* base_ = nullptr;
  size_t bytes_, offset_;
};

// A State8 on the device (each array misaligned by `offset` elements when asked).
struct DeviceState8 {
  DeviceBytes m, v, absmax_m, absmax_v;
  DeviceState8(const State8& s, size_t offset)
      : m(s.m.data(), s.m.size(), offset),
        v(s.v.data(), s.v.size(), offset),
        absmax_m(s.absmax_m.data(), s.absmax_m.size() * 4),
        absmax_v(s.absmax_v.data(), s.absmax_v.size() * 4) {}
  QuantizedMoments view() {
    return {static_cast<uint8_t*>(m.data()), static_cast<uint8_t*>(v.data()), static_cast<float*>(absmax_m.data()),
            static_cast<float*>(absmax_v.data())};
  }
  State8 download(int64_t n) const {
    State8 s(n);
    m.download(s.m.data());
    v.download(s.v.data());
    absmax_m.download(s.absmax_m.data());
    absmax_v.download(s.absmax_v.data());
    return s;
  }
  bool canaries_intact() const {
    return m.canaries_intact() && v.canaries_intact() && absmax_m.canaries_intact() && absmax_v.canaries_intact();
  }
};

// One slot pair (plus the blocks_done slot) of step counts in device memory.
struct DeviceCount {
  DeviceBytes slots;
  explicit DeviceCount(int64_t start) : slots(std::vector<int64_t>{start, -1, 0}.data(), 3 * sizeof(int64_t)) {}
  int64_t* data() { return static_cast<int64_t*>(slots.data()); }
  std::vector<int64_t> read() const {
    std::vector<int64_t> out(3);
    slots.download(out.data());
    return out;
  }
};

double ulp_of(DType dtype) { return dtype == DType::f16 ? 0x1p-10 : dtype == DType::bf16 ? 0x1p-7 : 0x1p-23; }

}  // namespace

TEST_CASE("cuda adamw8bit_step_device equals the CPU kernel") {
  SKIP_WITHOUT_DEVICE();
  std::mt19937 rng = hg::testing::seeded_rng();
  int64_t code_differences = 0, codes = 0;
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16})
    for (const bool with_master : {false, true})
      for (const int64_t n : {int64_t(1), int64_t(1000), int64_t(2048), int64_t(5000), int64_t(3 * 2048 + 17)})
        for (const size_t offset : {size_t(0), size_t(1)}) {
          if (offset == 1 && n != 5000) continue;  // the element-wise path, once per dtype and master
          INFO(dtype_name(dtype), with_master ? " with master" : " without master", " n = ", n, " offset ", offset);
          HostBuffer param = random_adamw8bit_params(dtype, n, rng);
          HostBuffer master(DType::f32, n);
          for (int64_t i = 0; i < n; ++i) master.set(i, param.get(i));
          State8 state(n);
          int64_t t = 0;
          for (int step = 0; step < 3; ++step) {
            const HostBuffer grad = random_adamw8bit_grad(dtype, n, rng);
            // The device starts from the CPU's state of this step.
            const size_t e = dtype_size(dtype);
            // With a master copy the parameter is an output only: the device copy starts as NaN.
            HostBuffer param_in = param;
            if (with_master) param_in.poison_with_nan();
            DeviceBytes d_param(param_in.data(), n * e, offset * e), d_master(master.data(), n * 4, offset * 4);
            DeviceBytes d_grad(grad.data(), n * e, offset * e);
            DeviceState8 d_state(state, offset);
            DeviceCount d_count(t);
            AdamWStepScalars ds;
            ds.lr_value = kLr;
            ds.step = d_count.data();
            cuda::adamw8bit_step_device(d_param.data(), with_master ? d_master.data() : nullptr, d_grad.data(),
                                        d_state.view(), n, ds, kBeta1, kBeta2, kEps, kDecay, dtype,
                                        hg::testing::cuda_test_stream());
            int64_t count[2] = {t, -1};
            AdamWStepScalars hs;
            hs.lr_value = kLr;
            hs.step = count;
            const HostBuffer theta_before = with_master ? master : param;
            cpu::adamw8bit_step_device(param.data(), with_master ? master.data() : nullptr, grad.data(), state.view(),
                                       n, hs, kBeta1, kBeta2, kEps, kDecay, dtype);
            ++t;
            CHECK(d_count.read()[1] == t);
            CHECK(d_count.read()[0] == t - 1);
            const State8 got = d_state.download(n);
            HostBuffer got_param(dtype, n), got_master(DType::f32, n);
            d_param.download(got_param.data());
            d_master.download(got_master.data());
            REQUIRE(d_state.canaries_intact());
            REQUIRE(d_param.canaries_intact());
            REQUIRE(d_master.canaries_intact());
            for (size_t b = 0; b < state.absmax_m.size(); ++b) {
              INFO("block ", b);
              REQUIRE(std::abs(got.absmax_m[b] - state.absmax_m[b]) <= 4e-7 * state.absmax_m[b]);
              REQUIRE(std::abs(got.absmax_v[b] - state.absmax_v[b]) <= 4e-7 * state.absmax_v[b]);
            }
            for (int64_t i = 0; i < n; ++i) {
              INFO("element ", i, " codes ", int(got.m[i]), "/", int(state.m[i]), ", ", int(got.v[i]), "/",
                   int(state.v[i]));
              REQUIRE(std::abs(int(got.m[i]) - int(state.m[i])) <= 1);
              REQUIRE(std::abs(int(got.v[i]) - int(state.v[i])) <= 1);
              code_differences += got.m[i] != state.m[i];
              code_differences += got.v[i] != state.v[i];
              codes += 2;
              const double cpu_theta = with_master ? master.get(i) : param.get(i);
              const double gpu_theta = with_master ? got_master.get(i) : got_param.get(i);
              const double update = std::abs(cpu_theta - theta_before.get(i) * (1 - kLr * kDecay));
              const double tolerance = with_master || dtype == DType::f32
                                           ? 4e-7 * (std::abs(cpu_theta) + update)
                                           : ulp_of(dtype) * std::abs(cpu_theta) + 4e-7 * update;
              INFO("theta ", gpu_theta, " (CPU ", cpu_theta, ")");
              REQUIRE(std::abs(gpu_theta - cpu_theta) <= tolerance);
              if (with_master) {  // the parameter is the master's rounding
                HostBuffer one(dtype, 1);
                one.set(0, got_master.get(i));
                REQUIRE(one.get(0) == got_param.get(i));
              }
            }
          }
        }
  MESSAGE("codes that differ (moments on a midpoint): ", code_differences, " of ", codes);
  CHECK(code_differences * 1000 <= codes);
}

TEST_CASE("cuda adamw8bit_step_device: skip flag, device lr, blocks_done, n = 0") {
  SKIP_WITHOUT_DEVICE();
  std::mt19937 rng = hg::testing::seeded_rng();
  const int64_t n = 2 * 2048 + 300;
  HostBuffer param = random_adamw8bit_params(DType::bf16, n, rng);
  HostBuffer master(DType::f32, n);
  for (int64_t i = 0; i < n; ++i) master.set(i, param.get(i));
  State8 state(n);
  // A non-initial state: two CPU steps.
  int64_t count[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    const HostBuffer grad = random_adamw8bit_grad(DType::bf16, n, rng);
    AdamWStepScalars hs;
    hs.lr_value = kLr;
    hs.step = count;
    cpu::adamw8bit_step_device(param.data(), master.data(), grad.data(), state.view(), n, hs, kBeta1, kBeta2, kEps,
                               kDecay, DType::bf16);
    count[0] = count[1];
  }
  const HostBuffer grad = random_adamw8bit_grad(DType::bf16, n, rng);
  DeviceBytes d_param(param.data(), n * 2), d_master(master.data(), n * 4), d_grad(grad.data(), n * 2);
  DeviceState8 d_state(state, 0);
  DeviceCount d_count(2);
  const float flags[2] = {1.0f, 0.0f};
  const double lr = kLr;
  DeviceBytes d_flags(flags, sizeof flags), d_lr(&lr, sizeof lr);
  AdamWStepScalars s;
  s.lr = static_cast<const double*>(d_lr.data());
  s.lr_value = 55.0;  // ignored: the device lr is given
  s.found_inf = static_cast<const float*>(d_flags.data());
  s.step = d_count.data();
  s.blocks_done = reinterpret_cast<unsigned long long*>(d_count.data() + 2);
  const auto stream = hg::testing::cuda_test_stream();
  cuda::adamw8bit_step_device(d_param.data(), d_master.data(), d_grad.data(), d_state.view(), n, s, kBeta1, kBeta2,
                              kEps, kDecay, DType::bf16, stream);
  {  // skipped: no byte changed, the count stays
    const State8 got = d_state.download(n);
    HostBuffer got_param(DType::bf16, n), got_master(DType::f32, n);
    d_param.download(got_param.data());
    d_master.download(got_master.data());
    CHECK(got_param.bitwise_equal(param));
    CHECK(got_master.bitwise_equal(master));
    CHECK(got.m == state.m);
    CHECK(got.v == state.v);
    CHECK(std::memcmp(got.absmax_m.data(), state.absmax_m.data(), got.absmax_m.size() * 4) == 0);
    CHECK(std::memcmp(got.absmax_v.data(), state.absmax_v.data(), got.absmax_v.size() * 4) == 0);
    CHECK(d_count.read() == std::vector<int64_t>{2, 2, 0});
  }
  // Not skipped: the update at t = 3 with the device lr; blocks_done settles slot 0 and re-zeroes itself.
  s.found_inf = static_cast<const float*>(d_flags.data()) + 1;
  cuda::adamw8bit_step_device(d_param.data(), d_master.data(), d_grad.data(), d_state.view(), n, s, kBeta1, kBeta2,
                              kEps, kDecay, DType::bf16, stream);
  CHECK(d_count.read() == std::vector<int64_t>{3, 3, 0});
  AdamWStepScalars hs;
  hs.lr_value = kLr;
  hs.step = count;
  const HostBuffer master_before = master;
  cpu::adamw8bit_step_device(param.data(), master.data(), grad.data(), state.view(), n, hs, kBeta1, kBeta2, kEps,
                             kDecay, DType::bf16);
  HostBuffer got_master(DType::f32, n);
  d_master.download(got_master.data());
  // The same bound as the kernel test above: a few ulp of theta and of this step's update (a fixed
  // |theta| + lr scale failed for about 2% of seeds, where theta and the update are both small).
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double update = std::abs(master.get(i) - master_before.get(i) * (1 - kLr * kDecay));
    worst = std::max(worst, std::abs(got_master.get(i) - master.get(i)) / (std::abs(master.get(i)) + update));
  }
  CHECK(worst <= 4e-7);
  CHECK(d_state.download(n).absmax_m[0] == doctest::Approx(state.absmax_m[0]).epsilon(1e-6));

  // n = 0: one block records the count, and with blocks_done settles it.
  DeviceCount empty(9);
  AdamWStepScalars e;
  e.lr_value = kLr;
  e.step = empty.data();
  cuda::adamw8bit_step_device(nullptr, nullptr, nullptr, QuantizedMoments{}, 0, e, kBeta1, kBeta2, kEps, kDecay,
                              DType::f32, stream);
  CHECK(empty.read() == std::vector<int64_t>{9, 10, 0});
  e.blocks_done = reinterpret_cast<unsigned long long*>(empty.data() + 2);
  cuda::adamw8bit_step_device(nullptr, nullptr, nullptr, QuantizedMoments{}, 0, e, kBeta1, kBeta2, kEps, kDecay,
                              DType::f32, stream);
  CHECK(empty.read() == std::vector<int64_t>{10, 10, 0});
}

TEST_CASE("cuda adamw8bit_step_device: an inf, a NaN and a 1e30 gradient change only their own elements") {
  // As the CPU test: elements 5 (inf), 300 (NaN), 2047 (1e30: (1 - beta2) g^2 overflows) and
  // 2 * 2048 + 35 (-inf, in the element-wise tail) have m = v = 0 from two zero-gradient CPU steps; the
  // device's clean run gives them a zero gradient again. The bad run keeps their theta, gives them zero
  // codes, and every other element (codes, absmax, theta) is the clean run's bit for bit; the next
  // step, clean in both, is finite and the same.
  SKIP_WITHOUT_DEVICE();
  std::mt19937 rng = hg::testing::seeded_rng();
  const int64_t n = 2 * 2048 + 40;
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<std::pair<int64_t, float>> bad = {
      {5, inf}, {300, std::nanf("")}, {2047, 1e30f}, {2 * 2048 + 35, -inf}};
  auto clean_grad = [&] {
    HostBuffer g = random_adamw8bit_grad(DType::f32, n, rng);
    for (const auto& [i, value] : bad) g.set(i, 0.0);
    return g;
  };
  HostBuffer param = random_adamw8bit_params(DType::f32, n, rng);
  State8 state(n);
  int64_t count[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    AdamWStepScalars hs;
    hs.lr_value = kLr;
    hs.step = count;
    cpu::adamw8bit_step_device(param.data(), nullptr, clean_grad().data(), state.view(), n, hs, kBeta1, kBeta2, kEps,
                               kDecay, DType::f32);
    count[0] = count[1];
  }
  const HostBuffer grad = clean_grad(), next = random_adamw8bit_grad(DType::f32, n, rng);
  HostBuffer bad_grad = grad;
  for (const auto& [i, value] : bad) bad_grad.set(i, value);
  const auto stream = hg::testing::cuda_test_stream();
  // Two device steps from the CPU state: the first with `first`, the second with `next`.
  struct Run {
    HostBuffer param_after_first, param_after_next;
    State8 state_after_first, state_after_next;
  };
  auto run = [&](const HostBuffer& first) {
    DeviceBytes d_param(param.data(), n * 4), d_grad(first.data(), n * 4), d_next(next.data(), n * 4);
    DeviceState8 d_state(state, 0);
    DeviceCount d_count(2);
    AdamWStepScalars s;
    s.lr_value = kLr;
    s.step = d_count.data();
    s.blocks_done = reinterpret_cast<unsigned long long*>(d_count.data() + 2);
    Run r{HostBuffer(DType::f32, n), HostBuffer(DType::f32, n), State8(n), State8(n)};
    cuda::adamw8bit_step_device(d_param.data(), nullptr, d_grad.data(), d_state.view(), n, s, kBeta1, kBeta2, kEps,
                                kDecay, DType::f32, stream);
    d_param.download(r.param_after_first.data());
    r.state_after_first = d_state.download(n);
    cuda::adamw8bit_step_device(d_param.data(), nullptr, d_next.data(), d_state.view(), n, s, kBeta1, kBeta2, kEps,
                                kDecay, DType::f32, stream);
    d_param.download(r.param_after_next.data());
    r.state_after_next = d_state.download(n);
    REQUIRE(d_state.canaries_intact());
    REQUIRE(d_param.canaries_intact());
    return r;
  };
  const Run clean = run(grad), dirty = run(bad_grad);
  for (size_t b = 0; b < state.absmax_m.size(); ++b) {
    INFO("block ", b);
    REQUIRE(std::isfinite(dirty.state_after_first.absmax_m[b]));
    REQUIRE(std::isfinite(dirty.state_after_first.absmax_v[b]));
    REQUIRE(dirty.state_after_first.absmax_m[b] > 0.0f);
    CHECK(std::memcmp(&dirty.state_after_first.absmax_m[b], &clean.state_after_first.absmax_m[b], 4) == 0);
    CHECK(std::memcmp(&dirty.state_after_first.absmax_v[b], &clean.state_after_first.absmax_v[b], 4) == 0);
    CHECK(std::memcmp(&dirty.state_after_next.absmax_m[b], &clean.state_after_next.absmax_m[b], 4) == 0);
    CHECK(std::memcmp(&dirty.state_after_next.absmax_v[b], &clean.state_after_next.absmax_v[b], 4) == 0);
  }
  CHECK(dirty.state_after_first.m == clean.state_after_first.m);
  CHECK(dirty.state_after_first.v == clean.state_after_first.v);
  CHECK(dirty.state_after_next.m == clean.state_after_next.m);
  CHECK(dirty.state_after_next.v == clean.state_after_next.v);
  for (int64_t i = 0; i < n; ++i) {
    const bool is_bad = std::any_of(bad.begin(), bad.end(), [&](const auto& e) { return e.first == i; });
    INFO("element ", i, (is_bad ? " (non-finite update)" : ""));
    REQUIRE(std::isfinite(dirty.param_after_next.get(i)));
    if (is_bad) {
      REQUIRE(dirty.param_after_first.get(i) == param.get(i));
      REQUIRE(dirty.state_after_first.m[size_t(i)] == kAdamW8BitSignedZeroCode);
      REQUIRE(dirty.state_after_first.v[size_t(i)] == kAdamW8BitUnsignedZeroCode);
    } else {
      REQUIRE(dirty.param_after_first.get(i) == clean.param_after_first.get(i));
      REQUIRE(dirty.param_after_next.get(i) == clean.param_after_next.get(i));
    }
  }
}

TEST_CASE("cuda adamw8bit_step_device: a block whose absmax is subnormal becomes the zero state, not NaN") {
  // Block 0's gradients are ~1e-38 (new m ~ 2e-39, below FLT_MIN; v underflows to 0); block 1 is ordinary.
  SKIP_WITHOUT_DEVICE();
  std::mt19937 rng = hg::testing::seeded_rng();
  const int64_t n = 2048 + 100;
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  const HostBuffer param = random_adamw8bit_params(DType::f32, n, rng);
  HostBuffer grad = random_adamw8bit_grad(DType::f32, n, rng);
  for (int64_t i = 0; i < 2048; ++i) grad.set(i, 1e-38 * u(rng));
  grad.set(7, 1e-38);
  // Block 0 starts with spread codes, absmax_m = 1e-39 and absmax_v = 0: its m stays below FLT_MIN.
  State8 state(n);
  std::uniform_int_distribution<int> code(0, 255);
  for (int64_t i = 0; i < 2048; ++i) state.m[size_t(i)] = uint8_t(code(rng)), state.v[size_t(i)] = uint8_t(code(rng));
  state.absmax_m[0] = 1e-39f;
  DeviceBytes d_param(param.data(), n * 4), d_grad(grad.data(), n * 4);
  DeviceState8 d_state(state, 0);
  DeviceCount d_count(0);
  AdamWStepScalars s;
  s.lr_value = kLr;
  s.step = d_count.data();
  cuda::adamw8bit_step_device(d_param.data(), nullptr, d_grad.data(), d_state.view(), n, s, kBeta1, kBeta2, kEps,
                              kDecay, DType::f32, hg::testing::cuda_test_stream());
  const State8 got = d_state.download(n);
  HostBuffer got_param(DType::f32, n);
  d_param.download(got_param.data());
  check_subnormal_first_block_zeroed(got, got_param, n);
}

TEST_CASE("cuda adamw8bit_step_device: more quantisation blocks than a grid holds is a named error") {
  // Checked before any launch or pointer read (no device needed): the pointers only need to be non-null.
  int64_t slots[2] = {0, 0};
  AdamWStepScalars s;
  s.lr_value = kLr;
  s.step = slots;
  uint8_t byte = 0;
  float scale = 0.0f;
  const QuantizedMoments q{&byte, &byte, &scale, &scale};
  const int64_t n = (int64_t(1) << 31) * kAdamW8BitBlock;  // 2^31 blocks: one more than gridDim.x holds
  CHECK_ERROR(
      cuda::adamw8bit_step_device(&byte, nullptr, &byte, q, n, s, kBeta1, kBeta2, kEps, kDecay, DType::f32, nullptr),
      "adamw8bit_step_device", "2147483648 quantisation blocks", "at most 2147483647");
}
