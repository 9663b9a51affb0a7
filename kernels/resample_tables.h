#pragma once
// The axis tables of resample2d (kernels/resample_axis.h) for PyTorch's resampling modes, built on the
// host: the engine's ops (engine/ops/resample.cpp) and the kernel benchmarks build them here, then
// copy the arrays to the kernel's device and point a ResampleAxis at them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "kernels/resample_axis.h"

namespace hg::kernels {

struct ResampleTable {
  int64_t in = 0, out = 0;
  std::vector<int64_t> offset{0}, index;
  std::vector<double> weight;

  void add_tap(int64_t source, double w) {
    index.push_back(source);
    weight.push_back(w);
  }
  void end_output() { offset.push_back(int64_t(index.size())); }
};

inline ResampleTable identity_table(int64_t n) {
  ResampleTable t;
  t.in = t.out = n;
  for (int64_t i = 0; i < n; ++i) {
    t.add_tap(i, 1.0);
    t.end_output();
  }
  return t;
}

// PyTorch's scale of a source position: in / out, or 1 / scale_factor when the size came from one.
inline double source_scale(int64_t in, int64_t out, std::optional<double> scale_factor) {
  return scale_factor && *scale_factor > 0 ? 1.0 / *scale_factor : double(in) / double(out);
}

// PyTorch's nearest (legacy: floor(i scale), in float arithmetic, with its shortcuts for sizes 1x and
// 2x) and nearest-exact (floor((i + 0.5) scale)), clipped to the last input.
inline ResampleTable nearest_table(int64_t in, int64_t out, std::optional<double> scale_factor, bool exact) {
  ResampleTable t;
  t.in = in, t.out = out;
  const float scale = float(source_scale(in, out, scale_factor));
  for (int64_t i = 0; i < out; ++i) {
    int64_t source;
    if (exact)
      source = int64_t(std::floor(float((double(i) + 0.5) * double(scale))));
    else if (out == in)
      source = i;
    else if (out == 2 * in)
      source = i >> 1;
    else
      source = int64_t(std::floor(float(i) * scale));
    t.add_tap(std::min(source, in - 1), 1.0);
    t.end_output();
  }
  return t;
}

// PyTorch's linear interpolation along one axis: the source position s = i (in - 1) / (out - 1) with
// align_corners, else max((i + 0.5) scale - 0.5, 0); taps floor(s) and floor(s) + 1 (the same input
// again at the last one) with weights 1 - l and l, l = s - floor(s).
inline ResampleTable linear_table(int64_t in, int64_t out, std::optional<double> scale_factor, bool align_corners) {
  ResampleTable t;
  t.in = in, t.out = out;
  const double scale =
      align_corners ? (out > 1 ? double(in - 1) / double(out - 1) : 0.0) : source_scale(in, out, scale_factor);
  for (int64_t i = 0; i < out; ++i) {
    const double s = align_corners ? scale * double(i) : std::max(scale * (double(i) + 0.5) - 0.5, 0.0);
    const int64_t i0 = std::min(int64_t(s), in - 1);
    const int64_t i1 = i0 + (i0 < in - 1 ? 1 : 0);
    const double l1 = std::min(std::max(s - double(i0), 0.0), 1.0);
    t.add_tap(i0, 1.0 - l1);
    t.add_tap(i1, l1);
    t.end_output();
  }
  return t;
}

// Adaptive average pooling: output i averages inputs floor(i in / out) .. ceil((i + 1) in / out) - 1.
inline ResampleTable adaptive_avg_table(int64_t in, int64_t out) {
  ResampleTable t;
  t.in = in, t.out = out;
  for (int64_t i = 0; i < out; ++i) {
    const int64_t begin = (i * in) / out, end = ((i + 1) * in + out - 1) / out;
    for (int64_t k = begin; k < end; ++k) t.add_tap(k, 1.0 / double(end - begin));
    t.end_output();
  }
  return t;
}

// The transposed map: input position k gathers (output i, weight) for every tap of i that reads k, in
// increasing i.
inline ResampleTable transposed(const ResampleTable& t) {
  ResampleTable r;
  r.in = t.out, r.out = t.in;
  r.offset.assign(size_t(t.in + 1), 0);
  for (int64_t source : t.index) ++r.offset[size_t(source + 1)];
  for (int64_t k = 0; k < t.in; ++k) r.offset[size_t(k + 1)] += r.offset[size_t(k)];
  r.index.resize(t.index.size());
  r.weight.resize(t.weight.size());
  std::vector<int64_t> next(r.offset.begin(), r.offset.end() - 1);
  for (int64_t i = 0; i < t.out; ++i)
    for (int64_t a = t.offset[size_t(i)]; a < t.offset[size_t(i + 1)]; ++a) {
      const size_t slot = size_t(next[size_t(t.index[size_t(a)])]++);
      r.index[slot] = i;
      r.weight[slot] = t.weight[size_t(a)];
    }
  return r;
}

}  // namespace hg::kernels
