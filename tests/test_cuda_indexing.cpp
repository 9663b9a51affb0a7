// The index_gather, index_scatter_add, cumsum and topk CUDA kernels against the CPU backend's (topk:
// values and indices bit for bit, in both of its paths): gather and
// scatter_add bit for bit (the same order of additions; alpha a power of two, so no fused multiply-add
// can change a bit), cumsum's column path bit for bit and its warp-scan row path within the rounding
// of a reordered sum. Every floating dtype, i32 and i64 indices, both index layouts, sizes that leave
// partial warps and blocks; outputs poisoned (0xff) before each kernel runs. An index out of range is
// recorded on the device and raised, with the CPU's message, at the next host read. On the emulated
// build the emulator runs the kernels; without a device each case is listed as skipped.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/device_errors.h"
#include "kernels/kernels.h"
#include "kernels/kernels_cuda.h"
#include "support/cuda_device.h"
#include "support/random_buffers.h"

using hg::DType;
using hg::testing::HostBuffer;
using hg::testing::random_indices;
using hg::testing::random_normal;
namespace cpu = hg::kernels::cpu;
namespace gpu = hg::kernels::cuda;

namespace {

struct Sizes {
  int64_t outer, n, m, inner;
};

const std::vector<Sizes> kSizes = {{3, 5, 4, 7}, {1, 1, 6, 1}, {2, 9, 0, 3}, {1, 4, 9, 300}, {37, 2, 3, 1}};

struct DeviceBuffer {
  void* data = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(const HostBuffer& host) : bytes(host.bytes() + 1) {
    HG_CUDA_CHECK(cudaMalloc(&data, bytes));
    HG_CUDA_CHECK(cudaMemset(data, 0xff, bytes));  // the poison a kernel must overwrite
    if (host.bytes() != 0) HG_CUDA_CHECK(cudaMemcpy(data, host.data(), host.bytes(), cudaMemcpyHostToDevice));
  }
  ~DeviceBuffer() { (void)cudaFree(data); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void download(HostBuffer& host) const {
    gpu::synchronize_and_raise_device_errors(hg::testing::cuda_test_stream());
    if (host.bytes() != 0) HG_CUDA_CHECK(cudaMemcpy(host.data(), data, host.bytes(), cudaMemcpyDeviceToHost));
  }
};

const DType kFloating[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

}  // namespace

TEST_CASE("cuda index_gather and index_scatter_add: the CPU's bits, every dtype and index layout") {
  if (hg::testing::skip_without_cuda_device("cuda index_gather / index_scatter_add")) return;
  std::mt19937_64 rng(37);
  for (DType t : kFloating) {
    for (DType it : {DType::i32, DType::i64}) {
      for (bool per_element : {true, false}) {
        for (const Sizes& s : kSizes) {
          CAPTURE(std::string(hg::dtype_name(t)));
          CAPTURE(std::string(hg::dtype_name(it)));
          CAPTURE(per_element);
          CAPTURE(s.n);
          CAPTURE(s.inner);
          const int64_t small = s.outer * s.m * s.inner, large = s.outer * s.n * s.inner;
          const HostBuffer index = random_indices(it, per_element ? small : s.m, s.n, rng);
          const HostBuffer x = random_normal(t, large, rng);
          HostBuffer want(t, small), got(t, small);
          cpu::index_gather(x.data(), index.data(), it, want.data(), s.outer, s.n, s.m, s.inner, per_element, t);
          const DeviceBuffer dx(x), di(index), dy(got);
          gpu::index_gather(dx.data, di.data, it, dy.data, s.outer, s.n, s.m, s.inner, per_element, t,
                            hg::testing::cuda_test_stream());
          dy.download(got);
          CHECK(got.bitwise_equal(want));

          for (const bool with_base : {true, false}) {
            const HostBuffer src = random_normal(t, small, rng), base = random_normal(t, large, rng);
            HostBuffer want_sum(t, large), got_sum(t, large);
            cpu::index_scatter_add(with_base ? base.data() : nullptr, src.data(), index.data(), it, want_sum.data(),
                                   s.outer, s.n, s.m, s.inner, per_element, -0.5, t);
            const DeviceBuffer dbase(base), dsrc(src), dout(got_sum);
            gpu::index_scatter_add(with_base ? dbase.data : nullptr, dsrc.data, di.data, it, dout.data, s.outer, s.n,
                                   s.m, s.inner, per_element, -0.5, t, hg::testing::cuda_test_stream());
            dout.download(got_sum);
            CHECK(got_sum.bitwise_equal(want_sum));
          }
        }
      }
    }
  }
}

TEST_CASE("cuda index_gather copies bool and i64 bits") {
  if (hg::testing::skip_without_cuda_device("cuda index_gather of non-floating dtypes")) return;
  std::mt19937_64 rng(38);
  for (DType t : {DType::b8, DType::i64}) {
    HostBuffer x(t, 40);
    for (int64_t i = 0; i < 40; ++i) x.set(i, t == DType::b8 ? double(rng() % 2) : double(int64_t(rng() % 1000) - 500));
    const HostBuffer index = random_indices(DType::i64, 12, 10, rng);
    HostBuffer want(t, 48), got(t, 48);
    cpu::index_gather(x.data(), index.data(), DType::i64, want.data(), 1, 10, 12, 4, false, t);
    const DeviceBuffer dx(x), di(index), dy(got);
    gpu::index_gather(dx.data, di.data, DType::i64, dy.data, 1, 10, 12, 4, false, t, hg::testing::cuda_test_stream());
    dy.download(got);
    CHECK(got.bitwise_equal(want));
  }
}

TEST_CASE("cuda cumsum: columns bit for bit, rows (warp scan) within a reordered sum's rounding") {
  if (hg::testing::skip_without_cuda_device("cuda cumsum")) return;
  std::mt19937_64 rng(39);
  const std::vector<Sizes> shapes = {{5, 70, 0, 1}, {1, 31, 0, 1}, {3, 9, 0, 33}, {2, 0, 0, 1}, {1, 300, 0, 1}};
  for (DType t : kFloating) {
    for (bool reverse : {false, true}) {
      for (const Sizes& s : shapes) {
        CAPTURE(std::string(hg::dtype_name(t)));
        CAPTURE(reverse);
        CAPTURE(s.n);
        CAPTURE(s.inner);
        const int64_t count = s.outer * s.n * s.inner;
        const HostBuffer x = random_normal(t, count, rng);
        HostBuffer want(t, count), got(t, count);
        cpu::cumsum(x.data(), want.data(), s.outer, s.n, s.inner, reverse, t);
        const DeviceBuffer dx(x), dy(got);
        gpu::cumsum(dx.data, dy.data, s.outer, s.n, s.inner, reverse, t, hg::testing::cuda_test_stream());
        dy.download(got);
        if (s.inner > 1) {
          CHECK(got.bitwise_equal(want));
          continue;
        }
        // A prefix of n terms summed in another order: within n * eps_acc of the sum of magnitudes,
        // plus one rounding of the output dtype.
        const double acc_eps = t == DType::f64 ? 1.2e-16 : 6e-8;
        const double out_eps = t == DType::f16 ? 1.0 / 1024 : t == DType::bf16 ? 1.0 / 128 : acc_eps;
        int wrong = 0;
        for (int64_t o = 0; o < s.outer; ++o) {
          double magnitude = 0;
          for (int64_t step = 0; step < s.n; ++step) {
            const int64_t p = o * s.n + (reverse ? s.n - 1 - step : step);
            magnitude += std::fabs(x.get(p));
            const double tol = double(s.n) * acc_eps * magnitude + out_eps * std::fabs(want.get(p)) + 1e-30;
            wrong += !(std::fabs(got.get(p) - want.get(p)) <= tol);
          }
        }
        CHECK(wrong == 0);
      }
    }
  }
}

TEST_CASE("cuda index_gather and index_scatter_add: a bad index is raised at the next host read, as on the CPU") {
  if (hg::testing::skip_without_cuda_device("cuda index errors")) return;
  std::mt19937_64 rng(40);
  HostBuffer index(DType::i64, 6);
  for (int64_t i = 0; i < 6; ++i) index.set(i, double(i % 3));
  index.set(4, 7);
  const HostBuffer x = random_normal(DType::f32, 12, rng);
  HostBuffer y(DType::f32, 12);
  const DeviceBuffer dx(x), di(index), dy(y);
  const auto stream = hg::testing::cuda_test_stream();
  struct Case {
    const char* message;
    bool gather, per_element;
  };
  for (const Case& c :
       {Case{"[gather] index 7 at position 4 is out of range, expected 0 <= index < 3", true, true},
        Case{"[index_select] index 7 at position 4 is out of range, expected 0 <= index < 3", true, false},
        Case{"[scatter_add] index 7 at position 4 is out of range, expected 0 <= index < 3", false, true},
        Case{"[index_add] index 7 at position 4 is out of range, expected 0 <= index < 3", false, false}}) {
    CAPTURE(std::string(c.message));
    // x seen as [1, 3, 4] / [1, 6, 2] around the indexed dimension, the index as [1, 6, 1] or [6].
    if (c.gather) {
      gpu::index_gather(dx.data, di.data, DType::i64, dy.data, 1, 3, 6, 1, c.per_element, DType::f32, stream);
    } else {
      gpu::index_scatter_add(nullptr, dx.data, di.data, DType::i64, dy.data, 1, 3, 6, 1, c.per_element, 1.0, DType::f32,
                             stream);
    }
    std::string raised = "(nothing raised)";
    try {
      gpu::synchronize_and_raise_device_errors(stream);
    } catch (const std::exception& e) {
      raised = e.what();
    }
    CHECK(raised.starts_with(c.message));
    gpu::synchronize_and_raise_device_errors(stream);  // raised once: the record is clear again
  }
}

TEST_CASE("cuda topk: the CPU's values and indices, in shared memory and through the global bitonic network") {
  if (hg::testing::skip_without_cuda_device("cuda topk")) return;
  std::mt19937_64 rng(43);
  struct Case {
    int64_t rows, n, k;
  };
  // n = 2048 is the last row sorted in shared memory; 3000 takes the workspace network.
  for (DType t : kFloating)
    for (const bool largest : {true, false})
      for (const Case c : {Case{5, 37, 5}, Case{3, 9, 9}, Case{1, 1, 1}, Case{2, 2048, 40}, Case{2, 3000, 17}}) {
        CAPTURE(std::string(hg::dtype_name(t)));
        CAPTURE(largest);
        CAPTURE(c.n);
        const HostBuffer x = hg::testing::random_with_ties(t, c.rows, c.n, rng);
        HostBuffer want_values(t, c.rows * c.k), want_indices(DType::i64, c.rows * c.k);
        cpu::topk(x.data(), want_values.data(), static_cast<int64_t*>(want_indices.data()), c.rows, c.n, c.k, largest,
                  nullptr, 0, t);
        HostBuffer got_values(t, c.rows * c.k), got_indices(DType::i64, c.rows * c.k);
        const size_t bytes = gpu::topk_workspace_bytes(c.rows, c.n, hg::testing::cuda_test_stream());
        CHECK((bytes == 0) == (c.n <= 2048));
        const DeviceBuffer dx(x), dv(got_values), di(got_indices), workspace(HostBuffer(DType::u8, int64_t(bytes)));
        gpu::topk(dx.data, dv.data, static_cast<int64_t*>(di.data), c.rows, c.n, c.k, largest, workspace.data, bytes, t,
                  hg::testing::cuda_test_stream());
        dv.download(got_values);
        di.download(got_indices);
        CHECK(got_values.bitwise_equal(want_values));
        CHECK(got_indices.bitwise_equal(want_indices));
      }
}
