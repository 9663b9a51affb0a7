#pragma once
// The oracle of the fused attention kernels: the math of kernels/attention_problem.h computed
// directly in double, with the full score matrix, one (batch, head) at a time. Operands are dense
// [batch, heads, rows, d] vectors of double (tests convert their inputs to double first, after
// rounding them to the dtype under test). Dropout uses the same Philox keep bits as the kernels.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/attention_problem.h"
#include "kernels/philox.h"

namespace hg::testing {

struct AttentionReference {
  std::vector<double> o, lse;          // forward: [batch, heads, tq, d] and [batch, heads, tq]
  std::vector<double> dq, dk, dv;      // backward (when dout was given)
};

// q [B, H, tq, d], k and v [B, H, tk, d], dout [B, H, tq, d] or empty (forward only).
inline AttentionReference attention_reference(const kernels::AttentionProblem& p, const std::vector<double>& q,
                                              const std::vector<double>& k, const std::vector<double>& v,
                                              const std::vector<double>& dout = {}) {
  const int64_t tq = p.tq, tk = p.tk, d = p.d, bh = p.batch * p.heads;
  AttentionReference r;
  r.o.assign(size_t(bh * tq * d), 0.0);
  r.lse.assign(size_t(bh * tq), 0.0);
  const bool backward = !dout.empty();
  if (backward) {
    r.dq.assign(size_t(bh * tq * d), 0.0);
    r.dk.assign(size_t(bh * tk * d), 0.0);
    r.dv.assign(size_t(bh * tk * d), 0.0);
  }
  const double keep_scale = 1.0 / (1.0 - p.dropout_p);
  std::vector<double> probs(size_t(tq * tk)), zs(size_t(tq * tk)), dp(size_t(tq * tk));
  for (int64_t g = 0; g < bh; ++g) {
    const double* qg = q.data() + g * tq * d;
    const double* kg = k.data() + g * tk * d;
    const double* vg = v.data() + g * tk * d;
    for (int64_t i = 0; i < tq; ++i) {
      const int64_t visible = std::min<int64_t>(p.visible_keys(i), tk);
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < tk; ++j) {
        double s = -std::numeric_limits<double>::infinity();
        if (j < visible) {
          s = 0;
          for (int64_t c = 0; c < d; ++c) s += qg[i * d + c] * kg[j * d + c];
          s *= p.scale;
        }
        probs[size_t(i * tk + j)] = s;
        m = std::max(m, s);
      }
      double sum = 0;
      for (int64_t j = 0; j < visible; ++j) sum += std::exp(probs[size_t(i * tk + j)] - m);
      const double lse = m + std::log(sum);
      r.lse[size_t(g * tq + i)] = lse;
      for (int64_t j = 0; j < tk; ++j) {
        const double prob = j < visible ? std::exp(probs[size_t(i * tk + j)] - lse) : 0.0;
        probs[size_t(i * tk + j)] = prob;
        const uint64_t index = uint64_t((g * tq + i) * tk + j);
        const bool keep = p.dropout_p == 0.0 || dropout_keep(p.seed, p.offset, index, float(p.dropout_p));
        zs[size_t(i * tk + j)] = keep ? keep_scale : 0.0;
        for (int64_t c = 0; c < d; ++c) r.o[size_t((g * tq + i) * d + c)] += prob * zs[size_t(i * tk + j)] * vg[j * d + c];
      }
    }
    if (!backward) continue;
    const double* dog = dout.data() + g * tq * d;
    for (int64_t i = 0; i < tq; ++i) {
      double delta = 0;
      for (int64_t c = 0; c < d; ++c) delta += dog[i * d + c] * r.o[size_t((g * tq + i) * d + c)];
      for (int64_t j = 0; j < tk; ++j) {
        double dpz = 0;
        for (int64_t c = 0; c < d; ++c) dpz += dog[i * d + c] * vg[j * d + c];
        const double prob = probs[size_t(i * tk + j)], z = zs[size_t(i * tk + j)];
        const double ds = prob * (dpz * z - delta);
        dp[size_t(i * tk + j)] = ds;
        for (int64_t c = 0; c < d; ++c) r.dv[size_t((g * tk + j) * d + c)] += prob * z * dog[i * d + c];
      }
    }
    for (int64_t i = 0; i < tq; ++i) {
      for (int64_t j = 0; j < tk; ++j) {
        const double ds = dp[size_t(i * tk + j)] * p.scale;
        for (int64_t c = 0; c < d; ++c) {
          r.dq[size_t((g * tq + i) * d + c)] += ds * kg[j * d + c];
          r.dk[size_t((g * tk + j) * d + c)] += ds * qg[i * d + c];
        }
      }
    }
  }
  return r;
}

}  // namespace hg::testing
