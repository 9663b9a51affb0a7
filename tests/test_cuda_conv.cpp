// Convolution and pooling kernels on CUDA against the CPU backend (the oracle), in f32, f16, bf16
// and f64, over a table of geometries (stride, padding, dilation, groups, odd sizes, 1x1, a kernel
// as large as the padded input, more channels than a warp). With cuDNN -- a GPU build that found
// it, or the emulated build, whose emulated cuDNN (kernels/emu/cudnn.cpp) runs
// kernels/cuda/cudnn/conv2d_cudnn.cpp's real descriptor, algorithm and workspace code -- the
// convolutions run through cuDNN (the algorithm its heuristics chose, with its workspace); with
// HALFGRAD_CUDNN=0 (ctest runs the suite a second time so, prefixed "im2col: ") or without cuDNN
// through the hand-written im2col / col2im kernels and the GEMM.
//
// Inputs are seeded uniform values in [-2, 2], rounded to the dtype and given bit for bit to both
// backends; every device output is poisoned with 0xff bytes (NaN) before the call. Tolerance
// (|cuda - cpu| <= atol + rtol |cpu|): both accumulate in acc_t from the same inputs, so they differ
// by summation order (and, with cuDNN, by its algorithm: Winograd/FFT transforms lose a few more
// bits), then half outputs round once: rtol = 2 ulp(out) + 256 u(acc), atol = 256 u(acc) S with S
// = 4 terms, a bound on the sum of |terms| of an output; cuDNN's forward rounds twice (the
// convolution stored in the dtype, then the bias added by cudnnAddTensor), so its y may also be off
// by one ulp of the bias-free value (which, for an output near zero, is far more than its own ulp;
// found by the emulated cuDNN). Max pooling is exact (same element
// chosen, same argmax); pooling backward is a fixed-order gather and is checked for determinism.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/cuda/cudnn/conv2d_cudnn.h"
#include "kernels/kernels.h"
#include "kernels/kernels_cuda.h"
#include "kernels/runtime_counters.h"
#include "support/conv_geometry.h"
#include "support/cuda_device.h"
#include "support/host_buffer.h"

namespace {

using hg::DType;
using hg::kernels::Conv2dGeometry;
using hg::kernels::ConvPass;
using hg::kernels::Pool2dGeometry;
using hg::kernels::PoolMode;
using hg::testing::HostBuffer;
namespace cpu = hg::kernels::cpu;
namespace gpu = hg::kernels::cuda;

bool skip_without_device() { return hg::testing::skip_without_cuda_device("CUDA conv parity"); }

gpu::Stream stream() { return hg::testing::cuda_test_stream(); }

// Device memory of `bytes`, poisoned with 0xff (NaN in every float type) when made.
class DeviceMemory {
 public:
  explicit DeviceMemory(size_t bytes) : bytes_(bytes) {
    HG_CUDA_CHECK(cudaMalloc(&ptr_, std::max<size_t>(bytes, 1)));
    HG_CUDA_CHECK(cudaMemset(ptr_, 0xff, std::max<size_t>(bytes, 1)));
  }
  explicit DeviceMemory(const HostBuffer& host) : DeviceMemory(host.bytes()) {
    HG_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), host.bytes(), cudaMemcpyHostToDevice));
  }
  ~DeviceMemory() { (void)cudaFree(ptr_); }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  HostBuffer download(DType dtype, int64_t n) const {
    HG_CUDA_CHECK(cudaStreamSynchronize(stream()));
    HostBuffer host(dtype, n);
    HG_CUDA_CHECK(cudaMemcpy(host.data(), ptr_, host.bytes(), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

using hg::testing::geometry;

struct Case {
  const char* name;
  Conv2dGeometry g;
};

const Case kCases[] = {
    {"3x3 same padding", geometry(2, 3, 8, 8, 4, 3, 3, 1, 1, 1, 1)},
    {"odd sizes stride 2", geometry(3, 2, 7, 9, 5, 3, 2, 2, 2, 1, 0)},
    {"dilation", geometry(1, 3, 9, 8, 2, 3, 3, 1, 2, 2, 1, 2, 3)},
    {"groups", geometry(2, 6, 5, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 2)},
    {"1x1", geometry(2, 5, 4, 3, 3, 1, 1)},
    {"kernel fills padded input", geometry(2, 2, 3, 4, 3, 5, 6, 1, 1, 1, 1)},
    {"more channels than a warp", geometry(2, 40, 6, 6, 36, 3, 3, 1, 1, 1, 1)},
};

HostBuffer random_buffer(DType dtype, int64_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  HostBuffer b(dtype, n);
  for (int64_t i = 0; i < n; ++i) b.set(i, u(rng));
  return b;
}

// `rounded_before_bias` (cuDNN's forward: the convolution is stored in the dtype, then cudnnAddTensor
// adds the bias and rounds again) adds one ulp of that intermediate value to the element's tolerance.
std::string compare(const std::string& what, const HostBuffer& got, const HostBuffer& ref, DType dtype, int64_t terms,
                    const HostBuffer* rounded_before_bias = nullptr) {
  const double u = dtype == DType::f64 ? 0x1p-53 : 0x1p-24;
  const double ulp = dtype == DType::f16 ? 0x1p-10 : dtype == DType::bf16 ? 0x1p-7 : 0.0;
  const double rtol = 2 * ulp + 256 * u, atol = 256 * u * 4.0 * double(terms) + (dtype == DType::f16 ? 0x1p-24 : 0.0);
  for (int64_t i = 0; i < got.size(); ++i) {
    const double a = got.get(i), b = ref.get(i);
    const double intermediate = rounded_before_bias ? ulp * std::abs(rounded_before_bias->get(i)) : 0.0;
    if (!(std::abs(a - b) <= atol + rtol * std::abs(b) + intermediate))
      return what + "[" + std::to_string(i) + "]: cuda " + std::to_string(a) + ", cpu " + std::to_string(b);
  }
  return "";
}

// The CPU result of one pass (the oracle), with its own workspace.
template <class F>
void with_cpu_workspace(const Conv2dGeometry& g, ConvPass pass, DType dtype, F&& body) {
  std::vector<unsigned char> ws(cpu::conv2d_workspace_bytes(g, pass, dtype));
  body(ws.empty() ? nullptr : ws.data(), ws.size());
}

}  // namespace

TEST_CASE("conv2d forward backward-data backward-filter on CUDA equal the CPU in every dtype") {
  if (skip_without_device()) return;
  std::mt19937_64 rng(21);
  for (const Case& c : kCases) {
    const Conv2dGeometry& g = c.g;
    const int64_t nx = g.batch * g.in_channels * g.height * g.width, ny = g.batch * g.out_channels * g.out_pixels();
    for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
      const std::string name = std::string(c.name) + " " + hg::dtype_name(dtype) + " ";
      const HostBuffer x = random_buffer(dtype, nx, rng), w = random_buffer(dtype, g.weight_numel(), rng),
                       b = random_buffer(dtype, g.out_channels, rng), dy = random_buffer(dtype, ny, rng);
      HostBuffer y(dtype, ny), y_without_bias(dtype, ny), dx(dtype, nx), dw(dtype, g.weight_numel());
      with_cpu_workspace(g, ConvPass::Forward, dtype, [&](void* ws, size_t bytes) {
        cpu::conv2d_forward(g, x.data(), w.data(), b.data(), y.data(), ws, bytes, dtype);
        cpu::conv2d_forward(g, x.data(), w.data(), nullptr, y_without_bias.data(), ws, bytes, dtype);
      });
      with_cpu_workspace(g, ConvPass::BackwardData, dtype, [&](void* ws, size_t bytes) {
        cpu::conv2d_backward_data(g, dy.data(), w.data(), dx.data(), ws, bytes, dtype);
      });
      with_cpu_workspace(g, ConvPass::BackwardFilter, dtype, [&](void* ws, size_t bytes) {
        cpu::conv2d_backward_filter(g, x.data(), dy.data(), dw.data(), ws, bytes, dtype);
      });

      const DeviceMemory d_x(x), d_w(w), d_b(b), d_dy(dy);
      const DeviceMemory d_y(y.bytes()), d_dx(dx.bytes()), d_dw(dw.bytes());
      {
        const DeviceMemory ws(gpu::conv2d_workspace_bytes(g, ConvPass::Forward, dtype, stream()));
        gpu::conv2d_forward(g, d_x.data(), d_w.data(), d_b.data(), d_y.data(), ws.data(), ws.bytes(), dtype, stream());
        const std::string failure = compare(name + "y", d_y.download(dtype, ny), y, dtype, g.col_rows(),
                                            hg::kernels::cuda::cudnn::enabled() ? &y_without_bias : nullptr);
        CHECK_MESSAGE(failure.empty(), failure);
      }
      {
        const DeviceMemory ws(gpu::conv2d_workspace_bytes(g, ConvPass::BackwardData, dtype, stream()));
        gpu::conv2d_backward_data(g, d_dy.data(), d_w.data(), d_dx.data(), ws.data(), ws.bytes(), dtype, stream());
        const std::string failure = compare(name + "dx", d_dx.download(dtype, nx), dx, dtype,
                                            g.group_out_channels() * g.kernel_h * g.kernel_w);
        CHECK_MESSAGE(failure.empty(), failure);
      }
      {
        const DeviceMemory ws(gpu::conv2d_workspace_bytes(g, ConvPass::BackwardFilter, dtype, stream()));
        gpu::conv2d_backward_filter(g, d_x.data(), d_dy.data(), d_dw.data(), ws.data(), ws.bytes(), dtype, stream());
        const std::string failure =
            compare(name + "dweight", d_dw.download(dtype, g.weight_numel()), dw, dtype, g.batch * g.out_pixels());
        CHECK_MESSAGE(failure.empty(), failure);
      }
    }
  }
}

TEST_CASE("conv2d on CUDA takes the cuDNN path when built with it, one counted cuDNN call per pass") {
  if (skip_without_device()) return;
  namespace cudnn = hg::kernels::cuda::cudnn;
#if defined(HALFGRAD_EMULATED_CUDA) && defined(HALFGRAD_TEST_EMULATED_CUDNN)
  // The emulated build compiles conv2d_cudnn.cpp against the emulated cuDNN: only HALFGRAD_CUDNN=0
  // (the "im2col: " run of this suite) turns it off.
  const char* env = std::getenv("HALFGRAD_CUDNN");
  CHECK(cudnn::enabled() == !(env != nullptr && env[0] == '0'));
#endif
  std::mt19937_64 rng(23);
  const Conv2dGeometry g = geometry(2, 4, 6, 5, 6, 3, 3, 2, 1, 1, 2, 1, 1, 2);
  const int64_t nx = g.batch * g.in_channels * g.height * g.width, ny = g.batch * g.out_channels * g.out_pixels();
  const DType dtype = DType::f32;
  const DeviceMemory x(random_buffer(dtype, nx, rng)), w(random_buffer(dtype, g.weight_numel(), rng)),
      dy(random_buffer(dtype, ny, rng));
  const DeviceMemory y(size_t(ny) * 4), dx(size_t(nx) * 4), dw(size_t(g.weight_numel()) * 4);
  const DeviceMemory ws(std::max({gpu::conv2d_workspace_bytes(g, ConvPass::Forward, dtype, stream()),
                                  gpu::conv2d_workspace_bytes(g, ConvPass::BackwardData, dtype, stream()),
                                  gpu::conv2d_workspace_bytes(g, ConvPass::BackwardFilter, dtype, stream())}));
  const auto before = hg::runtime_counters();
  gpu::conv2d_forward(g, x.data(), w.data(), nullptr, y.data(), ws.data(), ws.bytes(), dtype, stream());
  gpu::conv2d_backward_data(g, dy.data(), w.data(), dx.data(), ws.data(), ws.bytes(), dtype, stream());
  gpu::conv2d_backward_filter(g, x.data(), dy.data(), dw.data(), ws.data(), ws.bytes(), dtype, stream());
  const auto delta = hg::runtime_counters() - before;
  CHECK(delta[hg::RuntimeCounter::dnn_calls] == (cudnn::enabled() ? 3 : 0));
}

TEST_CASE("conv2d on CUDA rejects a workspace smaller than it asked for") {
  if (skip_without_device()) return;
  const Conv2dGeometry g = geometry(1, 2, 5, 5, 3, 3, 3);
  const size_t bytes = gpu::conv2d_workspace_bytes(g, ConvPass::Forward, DType::f32, stream());
  if (bytes == 0) return;  // (cuDNN may choose an algorithm that needs none)
  const DeviceMemory x(50 * 4), w(54 * 4), y(27 * 4), ws(bytes);
  std::string message;
  try {
    gpu::conv2d_forward(g, x.data(), w.data(), nullptr, y.data(), ws.data(), bytes - 1, DType::f32, stream());
  } catch (const hg::Error& e) {
    message = e.what();
  }
  CHECK(message.find("workspace of") != std::string::npos);
}

TEST_CASE("max and avg pooling on CUDA equal the CPU with a deterministic backward") {
  if (skip_without_device()) return;
  std::mt19937_64 rng(22);
  struct PoolCase {
    const char* name;
    Pool2dGeometry g;
  };
  auto pool = [](int64_t n, int64_t c, int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph,
                 int64_t pw) {
    Pool2dGeometry g;
    g.batch = n, g.channels = c, g.height = h, g.width = w, g.kernel_h = kh, g.kernel_w = kw;
    g.stride_h = sh, g.stride_w = sw, g.pad_h = ph, g.pad_w = pw;
    return g;
  };
  const PoolCase cases[] = {
      {"2x2", pool(2, 3, 8, 8, 2, 2, 2, 2, 0, 0)},
      {"odd sizes", pool(1, 2, 7, 5, 2, 2, 2, 2, 0, 0)},
      {"overlapping padded", pool(2, 2, 9, 6, 3, 3, 2, 1, 1, 1)},
      {"window = image", pool(1, 4, 3, 5, 3, 5, 1, 1, 0, 0)},
      // Window rows of whole pairs (the kernel's 2-element loads), with rows and columns clipped by padding.
      {"pairs padded", pool(2, 2, 6, 10, 4, 4, 2, 2, 2, 2)},
      {"pairs 3x2 row-padded", pool(1, 3, 5, 8, 3, 2, 1, 2, 1, 0)},
      // Windows that tile the image (max backward writes whole windows), rows of 3 single elements.
      {"tiled 3x3", pool(2, 2, 6, 9, 3, 3, 3, 3, 0, 0)},
  };
  for (const PoolCase& c : cases) {
    const Pool2dGeometry& g = c.g;
    const int64_t nx = g.planes() * g.height * g.width, ny = g.planes() * g.out_h() * g.out_w();
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      for (PoolMode mode : {PoolMode::Max, PoolMode::Avg}) {
        const std::string name = std::string(c.name) + (mode == PoolMode::Max ? " max " : " avg ") + hg::dtype_name(dtype);
        const HostBuffer x = random_buffer(dtype, nx, rng), dy = random_buffer(dtype, ny, rng);
        HostBuffer y(dtype, ny), argmax(DType::i32, ny), dx(dtype, nx);
        cpu::pool2d_forward(mode, g, x.data(), y.data(), argmax.as<int32_t>(), dtype);
        cpu::pool2d_backward(mode, g, dy.data(), argmax.as<int32_t>(), dx.data(), dtype);

        const DeviceMemory d_x(x), d_dy(dy), d_y(y.bytes()), d_argmax(argmax.bytes()), d_dx(dx.bytes()), d_dx2(dx.bytes());
        int32_t* d_index = static_cast<int32_t*>(d_argmax.data());
        gpu::pool2d_forward(mode, g, d_x.data(), d_y.data(), d_index, dtype, stream());
        const HostBuffer got_y = d_y.download(dtype, ny);
        if (mode == PoolMode::Max) {
          CHECK_MESSAGE(got_y.bitwise_equal(y), name, ": max values differ");
          CHECK_MESSAGE(d_argmax.download(DType::i32, ny).bitwise_equal(argmax), name, ": argmax differs");
        } else {
          const std::string failure = compare(name + " y", got_y, y, dtype, g.kernel_h * g.kernel_w);
          CHECK_MESSAGE(failure.empty(), failure);
        }
        gpu::pool2d_backward(mode, g, d_dy.data(), d_index, d_dx.data(), dtype, stream());
        gpu::pool2d_backward(mode, g, d_dy.data(), d_index, d_dx2.data(), dtype, stream());
        const HostBuffer got_dx = d_dx.download(dtype, nx);
        const std::string failure = compare(name + " dx", got_dx, dx, dtype, g.kernel_h * g.kernel_w);
        CHECK_MESSAGE(failure.empty(), failure);
        CHECK_MESSAGE(got_dx.bitwise_equal(d_dx2.download(dtype, nx)), name, ": backward is not deterministic");
      }
    }
  }
}

// Max pooling's choice among equal values and NaNs (the first maximum in row-major window order, a NaN
// first) is the CPU's bit for bit, whether the kernel reads the window rows in pairs (x aligned) or
// element by element (x one element off an aligned address, or odd window widths).
TEST_CASE("max pooling on CUDA picks the CPU's argmax among ties and NaNs, aligned or not") {
  if (skip_without_device()) return;
  std::mt19937_64 rng(23);
  std::uniform_int_distribution<int> pick(0, 9);
  Pool2dGeometry pairs, odd;
  pairs.batch = 2, pairs.channels = 3, pairs.height = 6, pairs.width = 8, pairs.kernel_h = 2, pairs.kernel_w = 4;
  pairs.stride_h = 2, pairs.stride_w = 2, pairs.pad_h = 1, pairs.pad_w = 2;
  odd = pairs;
  odd.kernel_w = 3, odd.pad_w = 1;
  for (const Pool2dGeometry& g : {pairs, odd}) {
    const int64_t nx = g.planes() * g.height * g.width, ny = g.planes() * g.out_h() * g.out_w();
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      for (int64_t offset : {0, 1}) {
        const std::string name = std::string(g.kernel_w == 4 ? "4-wide" : "3-wide") + " windows, x offset " +
                                 std::to_string(offset) + ", " + hg::dtype_name(dtype);
        // Values from {-1, 0, 1} (many ties), one in ten NaN.
        HostBuffer x(dtype, nx + 1);
        for (int64_t i = 0; i < nx + 1; ++i) {
          const int v = pick(rng);
          x.set(i, v == 0 ? std::numeric_limits<double>::quiet_NaN() : double(v % 3 - 1));
        }
        HostBuffer y(dtype, ny), argmax(DType::i32, ny);
        const char* x_host = static_cast<const char*>(x.data()) + offset * hg::dtype_size(dtype);
        cpu::pool2d_forward(PoolMode::Max, g, x_host, y.data(), argmax.as<int32_t>(), dtype);

        const DeviceMemory d_x(x), d_y(y.bytes()), d_argmax(argmax.bytes());
        const char* x_device = static_cast<const char*>(d_x.data()) + offset * hg::dtype_size(dtype);
        gpu::pool2d_forward(PoolMode::Max, g, x_device, d_y.data(), static_cast<int32_t*>(d_argmax.data()), dtype,
                            stream());
        CHECK_MESSAGE(d_y.download(dtype, ny).bitwise_equal(y), name, ": max values differ");
        CHECK_MESSAGE(d_argmax.download(DType::i32, ny).bitwise_equal(argmax), name, ": argmax differs");
      }
    }
  }
}
