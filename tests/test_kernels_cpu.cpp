// kernels/cpu: every CPU kernel against a plain double-precision reference written here.
//
// Each check draws fresh seeded random inputs (never all zeros), rounds them to the dtype under test,
// poisons the outputs with NaN before the kernel runs (so an element the kernel forgets to write
// fails), and computes the reference in double from the very values stored in the inputs. Outputs
// must agree within `atol + |ref| * eps(dtype) * factor` (the factor covers reductions and the
// transcendental functions); the four floating dtypes run through every check.
#include <doctest/doctest.h>

#include "support/host_buffer.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/error.h"
#include "kernels/half.h"
#include "kernels/kernels.h"
#include "kernels/philox.h"
#include "support/op_cases.h"

namespace {

using hg::DType;
using hg::kernels::ReduceOp;
using hg::kernels::UnaryOp;
using hg::testing::binary_op_cases;
using hg::testing::BinaryOpCase;
using hg::testing::unary_op_cases;
using hg::testing::UnaryOpCase;
namespace cpu = hg::kernels::cpu;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
const DType kFloatingTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

// Relative precision expected of one rounded result in `t`.
double eps(DType t) {
  switch (t) {
    case DType::f64:
      return 1e-12;
    case DType::f32:
      return 1e-5;
    case DType::f16:
      return 2e-3;
    case DType::bf16:
      return 1.6e-2;
    default:
      return 0;
  }
}

// ---- a host buffer of any dtype ------------------------------------------------------------------

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

Buffer poisoned(DType dtype, int64_t n) {
  Buffer b(dtype, n);
  b.poison_with_nan();
  return b;
}

Buffer index_buffer(DType dtype, const std::vector<int64_t>& values) {
  Buffer b(dtype, int64_t(values.size()));
  for (size_t i = 0; i < values.size(); ++i) b.set(int64_t(i), double(values[i]));
  return b;
}

// Checks got[i] against ref[i] within atol + magnitude[i] * eps(dtype) * factor, where magnitude is
// |ref| unless given (sums pass the sum of |terms|). NaN must meet NaN. Reports the first mismatch.
void check_close(const Buffer& got, const std::vector<double>& ref, const std::string& what, double atol,
                 double factor = 1, const std::vector<double>* magnitude = nullptr) {
  REQUIRE(got.size() == int64_t(ref.size()));
  const double e = eps(got.dtype()) * factor;
  int64_t failures = 0;
  for (int64_t i = 0; i < got.size(); ++i) {
    const double g = got.get(i), r = ref[i];
    const double m = magnitude ? (*magnitude)[i] : std::fabs(r);
    const bool ok = std::isnan(r) ? std::isnan(g) : (g == r || std::fabs(g - r) <= atol + m * e);
    if (!ok && failures++ == 0) {
      FAIL_CHECK(what << " [" << std::string(hg::dtype_name(got.dtype())) << "] element " << i << ": got " << g
                      << ", expected " << r << " (tolerance " << atol + m * e << ")");
    }
  }
  if (failures > 1) FAIL_CHECK(what << ": " << failures << " elements out of tolerance in total");
}

void check_exact(const Buffer& got, const std::vector<double>& ref, const std::string& what) {
  check_close(got, ref, what, 0, 0);
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

// Runs `body` with OpenMP limited to `threads`, restoring the previous limit.
template <class F>
void with_threads(int threads, F&& body) {
  const int previous = omp_get_max_threads();
  omp_set_num_threads(threads);
  body();
  omp_set_num_threads(previous);
}

}  // namespace

// ==== fill and cast ===============================================================================

namespace {

// The representable value of `t` nearest to v, ties to even, computed by searching the neighbours of
// a first guess in exact double arithmetic (independent of cast.cpp's round-to-odd).
double round_exact(double v, DType t) {
  if (t == DType::f64) return v;
  if (t == DType::f32) return double(float(v));
  if (t == DType::i32 || t == DType::i64) return std::trunc(v);
  auto decode = [t](uint16_t bits) {
    return t == DType::f16 ? double(hg::half_bits_to_float(bits)) : double(hg::bfloat16_bits_to_float(bits));
  };
  const uint16_t guess = t == DType::f16 ? hg::float_to_half_bits(float(v)) : hg::float_to_bfloat16_bits(float(v));
  double best = decode(guess);
  uint16_t best_bits = guess;
  for (int step : {-1, 1}) {
    const uint16_t bits = uint16_t(guess + step);
    const double c = decode(bits);
    const double d = std::fabs(c - v), bd = std::fabs(best - v);
    if (std::isfinite(c) && (d < bd || (d == bd && (bits & 1u) == 0))) {
      best = c;
      best_bits = bits;
    }
  }
  (void)best_bits;
  return best;
}

}  // namespace

TEST_CASE("fill: every dtype, every element") {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    for (int64_t n : {int64_t(1), int64_t(37), int64_t(100000)}) {
      Buffer y = poisoned(t, n);
      cpu::fill(y.data(), n, -3.0, t);
      check_exact(y, std::vector<double>(static_cast<size_t>(n), -3.0), "fill");
    }
  }
  Buffer y = poisoned(DType::f16, 5);
  cpu::fill(y.data(), 5, 0.1, DType::f16);
  check_exact(y, std::vector<double>(5, round_exact(0.1, DType::f16)), "fill rounds");
}

TEST_CASE("cast: all 36 dtype pairs against a double reference") {
  const DType all[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64};
  Rng rng(11);
  const int64_t n = 3001;
  for (DType from : all) {
    for (DType to : all) {
      CAPTURE(std::string(hg::dtype_name(from)));
      CAPTURE(std::string(hg::dtype_name(to)));
      Buffer x(from, n);
      for (int64_t i = 0; i < n; ++i) {
        const double v = hg::is_integral(from) ? double(rng.integer(-3000, 3000)) : rng.uniform(-3000, 3000);
        x.set(i, v);
      }
      Buffer y = poisoned(to, n);
      cpu::cast(x.data(), from, y.data(), to, n);
      std::vector<double> ref(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) ref[i] = round_exact(x.get(i), to);
      check_exact(y, ref, "cast");
    }
  }
}

TEST_CASE("cast: one rounding from f64 to half types, truncation and saturation to integers") {
  // 1 + 2^-11 + 2^-40 is just above the f16 midpoint between 1 and 1 + 2^-10: rounding through float
  // first would land on the midpoint and round to even (1.0). Same for bf16 with 1 + 2^-8 + 2^-40.
  const double f16_case = 1 + std::ldexp(1, -11) + std::ldexp(1, -40);
  const double bf16_case = 1 + std::ldexp(1, -8) + std::ldexp(1, -40);
  Buffer x(DType::f64, 2);
  x.set(0, f16_case);
  x.set(1, -bf16_case);
  Buffer h = poisoned(DType::f16, 2), b = poisoned(DType::bf16, 2);
  cpu::cast(x.data(), DType::f64, h.data(), DType::f16, 2);
  cpu::cast(x.data(), DType::f64, b.data(), DType::bf16, 2);
  CHECK(h.get(0) == 1 + std::ldexp(1, -10));
  CHECK(b.get(1) == -(1 + std::ldexp(1, -7)));

  Buffer f(DType::f32, 6);
  const double inputs[] = {2.7, -2.7, kNaN, 1e20, -1e20, 0.999};
  for (int i = 0; i < 6; ++i) f.set(i, inputs[i]);
  Buffer i32 = poisoned(DType::i32, 6);
  cpu::cast(f.data(), DType::f32, i32.data(), DType::i32, 6);
  check_exact(i32, {2, -2, 0, 2147483647.0, -2147483648.0, 0}, "float -> i32");
}

// ==== copy_strided ================================================================================

namespace {

struct CopyCase {
  const char* name;
  std::vector<int64_t> shape, src_strides, dst_strides;
  int64_t src_base = 0;  // element offset of the first element (negative strides count down from it)
};

// Number of elements a strided view needs from its base (strides may be negative: base is then the
// offset of index 0 and the smallest address must stay >= 0).
int64_t view_extent(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides, int64_t base) {
  int64_t hi = base;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return base + 1;
    if (strides[d] > 0) hi += (shape[d] - 1) * strides[d];
  }
  return hi + 1;
}

// Visits every index of shape in row-major order with the offsets of the two views.
void for_each_index(const std::vector<int64_t>& shape, const std::vector<int64_t>& s1, const std::vector<int64_t>& s2,
                    const std::function<void(int64_t, int64_t, int64_t)>& visit) {
  int64_t total = 1;
  for (int64_t e : shape) total *= e;
  std::vector<int64_t> index(shape.size(), 0);
  for (int64_t linear = 0; linear < total; ++linear) {
    int64_t o1 = 0, o2 = 0;
    for (size_t d = 0; d < shape.size(); ++d) {
      o1 += index[d] * s1[d];
      o2 += index[d] * s2[d];
    }
    visit(linear, o1, o2);
    for (int d = int(shape.size()) - 1; d >= 0; --d) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int d = int(shape.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * shape[d + 1];
  return s;
}

}  // namespace

TEST_CASE("copy_strided: layouts (table), element sizes 2, 4 and 8") {
  const std::vector<CopyCase> cases = {
      {"rank 0", {}, {}, {}},
      {"contiguous 2d", {3, 5}, {5, 1}, {5, 1}},
      {"transpose", {4, 6}, {1, 4}, {6, 1}},
      {"3d permutation", {3, 4, 5}, {1, 15, 3}, {20, 5, 1}},
      {"broadcast source (stride 0)", {4, 7}, {0, 1}, {7, 1}},
      {"reversed source (negative stride)", {9}, {-1}, {1}, 8},
      {"into a slice with gaps", {3, 4}, {4, 1}, {10, 1}},
      {"size-1 dims with odd strides", {1, 6, 1, 2}, {99, 2, 77, 1}, {5, 2, 3, 1}},
      {"rank 8", {2, 1, 3, 2, 1, 2, 3, 2}, {1, 1, 4, 2, 1, 12, 24, 72}, contiguous_strides({2, 1, 3, 2, 1, 2, 3, 2})},
      {"large transpose (parallel)", {300, 257}, {1, 300}, {257, 1}},
      {"large contiguous rows into gaps (parallel)", {400, 200}, {200, 1}, {256, 1}},
      // A contiguous tensor of any rank collapses to one row: its columns are split over the threads.
      {"one long contiguous row (parallel columns)", {100003}, {1}, {1}},
      {"contiguous 3d, one long row once collapsed", {7, 97, 101}, contiguous_strides({7, 97, 101}),
       contiguous_strides({7, 97, 101})},
      {"one long strided row (parallel columns)", {70001}, {2}, {1}},
      {"one long reversed row (parallel columns)", {70001}, {-1}, {1}, 70000},
      {"zero-size dim", {3, 0, 2}, {0, 2, 1}, {0, 2, 1}},
  };
  Rng rng(21);
  for (DType t : {DType::f16, DType::f32, DType::f64}) {
    for (const CopyCase& c : cases) {
      for (int threads : {1, 3}) {
        CAPTURE(std::string(c.name));
        CAPTURE(std::string(hg::dtype_name(t)));
        CAPTURE(threads);
        Buffer src = random_buffer(t, view_extent(c.shape, c.src_strides, c.src_base), rng, -5, 5);
        Buffer dst = poisoned(t, view_extent(c.shape, c.dst_strides, 0));
        std::vector<double> ref = dst.values();
        for_each_index(c.shape, c.src_strides, c.dst_strides,
                       [&](int64_t, int64_t so, int64_t dof) { ref[dof] = src.get(c.src_base + so); });
        const char* src_base = static_cast<const char*>(src.data()) + c.src_base * int64_t(hg::dtype_size(t));
        with_threads(threads, [&] {
          cpu::copy_strided(src_base, c.src_strides.data(), dst.data(), c.dst_strides.data(), c.shape.data(),
                            int(c.shape.size()), t);
        });
        check_exact(dst, ref, c.name);  // unwritten gaps must still hold the poison
      }
    }
  }
}

// ==== unary, affine ===============================================================================

namespace {

// Random inputs in [lo, hi) kept away from 0 (where relu/abs have a kink).
Buffer unary_inputs(DType t, int64_t n, Rng& rng, const UnaryOpCase& c) {
  Buffer x(t, n);
  for (int64_t i = 0; i < n; ++i) {
    double v = rng.uniform(c.lo, c.hi);
    if (std::fabs(v) < 0.02) v += 0.05;
    x.set(i, v);
  }
  return x;
}

}  // namespace

TEST_CASE("unary references: derivatives agree with central differences of the forward") {
  for (const UnaryOpCase& c : unary_op_cases()) {
    CAPTURE(std::string(c.name));
    for (int k = 1; k < 20; ++k) {
      const double x = c.lo + (c.hi - c.lo) * k / 20.0 + 0.013, h = 1e-6;
      const double fd = (c.ref(x + h, c.scalar) - c.ref(x - h, c.scalar)) / (2 * h);
      CHECK(std::fabs(fd - c.ref_derivative(x, c.scalar)) <= 1e-6 * (1 + std::fabs(fd)));
    }
  }
}

TEST_CASE("unary_forward and unary_backward: every op (table) and dtype") {
  Rng rng(31);
  for (DType t : kFloatingTypes) {
    for (const UnaryOpCase& c : unary_op_cases()) {
      CAPTURE(std::string(c.name));
      CAPTURE(std::string(hg::dtype_name(t)));
      const int64_t n = c.op == UnaryOp::GeluTanh ? 70001 : 5001;  // one op through the parallel path
      const Buffer x = unary_inputs(t, n, rng, c);
      const Buffer dy = random_buffer(t, n, rng, -2, 2);
      Buffer y = poisoned(t, n);
      cpu::unary_forward(c.op, x.data(), y.data(), n, c.scalar, t);
      std::vector<double> y_ref(static_cast<size_t>(n)), dx_ref(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        y_ref[i] = c.ref(x.get(i), c.scalar);
        dx_ref[i] = dy.get(i) * c.ref_derivative(x.get(i), c.scalar);
      }
      check_close(y, y_ref, std::string("forward ") + c.name, eps(t), 4);

      // Ops whose derivative uses y see the rounded y, so allow its rounding too.
      const double factor = t == DType::f64 ? 1e3 : 6;
      Buffer dx = poisoned(t, n);
      cpu::unary_backward(c.op, x.data(), y.data(), dy.data(), dx.data(), n, c.scalar, t);
      check_close(dx, dx_ref, std::string("backward ") + c.name, eps(t), factor);
      Buffer dx_no_y = poisoned(t, n);
      cpu::unary_backward(c.op, x.data(), nullptr, dy.data(), dx_no_y.data(), n, c.scalar, t);
      check_close(dx_no_y, dx_ref, std::string("backward (y recomputed) ") + c.name, eps(t), factor);
    }
  }
}

TEST_CASE("unary_backward: y-only derivatives accept x = nullptr, the others refuse it") {
  Rng rng(32);
  const int64_t n = 300;
  const Buffer x = random_buffer(DType::f32, n, rng, -2, 2), dy = random_buffer(DType::f32, n, rng, -1, 1);
  Buffer y = poisoned(DType::f32, n), dx = poisoned(DType::f32, n);
  cpu::unary_forward(UnaryOp::Tanh, x.data(), y.data(), n, 0, DType::f32);
  cpu::unary_backward(UnaryOp::Tanh, nullptr, y.data(), dy.data(), dx.data(), n, 0, DType::f32);
  std::vector<double> ref(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ref[i] = dy.get(i) * (1 - y.get(i) * y.get(i));
  check_close(dx, ref, "tanh backward from y", 1e-6);
  check_error([&] { cpu::unary_backward(UnaryOp::Log, nullptr, y.data(), dy.data(), dx.data(), n, 0, DType::f32); },
              {"[unary_backward]", "needs x"});
}

TEST_CASE("unary ops: a row's `reads` is true -- the backward from y alone is right exactly when f' reads no x") {
  // With x = nullptr the kernel passes x = 0 to f', so a row that claims to read no x but does fails here;
  // one that claims to read no y but does fails the "y recomputed" check above.
  Rng rng(33);
  const int64_t n = 300;
  for (const UnaryOpCase& c : unary_op_cases()) {
    CAPTURE(std::string(c.name));
    const Buffer x = unary_inputs(DType::f64, n, rng, c), dy = random_buffer(DType::f64, n, rng, -2, 2);
    Buffer y = poisoned(DType::f64, n), dx = poisoned(DType::f64, n);
    cpu::unary_forward(c.op, x.data(), y.data(), n, c.scalar, DType::f64);
    if (hg::kernels::unary_derivative_reads(c.op) == hg::kernels::DerivativeReads::X) {
      check_error([&] { cpu::unary_backward(c.op, nullptr, y.data(), dy.data(), dx.data(), n, c.scalar, DType::f64); },
                  {"[unary_backward]", "needs x"});
      continue;
    }
    cpu::unary_backward(c.op, nullptr, y.data(), dy.data(), dx.data(), n, c.scalar, DType::f64);
    std::vector<double> ref(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) ref[i] = dy.get(i) * c.ref_derivative(x.get(i), c.scalar);
    check_close(dx, ref, std::string("backward from y alone ") + c.name, eps(DType::f64), 1e3);
  }
}

TEST_CASE("every unary and binary op of the kernel tables has a test row, and every binary op a gradcheck case") {
  // The kernel suites, gradcheck and the CUDA parity read these rows (tests/support/op_cases.cpp): an
  // op added to kernels/unary_math.h or kernels/binary_math.h without one would go untested.
  for (UnaryOp op : hg::kernels::kUnaryOps) {
    CAPTURE(std::string(hg::kernels::op_name(op)));
    CHECK(std::any_of(unary_op_cases().begin(), unary_op_cases().end(),
                      [&](const UnaryOpCase& c) { return c.op == op; }));
  }
  for (hg::kernels::BinaryOp op : hg::kernels::kBinaryOps) {
    const std::string name = hg::kernels::op_name(op);
    CAPTURE(name);
    CHECK(std::any_of(binary_op_cases().begin(), binary_op_cases().end(),
                      [&](const BinaryOpCase& c) { return c.op == op; }));
    CHECK(std::any_of(hg::testing::op_cases().begin(), hg::testing::op_cases().end(),
                      [&](const hg::testing::OpCase& c) { return std::string(c.name).rfind(name, 0) == 0; }));
  }
}

TEST_CASE("affine: y = alpha x + beta") {
  Rng rng(41);
  for (DType t : kFloatingTypes) {
    CAPTURE(std::string(hg::dtype_name(t)));
    const int64_t n = 40000;
    const Buffer x = random_buffer(t, n, rng, -4, 4);
    Buffer y = poisoned(t, n);
    cpu::affine(x.data(), y.data(), n, -1.5, 0.25, t);
    std::vector<double> ref(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) ref[i] = -1.5 * x.get(i) + 0.25;
    check_close(y, ref, "affine", eps(t), 2);
  }
}

// ==== binary ======================================================================================

namespace {

struct BinaryCase {
  const char* name;
  std::vector<int64_t> shape, a_strides, b_strides;
};

}  // namespace

TEST_CASE("binary_forward: broadcasting and strides (table), every op and dtype") {
  const std::vector<BinaryCase> cases = {
      {"same shape, contiguous (parallel)", {70, 1000}, {1000, 1}, {1000, 1}},
      {"scalar b", {5, 7}, {7, 1}, {0, 0}},
      {"scalar a", {5, 7}, {0, 0}, {7, 1}},
      {"row broadcast (bias)", {33, 70}, {70, 1}, {0, 1}},
      {"column broadcast", {33, 70}, {70, 1}, {1, 0}},
      {"transposed a", {40, 30}, {1, 40}, {30, 1}},
      {"transposed b", {40, 30}, {30, 1}, {1, 40}},
      {"every other element of both", {6, 9}, {18, 2}, {27, 3}},
      {"rank 3, mixed", {4, 5, 6}, {30, 1, 5}, {6, 0, 1}},
      {"outer product", {9, 11}, {1, 0}, {0, 1}},
      {"rank 0", {}, {}, {}},
      {"zero-size dim", {4, 0}, {0, 1}, {0, 1}},
      {"column broadcast, large (parallel general path)", {300, 300}, {300, 1}, {1, 0}},
      {"rank 8", {2, 3, 1, 2, 2, 1, 3, 2}, contiguous_strides({2, 3, 1, 2, 2, 1, 3, 2}), {0, 1, 0, 0, 3, 0, 6, 0}},
  };
  Rng rng(51);
  for (DType t : kFloatingTypes) {
    for (const BinaryCase& c : cases) {
      for (const BinaryOpCase& op : binary_op_cases()) {
        CAPTURE(std::string(c.name));
        CAPTURE(std::string(hg::kernels::op_name(op.op)));
        CAPTURE(std::string(hg::dtype_name(t)));
        const Buffer a = random_buffer(t, view_extent(c.shape, c.a_strides, 0), rng, -3, 3);
        Buffer b(t, view_extent(c.shape, c.b_strides, 0));
        for (int64_t i = 0; i < b.size(); ++i) b.set(i, rng.uniform(0.5, 2) * (rng.integer(0, 1) ? 1 : -1));
        int64_t n = 1;
        for (int64_t e : c.shape) n *= e;
        Buffer y = poisoned(t, n);
        std::vector<double> ref(static_cast<size_t>(n));
        for_each_index(c.shape, c.a_strides, c.b_strides, [&](int64_t linear, int64_t ao, int64_t bo) {
          ref[linear] = op.ref(a.get(ao), b.get(bo));
          Buffer stored(t, 1);  // a result past the dtype's range (pow into f16) is expected as its infinity
          stored.set(0, ref[linear]);
          if (std::isinf(stored.get(0))) ref[linear] = stored.get(0);
        });
        cpu::binary_forward(op.op, a.data(), c.a_strides.data(), b.data(), c.b_strides.data(), y.data(), c.shape.data(),
                            int(c.shape.size()), t);
        check_close(y, ref, c.name, eps(t), 1);
      }
    }
  }
}

TEST_CASE("accumulate: y += x in place, binary_forward(Add)'s bits for y + x, every dtype and 1 or 2 threads") {
  Rng rng(53);
  for (DType t : kFloatingTypes) {
    // Vector tails, one chunk and a bit, and a size past the parallel threshold.
    for (int64_t n : {int64_t(1), int64_t(15), int64_t(17), int64_t(2049), int64_t(40001)}) {
      CAPTURE(std::string(hg::dtype_name(t)));
      CAPTURE(n);
      const Buffer y0 = random_buffer(t, n, rng, -3, 3);
      const Buffer x = random_buffer(t, n, rng, -3, 3);
      Buffer sum = poisoned(t, n);
      const int64_t strides[] = {1};
      cpu::binary_forward(hg::kernels::BinaryOp::Add, y0.data(), strides, x.data(), strides, sum.data(), &n, 1, t);
      std::vector<double> ref(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) ref[i] = y0.get(i) + x.get(i);
      check_close(sum, ref, "binary_forward add", eps(t), 1);
      for (int threads : {1, 2}) {
        CAPTURE(threads);
        Buffer y = y0;
        with_threads(threads, [&] { cpu::accumulate(y.data(), x.data(), n, t); });
        CHECK(std::memcmp(y.data(), sum.data(), sum.bytes()) == 0);
      }
      // x is y itself: every element doubled (exact).
      Buffer y = y0;
      cpu::accumulate(y.data(), y.data(), n, t);
      std::vector<double> doubled(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) doubled[i] = 2 * y0.get(i);
      check_exact(y, doubled, "accumulate into itself");
    }
  }
  Buffer y = random_buffer(DType::f32, 4, rng, -1, 1);
  const Buffer before = y;
  cpu::accumulate(y.data(), nullptr, 0, DType::f32);
  CHECK(std::memcmp(y.data(), before.data(), before.bytes()) == 0);
  check_error([&] { cpu::accumulate(y.data(), y.data(), -1, DType::f32); }, {"[accumulate]", "n = -1", "n >= 0"});
  check_error([&] { cpu::accumulate(y.data(), y.data(), 4, DType::i32); }, {"[accumulate]", "floating", "i32"});
}

// ==== reduce ======================================================================================

namespace {

struct ReduceCase {
  const char* name;
  int64_t outer, n, inner;
};

const ReduceCase kReduceCases[] = {
    {"rows", 7, 33, 1},
    {"long rows, several blocks", 3, 20000, 1},
    {"one very long row (parallel blocks)", 1, 100000, 1},
    {"middle dim", 5, 17, 9},
    {"wide inner, several chunks", 2, 40, 1100},
    {"single element", 1, 1, 1},
};

double at(const Buffer& x, const ReduceCase& c, int64_t o, int64_t j, int64_t i) {
  return x.get((o * c.n + j) * c.inner + i);
}

}  // namespace

TEST_CASE("reduce Sum: outer x n x inner (table) with scale, every dtype") {
  Rng rng(61);
  for (DType t : kFloatingTypes) {
    for (const ReduceCase& c : kReduceCases) {
      CAPTURE(std::string(c.name));
      CAPTURE(std::string(hg::dtype_name(t)));
      const Buffer x = random_buffer(t, c.outer * c.n * c.inner, rng, -1, 2);
      const double scale = 1.0 / double(c.n);  // the mean
      Buffer y = poisoned(t, c.outer * c.inner);
      cpu::reduce(ReduceOp::Sum, x.data(), y.data(), nullptr, c.outer, c.n, c.inner, scale, t);
      std::vector<double> ref(static_cast<size_t>(c.outer * c.inner)), magnitude(ref.size());
      for (int64_t o = 0; o < c.outer; ++o) {
        for (int64_t i = 0; i < c.inner; ++i) {
          double s = 0, abs_sum = 0;
          for (int64_t j = 0; j < c.n; ++j) {
            s += at(x, c, o, j, i);
            abs_sum += std::fabs(at(x, c, o, j, i));
          }
          ref[o * c.inner + i] = s * scale;
          magnitude[o * c.inner + i] = abs_sum * scale;
        }
      }
      // Half outputs round once; the f32 accumulation adds ~sqrt(n) roundings.
      const double factor = hg::is_half(t) ? 1 : 20;
      check_close(y, ref, "sum", 0, factor, &magnitude);
    }
  }
  Buffer y = poisoned(DType::f32, 6);
  cpu::reduce(ReduceOp::Sum, nullptr, y.data(), nullptr, 2, 0, 3, 1.0, DType::f32);
  check_exact(y, std::vector<double>(6, 0.0), "empty sum");
}

TEST_CASE("reduce Max: first index on ties, NaN propagates, every dtype") {
  Rng rng(71);
  for (DType t : kFloatingTypes) {
    for (const ReduceCase& c : kReduceCases) {
      CAPTURE(std::string(c.name));
      CAPTURE(std::string(hg::dtype_name(t)));
      // Small integers: ties everywhere, so the first-index rule is exercised.
      Buffer x(t, c.outer * c.n * c.inner);
      for (int64_t k = 0; k < x.size(); ++k) x.set(k, double(rng.integer(-3, 3)));
      // Slice (0, ., 0) gets NaNs at j = n/2 and a later j (first one wins); for a long row the NaN
      // sits in a later block.
      if (c.n >= 4) {
        x.set((0 * c.n + c.n / 2) * c.inner, kNaN);
        x.set((0 * c.n + c.n - 1) * c.inner, kNaN);
      }
      const int64_t outputs = c.outer * c.inner;
      Buffer y = poisoned(t, outputs);
      std::vector<int64_t> argmax(static_cast<size_t>(outputs), -7);
      cpu::reduce(ReduceOp::Max, x.data(), y.data(), argmax.data(), c.outer, c.n, c.inner, 1.0, t);
      std::vector<double> ref(static_cast<size_t>(outputs));
      for (int64_t o = 0; o < c.outer; ++o) {
        for (int64_t i = 0; i < c.inner; ++i) {
          double best = at(x, c, o, 0, i);
          int64_t best_j = 0;
          for (int64_t j = 1; j < c.n && !std::isnan(best); ++j) {
            const double v = at(x, c, o, j, i);
            if (std::isnan(v) || v > best) {
              best = v;
              best_j = j;
            }
          }
          ref[o * c.inner + i] = best;
          if (argmax[o * c.inner + i] != best_j) {
            FAIL_CHECK("argmax at (" << o << ", " << i << "): got " << argmax[o * c.inner + i] << ", expected "
                                     << best_j);
          }
        }
      }
      check_exact(y, ref, "max");
      if (c.n >= 4) CHECK(std::isnan(y.get(0)));
    }
  }
  Buffer x(DType::f32, 3), y = poisoned(DType::f32, 1);
  for (int k = 0; k < 3; ++k) x.set(k, -kInf);
  int64_t index = -1;
  cpu::reduce(ReduceOp::Max, x.data(), y.data(), &index, 1, 3, 1, 1.0, DType::f32);
  CHECK(y.get(0) == -kInf);
  CHECK(index == 0);
}

// ==== softmax =====================================================================================

namespace {

struct SoftmaxCase {
  const char* name;
  int64_t rows, cols, causal_rows;
};

// Row r's visible columns: all, or c <= (r % causal_rows) + (cols - causal_rows).
int64_t visible(const SoftmaxCase& c, int64_t r) {
  return c.causal_rows > 0 ? (r % c.causal_rows) + (c.cols - c.causal_rows) + 1 : c.cols;
}

std::vector<double> ref_softmax(const Buffer& x, const SoftmaxCase& c, bool log) {
  std::vector<double> y(static_cast<size_t>(c.rows * c.cols));
  for (int64_t r = 0; r < c.rows; ++r) {
    const int64_t v = visible(c, r);
    double m = -kInf, s = 0;
    for (int64_t k = 0; k < v; ++k) m = std::max(m, x.get(r * c.cols + k));
    for (int64_t k = 0; k < v; ++k) s += std::exp(x.get(r * c.cols + k) - m);
    for (int64_t k = 0; k < c.cols; ++k) {
      const double xv = x.get(r * c.cols + k);
      if (k >= v) {
        y[r * c.cols + k] = log ? -kInf : 0;
      } else {
        y[r * c.cols + k] = log ? xv - m - std::log(s) : std::exp(xv - m) / s;
      }
    }
  }
  return y;
}

const SoftmaxCase kSoftmaxCases[] = {
    {"small", 7, 33, 0},
    {"one column", 5, 1, 0},
    {"large (parallel)", 64, 1000, 0},
    {"causal, 3 matrices of 4 queries x 10 keys", 12, 10, 4},
    {"causal, square", 9, 9, 9},
};

// body(dtype, case, log) for every floating dtype, softmax case and {softmax, log_softmax}, each named
// in a failure's report.
template <class Body>
void for_each_softmax_case(Body&& body) {
  for (DType t : kFloatingTypes)
    for (const SoftmaxCase& c : kSoftmaxCases)
      for (bool log : {false, true}) {
        CAPTURE(std::string(c.name));
        CAPTURE(log);
        CAPTURE(std::string(hg::dtype_name(t)));
        body(t, c, log);
      }
}

}  // namespace

TEST_CASE("softmax_forward and log: max-subtracted, causal mask (table), every dtype") {
  Rng rng(81);
  for_each_softmax_case([&](DType t, const SoftmaxCase& c, bool log) {
    const Buffer x = random_buffer(t, c.rows * c.cols, rng, -8, 8);
    Buffer y = poisoned(t, c.rows * c.cols);
    cpu::softmax_forward(x.data(), y.data(), c.rows, c.cols, log, c.causal_rows, t);
    check_close(y, ref_softmax(x, c, log), "softmax forward", eps(t) * (log ? 4 : 0.1), 4);
  });
  // Large logits: without max-subtraction exp overflows.
  Buffer x(DType::f32, 3), y = poisoned(DType::f32, 3);
  x.set(0, 1000);
  x.set(1, 1000);
  x.set(2, -1000);
  cpu::softmax_forward(x.data(), y.data(), 1, 3, false, 0, DType::f32);
  check_close(y, {0.5, 0.5, 0}, "softmax of large logits", 1e-7);
}

TEST_CASE("softmax_backward: softmax and log_softmax, every dtype") {
  Rng rng(82);
  for_each_softmax_case([&](DType t, const SoftmaxCase& c, bool log) {
    if (log && c.causal_rows > 0) return;  // masked log outputs are -inf, whose gradient is undefined
    const Buffer x = random_buffer(t, c.rows * c.cols, rng, -4, 4);
    const Buffer dy = random_buffer(t, c.rows * c.cols, rng, -1, 1);
    Buffer y = poisoned(t, c.rows * c.cols), dx = poisoned(t, c.rows * c.cols);
    cpu::softmax_forward(x.data(), y.data(), c.rows, c.cols, log, c.causal_rows, t);
    cpu::softmax_backward(y.data(), dy.data(), dx.data(), c.rows, c.cols, log, t);
    std::vector<double> ref(static_cast<size_t>(c.rows * c.cols));
    for (int64_t r = 0; r < c.rows; ++r) {
      double s = 0;
      for (int64_t k = 0; k < c.cols; ++k) {
        const int64_t i = r * c.cols + k;
        s += log ? dy.get(i) : dy.get(i) * y.get(i);
      }
      for (int64_t k = 0; k < c.cols; ++k) {
        const int64_t i = r * c.cols + k;
        ref[i] = log ? dy.get(i) - std::exp(y.get(i)) * s : y.get(i) * (dy.get(i) - s);
      }
    }
    check_close(dx, ref, "softmax backward", eps(t) * (log ? 4 : 0.5), 8);
  });
}

// ==== cross entropy ===============================================================================

TEST_CASE("cross_entropy: forward never needs probabilities, ignore_index, backward, every dtype") {
  Rng rng(91);
  const int64_t ignore = -100;
  for (DType t : kFloatingTypes) {
    for (DType index_type : {DType::i32, DType::i64}) {
      for (int64_t cols : {int64_t(100), int64_t(3000)}) {
        CAPTURE(std::string(hg::dtype_name(t)));
        CAPTURE(std::string(hg::dtype_name(index_type)));
        CAPTURE(cols);
        const int64_t rows = 37;
        const DType acc = hg::accumulate_dtype(t);
        const Buffer x = random_buffer(t, rows * cols, rng, -6, 6);
        std::vector<int64_t> target_values(static_cast<size_t>(rows));
        int64_t expected_count = 0;
        for (int64_t r = 0; r < rows; ++r) {
          target_values[r] = r % 5 == 2 ? ignore : rng.integer(0, cols - 1);
          expected_count += target_values[r] != ignore;
        }
        const Buffer targets = index_buffer(index_type, target_values);
        Buffer loss = poisoned(acc, rows), lse = poisoned(acc, rows), mean = poisoned(acc, 1),
               inv_count = poisoned(acc, 1);
        cpu::cross_entropy_forward(x.data(), targets.data(), index_type, loss.data(), lse.data(), mean.data(),
                                   inv_count.data(), rows, cols, ignore, t);
        check_close(inv_count, {1.0 / double(expected_count)}, "1 / count", 0, 1);
        std::vector<double> lse_ref(static_cast<size_t>(rows)), loss_ref(static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) {
          double m = -kInf, s = 0;
          for (int64_t k = 0; k < cols; ++k) m = std::max(m, x.get(r * cols + k));
          for (int64_t k = 0; k < cols; ++k) s += std::exp(x.get(r * cols + k) - m);
          lse_ref[r] = m + std::log(s);
          loss_ref[r] = target_values[r] == ignore ? 0 : lse_ref[r] - x.get(r * cols + target_values[r]);
        }
        check_close(lse, lse_ref, "lse", 0, 2);
        check_close(loss, loss_ref, "loss", eps(acc) * 8, 2);
        double loss_sum = 0;
        for (double l : loss_ref) loss_sum += l;
        check_close(mean, {loss_sum / double(expected_count)}, "mean over the counted rows", 0, double(rows) + 4);

        const Buffer dloss = random_buffer(acc, rows, rng, 0.5, 2);
        Buffer dx = poisoned(t, rows * cols);
        cpu::cross_entropy_backward(x.data(), targets.data(), index_type, lse.data(), dloss.data(), dx.data(), rows,
                                    cols, ignore, t);
        std::vector<double> dx_ref(static_cast<size_t>(rows * cols));
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t k = 0; k < cols; ++k) {
            const double p = std::exp(x.get(r * cols + k) - lse_ref[r]);
            dx_ref[r * cols + k] =
                target_values[r] == ignore ? 0 : dloss.get(r) * (p - (k == target_values[r] ? 1.0 : 0.0));
          }
        }
        check_close(dx, dx_ref, "dlogits", eps(t) * 2, 4);
      }
    }
  }
}

TEST_CASE("cross_entropy: a target out of range names the row, the value and the range") {
  Buffer x(DType::f32, 6 * 10), loss(DType::f32, 6), lse(DType::f32, 6), dloss(DType::f32, 6), dx(DType::f32, 60);
  Buffer mean(DType::f32, 1), inv_count(DType::f32, 1);
  const Buffer targets = index_buffer(DType::i64, {1, 2, -100, 3, 4, 10});
  check_error(
      [&] {
        cpu::cross_entropy_forward(x.data(), targets.data(), DType::i64, loss.data(), lse.data(), mean.data(),
                                   inv_count.data(), 6, 10, -100, DType::f32);
      },
      {"[cross_entropy_forward]", "target 10 at row 5", "0 <= target < 10"});
  check_error(
      [&] {
        cpu::cross_entropy_backward(x.data(), targets.data(), DType::i64, lse.data(), dloss.data(), dx.data(), 6, 10,
                                    -1, DType::f32);
      },
      {"[cross_entropy_backward]", "target -100 at row 2"});
}

// ==== layer norm ==================================================================================

namespace {

struct LayerNormRef {
  std::vector<double> y, mean, rstd, dx, dw, db;
};

// Double LayerNorm; w and b may be null (1 and 0), dy may be null (forward only).
LayerNormRef ref_layer_norm(const Buffer& x, const Buffer* w, const Buffer* b, const Buffer* dy, int64_t rows,
                            int64_t cols, double eps_ln) {
  LayerNormRef out;
  out.y.resize(static_cast<size_t>(rows * cols));
  out.dx.resize(out.y.size());
  out.mean.resize(static_cast<size_t>(rows));
  out.rstd.resize(static_cast<size_t>(rows));
  out.dw.assign(static_cast<size_t>(cols), 0);
  out.db.assign(static_cast<size_t>(cols), 0);
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < cols; ++c) mean += x.get(r * cols + c) / double(cols);
    for (int64_t c = 0; c < cols; ++c) var += std::pow(x.get(r * cols + c) - mean, 2) / double(cols);
    const double rstd = 1 / std::sqrt(var + eps_ln);
    out.mean[r] = mean;
    out.rstd[r] = rstd;
    double mean_g = 0, mean_gx = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const double xhat = (x.get(r * cols + c) - mean) * rstd;
      const double wc = w ? w->get(c) : 1, bc = b ? b->get(c) : 0;
      out.y[r * cols + c] = xhat * wc + bc;
      if (!dy) continue;
      const double g = dy->get(r * cols + c) * wc;
      mean_g += g / double(cols);
      mean_gx += g * xhat / double(cols);
      out.dw[c] += dy->get(r * cols + c) * xhat;
      out.db[c] += dy->get(r * cols + c);
    }
    if (!dy) continue;
    for (int64_t c = 0; c < cols; ++c) {
      const double xhat = (x.get(r * cols + c) - mean) * rstd;
      const double g = dy->get(r * cols + c) * (w ? w->get(c) : 1);
      out.dx[r * cols + c] = rstd * (g - mean_g - xhat * mean_gx);
    }
  }
  return out;
}

struct LayerNormOutputs {
  Buffer y, mean, rstd, dx, dw, db;
  LayerNormOutputs(DType t, int64_t rows, int64_t cols)
      : y(poisoned(t, rows * cols)),
        mean(poisoned(hg::accumulate_dtype(t), rows)),
        rstd(poisoned(hg::accumulate_dtype(t), rows)),
        dx(poisoned(t, rows * cols)),
        dw(poisoned(t, cols)),
        db(poisoned(t, cols)) {}
};

LayerNormOutputs run_layer_norm(DType t, const Buffer& x, const Buffer* w, const Buffer* b, const Buffer& dy,
                                int64_t rows, int64_t cols, double eps_ln) {
  LayerNormOutputs out(t, rows, cols);
  cpu::layer_norm_forward(x.data(), w ? w->data() : nullptr, b ? b->data() : nullptr, out.y.data(), out.mean.data(),
                          out.rstd.data(), rows, cols, eps_ln, t);
  cpu::layer_norm_backward(x.data(), w ? w->data() : nullptr, out.mean.data(), out.rstd.data(), dy.data(),
                           out.dx.data(), out.dw.data(), out.db.data(), rows, cols, t);
  return out;
}

}  // namespace

TEST_CASE("layer_norm forward and backward against a double reference, every dtype, with and without affine") {
  Rng rng(101);
  const double eps_ln = 1e-5;
  for (DType t : kFloatingTypes) {
    for (bool affine_params : {true, false}) {
      for (int64_t rows : {int64_t(5), int64_t(200)}) {  // 200 x 300 runs the parallel paths
        CAPTURE(std::string(hg::dtype_name(t)));
        CAPTURE(affine_params);
        CAPTURE(rows);
        const int64_t cols = 300;
        const Buffer x = random_buffer(t, rows * cols, rng, -2, 3);
        const Buffer w = random_buffer(t, cols, rng, 0.5, 1.5), b = random_buffer(t, cols, rng, -1, 1);
        const Buffer dy = random_buffer(t, rows * cols, rng, -1, 1);
        const Buffer* wp = affine_params ? &w : nullptr;
        const Buffer* bp = affine_params ? &b : nullptr;
        const LayerNormOutputs got = run_layer_norm(t, x, wp, bp, dy, rows, cols, eps_ln);
        const LayerNormRef ref = ref_layer_norm(x, wp, bp, &dy, rows, cols, eps_ln);
        check_close(got.y, ref.y, "y", eps(t) * 2, 4);
        check_close(got.mean, ref.mean, "mean", 1e-6, 4);
        check_close(got.rstd, ref.rstd, "rstd", 0, 10);
        check_close(got.dx, ref.dx, "dx", eps(t) * 4, 8);
        // Column sums over rows: tolerance scales with the sum of |terms| (~ rows).
        std::vector<double> dw_magnitude(static_cast<size_t>(cols), 0), db_magnitude(static_cast<size_t>(cols), 0);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < cols; ++c) {
            const double xhat = (x.get(r * cols + c) - ref.mean[r]) * ref.rstd[r];
            dw_magnitude[c] += std::fabs(dy.get(r * cols + c) * xhat);
            db_magnitude[c] += std::fabs(dy.get(r * cols + c));
          }
        }
        check_close(got.dw, ref.dw, "dweight", 0, 4, &dw_magnitude);
        check_close(got.db, ref.db, "dbias", 0, 4, &db_magnitude);
      }
    }
  }
}

TEST_CASE("layer_norm backward: the formula matches central differences (f64)") {
  Rng rng(102);
  const int64_t rows = 3, cols = 7;
  const double eps_ln = 1e-5, h = 1e-6;
  Buffer x = random_buffer(DType::f64, rows * cols, rng, -2, 2);
  Buffer w = random_buffer(DType::f64, cols, rng, 0.5, 1.5);
  const Buffer b = random_buffer(DType::f64, cols, rng, -1, 1);
  const Buffer dy = random_buffer(DType::f64, rows * cols, rng, -1, 1);
  // L = sum(y * dy); dL/dx and dL/dw by central differences through layer_norm_forward itself.
  auto loss = [&]() {
    Buffer y = poisoned(DType::f64, rows * cols);
    cpu::layer_norm_forward(x.data(), w.data(), b.data(), y.data(), nullptr, nullptr, rows, cols, eps_ln, DType::f64);
    double s = 0;
    for (int64_t i = 0; i < rows * cols; ++i) s += y.get(i) * dy.get(i);
    return s;
  };
  auto central_difference = [&](Buffer& p, int64_t i) {
    const double v = p.get(i);
    p.set(i, v + h);
    const double up = loss();
    p.set(i, v - h);
    const double down = loss();
    p.set(i, v);
    return (up - down) / (2 * h);
  };
  const LayerNormOutputs got = run_layer_norm(DType::f64, x, &w, &b, dy, rows, cols, eps_ln);
  std::vector<double> dx_fd(static_cast<size_t>(rows * cols)), dw_fd(static_cast<size_t>(cols));
  for (int64_t i = 0; i < rows * cols; ++i) dx_fd[i] = central_difference(x, i);
  for (int64_t c = 0; c < cols; ++c) dw_fd[c] = central_difference(w, c);
  check_close(got.dx, dx_fd, "dx vs finite differences", 1e-7, 0);
  check_close(got.dw, dw_fd, "dweight vs finite differences", 1e-7, 0);
}

TEST_CASE("layer_norm backward is deterministic: repeated runs and 1 vs 2 threads are bitwise equal") {
  Rng rng(103);
  const int64_t rows = 333, cols = 257;
  for (DType t : {DType::f32, DType::bf16}) {
    CAPTURE(std::string(hg::dtype_name(t)));
    const Buffer x = random_buffer(t, rows * cols, rng, -2, 3);
    const Buffer w = random_buffer(t, cols, rng, 0.5, 1.5), b = random_buffer(t, cols, rng, -1, 1);
    const Buffer dy = random_buffer(t, rows * cols, rng, -1, 1);
    const LayerNormOutputs first = run_layer_norm(t, x, &w, &b, dy, rows, cols, 1e-5);
    const LayerNormOutputs second = run_layer_norm(t, x, &w, &b, dy, rows, cols, 1e-5);
    CHECK(first.dx.bitwise_equal(second.dx));
    CHECK(first.dw.bitwise_equal(second.dw));
    CHECK(first.db.bitwise_equal(second.db));
    for (int threads : {1, 2}) {
      CAPTURE(threads);
      with_threads(threads, [&] {
        const LayerNormOutputs other = run_layer_norm(t, x, &w, &b, dy, rows, cols, 1e-5);
        CHECK(first.y.bitwise_equal(other.y));
        CHECK(first.dx.bitwise_equal(other.dx));
        CHECK(first.dw.bitwise_equal(other.dw));
        CHECK(first.db.bitwise_equal(other.db));
      });
    }
  }
}

TEST_CASE("reduce Sum over one long row is the same with 1 and 2 threads") {
  Rng rng(104);
  const Buffer x = random_buffer(DType::f32, 123457, rng, -1, 1);
  Buffer one = poisoned(DType::f32, 1), two = poisoned(DType::f32, 1);
  with_threads(1, [&] { cpu::reduce(ReduceOp::Sum, x.data(), one.data(), nullptr, 1, 123457, 1, 1.0, DType::f32); });
  with_threads(2, [&] { cpu::reduce(ReduceOp::Sum, x.data(), two.data(), nullptr, 1, 123457, 1, 1.0, DType::f32); });
  CHECK(one.bitwise_equal(two));
}

// ==== embedding ===================================================================================

TEST_CASE("embedding: forward gathers rows, backward sums repeated ids, unused rows are 0") {
  Rng rng(111);
  for (DType t : kFloatingTypes) {
    for (DType index_type : {DType::i32, DType::i64}) {
      for (int64_t n_ids : {int64_t(50), int64_t(3000)}) {
        CAPTURE(std::string(hg::dtype_name(t)));
        CAPTURE(std::string(hg::dtype_name(index_type)));
        CAPTURE(n_ids);
        const int64_t vocab = 40, dim = 24;
        std::vector<int64_t> id_values(static_cast<size_t>(n_ids));
        for (auto& id : id_values) id = rng.integer(0, 29);  // rows 30..39 stay unused; many repeats
        id_values[0] = id_values[1] = id_values[n_ids - 1] = 7;
        const Buffer ids = index_buffer(index_type, id_values);
        const Buffer weight = random_buffer(t, vocab * dim, rng, -1, 1);
        Buffer y = poisoned(t, n_ids * dim);
        cpu::embedding_forward(weight.data(), ids.data(), index_type, y.data(), n_ids, vocab, dim, t);
        std::vector<double> y_ref(static_cast<size_t>(n_ids * dim));
        for (int64_t i = 0; i < n_ids; ++i) {
          for (int64_t c = 0; c < dim; ++c) y_ref[i * dim + c] = weight.get(id_values[i] * dim + c);
        }
        check_exact(y, y_ref, "embedding forward");

        const Buffer dy = random_buffer(t, n_ids * dim, rng, -1, 1);
        Buffer dw = poisoned(t, vocab * dim);
        cpu::embedding_backward(dy.data(), ids.data(), index_type, dw.data(), n_ids, vocab, dim, t);
        std::vector<double> dw_ref(static_cast<size_t>(vocab * dim), 0), magnitude(dw_ref.size(), 0);
        for (int64_t i = 0; i < n_ids; ++i) {
          for (int64_t c = 0; c < dim; ++c) {
            dw_ref[id_values[i] * dim + c] += dy.get(i * dim + c);
            magnitude[id_values[i] * dim + c] += std::fabs(dy.get(i * dim + c));
          }
        }
        check_close(dw, dw_ref, "embedding backward", 0, hg::is_half(t) ? 1 : 8, &magnitude);
      }
    }
  }
}

TEST_CASE("embedding: an id out of range names its position") {
  Buffer weight(DType::f32, 10 * 4), y(DType::f32, 5 * 4);
  const Buffer ids = index_buffer(DType::i32, {0, 9, 3, 10, 2});
  check_error([&] { cpu::embedding_forward(weight.data(), ids.data(), DType::i32, y.data(), 5, 10, 4, DType::f32); },
              {"[embedding_forward]", "id 10 at position 3", "0 <= id < 10"});
  const Buffer negative = index_buffer(DType::i64, {-1});
  check_error(
      [&] { cpu::embedding_backward(y.data(), negative.data(), DType::i64, weight.data(), 1, 10, 4, DType::f32); },
      {"[embedding_backward]", "id -1 at position 0"});
}

// ==== dropout =====================================================================================

TEST_CASE("dropout: keep rate, scaling, the mask of philox.h, backward reuses it") {
  const int64_t n = 200001;
  const double p = 0.3;
  const uint64_t seed = 0x1234abcd5678ull, offset = 77;
  Rng rng(121);
  for (DType t : kFloatingTypes) {
    CAPTURE(std::string(hg::dtype_name(t)));
    Buffer x(t, n);
    for (int64_t i = 0; i < n; ++i) x.set(i, rng.uniform(0.5, 2) * (i % 2 ? 1 : -1));  // never 0
    Buffer y = poisoned(t, n);
    cpu::dropout_forward(x.data(), y.data(), n, p, seed, offset, t);
    std::vector<double> ref(static_cast<size_t>(n));
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      const bool keep = hg::dropout_keep(seed, offset, uint64_t(i), float(p));
      kept += keep;
      ref[i] = keep ? x.get(i) / (1 - p) : 0;
    }
    CHECK(std::fabs(double(kept) / double(n) - (1 - p)) < 0.005);
    check_close(y, ref, "dropout forward", 0, 1);

    const Buffer dy = random_buffer(t, n, rng, 0.5, 1.5);
    Buffer dx = poisoned(t, n);
    cpu::dropout_backward(dy.data(), dx.data(), n, p, seed, offset, t);
    int64_t mask_mismatches = 0;
    for (int64_t i = 0; i < n; ++i) {
      mask_mismatches += (y.get(i) != 0) != (dx.get(i) != 0);
      ref[i] = y.get(i) != 0 ? dy.get(i) / (1 - p) : 0;
    }
    CHECK(mask_mismatches == 0);
    check_close(dx, ref, "dropout backward", 0, 1);
  }
}

TEST_CASE("dropout: element i depends on (seed, offset, i) only, not on n, and p outside 0 <= p < 1 throws") {
  Rng rng(122);
  const Buffer x = random_buffer(DType::f32, 1000, rng, 1, 2);
  Buffer all = poisoned(DType::f32, 1000), prefix = poisoned(DType::f32, 37), shifted = poisoned(DType::f32, 996);
  cpu::dropout_forward(x.data(), all.data(), 1000, 0.5, 9, 5, DType::f32);
  cpu::dropout_forward(x.data(), prefix.data(), 37, 0.5, 9, 5, DType::f32);
  // Offset + 1 skips one Philox block: element i there is element i + 4 here.
  cpu::dropout_forward(static_cast<const float*>(x.data()) + 4, shifted.data(), 996, 0.5, 9, 6, DType::f32);
  for (int64_t i = 0; i < 37; ++i) CHECK(prefix.get(i) == all.get(i));
  int64_t mismatches = 0;
  for (int64_t i = 0; i < 996; ++i) mismatches += shifted.get(i) != all.get(i + 4);
  CHECK(mismatches == 0);
  Buffer p0 = poisoned(DType::f32, 1000);
  cpu::dropout_forward(x.data(), p0.data(), 1000, 0.0, 9, 5, DType::f32);
  CHECK(p0.bitwise_equal(x));  // p = 0 keeps everything, scale 1
  check_error([&] { cpu::dropout_forward(x.data(), all.data(), 10, 1.0, 9, 5, DType::f32); },
              {"[dropout_forward]", "p = 1", "expected 0 <= p < 1"});
  check_error([&] { cpu::dropout_backward(x.data(), all.data(), 10, -0.1, 9, 5, DType::f32); },
              {"[dropout_backward]", "p = -0.1"});
}

// ==== random fills ================================================================================

TEST_CASE("uniform_fill: element i = low + (high - low) u(philox word i), low <= y < high") {
  const uint64_t seed = 42, offset = 3;
  for (DType t : kFloatingTypes) {
    CAPTURE(std::string(hg::dtype_name(t)));
    const int64_t n = 100003;
    Buffer y = poisoned(t, n);
    cpu::uniform_fill(y.data(), n, -1.0, 3.0, seed, offset, t);
    double sum = 0, lo = kInf, hi = -kInf;
    std::vector<double> ref(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      sum += y.get(i);
      lo = std::min(lo, y.get(i));
      hi = std::max(hi, y.get(i));
      ref[i] = -1.0 + 4.0 * double(hg::bits_to_uniform(hg::philox_bits(seed, offset, uint64_t(i))));
    }
    CHECK(lo >= -1.0);
    CHECK(hi < 3.0);
    CHECK(std::fabs(sum / double(n) - 1.0) < 0.02);
    check_close(y, ref, "uniform", eps(t) * 4, 1);
  }
  // bf16 over [0, 1): values that would round up to 1.0 must stay below it.
  Buffer y = poisoned(DType::bf16, 200000);
  cpu::uniform_fill(y.data(), 200000, 0.0, 1.0, 7, 0, DType::bf16);
  double hi = 0;
  for (int64_t i = 0; i < 200000; ++i) hi = std::max(hi, y.get(i));
  CHECK(hi < 1.0);
}

TEST_CASE("normal_fill: Box-Muller on words 2i and 2i+1, mean and std, consumes philox_blocks(2n)") {
  const uint64_t seed = 1234, offset = 10;
  // Element i from the documented formula, in double.
  auto reference = [&](uint64_t off, int64_t i, double mean, double std) {
    const uint32_t w1 = hg::philox_bits(seed, off, uint64_t(2 * i)),
                   w2 = hg::philox_bits(seed, off, uint64_t(2 * i + 1));
    const double u1 = double((w1 >> 8) + 1u) / 16777216.0, u2 = double(w2 >> 8) / 16777216.0;
    return mean + std * std::sqrt(-2 * std::log(u1)) * std::cos(2 * 3.141592653589793 * u2);
  };
  for (DType t : kFloatingTypes) {
    CAPTURE(std::string(hg::dtype_name(t)));
    const int64_t n = t == DType::f32 ? (int64_t(1) << 20) : 20001;
    Buffer y = poisoned(t, n);
    cpu::normal_fill(y.data(), n, 0.5, 2.0, seed, offset, t);
    double sum = 0, squares = 0;
    std::vector<double> ref(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      sum += y.get(i);
      squares += (y.get(i) - 0.5) * (y.get(i) - 0.5);
      ref[i] = reference(offset, i, 0.5, 2.0);
    }
    const double mean = sum / double(n), std = std::sqrt(squares / double(n));
    CHECK(std::fabs(mean - 0.5) < 5 * 2.0 / std::sqrt(double(n)));
    CHECK(std::fabs(std - 2.0) < (t == DType::f32 ? 0.01 : 0.05));
    check_close(y, ref, "normal", eps(t) * 8, 8);
  }
  // A fill of 10 then a fill at offset + philox_blocks(2 * 10) continue one fill of 16; prefixes of
  // an odd length agree with longer fills.
  Buffer first = poisoned(DType::f32, 10), next = poisoned(DType::f32, 6), whole = poisoned(DType::f32, 16);
  Buffer odd = poisoned(DType::f32, 7);
  cpu::normal_fill(first.data(), 10, 0, 1, seed, offset, DType::f32);
  cpu::normal_fill(next.data(), 6, 0, 1, seed, offset + hg::philox_blocks(2 * 10), DType::f32);
  cpu::normal_fill(whole.data(), 16, 0, 1, seed, offset, DType::f32);
  cpu::normal_fill(odd.data(), 7, 0, 1, seed, offset, DType::f32);
  for (int64_t i = 0; i < 10; ++i) CHECK(first.get(i) == whole.get(i));
  for (int64_t i = 0; i < 6; ++i) CHECK(next.get(i) == whole.get(10 + i));
  for (int64_t i = 0; i < 7; ++i) CHECK(odd.get(i) == whole.get(i));
}

// ==== error messages ==============================================================================

TEST_CASE("invalid arguments throw hg::Error naming the op, the value and what was expected") {
  Buffer f(DType::f32, 64), i(DType::i32, 64);
  const int64_t negative_shape[] = {3, -2};
  const int64_t strides[] = {1, 1};
  check_error([&] { cpu::copy_strided(f.data(), strides, f.data(), strides, negative_shape, 2, DType::f32); },
              {"[copy_strided]", "shape[1] = -2", "expected >= 0"});
  check_error([&] { cpu::reduce(ReduceOp::Max, f.data(), f.data(), nullptr, 2, 0, 1, 1.0, DType::f32); },
              {"[reduce]", "Max over an empty dimension", "expected n >= 1"});
  check_error([&] { cpu::softmax_forward(f.data(), f.data(), 2, 4, false, 5, DType::f32); },
              {"[softmax_forward]", "causal_rows = 5", "causal_rows <= cols = 4"});
  check_error([&] { cpu::softmax_forward(i.data(), i.data(), 2, 4, false, 0, DType::i32); },
              {"[softmax_forward]", "expected a floating dtype", "got i32"});
  check_error([&] { cpu::fill(i.data(), 4, 2.5, DType::i32); }, {"[fill]", "value 2.5", "i32"});
  check_error([&] { cpu::affine(f.data(), f.data(), -1, 1, 0, DType::f32); }, {"[affine]", "n = -1"});
  check_error([&] { cpu::normal_fill(f.data(), 4, 0, -1, 1, 0, DType::f32); }, {"[normal_fill]", "std = -1"});
  check_error([&] { cpu::uniform_fill(f.data(), 4, 2, 1, 1, 0, DType::f32); }, {"[uniform_fill]", "low <= high"});
  check_error([&] { cpu::embedding_forward(f.data(), i.data(), DType::f32, f.data(), 1, 1, 1, DType::f32); },
              {"[embedding_forward]", "expected an index dtype", "got f32"});
  check_error(
      [&] { cpu::layer_norm_forward(f.data(), nullptr, nullptr, f.data(), nullptr, nullptr, 1, 0, 1e-5, DType::f32); },
      {"[layer_norm_forward]", "cols = 0"});
}

// ==== gradient norm: sum of squares ================================================================

TEST_CASE("sum_of_squares: every floating dtype against a double sum, vector tails, no thread dependence") {
  // Squares of f32/f16/bf16 values are exact in double, so only the additions round: relative error
  // <= n 2^-53 in any order. Sizes around the 16- and 32-element vector steps and the 8192-element
  // chunks; the stored values are summed in double here as the reference.
  Rng rng(511);
  for (DType t : kFloatingTypes) {
    for (int64_t n : {int64_t(1), int64_t(15), int64_t(16), int64_t(17), int64_t(31), int64_t(33), int64_t(8191),
                      int64_t(8193), int64_t(70001)}) {
      const std::string dtype = hg::dtype_name(t);
      CAPTURE(dtype);
      CAPTURE(n);
      Buffer x(t, n);
      for (int64_t i = 0; i < n; ++i) x.set(i, rng.uniform(-3, 3));
      double ref = 0;
      for (int64_t i = 0; i < n; ++i) ref += x.get(i) * x.get(i);
      const double got = cpu::sum_of_squares(x.data(), n, t);
      CHECK(std::fabs(got - ref) <= double(n + 1) * 0x1p-53 * ref);
      double one_thread = 0;
      with_threads(1, [&] { one_thread = cpu::sum_of_squares(x.data(), n, t); });
      CHECK(std::memcmp(&got, &one_thread, sizeof got) == 0);
    }
    // inf and NaN anywhere, the vector tail included, reach the result.
    for (int64_t position : {int64_t(0), int64_t(20), int64_t(40)}) {
      Buffer x(t, 41);
      for (int64_t i = 0; i < 41; ++i) x.set(i, 0.5);
      x.set(position, -kInf);
      CHECK(cpu::sum_of_squares(x.data(), 41, t) == kInf);
      x.set(position, kNaN);
      CHECK(std::isnan(cpu::sum_of_squares(x.data(), 41, t)));
    }
  }
}

// ==== loss scaler: fused unscale and check ========================================================

namespace {

// Tensors of mixed dtypes and sizes (some not multiples of the kernel's chunk), each stored as
// [NaN, x_0 .. x_{n-1}, NaN]: the NaN guards make any read or write outside a tensor show (a read
// would report found_inf on clean tensors, a write would change the guard bits).
struct GuardedTensors {
  std::vector<Buffer> buffers;
  std::vector<hg::kernels::TensorSpan> spans() {
    std::vector<hg::kernels::TensorSpan> out;
    for (Buffer& b : buffers) {
      out.push_back({static_cast<char*>(b.data()) + hg::dtype_size(b.dtype()), b.size() - 2, b.dtype()});
    }
    return out;
  }
};

GuardedTensors guarded_tensors(Rng& rng) {
  GuardedTensors g;
  const int64_t sizes[] = {1, 7, 16383, 16385, 40001, 3};
  int k = 0;
  for (int64_t n : sizes) {
    for (DType t : kFloatingTypes) {
      if (++k % 2 == 0 && n > 7) continue;  // keep the test small: half of the large ones
      Buffer b(t, n + 2);                      // starts NaN everywhere: the guards stay NaN
      for (int64_t i = 1; i <= n; ++i) b.set(i, rng.uniform(-3, 3));
      g.buffers.push_back(std::move(b));
    }
  }
  return g;
}

// The kernel's math (kernels/unscale_math.h) written out: one product in acc_t, one rounding.
double unscaled(DType t, double x, double inv_scale) {
  return t == DType::f64 ? x * inv_scale : double(float(x) * float(inv_scale));
}

}  // namespace

TEST_CASE("unscale_and_check: every element of many mixed-dtype tensors scaled bit for bit and no thread dependence") {
  Rng rng(501);
  for (double inv_scale : {0x1p-16, 1.0 / 3.0, 4.0}) {
    CAPTURE(inv_scale);
    GuardedTensors g = guarded_tensors(rng);
    GuardedTensors expected = g;
    for (Buffer& b : expected.buffers) {
      for (int64_t i = 1; i < b.size() - 1; ++i) b.set(i, unscaled(b.dtype(), b.get(i), inv_scale));
    }
    GuardedTensors single = g;
    auto spans = g.spans();
    CHECK_FALSE(cpu::unscale_and_check(spans.data(), int64_t(spans.size()), inv_scale));
    auto single_spans = single.spans();
    with_threads(1, [&] {
      CHECK_FALSE(cpu::unscale_and_check(single_spans.data(), int64_t(single_spans.size()), inv_scale));
    });
    for (size_t t = 0; t < g.buffers.size(); ++t) {
      CAPTURE(t);
      CHECK(g.buffers[t].bitwise_equal(expected.buffers[t]));  // the NaN guards are compared too
      CHECK(g.buffers[t].bitwise_equal(single.buffers[t]));
    }
  }
}

TEST_CASE("unscale_and_check: an inf or NaN planted anywhere in one tensor of many is found") {
  Rng rng(502);
  for (int trial = 0; trial < 12; ++trial) {
    GuardedTensors g = guarded_tensors(rng);
    const size_t victim = size_t(rng.integer(0, int64_t(g.buffers.size()) - 1));
    Buffer& b = g.buffers[victim];
    const int64_t position = rng.integer(1, b.size() - 2);
    const double planted = trial % 3 == 0 ? kInf : trial % 3 == 1 ? -kInf : kNaN;
    b.set(position, planted);
    CAPTURE(trial);
    CAPTURE(victim);
    CAPTURE(position);
    GuardedTensors expected = g;
    for (Buffer& e : expected.buffers) {
      for (int64_t i = 1; i < e.size() - 1; ++i) e.set(i, unscaled(e.dtype(), e.get(i), 0x1p-8));
    }
    auto spans = g.spans();
    CHECK(cpu::unscale_and_check(spans.data(), int64_t(spans.size()), 0x1p-8));
    for (size_t t = 0; t < g.buffers.size(); ++t) CHECK(g.buffers[t].bitwise_equal(expected.buffers[t]));
  }
}

TEST_CASE("unscale_and_check: inv_scale 1 only checks, a product that overflows the dtype is found") {
  Rng rng(503);
  GuardedTensors g = guarded_tensors(rng);
  const GuardedTensors before = g;
  auto spans = g.spans();
  CHECK_FALSE(cpu::unscale_and_check(spans.data(), int64_t(spans.size()), 1.0));
  g.buffers[2].set(1, kNaN);
  const GuardedTensors planted = g;
  CHECK(cpu::unscale_and_check(spans.data(), int64_t(spans.size()), 1.0));
  for (size_t t = 0; t < g.buffers.size(); ++t) CHECK(g.buffers[t].bitwise_equal(planted.buffers[t]));
  CHECK(before.buffers[0].bitwise_equal(g.buffers[0]));

  // 40000 is finite in f16 but 40000 * 2 is not (max 65504): the stored inf is what counts.
  Buffer h(DType::f16, 3);
  h.set(0, 40000.0);
  h.set(1, -1.0);
  h.set(2, 0.5);
  const hg::kernels::TensorSpan span{h.data(), 3, DType::f16};
  CHECK(cpu::unscale_and_check(&span, 1, 2.0));
  CHECK(h.get(0) == kInf);
  CHECK(h.get(1) == -2.0);
  CHECK(cpu::unscale_and_check(nullptr, 0, 0.5) == false);
}

TEST_CASE("unscale_and_check: invalid arguments throw before any element changes") {
  Buffer f(DType::f32, 8), i(DType::i32, 8);
  for (int64_t k = 0; k < 8; ++k) f.set(k, double(k));
  const Buffer before = f;
  const hg::kernels::TensorSpan good{f.data(), 8, DType::f32};
  const hg::kernels::TensorSpan bad_dtype[] = {good, {i.data(), 8, DType::i32}};
  check_error([&] { cpu::unscale_and_check(bad_dtype, 2, 0.5); },
              {"[unscale_and_check]", "tensor 1 is i32", "expected a floating dtype"});
  const hg::kernels::TensorSpan null_data[] = {good, {nullptr, 4, DType::f16}};
  check_error([&] { cpu::unscale_and_check(null_data, 2, 0.5); }, {"[unscale_and_check]", "tensor 1 is null"});
  const hg::kernels::TensorSpan negative[] = {good, {f.data(), -1, DType::f32}};
  check_error([&] { cpu::unscale_and_check(negative, 2, 0.5); }, {"[unscale_and_check]", "n = -1"});
  for (double inv : {0.0, -1.0, kInf, kNaN}) {
    check_error([&] { cpu::unscale_and_check(&good, 1, inv); }, {"[unscale_and_check]", "invalid inv_scale"});
  }
  CHECK(f.bitwise_equal(before));
}
