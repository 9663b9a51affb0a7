// kernels/cuda: every hand-written CUDA kernel against its CPU twin (kernels::cpu, the oracle).
//
// Each check draws seeded random inputs on the host, rounds them to the dtype under test, gives the
// very same bits to both backends, poisons every output with 0xff bytes (NaN in every float type)
// before each launch so an element a kernel forgets to write fails, and compares. Device memory goes
// through the CUDA runtime API (cudaMalloc/cudaMemcpy/cudaMemset), which the emulator provides.
//
// Where the math is exact the comparison is bitwise: copy_strided, scatter_along, Max and argmax,
// embedding forward and backward (same additions in the same order), dropout, uniform_fill with a
// power-of-two width, accumulate (one addition). Elsewhere a result passes when |got - ref| <= atol + rtol * |ref| with
//   rtol = ulps * u(acc) + ulp(out),   atol = ulps * u(acc) * scale,
// where
//   u(acc)   = 2^-24 for f32/f16/bf16 (fp32 accumulation), 2^-53 for f64: one rounding of acc_t;
//   ulps     = how many acc_t roundings the two backends may differ by for that op, stated per test
//              (a GPU's expf/logf/tanhf/erff are within 2 ulp of glibc's; nvcc fuses a*b+c into one
//              fma; reductions add in a different order, whose error grows like sqrt(n) ulps of the
//              sum of |terms| for random data);
//   ulp(out) = one ulp of the output type, relative: 2^-10 ~ 9.8e-4 for f16 (10 fraction bits) and
//              2^-7 ~ 7.8e-3 for bf16 (7 fraction bits), 0 for f32/f64 whose outputs are the
//              accumulator itself. Two fp32 values a few ulp apart can round to neighbouring half
//              values, so half outputs may differ by one of their own ulp and by no more (for f16
//              subnormals, below 2^-14, that ulp is 2^-24 absolute, added to atol);
//   scale    = the magnitude of the terms that cancel into a small result (for sums, passed per
//              element as the sum of |terms|), so cancellation near zero is not held to rtol alone.
// Under the emulator both backends call the same glibc functions, so the differences are only of
// order and fma; on a GPU the same bounds hold with margin.
//
// Shapes include odd sizes, sizes that are not multiples of the 16-byte vector width, rows longer
// than a block (block-per-row paths), rows of one element, and unaligned pointers (every operand
// offset by one element, so the vector paths peel a scalar head; or one operand offset alone, so
// they fall back to scalar). Determinism: LayerNorm's dweight/dbias, embedding backward and
// sum_of_squares are run twice and must match bit for bit (the emulator runs blocks in a shuffled
// order, so an order dependence would show).
//
// Without a CUDA device (the normal build on a machine without a GPU) every test says why it skips
// and passes; the emulated build (HALFGRAD_CUDA=EMULATED) and a GPU machine run them all.
#include <doctest/doctest.h>

#include "support/cuda_device.h"
#include "support/device_buffer.h"
#include "support/host_buffer.h"
#include "support/op_cases.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_errors.h"
#include "kernels/error.h"
#include "kernels/half.h"
#include "kernels/kernels.h"
#include "kernels/kernels_cuda.h"
#include "kernels/runtime_counters.h"
#include "kernels/step_kernels.h"

namespace {

using hg::DType;
using hg::kernels::BinaryOp;
using hg::kernels::ReduceOp;
using hg::kernels::UnaryOp;
namespace cpu = hg::kernels::cpu;
namespace gpu = hg::kernels::cuda;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
const DType kFloatingTypes[] = {DType::f32, DType::f16, DType::bf16, DType::f64};

// ---- the device, or why there is none ------------------------------------------------------------

// Empty when a CUDA device answers; otherwise the reason, printed by every test as it skips.
#define SKIP_WITHOUT_DEVICE()                                          \
  do {                                                                 \
    if (hg::testing::skip_without_cuda_device("CUDA kernel parity")) return; \
  } while (0)

// One non-default stream for every launch, so nothing relies on the legacy default stream.
gpu::Stream stream() { return hg::testing::cuda_test_stream(); }

// ---- host buffers of any dtype -------------------------------------------------------------------

using Buffer = hg::testing::HostBuffer;

struct Rng {
  std::mt19937_64 engine;
  explicit Rng(uint64_t seed) : engine(seed) {}
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(engine); }
  int64_t integer(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(engine); }
};

Buffer random_buffer(DType dtype, int64_t n, Rng& rng, double lo, double hi) {
  Buffer b(dtype, n);
  for (int64_t i = 0; i < n; ++i) b.set(i, rng.uniform(lo, hi));
  return b;
}

Buffer random_bits(DType dtype, int64_t n, Rng& rng) {
  Buffer b(dtype, n);
  auto* bytes = static_cast<unsigned char*>(b.data());
  for (size_t k = 0; k < b.bytes(); ++k) bytes[k] = static_cast<unsigned char>(rng.integer(0, 255));
  return b;
}

Buffer index_buffer(DType dtype, const std::vector<int64_t>& values) {
  Buffer b(dtype, int64_t(values.size()));
  for (size_t i = 0; i < values.size(); ++i) b.set(int64_t(i), double(values[i]));
  return b;
}

// ---- device buffers ------------------------------------------------------------------------------

using hg::testing::DeviceBuffer;  // support/device_buffer.h: poisoned with 0xff bytes when made

// ---- comparisons ---------------------------------------------------------------------------------

struct Tol {
  double atol, rtol;
};

double acc_unit(DType t) { return t == DType::f64 ? 0x1p-53 : 0x1p-24; }
double out_ulp(DType t) { return t == DType::f16 ? 0x1p-10 : t == DType::bf16 ? 0x1p-7 : 0.0; }

// The smallest ulp of the output type: f16 outputs below 2^-14 are subnormal, spaced 2^-24 apart,
// so there one ulp of the output is that absolute step, not a relative one (bf16, f32 and f64
// subnormals lie below 1e-38, out of reach of these tests).
double out_abs_ulp(DType t) { return t == DType::f16 ? 0x1p-24 : 0.0; }

// The tolerance of the header comment: `ulps` roundings of acc_t, plus one ulp of a half output.
Tol tolerance(DType t, double ulps, double scale = 1) {
  const double u = acc_unit(t);
  return {ulps * u * scale + out_abs_ulp(t), ulps * u + out_ulp(t)};
}

std::string name_of(DType t) { return hg::dtype_name(t); }

// got vs ref element by element within atol + rtol * magnitude (|ref| unless given). NaN must meet
// NaN and an infinity the same infinity. Reports the first mismatch and the count.
void check_close(const Buffer& got, const Buffer& ref, const std::string& what, Tol tol,
                 const std::vector<double>* magnitude = nullptr) {
  REQUIRE(got.size() == ref.size());
  int64_t failures = 0;
  for (int64_t i = 0; i < got.size(); ++i) {
    const double g = got.get(i), r = ref.get(i);
    const double m = magnitude ? (*magnitude)[size_t(i)] : std::fabs(r);
    const double bound = tol.atol + tol.rtol * m;
    const bool ok = std::isnan(r) ? std::isnan(g) : (g == r || std::fabs(g - r) <= bound);
    if (!ok && failures++ == 0) {
      FAIL_CHECK(what << " [" << name_of(got.dtype()) << "] element " << i << " of " << got.size() << ": got " << g
                      << ", CPU " << r << ", |difference| " << std::fabs(g - r) << " > tolerance " << bound);
    }
  }
  if (failures > 1) FAIL_CHECK(what << ": " << failures << " elements out of tolerance in total");
}

// Bit for bit (the whole buffer, so poison that must survive is checked too).
void check_bitwise(const Buffer& got, const Buffer& ref, const std::string& what) {
  REQUIRE(got.bytes() == ref.bytes());
  const size_t e = hg::dtype_size(got.dtype());
  const auto* g = static_cast<const unsigned char*>(got.data());
  const auto* r = static_cast<const unsigned char*>(ref.data());
  int64_t failures = 0;
  for (int64_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(g + size_t(i) * e, r + size_t(i) * e, e) != 0 && failures++ == 0) {
      FAIL_CHECK(what << " [" << name_of(got.dtype()) << "] element " << i << " of " << got.size() << ": got "
                      << got.get(i) << ", CPU " << ref.get(i) << " (bits differ)");
    }
  }
  if (failures > 1) FAIL_CHECK(what << ": " << failures << " elements differ in total");
}

std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const hg::Error& e) {
    return e.what();
  }
  return "(no hg::Error thrown)";
}

void check_error(const std::function<void()>& call, const std::vector<std::string>& fragments) {
  const std::string message = error_of(call);
  for (const std::string& fragment : fragments) {
    CHECK_MESSAGE(message.find(fragment) != std::string::npos,
                  "message \"" << message << "\" lacks \"" << fragment << "\"");
  }
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = s;
    s *= shape[d];
  }
  return strides;
}

// Elements a strided view reaches: 1 + the largest offset (0 for an empty view).
int64_t view_extent(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  int64_t last = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return 0;
    last += (shape[d] - 1) * strides[d];
  }
  return last + 1;
}

}  // namespace

// ==== copy_strided ================================================================================

TEST_CASE("cuda copy_strided: layouts (table), element sizes 2, 4 and 8, bit for bit") {
  SKIP_WITHOUT_DEVICE();
  struct Case {
    const char* name;
    std::vector<int64_t> shape, src_strides, dst_strides;
    int64_t src_offset = 0, dst_offset = 0;  // elements: 1 makes the pointer unaligned
  };
  const std::vector<Case> cases = {
      {"rank 0", {}, {}, {}},
      {"contiguous, packs", {1003}, {1}, {1}},
      {"contiguous, both unaligned (scalar head)", {1003}, {1}, {1}, 1, 1},
      {"contiguous, source alone unaligned (scalar)", {517}, {1}, {1}, 1, 0},
      {"contiguous 3d, merges to one row", {3, 5, 7}, {35, 7, 1}, {35, 7, 1}},
      {"transpose", {37, 53}, {1, 37}, {53, 1}},
      {"3d permutation", {3, 4, 5}, {1, 15, 3}, {20, 5, 1}},
      {"slice of a larger tensor", {5, 7, 9}, {80, 10, 1}, {63, 9, 1}},
      {"into a slice with gaps", {4, 6}, {6, 1}, {10, 1}},
      {"broadcast source (stride 0)", {3, 5}, {0, 1}, {5, 1}},
      {"size-1 dims with odd strides", {1, 6, 1, 2}, {99, 2, 77, 1}, {5, 2, 3, 1}},
      {"rank 8", {2, 1, 3, 2, 1, 2, 3, 2}, {1, 1, 4, 2, 1, 12, 24, 72}, contiguous_strides({2, 1, 3, 2, 1, 2, 3, 2})},
      {"zero-size dim", {3, 0, 2}, {0, 2, 1}, {0, 2, 1}},
  };
  Rng rng(11);
  for (DType t : {DType::f16, DType::f32, DType::f64, DType::i32}) {
    for (const Case& c : cases) {
      CAPTURE(std::string(c.name));
      CAPTURE(name_of(t));
      const Buffer src = random_bits(t, std::max<int64_t>(view_extent(c.shape, c.src_strides), 1), rng);
      const int64_t dst_size = std::max<int64_t>(view_extent(c.shape, c.dst_strides), 1);
      Buffer ref(t, dst_size);  // poisoned, like the device buffer
      cpu::copy_strided(src.data(), c.src_strides.data(), ref.data(), c.dst_strides.data(), c.shape.data(),
                        int(c.shape.size()), t);
      DeviceBuffer d_src(src, c.src_offset), d_dst(t, dst_size, c.dst_offset);
      gpu::copy_strided(d_src.data(), c.src_strides.data(), d_dst.data(), c.dst_strides.data(), c.shape.data(),
                        int(c.shape.size()), t, stream());
      check_bitwise(d_dst.download(), ref, c.name);  // gaps keep the poison
    }
  }
  const int64_t shape[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  check_error([&] { gpu::copy_strided(nullptr, shape, nullptr, shape, shape, 9, DType::f32, stream()); },
              {"[copy_strided]", "rank 9"});
}

// ==== unary, affine ===============================================================================

namespace {

// Sizes: one element, a partial pack, not a multiple of any vector width, several blocks.
const int64_t kElementwiseSizes[] = {1, 7, 1003, 4099};

}  // namespace

TEST_CASE("cuda unary_forward and unary_backward: every op (table), dtype, size, alignment") {
  SKIP_WITHOUT_DEVICE();
  // Forward: 16 ulps -- a device transcendental within 2 ulp, composed with up to a few roundings
  // (GELU: a cubic inside tanh; pow: exp(s log x)), each amplified by at most the function's
  // condition number on these domains (|x| <= 6).
  // Backward: 128 ulps -- the derivatives cancel (1 - tanh^2, y (1 - y) near y = 1, the GELU sum),
  // which multiplies a 2-ulp error of y by up to ~40 on these domains; scale 2 covers |dy| <= 2.
  Rng rng(21);
  for (DType t : kFloatingTypes) {
    for (const hg::testing::UnaryOpCase& c : hg::testing::unary_op_cases()) {
      for (int64_t n : kElementwiseSizes) {
        for (int64_t offset : {0, 1}) {
          CAPTURE(std::string(c.name));
          CAPTURE(name_of(t));
          CAPTURE(n);
          CAPTURE(offset);
          Buffer x(t, n);
          for (int64_t i = 0; i < n; ++i) {
            double v = rng.uniform(c.lo, c.hi);
            if (std::fabs(v) < 0.02) v += 0.05;  // away from the kinks of relu/abs
            x.set(i, v);
          }
          const Buffer dy = random_buffer(t, n, rng, -2, 2);
          Buffer y(t, n);
          cpu::unary_forward(c.op, x.data(), y.data(), n, c.scalar, t);
          DeviceBuffer d_x(x, offset), d_dy(dy, offset), d_y(t, n, offset), d_dx(t, n, offset);
          gpu::unary_forward(c.op, d_x.data(), d_y.data(), n, c.scalar, t, stream());
          check_close(d_y.download(), y, std::string("forward ") + c.name, tolerance(t, 16));

          // Backward sees the CPU's y, so both backends differentiate from the same values.
          DeviceBuffer d_y_ref(y, offset);
          Buffer dx(t, n);
          cpu::unary_backward(c.op, x.data(), y.data(), dy.data(), dx.data(), n, c.scalar, t);
          gpu::unary_backward(c.op, d_x.data(), d_y_ref.data(), d_dy.data(), d_dx.data(), n, c.scalar, t, stream());
          check_close(d_dx.download(), dx, std::string("backward (x, y) ") + c.name, tolerance(t, 128, 2));

          Buffer dx_no_y(t, n);
          cpu::unary_backward(c.op, x.data(), nullptr, dy.data(), dx_no_y.data(), n, c.scalar, t);
          d_dx.poison();
          gpu::unary_backward(c.op, d_x.data(), nullptr, d_dy.data(), d_dx.data(), n, c.scalar, t, stream());
          check_close(d_dx.download(), dx_no_y, std::string("backward (x, y recomputed) ") + c.name,
                      tolerance(t, 128, 2));

          if (hg::kernels::unary_derivative_reads(c.op) != hg::kernels::DerivativeReads::X) {
            Buffer dx_no_x(t, n);
            cpu::unary_backward(c.op, nullptr, y.data(), dy.data(), dx_no_x.data(), n, c.scalar, t);
            d_dx.poison();
            gpu::unary_backward(c.op, nullptr, d_y_ref.data(), d_dy.data(), d_dx.data(), n, c.scalar, t, stream());
            check_close(d_dx.download(), dx_no_x, std::string("backward (y only) ") + c.name, tolerance(t, 128, 2));
          }
        }
      }
    }
  }
  DeviceBuffer d(DType::f32, 4);
  check_error(
      [&] { gpu::unary_backward(UnaryOp::Log, nullptr, d.data(), d.data(), d.data(), 4, 0, DType::f32, stream()); },
      {"[unary_backward]", "needs x"});
}

TEST_CASE("cuda affine: y = alpha x + beta, every dtype, size, alignment") {
  SKIP_WITHOUT_DEVICE();
  // 2 ulps: nvcc may fuse alpha * x + beta into one fma (one rounding instead of two); scale 8
  // covers |alpha x| <= 6 cancelling against beta.
  Rng rng(31);
  for (DType t : kFloatingTypes) {
    for (int64_t n : kElementwiseSizes) {
      for (int64_t offset : {0, 1}) {
        CAPTURE(name_of(t));
        CAPTURE(n);
        CAPTURE(offset);
        const Buffer x = random_buffer(t, n, rng, -4, 4);
        Buffer y(t, n);
        cpu::affine(x.data(), y.data(), n, -1.5, 0.25, t);
        DeviceBuffer d_x(x, offset), d_y(t, n, offset);
        gpu::affine(d_x.data(), d_y.data(), n, -1.5, 0.25, t, stream());
        check_close(d_y.download(), y, "affine", tolerance(t, 2, 8));
      }
    }
  }
}

// ==== accumulate ==================================================================================

TEST_CASE("cuda accumulate: y += x in place, the CPU's bits, every dtype, size and alignment, and x = y") {
  SKIP_WITHOUT_DEVICE();
  // One addition in acc_t rounded once: nothing to fuse or reorder, so bit for bit. The output is an
  // input too, so it cannot be poisoned; an element the kernel skipped keeps y's value, not the sum.
  Rng rng(37);
  for (DType t : kFloatingTypes) {
    for (int64_t n : kElementwiseSizes) {
      // Both aligned, both offset by one element (packs after a scalar head), x alone offset (scalar).
      for (auto [y_offset, x_offset] : {std::pair<int64_t, int64_t>{0, 0}, {1, 1}, {0, 1}}) {
        CAPTURE(name_of(t));
        CAPTURE(n);
        CAPTURE(y_offset);
        CAPTURE(x_offset);
        const Buffer y0 = random_buffer(t, n, rng, -3, 3), x = random_buffer(t, n, rng, -3, 3);
        Buffer y = y0;
        cpu::accumulate(y.data(), x.data(), n, t);
        DeviceBuffer d_y(y0, y_offset), d_x(x, x_offset);
        gpu::accumulate(d_y.data(), d_x.data(), n, t, stream());
        check_bitwise(d_y.download(), y, "accumulate");
        Buffer twice = y0;
        cpu::accumulate(twice.data(), twice.data(), n, t);
        d_y.upload(y0);
        gpu::accumulate(d_y.data(), d_y.data(), n, t, stream());
        check_bitwise(d_y.download(), twice, "accumulate into itself");
      }
    }
  }
}

// ==== binary ======================================================================================

TEST_CASE("cuda binary_forward: broadcasting and strides (table), every op and dtype") {
  SKIP_WITHOUT_DEVICE();
  struct Case {
    const char* name;
    std::vector<int64_t> shape, a_strides, b_strides;
    int64_t a_offset = 0, b_offset = 0, y_offset = 0;
  };
  const std::vector<Case> cases = {
      {"same shape, contiguous (packs)", {33, 31}, {31, 1}, {31, 1}},
      {"same shape, all unaligned (scalar head)", {1003}, {1}, {1}, 1, 1, 1},
      {"same shape, a alone unaligned (scalar)", {1003}, {1}, {1}, 1, 0, 0},
      {"scalar b", {5, 7}, {7, 1}, {0, 0}},
      {"scalar a, unaligned output", {517}, {0}, {1}, 0, 1, 1},
      {"row broadcast (bias)", {33, 70}, {70, 1}, {0, 1}},
      {"column broadcast", {33, 70}, {70, 1}, {1, 0}},
      {"transposed a", {40, 30}, {1, 40}, {30, 1}},
      {"every other element of both", {6, 9}, {18, 2}, {27, 3}},
      {"rank 3, mixed", {4, 5, 6}, {30, 1, 5}, {6, 0, 1}},
      {"outer product", {9, 11}, {1, 0}, {0, 1}},
      {"rank 0", {}, {}, {}},
      {"zero-size dim", {4, 0}, {0, 1}, {0, 1}},
      {"rank 8", {2, 3, 1, 2, 2, 1, 3, 2}, contiguous_strides({2, 3, 1, 2, 2, 1, 3, 2}), {0, 1, 0, 0, 3, 0, 6, 0}},
  };
  // 1 ulp: one IEEE operation (or a select: maximum, minimum), rounded once by both backends (the same
  // bits unless a compiler reassociates, which neither may).
  Rng rng(41);
  for (DType t : kFloatingTypes) {
    for (const Case& c : cases) {
      for (BinaryOp op : hg::kernels::kBinaryOps) {
        CAPTURE(std::string(c.name));
        CAPTURE(std::string(hg::kernels::op_name(op)));
        CAPTURE(name_of(t));
        const Buffer a = random_buffer(t, std::max<int64_t>(view_extent(c.shape, c.a_strides), 1), rng, -3, 3);
        Buffer b(t, std::max<int64_t>(view_extent(c.shape, c.b_strides), 1));
        for (int64_t i = 0; i < b.size(); ++i) b.set(i, rng.uniform(0.5, 2) * (rng.integer(0, 1) ? 1 : -1));
        int64_t n = 1;
        for (int64_t e : c.shape) n *= e;
        Buffer y(t, n);
        cpu::binary_forward(op, a.data(), c.a_strides.data(), b.data(), c.b_strides.data(), y.data(), c.shape.data(),
                            int(c.shape.size()), t);
        DeviceBuffer d_a(a, c.a_offset), d_b(b, c.b_offset), d_y(t, n, c.y_offset);
        gpu::binary_forward(op, d_a.data(), c.a_strides.data(), d_b.data(), c.b_strides.data(), d_y.data(),
                            c.shape.data(), int(c.shape.size()), t, stream());
        // pow is a library call: CUDA's powf is within 2 ulp, not correctly rounded.
        check_close(d_y.download(), y, c.name, tolerance(t, op == BinaryOp::Pow ? 4 : 1));
      }
    }
  }
}

// ==== reduce, scatter_along =======================================================================

namespace {

struct ReduceCase {
  const char* name;
  int64_t outer, n, inner;
};

const ReduceCase kReduceCases[] = {
    {"single element", 1, 1, 1},
    {"short rows (a warp per row), odd length", 37, 33, 1},
    {"rows of 1000 (a warp per row, many packs each)", 5, 1000, 1},
    {"rows longer than 1024 (a block per row)", 3, 1500, 1},
    {"one long row", 1, 5003, 1},
    {"rows of 8200 (1024-thread blocks)", 2, 8200, 1},
    {"middle dim", 5, 17, 9},
    {"wide inner", 2, 40, 300},
    {"inner with n = 1", 3, 1, 7},
};

}  // namespace

TEST_CASE("cuda reduce Sum: outer x n x inner (table), scale, every dtype, unaligned rows") {
  SKIP_WITHOUT_DEVICE();
  // The two backends add in different orders: allow 4 sqrt(n) + 4 ulps of fp32 (f64) of the sum of
  // |terms| (per output), plus one ulp of a half output.
  Rng rng(51);
  for (DType t : kFloatingTypes) {
    for (const ReduceCase& c : kReduceCases) {
      for (int64_t offset : {0, 1}) {
        CAPTURE(std::string(c.name));
        CAPTURE(name_of(t));
        CAPTURE(offset);
        const int64_t outputs = c.outer * c.inner;
        const Buffer x = random_buffer(t, c.outer * c.n * c.inner, rng, -1, 2);
        const double scale = 1.0 / double(c.n);  // the mean
        Buffer y(t, outputs);
        cpu::reduce(ReduceOp::Sum, x.data(), y.data(), nullptr, c.outer, c.n, c.inner, scale, t);
        DeviceBuffer d_x(x, offset), d_y(t, outputs, offset);
        gpu::reduce(ReduceOp::Sum, d_x.data(), d_y.data(), nullptr, c.outer, c.n, c.inner, scale, t, stream());
        std::vector<double> magnitude(size_t(outputs), 0.0);
        for (int64_t o = 0; o < c.outer; ++o) {
          for (int64_t j = 0; j < c.n; ++j) {
            for (int64_t i = 0; i < c.inner; ++i)
              magnitude[o * c.inner + i] += std::fabs(x.get((o * c.n + j) * c.inner + i)) * scale;
          }
        }
        check_close(d_y.download(), y, "sum", tolerance(t, 4 * std::sqrt(double(c.n)) + 4, 0), &magnitude);
      }
    }
  }
  DeviceBuffer d_y(DType::f32, 6);
  gpu::reduce(ReduceOp::Sum, nullptr, d_y.data(), nullptr, 2, 0, 3, 1.0, DType::f32, stream());
  Buffer zeros(DType::f32, 6);
  for (int k = 0; k < 6; ++k) zeros.set(k, 0);
  check_bitwise(d_y.download(), zeros, "empty sum");
}

TEST_CASE("cuda reduce Max: value and first index on ties bit for bit, NaN propagates, every dtype") {
  SKIP_WITHOUT_DEVICE();
  Rng rng(52);
  for (DType t : kFloatingTypes) {
    for (const ReduceCase& c : kReduceCases) {
      for (int64_t offset : {0, 1}) {
        CAPTURE(std::string(c.name));
        CAPTURE(name_of(t));
        CAPTURE(offset);
        // Small integers: ties everywhere, so the first-index rule is exercised across threads.
        Buffer x(t, c.outer * c.n * c.inner);
        for (int64_t k = 0; k < x.size(); ++k) x.set(k, double(rng.integer(-3, 3)));
        if (c.n >= 4) {  // slice (0, ., 0): NaNs at j = n/2 and n - 1; the first one is the max
          x.set((c.n / 2) * c.inner, kNaN);
          x.set((c.n - 1) * c.inner, kNaN);
        }
        if (c.outer > 1 && c.n >= 2) {  // slice (1, ., 0) ends in -inf, the rest of it -inf too
          for (int64_t j = 0; j < c.n; ++j) x.set((c.n + j) * c.inner, -kInf);
        }
        const int64_t outputs = c.outer * c.inner;
        Buffer y(t, outputs), argmax(DType::i64, outputs);
        cpu::reduce(ReduceOp::Max, x.data(), y.data(), argmax.as<int64_t>(), c.outer, c.n, c.inner, 1.0, t);
        DeviceBuffer d_x(x, offset), d_y(t, outputs, offset), d_argmax(DType::i64, outputs);
        gpu::reduce(ReduceOp::Max, d_x.data(), d_y.data(), d_argmax.as<int64_t>(), c.outer, c.n, c.inner, 1.0, t,
                    stream());
        check_bitwise(d_y.download(), y, "max");
        check_bitwise(d_argmax.download(), argmax, "argmax");
        // argmax is nullable.
        d_y.poison();
        gpu::reduce(ReduceOp::Max, d_x.data(), d_y.data(), nullptr, c.outer, c.n, c.inner, 1.0, t, stream());
        check_bitwise(d_y.download(), y, "max without argmax");
      }
    }
  }
  check_error([&] { gpu::reduce(ReduceOp::Max, nullptr, nullptr, nullptr, 2, 0, 3, 1.0, DType::f32, stream()); },
              {"[reduce]", "n = 0"});
}

TEST_CASE("cuda scatter_along: y[o, index[o, i], i] = x[o, i], zeros elsewhere, bit for bit") {
  SKIP_WITHOUT_DEVICE();
  Rng rng(53);
  for (DType t : kFloatingTypes) {
    for (const ReduceCase& c : kReduceCases) {
      CAPTURE(std::string(c.name));
      CAPTURE(name_of(t));
      const int64_t columns = c.outer * c.inner;
      const Buffer x = random_buffer(t, columns, rng, -2, 2);
      std::vector<int64_t> index_values(static_cast<size_t>(columns));
      for (int64_t& v : index_values) v = rng.integer(0, c.n - 1);
      const Buffer index = index_buffer(DType::i64, index_values);
      Buffer y(t, c.outer * c.n * c.inner);
      cpu::scatter_along(x.data(), index_values.data(), y.data(), c.outer, c.n, c.inner, t);
      DeviceBuffer d_x(x), d_index(index), d_y(t, y.size());
      gpu::scatter_along(d_x.data(), d_index.as<int64_t>(), d_y.data(), c.outer, c.n, c.inner, t, stream());
      check_bitwise(d_y.download(), y, "scatter_along");
    }
  }
}

// ==== softmax =====================================================================================

namespace {

struct SoftmaxCase {
  const char* name;
  int64_t rows, cols, causal_rows;
};

const SoftmaxCase kSoftmaxCases[] = {
    {"one column", 5, 1, 0},
    {"short rows (a warp per row)", 19, 33, 0},
    {"rows of 1000", 3, 1000, 0},
    {"rows longer than 1024 (a block per row)", 3, 1500, 0},
    {"long odd rows", 2, 4099, 0},
    {"rows of 8200 (1024-thread blocks)", 2, 8200, 0},
    {"causal, 3 matrices of 4 queries x 10 keys", 12, 10, 4},
    {"causal, square", 9, 9, 9},
    {"causal, long rows (a block per row)", 4, 1100, 2},
};

}  // namespace

TEST_CASE("cuda softmax_forward and log_softmax: causal mask (table), every dtype, unaligned rows") {
  SKIP_WITHOUT_DEVICE();
  // softmax: exp(x - m) / s with s summed in another order (4 sqrt(cols) ulps) plus exp's 2 ulps
  // and the division: 4 sqrt(cols) + 8 ulps relative. log_softmax: x - m - log(s) is absolute
  // error of the same ulps times |x - m| + |log s| <= 16 + 9: scale 32.
  Rng rng(61);
  for (DType t : kFloatingTypes) {
    for (const SoftmaxCase& c : kSoftmaxCases) {
      for (bool log : {false, true}) {
        for (int64_t offset : {0, 1}) {
          CAPTURE(std::string(c.name));
          CAPTURE(log);
          CAPTURE(name_of(t));
          CAPTURE(offset);
          const Buffer x = random_buffer(t, c.rows * c.cols, rng, -8, 8);
          Buffer y(t, c.rows * c.cols);
          cpu::softmax_forward(x.data(), y.data(), c.rows, c.cols, log, c.causal_rows, t);
          DeviceBuffer d_x(x, offset), d_y(t, y.size(), offset);
          gpu::softmax_forward(d_x.data(), d_y.data(), c.rows, c.cols, log, c.causal_rows, t, stream());
          const double ulps = 4 * std::sqrt(double(c.cols)) + 8;
          check_close(d_y.download(), y, "softmax forward", tolerance(t, ulps, log ? 32 : 0));
        }
      }
    }
  }
  // Large logits: without max-subtraction exp would overflow.
  Buffer x(DType::f32, 3);
  x.set(0, 1000);
  x.set(1, 1000);
  x.set(2, -1000);
  Buffer y(DType::f32, 3);
  cpu::softmax_forward(x.data(), y.data(), 1, 3, false, 0, DType::f32);
  DeviceBuffer d_x(x), d_y(DType::f32, 3);
  gpu::softmax_forward(d_x.data(), d_y.data(), 1, 3, false, 0, DType::f32, stream());
  check_bitwise(d_y.download(), y, "softmax of large logits");
  check_error([&] { gpu::softmax_forward(nullptr, nullptr, 2, 4, false, 5, DType::f32, stream()); },
              {"[softmax_forward]", "causal_rows = 5"});
}

TEST_CASE("cuda softmax_backward: softmax and log_softmax, every dtype, unaligned rows") {
  SKIP_WITHOUT_DEVICE();
  // softmax: dx = y (dy - sum dy y): the sum is over |dy y| <= 1 in total (sum y = 1), added in
  // another order: 4 sqrt(cols) + 8 ulps, scale 1. log_softmax: dx = dy - exp(y) sum dy: the sum of
  // |dy| reaches cols, so the scale is cols.
  Rng rng(62);
  for (DType t : kFloatingTypes) {
    for (const SoftmaxCase& c : kSoftmaxCases) {
      for (bool log : {false, true}) {
        if (log && c.causal_rows > 0) continue;  // masked log outputs are -inf: no gradient
        for (int64_t offset : {0, 1}) {
          CAPTURE(std::string(c.name));
          CAPTURE(log);
          CAPTURE(name_of(t));
          CAPTURE(offset);
          const Buffer x = random_buffer(t, c.rows * c.cols, rng, -4, 4);
          const Buffer dy = random_buffer(t, c.rows * c.cols, rng, -1, 1);
          Buffer y(t, x.size()), dx(t, x.size());
          cpu::softmax_forward(x.data(), y.data(), c.rows, c.cols, log, c.causal_rows, t);
          cpu::softmax_backward(y.data(), dy.data(), dx.data(), c.rows, c.cols, log, t);
          DeviceBuffer d_y(y, offset), d_dy(dy, offset), d_dx(t, x.size(), offset);
          gpu::softmax_backward(d_y.data(), d_dy.data(), d_dx.data(), c.rows, c.cols, log, t, stream());
          const double ulps = 4 * std::sqrt(double(c.cols)) + 8;
          check_close(d_dx.download(), dx, "softmax backward", tolerance(t, ulps, log ? double(c.cols) : 1));
        }
      }
    }
  }
}

// ==== cross entropy ===============================================================================

TEST_CASE("cuda cross_entropy: loss, lse, mean, 1/count, ignore_index and dlogits, every dtype and index type") {
  SKIP_WITHOUT_DEVICE();
  // lse = m + log(sum exp(x - m)): the sum in another order (4 sqrt(cols) + 8 ulps) becomes an
  // absolute error of lse of that many ulps; loss = lse - x[t] cancels against |x| <= 6 + log(cols):
  // scale 16. The mean adds the rows' losses in another order too (4 sqrt(rows) more ulps of their
  // sum). dlogits = dloss (exp(x - lse) - [c = t]): exp's 2 ulps plus the (absolute, <= 16 ulps)
  // error of lse, times dloss <= 2: 64 ulps with scale 2.
  Rng rng(71);
  const int64_t ignore = -100;
  struct Case {
    int64_t rows, cols, offset;
  };
  // {0, 5}: no rows, a mean over nothing (NaN); {4, 3} below: every row ignored.
  const Case cases[] = {{1, 1, 0}, {13, 7, 1}, {37, 100, 0}, {37, 100, 1}, {4, 1500, 0}, {3, 3001, 1}, {0, 5, 0},
                        {2500, 3, 0}};
  for (DType t : kFloatingTypes) {
    for (DType index_type : {DType::i32, DType::i64}) {
      for (const Case& c : cases) {
        CAPTURE(name_of(t));
        CAPTURE(name_of(index_type));
        CAPTURE(c.rows);
        CAPTURE(c.cols);
        CAPTURE(c.offset);
        const DType acc = hg::accumulate_dtype(t);
        const Buffer x = random_buffer(t, c.rows * c.cols, rng, -6, 6);
        std::vector<int64_t> target_values(static_cast<size_t>(c.rows));
        for (int64_t r = 0; r < c.rows; ++r) target_values[r] = r % 5 == 2 ? ignore : rng.integer(0, c.cols - 1);
        const Buffer targets = index_buffer(index_type, target_values);
        Buffer loss(acc, c.rows), lse(acc, c.rows), mean(acc, 1), inv_count(acc, 1);
        cpu::cross_entropy_forward(x.data(), targets.data(), index_type, loss.data(), lse.data(), mean.data(),
                                   inv_count.data(), c.rows, c.cols, ignore, t);
        // The CPU's mean against its own rows (a serial sum of positive terms: within rows ulps).
        int64_t counted = 0;
        double sum = 0;
        for (int64_t r = 0; r < c.rows; ++r) {
          counted += target_values[size_t(r)] != ignore;
          sum += loss.get(r);
        }
        Buffer expect_inv(acc, 1), expect_mean(acc, 1);
        expect_inv.set(0, counted > 0 ? 1.0 / double(counted) : kNaN);
        expect_mean.set(0, counted > 0 ? sum / double(counted) : kNaN);
        check_close(inv_count, expect_inv, "CPU 1 / count", tolerance(acc, 1));
        check_close(mean, expect_mean, "CPU mean", tolerance(acc, double(c.rows) + 4));
        DeviceBuffer d_x(x, c.offset), d_targets(targets), d_loss(acc, c.rows), d_lse(acc, c.rows), d_mean(acc, 1),
            d_inv_count(acc, 1);
        gpu::cross_entropy_forward(d_x.data(), d_targets.data(), index_type, d_loss.data(), d_lse.data(),
                                   d_mean.data(), d_inv_count.data(), c.rows, c.cols, ignore, t, stream());
        gpu::synchronize_and_raise_device_errors(stream());  // no error: nothing is thrown
        const double ulps = 4 * std::sqrt(double(c.cols)) + 8;
        check_close(d_lse.download(), lse, "lse", tolerance(acc, ulps, 16));
        check_close(d_loss.download(), loss, "loss", tolerance(acc, ulps, 16));
        check_close(d_inv_count.download(), inv_count, "1 / count", tolerance(acc, 1, 1));
        check_close(d_mean.download(), mean, "mean", tolerance(acc, ulps + 4 * std::sqrt(double(c.rows)), 16));

        // Backward from the CPU's lse, so both backends see the same statistics.
        const Buffer dloss = random_buffer(acc, c.rows, rng, 0.5, 2);
        Buffer dx(t, x.size());
        cpu::cross_entropy_backward(x.data(), targets.data(), index_type, lse.data(), dloss.data(), dx.data(), c.rows,
                                    c.cols, ignore, t);
        DeviceBuffer d_lse_ref(lse), d_dloss(dloss), d_dx(t, x.size(), c.offset);
        gpu::cross_entropy_backward(d_x.data(), d_targets.data(), index_type, d_lse_ref.data(), d_dloss.data(),
                                    d_dx.data(), c.rows, c.cols, ignore, t, stream());
        check_close(d_dx.download(), dx, "dlogits", tolerance(t, 64, 2));
      }
    }
  }
  SUBCASE("every row ignored: mean and 1/count are NaN on both backends") {
    const Buffer x = random_buffer(DType::f32, 4 * 3, rng, -1, 1);
    const Buffer targets = index_buffer(DType::i64, {ignore, ignore, ignore, ignore});
    Buffer loss(DType::f32, 4), lse(DType::f32, 4), mean(DType::f32, 1), inv_count(DType::f32, 1);
    cpu::cross_entropy_forward(x.data(), targets.data(), DType::i64, loss.data(), lse.data(), mean.data(),
                               inv_count.data(), 4, 3, ignore, DType::f32);
    DeviceBuffer d_x(x), d_targets(targets), d_loss(DType::f32, 4), d_lse(DType::f32, 4), d_mean(DType::f32, 1),
        d_inv_count(DType::f32, 1);
    gpu::cross_entropy_forward(d_x.data(), d_targets.data(), DType::i64, d_loss.data(), d_lse.data(), d_mean.data(),
                               d_inv_count.data(), 4, 3, ignore, DType::f32, stream());
    CHECK(std::isnan(mean.get(0)));
    CHECK(std::isnan(inv_count.get(0)));
    CHECK(std::isnan(d_mean.download().get(0)));
    CHECK(std::isnan(d_inv_count.download().get(0)));
  }
}

TEST_CASE("cuda cross_entropy: an out-of-range target names the row, the value and the range") {
  SKIP_WITHOUT_DEVICE();
  Rng rng(72);
  for (DType index_type : {DType::i32, DType::i64}) {
    CAPTURE(name_of(index_type));
    DeviceBuffer d_x(random_buffer(DType::f32, 6 * 10, rng, -1, 1));
    DeviceBuffer d_loss(DType::f32, 6), d_lse(DType::f32, 6), d_mean(DType::f32, 1), d_inv(DType::f32, 1);
    DeviceBuffer d_high(index_buffer(index_type, {1, 2, -100, 3, 4, 10}));
    // The kernel makes no host wait: the error is recorded on the device and raised at the next read.
    check_error(
        [&] {
          gpu::cross_entropy_forward(d_x.data(), d_high.data(), index_type, d_loss.data(), d_lse.data(), d_mean.data(),
                                     d_inv.data(), 6, 10, -100, DType::f32, stream());
          gpu::synchronize_and_raise_device_errors(stream());
        },
        {"[cross_entropy_forward]", "target 10 at row 5", "0 <= target < 10", "ignore_index = -100"});
    // Two bad rows: the first one is named, as the CPU backend does.
    DeviceBuffer d_two(index_buffer(index_type, {1, -3, 2, 3, 12, 0}));
    check_error(
        [&] {
          gpu::cross_entropy_forward(d_x.data(), d_two.data(), index_type, d_loss.data(), d_lse.data(), d_mean.data(),
                                     d_inv.data(), 6, 10, -100, DType::f32, stream());
          gpu::synchronize_and_raise_device_errors(stream());
        },
        {"[cross_entropy_forward]", "target -3 at row 1"});
  }
}

TEST_CASE("cuda index errors: the first one enqueued is raised, once, then the record is clear") {
  SKIP_WITHOUT_DEVICE();
  Rng rng(73);
  DeviceBuffer d_x(random_buffer(DType::f32, 6 * 10, rng, -1, 1));
  DeviceBuffer d_loss(DType::f32, 6), d_lse(DType::f32, 6), d_mean(DType::f32, 1), d_inv(DType::f32, 1);
  DeviceBuffer d_bad_targets(index_buffer(DType::i64, {1, 2, 3, 11, 4, 5}));
  DeviceBuffer d_weight(random_buffer(DType::f32, 10 * 4, rng, -1, 1)), d_y(DType::f32, 3 * 4);
  DeviceBuffer d_bad_ids(index_buffer(DType::i32, {0, 12, 1}));
  // Two bad ops before any read: the first (cross entropy) is reported, the second is dropped.
  gpu::cross_entropy_forward(d_x.data(), d_bad_targets.data(), DType::i64, d_loss.data(), d_lse.data(), d_mean.data(),
                             d_inv.data(), 6, 10, -100, DType::f32, stream());
  gpu::embedding_forward(d_weight.data(), d_bad_ids.data(), DType::i32, d_y.data(), 3, 10, 4, DType::f32, stream());
  check_error([&] { gpu::synchronize_and_raise_device_errors(stream()); },
              {"[cross_entropy_forward]", "target 11 at row 3", "0 <= target < 10"});
  // Raised once: the next read is clean, and good inputs run as before.
  gpu::synchronize_and_raise_device_errors(stream());
  DeviceBuffer d_good_ids(index_buffer(DType::i32, {3, 0, 9}));
  gpu::embedding_forward(d_weight.data(), d_good_ids.data(), DType::i32, d_y.data(), 3, 10, 4, DType::f32, stream());
  gpu::synchronize_and_raise_device_errors(stream());
  // A new error after the clear is recorded again.
  gpu::embedding_forward(d_weight.data(), d_bad_ids.data(), DType::i32, d_y.data(), 3, 10, 4, DType::f32, stream());
  check_error([&] { gpu::synchronize_and_raise_device_errors(stream()); },
              {"[embedding_forward]", "id 12 at position 1", "0 <= id < 10", "raised at the next host read"});
  gpu::synchronize_and_raise_device_errors(stream());
}

// ==== LayerNorm ===================================================================================

TEST_CASE("cuda layer_norm forward and backward, with and without affine, every dtype, deterministic dweight and dbias") {
  SKIP_WITHOUT_DEVICE();
  // Forward: mean and variance summed in another order (4 sqrt(cols) + 8 ulps of the statistics),
  // y = xhat w + b with |xhat w| + |b| <= ~6: scale 8. Backward: dx = rstd (g - mean(g) - xhat
  // mean(g xhat)) cancels terms of size ~rstd (|g| + |xhat| |mean g xhat|) <= ~8: 4 sqrt(cols) + 16
  // ulps, scale 8; dw, db: sums over rows in another order: 4 sqrt(rows) + 8 ulps of the sum of
  // |terms| of each column.
  struct Case {
    int64_t rows, cols, offset;
  };
  // Backward's dw/db accumulator: interleaved in shared memory (cols a multiple of the pack: 100,
  // 1500, 2048, 24), plain (7, 9, 4099: in global memory, too big for shared), interleaved in global
  // memory (6144); 600 and 530 rows span several 16-row blocks.
  const Case cases[] = {{1, 1, 0},    {3, 7, 1},    {37, 100, 0}, {37, 100, 1},  {5, 1500, 0},
                        {2, 4099, 1}, {600, 24, 0}, {530, 9, 1},  {40, 2048, 0}, {3, 6144, 0}};
  Rng rng(81);
  for (DType t : kFloatingTypes) {
    for (const Case& c : cases) {
      for (bool affine : {true, false}) {
        CAPTURE(name_of(t));
        CAPTURE(c.rows);
        CAPTURE(c.cols);
        CAPTURE(c.offset);
        CAPTURE(affine);
        const DType acc = hg::accumulate_dtype(t);
        const int64_t n = c.rows * c.cols;
        const Buffer x = random_buffer(t, n, rng, -2, 3);
        const Buffer w = random_buffer(t, c.cols, rng, 0.5, 1.5), b = random_buffer(t, c.cols, rng, -1, 1);
        const double eps = 1e-5;
        Buffer y(t, n), mean(acc, c.rows), rstd(acc, c.rows);
        cpu::layer_norm_forward(x.data(), affine ? w.data() : nullptr, affine ? b.data() : nullptr, y.data(),
                                mean.data(), rstd.data(), c.rows, c.cols, eps, t);
        DeviceBuffer d_x(x, c.offset), d_w(w, c.offset), d_b(b, c.offset), d_y(t, n, c.offset);
        DeviceBuffer d_mean(acc, c.rows), d_rstd(acc, c.rows);
        gpu::layer_norm_forward(d_x.data(), affine ? d_w.data() : nullptr, affine ? d_b.data() : nullptr, d_y.data(),
                                d_mean.data(), d_rstd.data(), c.rows, c.cols, eps, t, stream());
        const double row_ulps = 4 * std::sqrt(double(c.cols)) + 8;
        check_close(d_y.download(), y, "y", tolerance(t, row_ulps, 8));
        check_close(d_mean.download(), mean, "mean", tolerance(acc, row_ulps, 3));
        check_close(d_rstd.download(), rstd, "rstd", tolerance(acc, row_ulps));

        // Backward from the CPU's statistics.
        const Buffer dy = random_buffer(t, n, rng, -1, 1);
        Buffer dx(t, n), dw(t, c.cols), db(t, c.cols);
        cpu::layer_norm_backward(x.data(), affine ? w.data() : nullptr, mean.data(), rstd.data(), dy.data(), dx.data(),
                                 dw.data(), db.data(), c.rows, c.cols, t);
        DeviceBuffer d_mean_ref(mean), d_rstd_ref(rstd), d_dy(dy, c.offset), d_dx(t, n, c.offset);
        DeviceBuffer d_dw(t, c.cols, c.offset), d_db(t, c.cols, c.offset);
        const auto run_backward = [&] {
          d_dx.poison();
          d_dw.poison();
          d_db.poison();
          gpu::layer_norm_backward(d_x.data(), affine ? d_w.data() : nullptr, d_mean_ref.data(), d_rstd_ref.data(),
                                   d_dy.data(), d_dx.data(), d_dw.data(), d_db.data(), c.rows, c.cols, t, stream());
        };
        run_backward();
        const Buffer got_dx = d_dx.download(), got_dw = d_dw.download(), got_db = d_db.download();
        check_close(got_dx, dx, "dx", tolerance(t, row_ulps + 8, 8));
        std::vector<double> dw_magnitude(size_t(c.cols), 0.0), db_magnitude(size_t(c.cols), 0.0);
        for (int64_t r = 0; r < c.rows; ++r) {
          for (int64_t k = 0; k < c.cols; ++k) {
            const double xhat = (x.get(r * c.cols + k) - mean.get(r)) * rstd.get(r);
            dw_magnitude[k] += std::fabs(dy.get(r * c.cols + k) * xhat);
            db_magnitude[k] += std::fabs(dy.get(r * c.cols + k));
          }
        }
        const Tol sum_tol = tolerance(t, 4 * std::sqrt(double(c.rows)) + 8, 0);
        check_close(got_dw, dw, "dweight", sum_tol, &dw_magnitude);
        check_close(got_db, db, "dbias", sum_tol, &db_magnitude);

        run_backward();  // again: the two-stage reduction must give the same bits
        check_bitwise(d_dx.download(), got_dx, "dx, second run");
        check_bitwise(d_dw.download(), got_dw, "dweight, second run");
        check_bitwise(d_db.download(), got_db, "dbias, second run");

        // dweight and dbias are nullable (dx alone), and mean/rstd of the forward too.
        d_dx.poison();
        gpu::layer_norm_backward(d_x.data(), affine ? d_w.data() : nullptr, d_mean_ref.data(), d_rstd_ref.data(),
                                 d_dy.data(), d_dx.data(), nullptr, nullptr, c.rows, c.cols, t, stream());
        check_bitwise(d_dx.download(), got_dx, "dx without parameter gradients");
      }
    }
  }
}

TEST_CASE("cuda add_layer_norm: fused residual add + LayerNorm against the CPU, and against the unfused CUDA kernels") {
  SKIP_WITHOUT_DEVICE();
  // h = round(x + residual) is one exact rounding on both backends: bitwise. y, mean, rstd: the
  // LayerNorm bounds of the test above. On the device, the fused y must equal layer_norm_forward of h
  // bit for bit (same statistics, same passes), and the fused backward without dh must equal
  // layer_norm_backward's dx bit for bit. dx with dh: see below.
  struct Case {
    int64_t rows, cols, offset;
  };
  const Case cases[] = {{3, 7, 1}, {37, 100, 0}, {37, 100, 1}, {5, 1500, 0}, {600, 24, 0}, {530, 9, 1}, {40, 2048, 0}};
  Rng rng(83);
  for (DType t : kFloatingTypes) {
    for (const Case& c : cases) {
      for (bool affine : {true, false}) {
        CAPTURE(name_of(t));
        CAPTURE(c.rows);
        CAPTURE(c.cols);
        CAPTURE(c.offset);
        CAPTURE(affine);
        const DType acc = hg::accumulate_dtype(t);
        const int64_t n = c.rows * c.cols;
        const double eps = 1e-5;
        const Buffer x = random_buffer(t, n, rng, -2, 3), res = random_buffer(t, n, rng, -1.5, 1);
        const Buffer w = random_buffer(t, c.cols, rng, 0.5, 1.5), b = random_buffer(t, c.cols, rng, -1, 1);
        const void* wp = affine ? w.data() : nullptr;
        const void* bp = affine ? b.data() : nullptr;
        Buffer h(t, n), y(t, n), mean(acc, c.rows), rstd(acc, c.rows);
        cpu::add_layer_norm_forward(x.data(), res.data(), wp, bp, h.data(), y.data(), mean.data(), rstd.data(), c.rows,
                                    c.cols, eps, t);
        DeviceBuffer d_x(x, c.offset), d_res(res, c.offset), d_w(w, c.offset), d_b(b, c.offset);
        DeviceBuffer d_h(t, n, c.offset), d_y(t, n, c.offset), d_mean(acc, c.rows), d_rstd(acc, c.rows);
        d_h.poison();
        d_y.poison();
        d_mean.poison();
        d_rstd.poison();
        const void* d_wp = affine ? d_w.data() : nullptr;
        const void* d_bp = affine ? d_b.data() : nullptr;
        gpu::add_layer_norm_forward(d_x.data(), d_res.data(), d_wp, d_bp, d_h.data(), d_y.data(), d_mean.data(),
                                    d_rstd.data(), c.rows, c.cols, eps, t, stream());
        const double row_ulps = 4 * std::sqrt(double(c.cols)) + 8;
        const Buffer got_h = d_h.download(), got_y = d_y.download();
        check_bitwise(got_h, h, "h");
        check_close(got_y, y, "y", tolerance(t, row_ulps, 8));
        check_close(d_mean.download(), mean, "mean", tolerance(acc, row_ulps, 3));
        check_close(d_rstd.download(), rstd, "rstd", tolerance(acc, row_ulps));
        DeviceBuffer d_y_plain(t, n, c.offset);
        d_y_plain.poison();
        gpu::layer_norm_forward(d_h.data(), d_wp, d_bp, d_y_plain.data(), nullptr, nullptr, c.rows, c.cols, eps, t,
                                stream());
        check_bitwise(got_y, d_y_plain.download(), "fused y against layer_norm_forward of h");

        const Buffer dy = random_buffer(t, n, rng, -1, 1), dh = random_buffer(t, n, rng, -1, 1);
        Buffer dx(t, n), dw(t, c.cols), db(t, c.cols);
        cpu::add_layer_norm_backward(h.data(), wp, mean.data(), rstd.data(), dy.data(), dh.data(), dx.data(), dw.data(),
                                     db.data(), c.rows, c.cols, t);
        DeviceBuffer d_mean_ref(mean), d_rstd_ref(rstd), d_dy(dy, c.offset), d_dh(dh, c.offset), d_dx(t, n, c.offset);
        DeviceBuffer d_dw(t, c.cols, c.offset), d_db(t, c.cols, c.offset);
        d_dx.poison();
        d_dw.poison();
        d_db.poison();
        gpu::add_layer_norm_backward(d_h.data(), d_wp, d_mean_ref.data(), d_rstd_ref.data(), d_dy.data(), d_dh.data(),
                                     d_dx.data(), d_dw.data(), d_db.data(), c.rows, c.cols, t, stream());
        // dx is LayerNorm's dx rounded to the dtype, plus dh, rounded again: the two backends' LayerNorm
        // terms may round to neighbouring values (an ulp of |dx_ln|, which exceeds |dx| where dh cancels
        // it), so the relative bound is taken of |dx| + |dx_ln|.
        Buffer dx_ln(t, n);
        cpu::layer_norm_backward(h.data(), wp, mean.data(), rstd.data(), dy.data(), dx_ln.data(), nullptr, nullptr,
                                 c.rows, c.cols, t);
        std::vector<double> dx_magnitude(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) dx_magnitude[size_t(i)] = std::fabs(dx.get(i)) + std::fabs(dx_ln.get(i));
        check_close(d_dx.download(), dx, "dx", tolerance(t, row_ulps + 10, 8), &dx_magnitude);
        std::vector<double> dw_magnitude(size_t(c.cols), 0.0), db_magnitude(size_t(c.cols), 0.0);
        for (int64_t r = 0; r < c.rows; ++r) {
          for (int64_t k = 0; k < c.cols; ++k) {
            const double xhat = (h.get(r * c.cols + k) - mean.get(r)) * rstd.get(r);
            dw_magnitude[k] += std::fabs(dy.get(r * c.cols + k) * xhat);
            db_magnitude[k] += std::fabs(dy.get(r * c.cols + k));
          }
        }
        const Tol sum_tol = tolerance(t, 4 * std::sqrt(double(c.rows)) + 8, 0);
        check_close(d_dw.download(), dw, "dweight", sum_tol, &dw_magnitude);
        check_close(d_db.download(), db, "dbias", sum_tol, &db_magnitude);

        // Without dh the fused backward is layer_norm_backward, bit for bit.
        DeviceBuffer d_dx_plain(t, n, c.offset);
        d_dx.poison();
        d_dx_plain.poison();
        gpu::add_layer_norm_backward(d_h.data(), d_wp, d_mean_ref.data(), d_rstd_ref.data(), d_dy.data(), nullptr,
                                     d_dx.data(), nullptr, nullptr, c.rows, c.cols, t, stream());
        gpu::layer_norm_backward(d_h.data(), d_wp, d_mean_ref.data(), d_rstd_ref.data(), d_dy.data(), d_dx_plain.data(),
                                 nullptr, nullptr, c.rows, c.cols, t, stream());
        check_bitwise(d_dx.download(), d_dx_plain.download(), "dx without dh against layer_norm_backward");
      }
    }
  }
}

// ==== embedding ===================================================================================

TEST_CASE("cuda embedding: forward gathers rows and backward sums in increasing position, bit for bit and deterministic") {
  SKIP_WITHOUT_DEVICE();
  // Backward is compared bit for bit too: each output element is the same additions in the same
  // order (increasing position) in acc_t on both backends, rounded once.
  struct Case {
    int64_t vocab, dim, n_ids, offset;
  };
  const Case cases[] = {{50, 1, 7, 0}, {50, 7, 300, 1}, {50, 32, 300, 0}, {50, 130, 300, 1}, {3, 16, 1, 0}};
  Rng rng(91);
  for (DType t : kFloatingTypes) {
    for (DType index_type : {DType::i32, DType::i64}) {
      for (const Case& c : cases) {
        CAPTURE(name_of(t));
        CAPTURE(name_of(index_type));
        CAPTURE(c.vocab);
        CAPTURE(c.dim);
        CAPTURE(c.n_ids);
        CAPTURE(c.offset);
        // Ids from the first 60% of the vocabulary: repeats, and rows no id points at.
        std::vector<int64_t> id_values(static_cast<size_t>(c.n_ids));
        for (int64_t& v : id_values) v = rng.integer(0, std::max<int64_t>(c.vocab * 3 / 5 - 1, 0));
        const Buffer ids = index_buffer(index_type, id_values);
        const Buffer weight = random_buffer(t, c.vocab * c.dim, rng, -1, 1);
        Buffer y(t, c.n_ids * c.dim);
        cpu::embedding_forward(weight.data(), ids.data(), index_type, y.data(), c.n_ids, c.vocab, c.dim, t);
        DeviceBuffer d_weight(weight, c.offset), d_ids(ids), d_y(t, y.size(), c.offset);
        gpu::embedding_forward(d_weight.data(), d_ids.data(), index_type, d_y.data(), c.n_ids, c.vocab, c.dim, t,
                               stream());
        check_bitwise(d_y.download(), y, "embedding forward");

        const Buffer dy = random_buffer(t, c.n_ids * c.dim, rng, -1, 1);
        Buffer dweight(t, c.vocab * c.dim);
        cpu::embedding_backward(dy.data(), ids.data(), index_type, dweight.data(), c.n_ids, c.vocab, c.dim, t);
        DeviceBuffer d_dy(dy, c.offset), d_dweight(t, dweight.size(), c.offset);
        gpu::embedding_backward(d_dy.data(), d_ids.data(), index_type, d_dweight.data(), c.n_ids, c.vocab, c.dim, t,
                                stream());
        const Buffer first = d_dweight.download();
        check_bitwise(first, dweight, "embedding backward");
        d_dweight.poison();
        gpu::embedding_backward(d_dy.data(), d_ids.data(), index_type, d_dweight.data(), c.n_ids, c.vocab, c.dim, t,
                                stream());
        check_bitwise(d_dweight.download(), first, "embedding backward, second run");
      }
    }
  }
}

TEST_CASE("cuda embedding: an id out of range names its position") {
  SKIP_WITHOUT_DEVICE();
  for (DType index_type : {DType::i32, DType::i64}) {
    CAPTURE(name_of(index_type));
    DeviceBuffer d_weight(DType::f32, 10 * 4), d_y(DType::f32, 6 * 4);
    DeviceBuffer d_ids(index_buffer(index_type, {1, 2, 9, 10, 4, -1}));
    check_error(
        [&] {
          gpu::embedding_forward(d_weight.data(), d_ids.data(), index_type, d_y.data(), 6, 10, 4, DType::f32, stream());
          gpu::synchronize_and_raise_device_errors(stream());  // reported at the next read, not by the call
        },
        {"[embedding_forward]", "id 10 at position 3", "0 <= id < 10"});
    DeviceBuffer d_negative(index_buffer(index_type, {-1, 2}));
    check_error(
        [&] {
          gpu::embedding_forward(d_weight.data(), d_negative.data(), index_type, d_y.data(), 2, 10, 4, DType::f32,
                                 stream());
          gpu::synchronize_and_raise_device_errors(stream());
        },
        {"[embedding_forward]", "id -1 at position 0"});
    DeviceBuffer d_dy(DType::f32, 6 * 4), d_dweight(DType::f32, 10 * 4);
    check_error(
        [&] {
          gpu::embedding_backward(d_dy.data(), d_ids.data(), index_type, d_dweight.data(), 6, 10, 4, DType::f32,
                                  stream());
          gpu::synchronize_and_raise_device_errors(stream());
        },
        {"[embedding_backward]", "id 10 at position 3", "0 <= id < 10"});
  }
}

// ==== dropout, random fills =======================================================================

TEST_CASE("cuda dropout forward and backward: the CPU's Philox mask and values, bit for bit") {
  SKIP_WITHOUT_DEVICE();
  Rng rng(101);
  for (DType t : kFloatingTypes) {
    for (int64_t n : {int64_t(1), int64_t(5), int64_t(1003), int64_t(4099)}) {
      for (double p : {0.0, 0.1, 0.5, 0.9}) {
        for (int64_t offset : {0, 1}) {
          CAPTURE(name_of(t));
          CAPTURE(n);
          CAPTURE(p);
          CAPTURE(offset);
          const uint64_t seed = 0x1234'5678'9abc'def0ull + uint64_t(n), philox_offset = uint64_t(rng.integer(0, 1000));
          const Buffer x = random_buffer(t, n, rng, -3, 3);
          Buffer y(t, n), dx(t, n);
          cpu::dropout_forward(x.data(), y.data(), n, p, seed, philox_offset, t);
          cpu::dropout_backward(x.data(), dx.data(), n, p, seed, philox_offset, t);
          DeviceBuffer d_x(x, offset), d_y(t, n, offset);
          gpu::dropout_forward(d_x.data(), d_y.data(), n, p, seed, philox_offset, t, stream());
          check_bitwise(d_y.download(), y, "dropout forward");
          d_y.poison();
          gpu::dropout_backward(d_x.data(), d_y.data(), n, p, seed, philox_offset, t, stream());
          check_bitwise(d_y.download(), dx, "dropout backward");
        }
      }
    }
  }
  check_error([] { gpu::dropout_forward(nullptr, nullptr, 4, 1.0, 1, 0, DType::f32, stream()); },
              {"[dropout_forward]", "0 <= p < 1"});
}

TEST_CASE("cuda uniform_fill and normal_fill: the CPU's Philox streams") {
  SKIP_WITHOUT_DEVICE();
  // uniform_fill with a power-of-two width: (high - low) u is exact, so the value is one rounding
  // of low + (high - low) u on both backends: bit for bit (the clamp below `high` included).
  // Another width: both round the product and the sum, but the CPU compiler may fuse them: 1 ulp,
  // scale |low| + |high|.
  // normal_fill: the Philox words are the same; sqrt(-2 log u1) cos(2 pi u2) uses the device's
  // logf/cosf (2 ulp each, cos of an argument up to 2 pi): 16 ulps of |mean| + 6 std.
  struct Range {
    double low, high;
    bool exact;
  };
  const Range ranges[] = {{-1, 1, true}, {0, 1, true}, {2, 6, true}, {-0.5, 0.5, true}, {-3, 7, false}};
  for (DType t : kFloatingTypes) {
    for (int64_t n : {int64_t(1), int64_t(7), int64_t(4099)}) {
      for (int64_t offset : {0, 1}) {
        CAPTURE(name_of(t));
        CAPTURE(n);
        CAPTURE(offset);
        const uint64_t seed = 42 + uint64_t(n), philox_offset = 17;
        for (const Range& r : ranges) {
          CAPTURE(r.low);
          CAPTURE(r.high);
          Buffer y(t, n);
          cpu::uniform_fill(y.data(), n, r.low, r.high, seed, philox_offset, t);
          DeviceBuffer d_y(t, n, offset);
          gpu::uniform_fill(d_y.data(), n, r.low, r.high, seed, philox_offset, t, stream());
          const Buffer got = d_y.download();
          if (r.exact) {
            check_bitwise(got, y, "uniform_fill");
          } else {
            check_close(got, y, "uniform_fill", tolerance(t, 1, std::fabs(r.low) + std::fabs(r.high)));
          }
        }
        Buffer y(t, n);
        cpu::normal_fill(y.data(), n, 0.5, 2.0, seed, philox_offset, t);
        DeviceBuffer d_y(t, n, offset);
        gpu::normal_fill(d_y.data(), n, 0.5, 2.0, seed, philox_offset, t, stream());
        check_close(d_y.download(), y, "normal_fill", tolerance(t, 16, 0.5 + 6 * 2.0));
      }
    }
  }
}

// ==== optimizer ===================================================================================

TEST_CASE("cuda adamw_step: with and without an fp32 master copy, every dtype, size, alignment") {
  SKIP_WITHOUT_DEVICE();
  // The moments: a * b + c * d, which nvcc may fuse (2 ulps of the terms: scale |m| + |g|).
  // theta: theta decay - step_size m / (sqrt(v) / bias2 + eps), a few roundings, some fusable; the
  // update m / denom is at most ~lr / (1 - beta1^t) and theta ~1: 8 ulps, scale 2.
  Rng rng(111);
  for (DType t : kFloatingTypes) {
    for (int64_t n : kElementwiseSizes) {
      for (int64_t offset : {0, 1}) {
        for (bool with_master : {false, true}) {
          CAPTURE(name_of(t));
          CAPTURE(n);
          CAPTURE(offset);
          CAPTURE(with_master);
          const DType acc = hg::accumulate_dtype(t);
          const Buffer param0 = random_buffer(t, n, rng, -1, 1), grad = random_buffer(t, n, rng, -1, 1);
          const Buffer m0 = random_buffer(acc, n, rng, -0.1, 0.1), v0 = random_buffer(acc, n, rng, 0, 0.01);
          Buffer master0(acc, n);
          for (int64_t i = 0; i < n; ++i) master0.set(i, param0.get(i) + 1e-4 * rng.uniform(-1, 1));
          Buffer param = param0, m = m0, v = v0, master = master0;
          const double lr = 1e-2, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.1;
          const int64_t step = 3;
          cpu::adamw_step(param.data(), with_master ? master.data() : nullptr, grad.data(), m.data(), v.data(), n, lr,
                          beta1, beta2, eps, weight_decay, step, t);
          DeviceBuffer d_param(param0, offset), d_grad(grad, offset), d_m(m0, offset), d_v(v0, offset),
              d_master(master0, offset);
          gpu::adamw_step(d_param.data(), with_master ? d_master.data() : nullptr, d_grad.data(), d_m.data(),
                          d_v.data(), n, lr, beta1, beta2, eps, weight_decay, step, t, stream());
          check_close(d_param.download(), param, "param", tolerance(t, 8, 2));
          check_close(d_m.download(), m, "exp_avg", tolerance(acc, 2, 1));
          check_close(d_v.download(), v, "exp_avg_sq", tolerance(acc, 2, 0.01));
          if (with_master) check_close(d_master.download(), master, "master", tolerance(acc, 8, 2));
        }
      }
    }
  }
  check_error(
      [] {
        gpu::adamw_step(nullptr, nullptr, nullptr, nullptr, nullptr, 4, 1e-3, 0.9, 0.999, 1e-8, 0, 0, DType::f32,
                        stream());
      },
      {"[adamw_step]", "step >= 1"});
}

TEST_CASE("cuda adamw_step_device with a blocks-done counter settles the step count in its own launch") {
  SKIP_WITHOUT_DEVICE();
  // The last block to finish moves the new count into slot 0 and re-zeroes the counter: one launch per
  // call, the count where the next call reads it, and the same update as the two-slot form.
  Rng rng(112);
  const int64_t kSteps = 3, kStart = 4;
  for (int64_t n : {int64_t(0), int64_t(5), int64_t(3001), int64_t(70000)}) {  // none, one block, a few, many
    for (bool skipped : {false, true}) {
      CAPTURE(n);
      CAPTURE(skipped);
      const Buffer param0 = random_buffer(DType::f32, n, rng, -1, 1), grad = random_buffer(DType::f32, n, rng, -1, 1);
      const Buffer m0 = random_buffer(DType::f32, n, rng, -0.1, 0.1), v0 = random_buffer(DType::f32, n, rng, 0, 0.01);
      DeviceBuffer p_settled(param0), m_settled(m0), v_settled(v0), p_plain(param0), m_plain(m0), v_plain(v0), g(grad);
      DeviceBuffer count(DType::i64, 3), flag(DType::f32, 1);
      const std::vector<int64_t> count0{kStart, -7, 0};
      HG_CUDA_CHECK(cudaMemcpy(count.data(), count0.data(), sizeof(int64_t) * 3, cudaMemcpyHostToDevice));
      const float inf_flag = skipped ? 1.0f : 0.0f;
      HG_CUDA_CHECK(cudaMemcpy(flag.data(), &inf_flag, sizeof inf_flag, cudaMemcpyHostToDevice));
      hg::kernels::AdamWStepScalars s;
      s.lr_value = 1e-2;
      s.found_inf = static_cast<const float*>(flag.data());
      s.step = static_cast<int64_t*>(count.data());
      s.blocks_done = reinterpret_cast<unsigned long long*>(s.step + 2);
      const hg::RuntimeCounters before = hg::runtime_counters();
      for (int64_t k = 0; k < kSteps; ++k) {
        gpu::adamw_step_device(p_settled.data(), nullptr, g.data(), m_settled.data(), v_settled.data(), n, s, 0.9,
                               0.999, 1e-8, 0.1, DType::f32, stream());
      }
      CHECK((hg::runtime_counters() - before)[hg::RuntimeCounter::kernel_launches] == kSteps);
      std::vector<int64_t> after(3);
      HG_CUDA_CHECK(cudaMemcpy(after.data(), count.data(), sizeof(int64_t) * 3, cudaMemcpyDeviceToHost));
      const int64_t expected = skipped ? kStart : kStart + kSteps;
      CHECK(after[0] == expected);
      CHECK(after[1] == expected);
      CHECK(after[2] == 0);
      // The same updates through the host-scalar kernel at t = kStart + 1, +2, ...
      for (int64_t k = 0; k < kSteps && !skipped; ++k) {
        gpu::adamw_step(p_plain.data(), nullptr, g.data(), m_plain.data(), v_plain.data(), n, 1e-2, 0.9, 0.999, 1e-8,
                        0.1, kStart + 1 + k, DType::f32, stream());
      }
      check_close(p_settled.download(), skipped ? param0 : p_plain.download(), "param", tolerance(DType::f32, 2, 1));
      check_close(m_settled.download(), skipped ? m0 : m_plain.download(), "exp_avg", tolerance(DType::f32, 2, 1));
    }
  }
}

TEST_CASE("cuda sum_of_squares: double accumulation, deterministic, inf and NaN propagate") {
  SKIP_WITHOUT_DEVICE();
  // Positive terms summed in double in any order: relative error <= n 2^-53 (each square of an
  // f32/f16/bf16 value is exact in double; for f64 one more rounding per term).
  Rng rng(121);
  for (DType t : kFloatingTypes) {
    for (int64_t n : {int64_t(1), int64_t(7), int64_t(1003), int64_t(100003)}) {
      for (int64_t offset : {0, 1}) {
        CAPTURE(name_of(t));
        CAPTURE(n);
        CAPTURE(offset);
        const Buffer x = random_buffer(t, n, rng, -2, 2);
        const double ref = cpu::sum_of_squares(x.data(), n, t);
        DeviceBuffer d_x(x, offset);
        const double got = gpu::sum_of_squares(d_x.data(), n, t, stream());
        CHECK(std::fabs(got - ref) <= double(n + 1) * 0x1p-53 * ref);
        const double again = gpu::sum_of_squares(d_x.data(), n, t, stream());
        CHECK(std::memcmp(&got, &again, sizeof got) == 0);
      }
    }
  }
  Buffer special(DType::f32, 1000);
  for (int64_t i = 0; i < 1000; ++i) special.set(i, 1.0);
  special.set(700, kInf);
  DeviceBuffer d_special(special);
  CHECK(gpu::sum_of_squares(d_special.data(), 1000, DType::f32, stream()) == kInf);
  special.set(300, kNaN);
  d_special.upload(special);
  CHECK(std::isnan(gpu::sum_of_squares(d_special.data(), 1000, DType::f32, stream())));
  CHECK(gpu::sum_of_squares(nullptr, 0, DType::f32, stream()) == 0.0);
}

TEST_CASE("cuda unscale_and_check: one launch over mixed tensors matches the CPU bit for bit and finds planted inf and NaN") {
  SKIP_WITHOUT_DEVICE();
  // Tensors of every floating dtype, sizes around and not multiples of the chunk (65536), stored
  // as [NaN guard, x..., NaN guard] at aligned and unaligned addresses: a read outside a tensor
  // would report found_inf on clean data, a write would change a guard.
  Rng rng(131);
  const int64_t sizes[] = {1, 5, 1000, 65537, 70001};
  for (int trial = 0; trial < 6; ++trial) {
    CAPTURE(trial);
    std::vector<Buffer> host;
    std::vector<std::unique_ptr<DeviceBuffer>> device;
    std::vector<hg::kernels::TensorSpan> cpu_spans, gpu_spans;
    for (int64_t n : sizes) {
      for (DType t : kFloatingTypes) {
        if ((n > 1000) && rng.integer(0, 3) != 0) continue;  // a few large ones per trial
        Buffer b(t, n + 2);
        for (int64_t i = 1; i <= n; ++i) b.set(i, rng.uniform(-3, 3));
        host.push_back(std::move(b));
      }
    }
    const bool plant = trial % 3 != 0;
    if (plant) {
      Buffer& victim = host[size_t(rng.integer(0, int64_t(host.size()) - 1))];
      victim.set(rng.integer(1, victim.size() - 2), trial % 3 == 1 ? kNaN : -kInf);
    }
    for (size_t k = 0; k < host.size(); ++k) {
      device.push_back(std::make_unique<DeviceBuffer>(host[k], int64_t(k % 2)));
      const size_t element = hg::dtype_size(host[k].dtype());
      cpu_spans.push_back({static_cast<char*>(host[k].data()) + element, host[k].size() - 2, host[k].dtype()});
      gpu_spans.push_back({static_cast<char*>(device[k]->data()) + element, host[k].size() - 2, host[k].dtype()});
    }
    const double inv_scale = trial < 3 ? 0x1p-12 : 1.0 / 3.0;
    const bool gpu_found = gpu::unscale_and_check(gpu_spans.data(), int64_t(gpu_spans.size()), inv_scale, stream());
    const bool cpu_found = cpu::unscale_and_check(cpu_spans.data(), int64_t(cpu_spans.size()), inv_scale);
    CHECK(gpu_found == plant);
    CHECK(cpu_found == plant);
    for (size_t k = 0; k < host.size(); ++k) {
      CAPTURE(k);
      CHECK(device[k]->download().bitwise_equal(host[k]));
    }
    // inv_scale 1: a check that writes nothing.
    const bool again = gpu::unscale_and_check(gpu_spans.data(), int64_t(gpu_spans.size()), 1.0, stream());
    CHECK(again == plant);
    for (size_t k = 0; k < host.size(); ++k) CHECK(device[k]->download().bitwise_equal(host[k]));
  }
  CHECK_FALSE(gpu::unscale_and_check(nullptr, 0, 0.5, stream()));
  DeviceBuffer ints(DType::i32, 4);
  const hg::kernels::TensorSpan bad{ints.data(), 4, DType::i32};
  CHECK_THROWS_AS(gpu::unscale_and_check(&bad, 1, 0.5, stream()), hg::Error);
}
