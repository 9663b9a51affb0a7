// The compare_forward and where_forward CUDA kernels against the CPU backend's, bit for bit, over every
// dtype, every compare op, broadcasting, strided and rank-8 layouts, an empty shape and unaligned
// operands; outputs are poisoned (0xff) before each kernel runs. On the emulated build the emulator runs
// the kernels; without a device each case is listed as skipped.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/kernels_cuda.h"
#include "support/cuda_device.h"
#include "support/host_buffer.h"

using hg::DType;
using hg::kernels::CompareOp;
using hg::testing::HostBuffer;
namespace cpu = hg::kernels::cpu;
namespace gpu = hg::kernels::cuda;

namespace {

struct Layout {
  const char* name;
  std::vector<int64_t> shape, first, second, third;  // strides of a, b (and where's third operand)
  int64_t offset = 0;                                // elements of misalignment of every operand
};

const std::vector<Layout> kLayouts = {
    {"contiguous", {37, 29}, {29, 1}, {29, 1}, {29, 1}},
    {"unaligned", {1001}, {1}, {1}, {1}, 1},
    {"scalar b", {5, 7}, {7, 1}, {0, 0}, {7, 1}},
    {"row broadcast", {33, 70}, {70, 1}, {0, 1}, {1, 0}},
    {"transposed a", {40, 30}, {1, 40}, {30, 1}, {0, 1}},
    {"every other element", {6, 9}, {18, 2}, {27, 3}, {9, 1}},
    {"rank 0", {}, {}, {}, {}},
    {"zero-size", {4, 0}, {0, 1}, {0, 1}, {0, 1}},
    {"rank 8", {2, 3, 1, 2, 2, 1, 3, 2}, {72, 24, 24, 12, 6, 6, 2, 1}, {0, 1, 0, 0, 3, 0, 6, 0}, {0, 0, 0, 0, 0, 0, 1, 0}},
};

int64_t extent(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  int64_t last = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return 0;
    last += (shape[d] - 1) * strides[d];
  }
  return last + 1;
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

// Values with ties and, for floating dtypes, NaN and infinities among them.
HostBuffer values(DType dtype, int64_t n, std::mt19937_64& rng) {
  HostBuffer b(dtype, n);
  std::uniform_int_distribution<int> small(-3, 3);
  for (int64_t i = 0; i < n; ++i) {
    double v = small(rng);
    if (dtype == DType::b8) v = v > 0;
    if (dtype == DType::u8) v = v + 3;
    if (hg::is_floating(dtype)) {
      v += 0.5 * (rng() % 2);
      if (rng() % 17 == 0) v = NAN;
      if (rng() % 23 == 0) v = rng() % 2 ? INFINITY : -INFINITY;
    }
    b.set(i, v);
  }
  return b;
}

struct Device {
  void* base = nullptr;
  size_t bytes = 0;
  int64_t offset_bytes = 0;
  Device(const HostBuffer& host, int64_t offset) {
    offset_bytes = offset * int64_t(hg::dtype_size(host.dtype()));
    bytes = host.bytes() + size_t(offset_bytes) + 1;
    HG_CUDA_CHECK(cudaMalloc(&base, bytes));
    HG_CUDA_CHECK(cudaMemset(base, 0xff, bytes));
    if (host.bytes() != 0) HG_CUDA_CHECK(cudaMemcpy(data(), host.data(), host.bytes(), cudaMemcpyHostToDevice));
  }
  ~Device() { (void)cudaFree(base); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  void* data() const { return static_cast<char*>(base) + offset_bytes; }
  void download(HostBuffer& host) const {
    HG_CUDA_CHECK(cudaStreamSynchronize(hg::testing::cuda_test_stream()));
    if (host.bytes() != 0) HG_CUDA_CHECK(cudaMemcpy(host.data(), data(), host.bytes(), cudaMemcpyDeviceToHost));
  }
};

const DType kAllTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8, DType::b8};

}  // namespace

TEST_CASE("cuda compare_forward: every op, dtype and layout, the CPU's bits") {
  if (hg::testing::skip_without_cuda_device("cuda compare_forward")) return;
  std::mt19937_64 rng(7);
  for (DType t : kAllTypes) {
    for (const Layout& l : kLayouts) {
      for (CompareOp op : hg::kernels::kCompareOps) {
        CAPTURE(std::string(l.name));
        CAPTURE(std::string(hg::dtype_name(t)));
        CAPTURE(std::string(hg::kernels::op_name(op)));
        const HostBuffer a = values(t, extent(l.shape, l.first), rng), b = values(t, extent(l.shape, l.second), rng);
        const int64_t n = numel(l.shape);
        HostBuffer want(DType::b8, n), got(DType::b8, n);
        cpu::compare_forward(op, a.data(), l.first.data(), b.data(), l.second.data(), want.as<bool>(), l.shape.data(),
                             int(l.shape.size()), t);
        const Device da(a, l.offset), db(b, l.offset), dy(got, l.offset);
        gpu::compare_forward(op, da.data(), l.first.data(), db.data(), l.second.data(), static_cast<bool*>(dy.data()),
                             l.shape.data(), int(l.shape.size()), t, hg::testing::cuda_test_stream());
        dy.download(got);
        CHECK(got.bitwise_equal(want));
      }
    }
  }
}

TEST_CASE("cuda where_forward: every dtype and layout, the CPU's bits (NaN payloads included)") {
  if (hg::testing::skip_without_cuda_device("cuda where_forward")) return;
  std::mt19937_64 rng(8);
  for (DType t : kAllTypes) {
    for (const Layout& l : kLayouts) {
      CAPTURE(std::string(l.name));
      CAPTURE(std::string(hg::dtype_name(t)));
      const HostBuffer cond = values(DType::b8, extent(l.shape, l.first), rng);
      const HostBuffer a = values(t, extent(l.shape, l.second), rng), b = values(t, extent(l.shape, l.third), rng);
      const int64_t n = numel(l.shape);
      HostBuffer want(t, n), got(t, n);
      cpu::where_forward(static_cast<const bool*>(cond.data()), l.first.data(), a.data(), l.second.data(), b.data(),
                         l.third.data(), want.data(), l.shape.data(), int(l.shape.size()), t);
      const Device dc(cond, l.offset), da(a, l.offset), db(b, l.offset), dy(got, l.offset);
      gpu::where_forward(static_cast<const bool*>(dc.data()), l.first.data(), da.data(), l.second.data(), db.data(),
                         l.third.data(), dy.data(), l.shape.data(), int(l.shape.size()), t,
                         hg::testing::cuda_test_stream());
      dy.download(got);
      CHECK(got.bitwise_equal(want));
      // And the CPU's answer is the definition's.
      int wrong = 0;
      std::vector<int64_t> index(l.shape.size(), 0);
      for (int64_t i = 0; i < n; ++i) {
        int64_t rest = i, co = 0, ao = 0, bo = 0;
        for (int d = int(l.shape.size()) - 1; d >= 0; --d) {
          const int64_t k = rest % l.shape[size_t(d)];
          rest /= l.shape[size_t(d)];
          co += k * l.first[size_t(d)];
          ao += k * l.second[size_t(d)];
          bo += k * l.third[size_t(d)];
        }
        const double expected = cond.get(co) != 0 ? a.get(ao) : b.get(bo), value = want.get(i);
        wrong += !(value == expected || (std::isnan(value) && std::isnan(expected)));
      }
      CHECK(wrong == 0);
    }
  }
}
