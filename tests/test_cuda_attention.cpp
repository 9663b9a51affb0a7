// kernels/cuda/attention_forward.cu: the fused attention forward (FlashAttention-2 with WMMA for f16 and
// bf16, CUDA cores for f32) against the double-precision oracle tests/support/attention_reference.h.
//
// Each case draws fresh seeded inputs, rounds them to the dtype under test, and gives the oracle those
// rounded values (so input rounding is no error). The operands are laid out as the GPT passes them: q, k
// and v strided slices of one [B, T, 3C] projection (C = heads * d; with tq < tk the queries are the last
// tq positions, the KV-cache shape), o written into [B, tq, heads, d]; or, for the kernel's element-wise
// load path, dense [B, heads, rows, d] operands one element past a 16-byte boundary. o and lse are
// poisoned with 0xff bytes (NaN) before the launch, and every element of both is compared, so an
// element the kernel forgets to write fails.
//
// Tolerances, derived from what the kernel rounds (u(f16) = 2^-11, u(bf16) = 2^-8: half a unit in the
// last place; u32 = 2^-24 for fp32):
//   scores: S is accumulated in fp32 from exactly representable products, error at most
//     e_S = d u32 scale sum_c |q_ic k_jc| <= d u32 scale d max|q| max|k|          (deterministic bound);
//   probabilities: P = exp(S - m) carries 2 e_S (S and the running max) plus a few u32 for exp; for
//     f16/bf16 it is rounded to T before the P V product (tensor-core operands): one more u(T);
//   P V: fp32 sums of tk terms, at most tk u32 of sum_j P_ij Z_ij |v_j| =: A_i (the oracle run on |v|
//     gives A exactly, per element), as is the P rounding above; l = sum P likewise (tk u32);
//   output: O rounded to T once: u(T) |O| (f16 subnormals, below 2^-14: 2^-25 absolute more).
// So per element of O:
//   |O - O_ref| <= (u_P + 2 e_S + (tk + 8) u32) A + u_out |O_ref| + 2^-24,
// with u_P = u_out = u(T) for f16/bf16 and 0 for f32 (P and O stay fp32), and per row of lse (fp32):
//   |lse - lse_ref| <= 2 e_S + (tk + 8) u32 + 4 u32 |lse_ref|.
// A wrong mask, a lost rescale, a dropped tile or a wrong dropout bit moves O by a sizable fraction of A.
//
// Without a CUDA device (the normal build on a machine without a GPU) every case says why it skips;
// the emulated build (HALFGRAD_CUDA=EMULATED) runs them on the SIMT emulator.
#include <doctest/doctest.h>

#include "support/attention_reference.h"
#include "support/check_error.h"
#include "support/cuda_device.h"
#include "support/device_buffer.h"
#include "support/host_buffer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/error.h"
#include "kernels/kernels.h"
#include "kernels/kernels_cuda.h"

namespace {

using hg::DType;
using hg::kernels::AttentionProblem;
using hg::kernels::AttentionTensor;
using Buffer = hg::testing::HostBuffer;
namespace gpu = hg::kernels::cuda;

#define SKIP_WITHOUT_DEVICE()                                          \
  do {                                                                 \
    if (hg::testing::skip_without_cuda_device("fused attention forward")) return; \
  } while (0)

gpu::Stream stream() { return hg::testing::cuda_test_stream(); }

// n elements of dtype in device memory, `offset` elements into the allocation; 0xff bytes (NaN) at first.
using hg::testing::DeviceBuffer;

enum class Layout {
  packed,     // q, k, v slices of [B, tk, 3C] (16-byte aligned rows), o in [B, tq, heads, d]
  unaligned,  // dense [B, heads, rows, d] operands starting one element past an aligned address
};

struct Case {
  DType dtype;
  int64_t batch, heads, tq, tk, d;
  bool causal;
  double dropout_p;
  Layout layout;
};

std::string describe(const Case& c) {
  return std::string(hg::dtype_name(c.dtype)) + " B" + std::to_string(c.batch) + " H" + std::to_string(c.heads) +
         " tq" + std::to_string(c.tq) + " tk" + std::to_string(c.tk) + " d" + std::to_string(c.d) +
         (c.causal ? " causal" : "") + " dropout " + std::to_string(c.dropout_p) +
         (c.layout == Layout::packed ? " packed" : " unaligned");
}

double half_unit(DType t) { return t == DType::f16 ? 0x1p-11 : t == DType::bf16 ? 0x1p-8 : 0.0; }

void check_forward(const Case& c, uint64_t seed) {
  INFO(describe(c));
  std::mt19937_64 rng(seed);
  const double q_max = 3.0, k_max = 1.0, v_max = 1.0;
  std::uniform_real_distribution<double> uq(-q_max, q_max), uk(-k_max, k_max), uv(-v_max, v_max);
  const int64_t B = c.batch, H = c.heads, d = c.d, C = H * d;

  AttentionProblem p;
  p.batch = B, p.heads = H, p.tq = c.tq, p.tk = c.tk, p.d = d;
  p.scale = 1.0 / std::sqrt(double(d));
  p.causal = c.causal;
  p.dropout_p = c.dropout_p;
  p.seed = seed * 7919 + 3, p.offset = seed % 5;

  // Dense [B, H, rows, d] doubles of the rounded inputs, for the oracle.
  std::vector<double> qd(size_t(B * H * c.tq * d)), kd(size_t(B * H * c.tk * d)), vd(kd.size());
  const auto dense = [&](int64_t b, int64_t h, int64_t row, int64_t col, int64_t rows) {
    return size_t(((b * H + h) * rows + row) * d + col);
  };

  AttentionTensor q, k, v, o;
  std::vector<std::unique_ptr<DeviceBuffer>> inputs;
  std::unique_ptr<DeviceBuffer> o_buffer;
  if (c.layout == Layout::packed) {
    Buffer qkv(c.dtype, B * c.tk * 3 * C);
    const int64_t first_query = c.tk - c.tq;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < c.tk; ++t) {
        for (int64_t h = 0; h < H; ++h) {
          for (int64_t col = 0; col < d; ++col) {
            const int64_t at = (b * c.tk + t) * 3 * C + h * d + col;
            qkv.set(at, uq(rng));
            qkv.set(at + C, uk(rng));
            qkv.set(at + 2 * C, uv(rng));
            if (t >= first_query) qd[dense(b, h, t - first_query, col, c.tq)] = qkv.get(at);
            kd[dense(b, h, t, col, c.tk)] = qkv.get(at + C);
            vd[dense(b, h, t, col, c.tk)] = qkv.get(at + 2 * C);
          }
        }
      }
    }
    inputs.push_back(std::make_unique<DeviceBuffer>(c.dtype, qkv.size()));
    inputs.back()->upload(qkv);
    char* base = static_cast<char*>(inputs.back()->data());
    const int64_t elem = int64_t(hg::dtype_size(c.dtype));
    const auto slice = [&](int64_t first) { return AttentionTensor{base + first * elem, c.tk * 3 * C, d, 3 * C}; };
    q = slice(first_query * 3 * C);
    k = slice(C);
    v = slice(2 * C);
    o_buffer = std::make_unique<DeviceBuffer>(c.dtype, B * c.tq * C);
    o = AttentionTensor{o_buffer->data(), c.tq * C, d, C};
  } else {
    const auto operand = [&](std::vector<double>& values, int64_t rows, std::uniform_real_distribution<double>& u) {
      Buffer host(c.dtype, int64_t(values.size()));
      for (size_t e = 0; e < values.size(); ++e) {
        host.set(int64_t(e), u(rng));
        values[e] = host.get(int64_t(e));
      }
      inputs.push_back(std::make_unique<DeviceBuffer>(c.dtype, host.size(), 1));
      inputs.back()->upload(host);
      return AttentionTensor{inputs.back()->data(), H * rows * d, rows * d, d};
    };
    q = operand(qd, c.tq, uq);
    k = operand(kd, c.tk, uk);
    v = operand(vd, c.tk, uv);
    o_buffer = std::make_unique<DeviceBuffer>(c.dtype, B * H * c.tq * d, 1);
    o = AttentionTensor{o_buffer->data(), H * c.tq * d, c.tq * d, d};
  }
  DeviceBuffer lse_buffer(DType::f32, B * H * c.tq);

  gpu::attention_forward(p, q, k, v, o, lse_buffer.data(), c.dtype, stream());
  const Buffer o_got = o_buffer->download();
  const Buffer lse_got = lse_buffer.download();

  const hg::testing::AttentionReference ref = hg::testing::attention_reference(p, qd, kd, vd);
  std::vector<double> v_abs(vd.size());
  for (size_t e = 0; e < vd.size(); ++e) v_abs[e] = std::abs(vd[e]);
  const std::vector<double> sum_abs = hg::testing::attention_reference(p, qd, kd, v_abs).o;  // A of the header

  constexpr double u32 = 0x1p-24;
  const double e_s = double(d) * u32 * p.scale * double(d) * q_max * k_max;
  const double u_t = half_unit(c.dtype);
  const double o_rel = u_t + 2 * e_s + double(c.tk + 8) * u32;
  int64_t o_bad = 0, lse_bad = 0;
  double o_worst = 0, lse_worst = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < c.tq; ++i) {
        const size_t row = size_t((b * H + h) * c.tq + i);
        const double lse_ref = ref.lse[row], lse = lse_got.get(int64_t(row));
        const double lse_tol = 2 * e_s + double(c.tk + 8) * u32 + 4 * u32 * std::abs(lse_ref);
        const double lse_err = std::abs(lse - lse_ref);
        if (!(lse_err <= lse_tol)) ++lse_bad;
        lse_worst = std::max(lse_worst, std::isnan(lse_err) ? INFINITY : lse_err / lse_tol);
        for (int64_t col = 0; col < d; ++col) {
          const size_t e = row * size_t(d) + size_t(col);
          const int64_t at =
              c.layout == Layout::packed ? (b * c.tq + i) * C + h * d + col : ((b * H + h) * c.tq + i) * d + col;
          const double got = o_got.get(at), want = ref.o[e];
          const double tol = o_rel * sum_abs[e] + u_t * std::abs(want) + u32;
          const double err = std::abs(got - want);
          if (!(err <= tol)) {
            if (o_bad < 5) {
              MESSAGE("o[b ", b, ", h ", h, ", i ", i, ", c ", col, "] = ", got, ", expected ", want, " +- ", tol);
            }
            ++o_bad;
          }
          o_worst = std::max(o_worst, std::isnan(err) ? INFINITY : err / tol);
        }
      }
    }
  }
  INFO("worst error / tolerance: o ", o_worst, ", lse ", lse_worst);
  CHECK(o_bad == 0);
  CHECK(lse_bad == 0);
}

const DType kTypes[] = {DType::f16, DType::bf16, DType::f32};

TEST_CASE("attention_forward: every dtype, causal or not, head dim 64 and 128, tq = tk in {1, 17, 64, 130}") {
  SKIP_WITHOUT_DEVICE();
  uint64_t seed = 1;
  for (const DType dtype : kTypes) {
    for (const int64_t d : {64, 128}) {
      for (const bool causal : {false, true}) {
        for (const int64_t t : {1, 17, 64, 130}) {
          const int64_t groups = t > 64 ? 1 : 2;  // batch and heads
          check_forward({dtype, groups, groups, t, t, d, causal, 0.0, Layout::packed}, seed++);
        }
      }
    }
  }
}

TEST_CASE("attention_forward: tq < tk (the KV-cache shape: the last tq of tk positions)") {
  SKIP_WITHOUT_DEVICE();
  uint64_t seed = 100;
  for (const DType dtype : kTypes) {
    for (const int64_t d : {64, 128}) {
      for (const bool causal : {false, true}) {
        check_forward({dtype, 1, 2, 17, 130, d, causal, 0.0, Layout::packed}, seed++);
        check_forward({dtype, 2, 1, 1, 70, d, causal, 0.0, Layout::packed}, seed++);
      }
    }
  }
}

TEST_CASE("attention_forward: dropout drops the probabilities the composed path drops") {
  SKIP_WITHOUT_DEVICE();
  uint64_t seed = 200;
  for (const DType dtype : kTypes) {
    for (const int64_t d : {64, 128}) {
      for (const bool causal : {false, true}) {
        check_forward({dtype, 2, 2, 17, 17, d, causal, 0.25, Layout::packed}, seed++);
        check_forward({dtype, 1, 1, 70, 130, d, causal, 0.5, Layout::packed}, seed++);
      }
    }
  }
}

TEST_CASE("attention_forward: operands off a 16-byte boundary take the element-wise loads") {
  SKIP_WITHOUT_DEVICE();
  uint64_t seed = 300;
  for (const DType dtype : kTypes) {
    for (const int64_t d : {64, 128}) {
      check_forward({dtype, 2, 2, 33, 33, d, true, 0.0, Layout::unaligned}, seed++);
      check_forward({dtype, 1, 3, 20, 70, d, false, 0.1, Layout::unaligned}, seed++);
    }
  }
}

TEST_CASE("attention_forward: refused shapes name what was wrong") {
  // The checks come before any device work, so they run without a device too.
  const AttentionTensor none{};
  float lse = 0;
  const auto problem = [](int64_t d, int64_t tq, int64_t tk, bool causal, double dropout) {
    AttentionProblem p;
    p.batch = 1, p.heads = 1, p.tq = tq, p.tk = tk, p.d = d, p.causal = causal, p.dropout_p = dropout;
    p.scale = 0.125;
    return p;
  };
  CHECK_ERROR(gpu::attention_forward(problem(32, 4, 4, false, 0), none, none, none, none, &lse, DType::f16, nullptr),
              "[attention_forward]", "head dimension 32", "f16");
  CHECK_ERROR(gpu::attention_forward(problem(96, 4, 4, false, 0), none, none, none, none, &lse, DType::bf16, nullptr),
              "head dimension 96", "bf16");
  CHECK_ERROR(gpu::attention_forward(problem(64, 4, 4, false, 0), none, none, none, none, &lse, DType::f64, nullptr),
              "head dimension 64", "f64");
  CHECK_ERROR(gpu::attention_forward(problem(64, 8, 4, true, 0), none, none, none, none, &lse, DType::f32, nullptr),
              "tq = 8 > tk = 4");
  CHECK_ERROR(gpu::attention_forward(problem(64, 4, 4, false, 1.0), none, none, none, none, &lse, DType::f32, nullptr),
              "dropout_p = 1");
  CHECK_ERROR(gpu::attention_forward(problem(64, 4, 0, false, 0), none, none, none, none, &lse, DType::f32, nullptr),
              "tk = 0");
}

}  // namespace
