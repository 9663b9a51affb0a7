// kernels/cuda/attention_backward.cu: the fused attention backward against the double-precision
// oracle (tests/support/attention_reference.h), independent of the forward kernel.
//
// Each case draws seeded random q, k, v, dO in [-1, 1), rounds them to the dtype, and runs the oracle
// forward in double for O and lse; O is rounded to the dtype and lse to fp32 (what a forward would
// hand over) and passed to cuda::attention_backward. Operands live in one of three layouts (dense
// [B, H, T, d]; the GPT's slices of one [B, T, 3, H, d] projection; rows of d + 1 elements starting
// one element into the allocation, which forces the element-by-element tile loads), with every
// element outside the operand set to NaN, so a read outside it shows. dQ, dK, dV and `delta` are
// poisoned with NaN before the call, and the holes of strided outputs must still be NaN after it.
//
// Tolerance: a first-order bound on the kernel's error, per output element, computed in double by
// running the math beside the oracle (attention_error_bounds). With u = 2^-24 (fp32), uo the unit
// roundoff of the dtype (2^-11 f16, 2^-8 bf16, 2^-24 f32) and tiny = 2^-25 for f16 (half the spacing
// of its subnormals; 0 otherwise), for each visible (i, j):
//   P's relative error    eP  = u ((d + 2) scale sum_c |q k| + 2 |lse| + 4)    fp32 dot of exactly
//                                                   multiplied operands, lse in fp32, expf within 2 ulp
//   Pz = P z, its error   ePz = Pz (eP + r + u) + t        r, t = uo, tiny when the kernel rounds Pz
//                                                   and dS to the dtype for the next product (WMMA:
//                                                   f16, bf16), 0 for f32 (kept in fp32)
//   dP's error            edP = z d u sum_c |dO v| + u |dP z|
//   D's error             eD  = (uo + d u) sum_c |dO O|     the kernel's D is of O rounded to the dtype
//   dS = P (dP z - D)     edS = eP |dS| + P (edP + eD) + (r + u) |dS| + t + u P |dP z|
// and the products add them, with fp32 accumulation over n terms (n u of the sum of |terms|):
//   dV[j, c] <- ePz |dO[i, c]| + tq u Pz |dO[i, c]|
//   dK[j, c] <- scale (edS |q[i, c]| + tq u |dS q[i, c]|),   dQ[i, c] <- scale (edS |k[j, c]| + tk u |dS k[j, c]|)
// The bound is that sum times 2 (second-order terms), plus the final rounding to the dtype,
// 2 uo |ref| (+ 2^-24 absolute for f16 subnormal outputs). For f16 at these sizes it is ~1e-3
// relative, for bf16 ~1e-2; a wrong mask, a lost tile or a misplaced scale is off by O(1).
//
// Determinism: the same call twice gives the same bits (each output element is written by one block
// in a fixed order; the emulator runs the blocks in a different shuffled order each launch).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention_problem.h"
#include "kernels/cuda/check.h"
#include "kernels/error.h"
#include "kernels/kernels.h"
#include "kernels/kernels_cuda.h"
#include "support/attention_reference.h"
#include "support/cuda_device.h"
#include "support/device_buffer.h"
#include "support/host_buffer.h"

namespace {

using hg::DType;
using hg::kernels::AttentionProblem;
using hg::kernels::AttentionTensor;
using Buffer = hg::testing::HostBuffer;
namespace gpu = hg::kernels::cuda;

// ---- the device, or why there is none ------------------------------------------------------------

#define SKIP_WITHOUT_DEVICE()                                          \
  do {                                                                 \
    if (hg::testing::skip_without_cuda_device("fused attention backward")) return; \
  } while (0)

gpu::Stream stream() { return hg::testing::cuda_test_stream(); }

// A device copy of a host buffer (or n poisoned elements): 0xff bytes (NaN) until written.
using hg::testing::DeviceBuffer;

// ---- operand layouts -----------------------------------------------------------------------------

enum class Layout { dense, qkv_slices, odd_rows };

const char* layout_name(Layout l) {
  return l == Layout::dense ? "dense [B, H, T, d]" : l == Layout::qkv_slices ? "slices of [B, T, 3, H, d]"
                                                                             : "rows of d + 1 at offset 1";
}

// Where one [batch, heads, rows, d] operand lives in its buffer: the first element and the strides
// (the AttentionTensor with an element offset instead of a pointer), and the buffer's size.
struct Placement {
  int64_t first = 0, batch_stride = 0, head_stride = 0, row_stride = 0, elements = 0;

  int64_t at(int64_t b, int64_t h, int64_t r, int64_t c) const {
    return first + b * batch_stride + h * head_stride + r * row_stride + c;
  }
  AttentionTensor on(void* base, DType dtype) const {
    return {static_cast<char*>(base) + first * int64_t(hg::dtype_size(dtype)), batch_stride, head_stride, row_stride};
  }
};

// slot: which third of a [B, T, 3, H, d] projection (q 0, k 1, v 2) for the qkv slices.
Placement place(Layout layout, int64_t batch, int64_t heads, int64_t rows, int64_t d, int slot) {
  Placement p;
  switch (layout) {
    case Layout::dense:
      p.row_stride = d, p.head_stride = rows * d, p.batch_stride = heads * rows * d;
      break;
    case Layout::qkv_slices:
      p.first = slot * heads * d;
      p.head_stride = d, p.row_stride = 3 * heads * d, p.batch_stride = rows * 3 * heads * d;
      break;
    case Layout::odd_rows:
      p.first = 1;
      p.head_stride = d + 1, p.row_stride = heads * (d + 1), p.batch_stride = rows * heads * (d + 1);
      break;
  }
  p.elements = p.first + batch * p.batch_stride;
  return p;
}

// [B, T, H, d]: how the engine hands over o and dout.
Placement place_rows_of_heads(int64_t batch, int64_t heads, int64_t rows, int64_t d) {
  Placement p;
  p.head_stride = d, p.row_stride = heads * d, p.batch_stride = rows * heads * d;
  p.elements = batch * p.batch_stride;
  return p;
}

// A host buffer holding dense [B, H, rows, d] values at their placement; NaN everywhere else.
Buffer scatter(const std::vector<double>& dense, const Placement& p, DType dtype, int64_t batch, int64_t heads,
               int64_t rows, int64_t d) {
  Buffer out(dtype, p.elements);
  out.poison_with_nan();
  int64_t n = 0;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < d; ++c) out.set(p.at(b, h, r, c), dense[size_t(n++)]);
      }
    }
  }
  return out;
}

// Random values in [-1, 1) rounded to dtype, dense [B, H, rows, d] in double.
std::vector<double> random_rounded(std::mt19937_64& rng, DType dtype, int64_t n) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  Buffer b(dtype, 1);
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) {
    b.set(0, dist(rng));
    x = b.get(0);
  }
  return v;
}

std::vector<double> rounded(const std::vector<double>& v, DType dtype) {
  Buffer b(dtype, 1);
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    b.set(0, v[i]);
    out[i] = b.get(0);
  }
  return out;
}

// ---- the error bound of the header comment ---------------------------------------------------------

struct Bounds {
  std::vector<double> dq, dk, dv;
};

double unit_roundoff(DType t) { return t == DType::f16 ? 0x1p-11 : t == DType::bf16 ? 0x1p-8 : 0x1p-24; }

Bounds attention_error_bounds(const AttentionProblem& p, DType dtype, const std::vector<double>& q,
                              const std::vector<double>& k, const std::vector<double>& v,
                              const std::vector<double>& dout, const std::vector<double>& o_rounded,
                              const std::vector<double>& lse, const hg::testing::AttentionReference& ref) {
  const double u = 0x1p-24, uo = unit_roundoff(dtype);
  const bool half = dtype != DType::f32;
  const double r = half ? uo : 0.0, tiny = dtype == DType::f16 ? 0x1p-25 : 0.0;
  const int64_t tq = p.tq, tk = p.tk, d = p.d, bh = p.batch * p.heads;
  const double keep_scale = 1.0 / (1.0 - p.dropout_p);
  Bounds e;
  e.dq.assign(size_t(bh * tq * d), 0.0);
  e.dk.assign(size_t(bh * tk * d), 0.0);
  e.dv.assign(size_t(bh * tk * d), 0.0);
  for (int64_t g = 0; g < bh; ++g) {
    for (int64_t i = 0; i < tq; ++i) {
      const double* qi = &q[size_t((g * tq + i) * d)];
      const double* doi = &dout[size_t((g * tq + i) * d)];
      const double* oi = &o_rounded[size_t((g * tq + i) * d)];
      const double lse_i = lse[size_t(g * tq + i)];
      double delta = 0, delta_abs = 0;
      for (int64_t c = 0; c < d; ++c) {
        delta += doi[c] * oi[c];
        delta_abs += std::fabs(doi[c] * oi[c]);
      }
      const double e_delta = (uo + double(d) * u) * delta_abs;
      const int64_t visible = std::min<int64_t>(p.visible_keys(i), tk);
      for (int64_t j = 0; j < visible; ++j) {
        const double* kj = &k[size_t((g * tk + j) * d)];
        const double* vj = &v[size_t((g * tk + j) * d)];
        double s = 0, s_abs = 0, dp = 0, dp_abs = 0;
        for (int64_t c = 0; c < d; ++c) {
          s += qi[c] * kj[c];
          s_abs += std::fabs(qi[c] * kj[c]);
          dp += doi[c] * vj[c];
          dp_abs += std::fabs(doi[c] * vj[c]);
        }
        const double prob = std::exp(s * p.scale - lse_i);
        const uint64_t index = uint64_t((g * tq + i) * tk + j);
        const bool keep = p.dropout_p == 0.0 || hg::dropout_keep(p.seed, p.offset, index, float(p.dropout_p));
        const double z = keep ? keep_scale : 0.0;
        const double e_p = u * (double(d + 2) * p.scale * s_abs + 2 * std::fabs(lse_i) + 4);
        const double pz = prob * z;
        const double e_pz = pz * (e_p + r + u) + tiny;
        const double e_dp = z * double(d) * u * dp_abs + u * std::fabs(dp * z);
        const double ds = prob * (dp * z - delta);
        const double e_ds = e_p * std::fabs(ds) + prob * (e_dp + e_delta) + (r + u) * std::fabs(ds) + tiny +
                            u * prob * std::fabs(dp * z);
        for (int64_t c = 0; c < d; ++c) {
          e.dv[size_t((g * tk + j) * d + c)] += e_pz * std::fabs(doi[c]) + double(tq) * u * pz * std::fabs(doi[c]);
          e.dk[size_t((g * tk + j) * d + c)] +=
              p.scale * (e_ds * std::fabs(qi[c]) + double(tq) * u * std::fabs(ds * qi[c]));
          e.dq[size_t((g * tq + i) * d + c)] +=
              p.scale * (e_ds * std::fabs(kj[c]) + double(tk) * u * std::fabs(ds * kj[c]));
        }
      }
    }
  }
  const double f16_subnormal = dtype == DType::f16 ? 0x1p-24 : 0.0;
  const auto finish = [&](std::vector<double>& bound, const std::vector<double>& reference) {
    for (size_t n = 0; n < bound.size(); ++n) bound[n] = 2 * bound[n] + 2 * uo * std::fabs(reference[n]) + f16_subnormal;
  };
  finish(e.dq, ref.dq);
  finish(e.dk, ref.dk);
  finish(e.dv, ref.dv);
  return e;
}

// ---- one case --------------------------------------------------------------------------------------

struct Case {
  DType dtype;
  int64_t batch, heads, tq, tk, d;
  bool causal;
  double dropout_p;
  Layout layout;
};

std::string describe(const Case& c) {
  return std::string(hg::dtype_name(c.dtype)) + " B=" + std::to_string(c.batch) + " H=" + std::to_string(c.heads) +
         " tq=" + std::to_string(c.tq) + " tk=" + std::to_string(c.tk) + " d=" + std::to_string(c.d) +
         (c.causal ? " causal" : " full") + " dropout=" + std::to_string(c.dropout_p) + " " + layout_name(c.layout);
}

struct Outputs {
  Buffer dq, dk, dv;
};

// The case's device operands, and a call of the kernel that returns dq, dk, dv as downloaded.
struct Run {
  Case c;
  AttentionProblem problem;
  Placement pq, pk, pv, prow;
  std::vector<double> q, k, v, dout, o_rounded, lse;
  hg::testing::AttentionReference ref;
  DeviceBuffer dev_q, dev_k, dev_v, dev_o, dev_dout, dev_lse, dev_delta, dev_dq, dev_dk, dev_dv;

  static AttentionProblem problem_of(const Case& c, uint64_t seed) {
    AttentionProblem p;
    p.batch = c.batch, p.heads = c.heads, p.tq = c.tq, p.tk = c.tk, p.d = c.d;
    p.scale = 1.0 / std::sqrt(double(c.d));
    p.causal = c.causal;
    p.dropout_p = c.dropout_p;
    p.seed = seed * 0x9E3779B97F4A7C15ull + 17, p.offset = seed % 5;
    return p;
  }

  Run(const Case& cs, uint64_t seed, std::mt19937_64& rng)
      : c(cs),
        problem(problem_of(cs, seed)),
        pq(place(cs.layout, cs.batch, cs.heads, cs.tq, cs.d, 0)),
        pk(place(cs.layout, cs.batch, cs.heads, cs.tk, cs.d, 1)),
        pv(place(cs.layout, cs.batch, cs.heads, cs.tk, cs.d, 2)),
        prow(place_rows_of_heads(cs.batch, cs.heads, cs.tq, cs.d)),
        q(random_rounded(rng, cs.dtype, cs.batch * cs.heads * cs.tq * cs.d)),
        k(random_rounded(rng, cs.dtype, cs.batch * cs.heads * cs.tk * cs.d)),
        v(random_rounded(rng, cs.dtype, cs.batch * cs.heads * cs.tk * cs.d)),
        dout(random_rounded(rng, cs.dtype, cs.batch * cs.heads * cs.tq * cs.d)),
        ref(hg::testing::attention_reference(problem, q, k, v, dout)),
        dev_q(scatter(q, pq, cs.dtype, cs.batch, cs.heads, cs.tq, cs.d)),
        dev_k(scatter(k, pk, cs.dtype, cs.batch, cs.heads, cs.tk, cs.d)),
        dev_v(scatter(v, pv, cs.dtype, cs.batch, cs.heads, cs.tk, cs.d)),
        dev_o(scatter(o_rounded = rounded(ref.o, cs.dtype), prow, cs.dtype, cs.batch, cs.heads, cs.tq, cs.d)),
        dev_dout(scatter(dout, prow, cs.dtype, cs.batch, cs.heads, cs.tq, cs.d)),
        dev_lse(lse_buffer()),
        dev_delta(DType::f32, cs.batch * cs.heads * cs.tq),
        dev_dq(cs.dtype, pq.elements),
        dev_dk(cs.dtype, pk.elements),
        dev_dv(cs.dtype, pv.elements) {}

  Buffer lse_buffer() {
    lse = rounded(ref.lse, DType::f32);
    Buffer b(DType::f32, int64_t(lse.size()));
    for (size_t i = 0; i < lse.size(); ++i) b.set(int64_t(i), lse[i]);
    return b;
  }

  Outputs call() {
    for (DeviceBuffer* out : {&dev_dq, &dev_dk, &dev_dv, &dev_delta}) out->poison();
    const DType t = c.dtype;
    gpu::attention_backward(problem, pq.on(dev_q.data(), t), pk.on(dev_k.data(), t), pv.on(dev_v.data(), t),
                            prow.on(dev_o.data(), t), prow.on(dev_dout.data(), t), dev_lse.data(), dev_delta.data(),
                            pq.on(dev_dq.data(), t), pk.on(dev_dk.data(), t), pv.on(dev_dv.data(), t), t, stream());
    return {dev_dq.download(), dev_dk.download(), dev_dv.download()};
  }
};

// got (at its placement) against the dense reference within the per-element bound; holes stay NaN.
void check_output(const Buffer& got, const Placement& place, const std::vector<double>& ref,
                  const std::vector<double>& bound, int64_t batch, int64_t heads, int64_t rows, int64_t d,
                  const std::string& what) {
  std::vector<char> inside(size_t(got.size()), 0);
  int64_t failures = 0, n = 0;
  std::string first;
  double worst_ratio = 0;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < d; ++c, ++n) {
          const int64_t at = place.at(b, h, r, c);
          inside[size_t(at)] = 1;
          const double g = got.get(at), want = ref[size_t(n)], err = std::fabs(g - want);
          worst_ratio = std::max(worst_ratio, err / bound[size_t(n)]);
          if (!(err <= bound[size_t(n)])) {
            if (failures++ == 0) {
              first = "(b " + std::to_string(b) + ", h " + std::to_string(h) + ", row " + std::to_string(r) +
                      ", col " + std::to_string(c) + "): got " + std::to_string(g) + ", want " +
                      std::to_string(want) + " +- " + std::to_string(bound[size_t(n)]);
            }
          }
        }
      }
    }
  }
  INFO(what << ": " << failures << " of " << n << " outside the bound, first " << first);
  CHECK(failures == 0);
  int64_t written_holes = 0;
  for (int64_t at = 0; at < got.size(); ++at) written_holes += !inside[size_t(at)] && !std::isnan(got.get(at));
  INFO(what << ": " << written_holes << " elements outside the operand were written");
  CHECK(written_holes == 0);
  MESSAGE(what << ": largest error / bound = " << worst_ratio);
}

void check_case(const Case& c, uint64_t seed) {
  INFO(describe(c));
  std::mt19937_64 rng(seed);
  Run run(c, seed, rng);
  const Outputs out = run.call();
  const Bounds bounds =
      attention_error_bounds(run.problem, c.dtype, run.q, run.k, run.v, run.dout, run.o_rounded, run.lse, run.ref);
  check_output(out.dq, run.pq, run.ref.dq, bounds.dq, c.batch, c.heads, c.tq, c.d, describe(c) + " dq");
  check_output(out.dk, run.pk, run.ref.dk, bounds.dk, c.batch, c.heads, c.tk, c.d, describe(c) + " dk");
  check_output(out.dv, run.pv, run.ref.dv, bounds.dv, c.batch, c.heads, c.tk, c.d, describe(c) + " dv");
}

// Every sequence length, head dimension, mask and dropout setting for one dtype; the layouts take
// turns. Small (b, h) counts for the longer sequences keep the emulated run short (the emulated WMMA
// collectives dominate it: about 20 s per half dtype under ASan on the 2-core VM, 2 s for f32).
void sweep(DType dtype) {
  const Layout layouts[] = {Layout::dense, Layout::qkv_slices, Layout::odd_rows};
  uint64_t seed = 1000 * uint64_t(dtype) + 1;
  int turn = 0;
  for (const int64_t t : {1, 17, 64, 130}) {
    for (const int64_t d : {64, 128}) {
      for (const bool causal : {false, true}) {
        for (const double dropout : {0.0, 0.2}) {
          // T = 130 (three tiles, partial last ones): two of the four mask x dropout pairs, to keep
          // the emulated tensor cores' run short; every pair is run at the shorter lengths.
          if (t == 130 && causal != (dropout > 0)) continue;
          // Every tile costs the same, however few of its rows are real: (b, h) counts stay small.
          const int64_t batch = t == 17 ? 2 : 1, heads = t == 130 ? 1 : 2;
          check_case({dtype, batch, heads, t, t, d, causal, dropout, layouts[turn++ % 3]}, seed++);
        }
      }
    }
  }
  // Fewer queries than keys (causal: the queries are the last tq positions), and more (full mask).
  struct Lengths {
    int64_t tq, tk;
    bool causal;
  };
  for (const Lengths l : {Lengths{17, 130, true}, Lengths{1, 64, true}, Lengths{64, 130, false},
                          Lengths{70, 17, false}, Lengths{17, 130, false}}) {
    for (const int64_t d : {64, 128}) {
      check_case({dtype, 1, 2, l.tq, l.tk, d, l.causal, d == 64 ? 0.1 : 0.0, layouts[turn++ % 3]}, seed++);
    }
  }
}

TEST_CASE("attention_backward f16 matches the oracle") {
  SKIP_WITHOUT_DEVICE();
  sweep(DType::f16);
}

TEST_CASE("attention_backward bf16 matches the oracle") {
  SKIP_WITHOUT_DEVICE();
  sweep(DType::bf16);
}

TEST_CASE("attention_backward f32 matches the oracle") {
  SKIP_WITHOUT_DEVICE();
  sweep(DType::f32);
}

TEST_CASE("attention_backward gives the same bits run to run") {
  SKIP_WITHOUT_DEVICE();
  for (const DType dtype : {DType::f16, DType::bf16, DType::f32}) {
    INFO(hg::dtype_name(dtype));
    std::mt19937_64 rng(7);
    Run run({dtype, 2, 2, 130, 130, 64, true, 0.1, Layout::qkv_slices}, 7, rng);
    const Outputs first = run.call(), second = run.call();
    CHECK(first.dq.bitwise_equal(second.dq));
    CHECK(first.dk.bitwise_equal(second.dk));
    CHECK(first.dv.bitwise_equal(second.dv));
  }
}

TEST_CASE("attention_backward refuses what the CUDA kernels do not take") {
  SKIP_WITHOUT_DEVICE();
  const auto message_of = [](const AttentionProblem& p, DType dtype) {
    try {
      gpu::attention_backward(p, {}, {}, {}, {}, {}, nullptr, nullptr, {}, {}, {}, dtype, stream());
    } catch (const hg::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  AttentionProblem p;
  p.batch = 1, p.heads = 1, p.tq = 4, p.tk = 4, p.d = 96;
  std::string m = message_of(p, DType::f16);
  CHECK(m.find("head dimension 96") != std::string::npos);
  CHECK(m.find("f16") != std::string::npos);
  p.d = 64;
  m = message_of(p, DType::f64);
  CHECK(m.find("head dimension 64") != std::string::npos);
  CHECK(m.find("f64") != std::string::npos);
  p.causal = true, p.tq = 8, p.tk = 4;
  m = message_of(p, DType::f32);
  CHECK(m.find("expected tk >= tq") != std::string::npos);
}

}  // namespace
