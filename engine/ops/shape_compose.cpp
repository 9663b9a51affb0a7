// Shape ops and factories composed from views, cat, comparisons and where (the math: engine/ops.h).
// Views stay views (split, chunk, flatten and unflatten of contiguous tensors); the rest copy through
// ops whose backwards are already written, so none of them needs a backward of its own.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/ops.h"
#include "engine/ops/op_support.h"
#include "engine/random.h"

namespace hg {

Tensor stack(const std::vector<Tensor>& tensors, int dim) {
  HG_CHECK(!tensors.empty(), "[stack] got no tensors; expected at least one");
  const Tensor& first = tensors.front();
  ops::check_defined(first, "stack", "tensors[0]");
  const int d = normalize_dim(dim, first.dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    ops::check_defined(tensors[i], "stack", "tensor");
    HG_CHECK(tensors[i].shape() == first.shape(), "[stack] tensor ", i, " is ", tensors[i].describe(), " but tensor 0 is ",
             first.describe(), "; expected equal shapes");
    parts.push_back(tensors[i].unsqueeze(d));
  }
  return cat(parts, d);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int dim) {
  ops::check_defined(x, "split", "x");
  const int d = normalize_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    HG_CHECK(s >= 0, "[split] size ", s, " is negative; expected sizes >= 0");
    total += s;
  }
  HG_CHECK(total == x.size(d), "[split] sizes sum to ", total, " but dimension ", d, " of ", x.describe(), " is ",
           x.size(d), "; expected them to sum to it");
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(x.narrow(d, start, s));
    start += s;
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int dim) {
  ops::check_defined(x, "split", "x");
  const int d = normalize_dim(dim, x.dim(), "split");
  const int64_t n = x.size(d);
  HG_CHECK(split_size > 0 || (split_size == 0 && n == 0), "[split] split_size = ", split_size, " for ", x.describe(),
           "; expected split_size > 0");
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < n; start += split_size) sizes.push_back(std::min(split_size, n - start));
  if (sizes.empty()) sizes.push_back(0);
  return split(x, sizes, d);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int dim) {
  ops::check_defined(x, "chunk", "x");
  HG_CHECK(chunks > 0, "[chunk] chunks = ", chunks, "; expected chunks > 0");
  const int d = normalize_dim(dim, x.dim(), "chunk");
  const int64_t n = x.size(d);
  return split(x, n == 0 ? int64_t(0) : (n + chunks - 1) / chunks, d);
}

Tensor flatten(const Tensor& x, int start_dim, int end_dim) {
  ops::check_defined(x, "flatten", "x");
  if (x.dim() == 0) return x.reshape({1});
  const int s = normalize_dim(start_dim, x.dim(), "flatten"), e = normalize_dim(end_dim, x.dim(), "flatten");
  HG_CHECK(s <= e, "[flatten] start_dim ", start_dim, " comes after end_dim ", end_dim, " in ", x.describe(),
           "; expected start_dim <= end_dim");
  Shape shape(x.shape().begin(), x.shape().begin() + s);
  shape.push_back(std::accumulate(x.shape().begin() + s, x.shape().begin() + e + 1, int64_t(1), std::multiplies<>()));
  shape.insert(shape.end(), x.shape().begin() + e + 1, x.shape().end());
  return x.reshape(shape);
}

Tensor unflatten(const Tensor& x, int dim, const Shape& sizes) {
  ops::check_defined(x, "unflatten", "x");
  HG_CHECK(!sizes.empty(), "[unflatten] sizes is empty; expected at least one size");
  const int d = normalize_dim(dim, x.dim(), "unflatten");
  Shape shape(x.shape().begin(), x.shape().begin() + d);
  shape.insert(shape.end(), sizes.begin(), sizes.end());
  shape.insert(shape.end(), x.shape().begin() + d + 1, x.shape().end());
  return x.reshape(shape);
}

Tensor repeat(const Tensor& x, const Shape& repeats) {
  ops::check_defined(x, "repeat", "x");
  HG_CHECK(repeats.size() >= size_t(x.dim()), "[repeat] ", repeats.size(), " repeats for ", x.describe(),
           "; expected at least one per dimension (", x.dim(), ")");
  const size_t rank = repeats.size();
  Shape padded(rank - size_t(x.dim()), 1);
  padded.insert(padded.end(), x.shape().begin(), x.shape().end());
  // [1, s0, 1, s1, ...] expanded to [r0, s0, r1, s1, ...], then merged pairwise: [r0 s0, r1 s1, ...].
  Shape interleaved, expanded, result;
  for (size_t i = 0; i < rank; ++i) {
    HG_CHECK(repeats[i] >= 0, "[repeat] repeats[", i, "] = ", repeats[i], "; expected >= 0");
    interleaved.insert(interleaved.end(), {1, padded[i]});
    expanded.insert(expanded.end(), {repeats[i], padded[i]});
    result.push_back(repeats[i] * padded[i]);
  }
  return x.reshape(interleaved).expand(expanded).reshape(result);
}

Tensor pad(const Tensor& x, const std::vector<int64_t>& amounts, double value) {
  ops::check_defined(x, "pad", "x");
  HG_CHECK(amounts.size() % 2 == 0 && amounts.size() / 2 <= size_t(x.dim()), "[pad] ", amounts.size(),
           " amounts for ", x.describe(), "; expected (before, after) pairs for at most ", x.dim(), " dimensions");
  Tensor out = x;
  for (size_t pair = 0; pair < amounts.size() / 2; ++pair) {
    const int d = x.dim() - 1 - int(pair);
    const int64_t before = amounts[2 * pair], after = amounts[2 * pair + 1];
    const int64_t size = out.size(d);
    HG_CHECK(size + std::min<int64_t>(before, 0) + std::min<int64_t>(after, 0) >= 0, "[pad] cropping ", -before,
             " and ", -after, " from dimension ", d, " of size ", size, " of ", x.describe(), " leaves less than nothing");
    if (before < 0 || after < 0) {
      const int64_t start = std::max<int64_t>(-before, 0);
      out = out.narrow(d, start, size - start - std::max<int64_t>(-after, 0));
    }
    std::vector<Tensor> parts;
    Shape block = out.shape();
    if (before > 0) {
      block[size_t(d)] = before;
      parts.push_back(full(block, value, out.dtype(), out.device()));
    }
    parts.push_back(out);
    if (after > 0) {
      block[size_t(d)] = after;
      parts.push_back(full(block, value, out.dtype(), out.device()));
    }
    if (parts.size() > 1) out = cat(parts, d);
  }
  return out;
}

// Reflect and replicate: an index_select per padded dimension, with the source of each output
// position (its backward, index_add, sums the gradients of the copies of an edge).
Tensor pad(const Tensor& x, const std::vector<int64_t>& amounts, PadMode mode, double value) {
  if (mode == PadMode::Constant) return pad(x, amounts, value);
  const char* op = mode == PadMode::Reflect ? "pad (reflect)" : "pad (replicate)";
  ops::check_defined(x, op, "x");
  HG_CHECK(amounts.size() % 2 == 0 && amounts.size() / 2 <= size_t(x.dim()), "[", op, "] ", amounts.size(),
           " amounts for ", x.describe(), "; expected (before, after) pairs for at most ", x.dim(), " dimensions");
  Tensor out = x;
  for (size_t pair = 0; pair < amounts.size() / 2; ++pair) {
    const int d = x.dim() - 1 - int(pair);
    const int64_t before = amounts[2 * pair], after = amounts[2 * pair + 1], n = x.size(d);
    HG_CHECK(before >= 0 && after >= 0, "[", op, "] amounts (", before, ", ", after, ") for dimension ", d,
             " must be >= 0");
    if (before == 0 && after == 0) continue;
    HG_CHECK(n > 0, "[", op, "] cannot pad the empty dimension ", d, " of ", x.describe());
    HG_CHECK(mode == PadMode::Replicate || (before < n && after < n), "[", op, "] amounts (", before, ", ", after,
             ") for dimension ", d, " of ", x.describe(), " must be below its size ", n);
    std::vector<int64_t> source;
    for (int64_t k = -before; k < n + after; ++k) {
      if (mode == PadMode::Reflect)
        source.push_back(k < 0 ? -k : k >= n ? 2 * (n - 1) - k : k);
      else
        source.push_back(std::clamp<int64_t>(k, 0, n - 1));
    }
    out = index_select(out, d, from_vector(source, {int64_t(source.size())}, i64, x.device()));
  }
  return out;
}

namespace {
// [rows, cols] bool: column - row compared with the diagonal (keep_lower: <=, else >=).
Tensor band_mask(int64_t rows, int64_t cols, int64_t diagonal, bool keep_lower, const Device& device) {
  const Tensor r = arange(double(diagonal), double(diagonal + rows), 1.0, f64, device).view({rows, 1});
  const Tensor c = arange(0.0, double(cols), 1.0, f64, device).view({1, cols});
  return keep_lower ? le(c, r) : ge(c, r);
}

Tensor triangle(const Tensor& x, int64_t diagonal, bool lower, const char* op) {
  ops::check_defined(x, op, "x");
  HG_CHECK(x.dim() >= 2, "[", op, "] ", x.describe(), " has fewer than 2 dimensions; expected a matrix or a batch of them");
  const Tensor keep = band_mask(x.size(-2), x.size(-1), diagonal, lower, x.device());
  return where(keep, x, scalar_tensor(0.0, x.dtype(), x.device()));
}
}  // namespace

Tensor tril(const Tensor& x, int64_t diagonal) { return triangle(x, diagonal, true, "tril"); }
Tensor triu(const Tensor& x, int64_t diagonal) { return triangle(x, diagonal, false, "triu"); }

Tensor one_hot(const Tensor& ids, int64_t num_classes) {
  ops::check_index(ids, "one_hot", "ids");
  if (num_classes < 0) {
    HG_CHECK(num_classes == -1, "[one_hot] num_classes = ", num_classes, "; expected -1 (infer) or >= 0");
    HG_CHECK(ids.numel() > 0, "[one_hot] cannot infer num_classes from empty ids ", ids.describe());
    num_classes = int64_t(max(cast(ids, f64)).item()) + 1;
  }
  const Tensor bad = logical_or(lt(ids, 0.0), ge(ids, double(num_classes)));
  if (ids.numel() > 0 && any(bad).item() != 0) {
    const std::vector<int64_t> values = ids.to_vector<int64_t>();
    const std::vector<int32_t> flags = bad.to_vector<int32_t>();
    size_t first = 0;
    while (flags[first] == 0) ++first;
    HG_FAIL("[one_hot] id ", values[first], " at element ", first, " is out of range; expected 0 <= id < ", num_classes);
  }
  return cast(eq(ids.unsqueeze(-1), arange(num_classes, ids.dtype(), ids.device())), i64);
}

Tensor arange(double start, double end, double step, DType dtype, const Device& device) {
  HG_CHECK(step != 0 && std::isfinite(start) && std::isfinite(end) && std::isfinite(step), "[arange] start ", start,
           ", end ", end, ", step ", step, "; expected finite values and a nonzero step");
  const double count = std::ceil((end - start) / step);
  HG_CHECK(count < 1e12, "[arange] ", count, " values from start ", start, " to end ", end, " by step ", step,
           " are too many");
  const int64_t n = std::max<int64_t>(0, int64_t(count));
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[size_t(i)] = start + double(i) * step;
  return from_vector(values, {n}, dtype, device);
}

Tensor linspace(double start, double end, int64_t steps, DType dtype, const Device& device) {
  HG_CHECK(steps >= 0, "[linspace] steps = ", steps, "; expected steps >= 0");
  std::vector<double> values(static_cast<size_t>(steps));
  const double step = steps > 1 ? (end - start) / double(steps - 1) : 0.0;
  // PyTorch's order of evaluation: from start for the first half, from end for the second.
  for (int64_t i = 0; i < steps; ++i)
    values[size_t(i)] = i < steps / 2 ? start + step * double(i) : end - step * double(steps - 1 - i);
  return from_vector(values, {steps}, dtype, device);
}

Tensor eye(int64_t n, int64_t m, DType dtype, const Device& device) {
  if (m < 0) m = n;
  HG_CHECK(n >= 0, "[eye] n = ", n, "; expected n >= 0");
  std::vector<double> values(size_t(n * m), 0.0);
  for (int64_t i = 0; i < std::min(n, m); ++i) values[size_t(i * m + i)] = 1.0;
  return from_vector(values, {n, m}, dtype, device);
}

Tensor full_like(const Tensor& t, double value) { return full(t.shape(), value, t.dtype(), t.device()); }
Tensor rand_like(const Tensor& t) { return rand(t.shape(), t.dtype(), t.device()); }
Tensor randn_like(const Tensor& t) { return randn(t.shape(), t.dtype(), t.device()); }

}  // namespace hg
