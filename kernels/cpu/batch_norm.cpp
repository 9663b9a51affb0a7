// BatchNorm on the CPU: forward in training (the batch's statistics, PyTorch's running-stat update) and
// eval (the running statistics), and the backward. The math: kernels/kernels.h.
//
// The tensor is N rows of C S elements: row n holds channel c's run of S contiguous elements at
// (n C + c) S. Every pass sweeps the rows in order, so memory is read as one stream (a channel-major
// walk would jump C S elements between runs and restart the prefetchers at each).
//   - The reductions (the statistics; the backward's sums of dy and dy (x - mean)) cut the rows into a
//     fixed number of blocks, chosen from N alone. Each block reduces its rows in order into its own
//     per-channel partials, and the partials are combined in block order.
//   - runs (S >= kRunMin: images): a run's mean and squared deviations come from two passes over the
//     run, which sits in L1 / L2 (widened once for the half types). Runs are merged into a block's and
//     blocks into the channel's by Chan, Golub and LeVeque's pairwise update, so the statistics take
//     one read of x and the variance stays exact for data far from zero.
//   - rows (S < kRunMin: BatchNorm1d's [N, C], short sequences): per-column partial sums over a row
//     of C S columns, then a channel's S columns added in order. The statistics take two reads of x
//     (sums, then squared deviations from the mean).
//   - The elementwise passes (y; dx) are one OpenMP iteration per row.
// Every sum's order depends on the shape alone: the same bits whatever the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/normalization_runs.h"
#include "kernels/kernels.h"

namespace hg::kernels::cpu {

using namespace norm;

namespace {

constexpr int64_t kParallelMinElements = int64_t(1) << 14;
constexpr int64_t kRunMin = 16;
constexpr int64_t kRowBlocks = 64;
constexpr int64_t kChunk = 1024;

struct Buffers {
  std::vector<float> x, dy, out;
};

int64_t block_count(int64_t rows) { return std::max<int64_t>(1, std::min(kRowBlocks, rows)); }

// visit(block, r, buffers) for every row r, block by block, a block's rows in order; a thread's blocks
// are its own, so a block's partials need no lock.
template <class Visit>
void for_row_blocks(int64_t rows, bool parallel, const Visit& visit) {
  const int64_t blocks = block_count(rows);
#pragma omp parallel if (parallel)
  {
    Buffers buffers;
#pragma omp for schedule(static)
    for (int64_t block = 0; block < blocks; ++block)
      for (int64_t r = rows * block / blocks; r < rows * (block + 1) / blocks; ++r) visit(block, r, buffers);
  }
}

// visit(r, buffers) for every row r, one OpenMP iteration per row (the elementwise passes).
template <class Visit>
void for_rows(int64_t rows, bool parallel, const Visit& visit) {
#pragma omp parallel if (parallel)
  {
    Buffers buffers;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) visit(r, buffers);
  }
}

// `width` partials per block, added in block order.
template <class A>
std::vector<A> combine_blocks(const std::vector<A>& partial, int64_t width) {
  std::vector<A> total(size_t(width), A(0));
  for (size_t block = 0; block < partial.size() / size_t(width); ++block)
    for (int64_t i = 0; i < width; ++i) total[size_t(i)] += partial[block * size_t(width) + size_t(i)];
  return total;
}

// Column sums [P = C S] to channel sums [C], a channel's S columns in order.
template <class A>
std::vector<A> channel_totals(const A* columns, int64_t channels, int64_t spatial) {
  std::vector<A> out(static_cast<size_t>(channels), A(0));
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t s = 0; s < spatial; ++s) out[size_t(c)] += columns[c * spatial + s];
  return out;
}

// A per-channel row [C] repeated over each channel's S columns: [P].
template <class A>
std::vector<A> per_column(const std::vector<A>& per_channel, int64_t spatial) {
  std::vector<A> out(per_channel.size() * size_t(spatial));
  for (size_t c = 0; c < per_channel.size(); ++c)
    std::fill_n(out.begin() + std::ptrdiff_t(c * size_t(spatial)), spatial, per_channel[c]);
  return out;
}

// Count, mean and sum of squared deviations of a set of values; two sets merge by Chan et al.
template <class A>
struct Moments {
  double count = 0;
  A mean = 0, m2 = 0;

  void merge(const Moments& other) {
    if (other.count == 0) return;
    const double total = count + other.count;
    const A delta = other.mean - mean;
    mean += delta * A(other.count / total);
    m2 += other.m2 + delta * delta * A(count * other.count / total);
    count = total;
  }
};

// The batch mean and biased variance of each channel [C].
template <class T, class A = acc_t<T>>
void batch_statistics(const T* x, int64_t batch, int64_t channels, int64_t spatial, bool parallel, std::vector<A>& mean,
                      std::vector<A>& variance) {
  const int64_t width = channels * spatial;
  if (spatial >= kRunMin) {
    std::vector<Moments<A>> partial(size_t(block_count(batch) * channels));
    for_row_blocks(batch, parallel, [&](int64_t block, int64_t n, Buffers& buffers) {
      for (int64_t c = 0; c < channels; ++c) {
        const auto* run = readable(x + n * width + c * spatial, spatial, buffers.x);
        Moments<A> m;
        m.count = double(spatial);
        m.mean = sum_of(run, spatial) / A(spatial);
        m.m2 = sum_of_squares(run, spatial, m.mean);
        partial[size_t(block * channels + c)].merge(m);
      }
    });
    for (int64_t c = 0; c < channels; ++c) {
      Moments<A> total;
      for (size_t block = 0; block < partial.size() / size_t(channels); ++block)
        total.merge(partial[block * size_t(channels) + size_t(c)]);
      mean[size_t(c)] = total.mean;
      variance[size_t(c)] = total.m2 / A(total.count);
    }
    return;
  }
  const A count = A(batch * spatial);
  std::vector<A> partial(size_t(block_count(batch) * width), A(0));
  for_row_blocks(batch, parallel, [&](int64_t block, int64_t n, Buffers& buffers) {
    const auto* row = readable(x + n * width, width, buffers.x);
    A* sums = partial.data() + block * width;
#pragma omp simd
    for (int64_t p = 0; p < width; ++p) sums[p] += A(row[p]);
  });
  mean = channel_totals(combine_blocks(partial, width).data(), channels, spatial);
  for (A& m : mean) m /= count;
  const std::vector<A> center = per_column(mean, spatial);
  std::fill(partial.begin(), partial.end(), A(0));
  for_row_blocks(batch, parallel, [&](int64_t block, int64_t n, Buffers& buffers) {
    const auto* row = readable(x + n * width, width, buffers.x);
    A* squares = partial.data() + block * width;
#pragma omp simd
    for (int64_t p = 0; p < width; ++p) squares[p] += (A(row[p]) - center[size_t(p)]) * (A(row[p]) - center[size_t(p)]);
  });
  variance = channel_totals(combine_blocks(partial, width).data(), channels, spatial);
  for (A& v : variance) v /= count;
}

template <class T>
void forward(const T* x, const void* weight, const void* bias, void* running_mean, void* running_var, T* y,
             void* save_mean, void* save_rstd, int64_t batch, int64_t channels, int64_t spatial, bool training,
             double momentum, double eps) {
  using A = acc_t<T>;
  const std::vector<A> w = param_row<T>(weight, channels), b = param_row<T>(bias, channels);
  A* rm = static_cast<A*>(running_mean);
  A* rv = static_cast<A*>(running_var);
  const int64_t count = batch * spatial, width = channels * spatial;
  const bool parallel = count * channels >= kParallelMinElements;
  std::vector<A> mean(static_cast<size_t>(channels)), variance(static_cast<size_t>(channels));
  if (training) batch_statistics(x, batch, channels, spatial, parallel, mean, variance);
  // y = (x - mean) * scale + shift per channel, with the statistics used (the running ones in eval,
  // updated from the batch's in training).
  std::vector<A> scale(static_cast<size_t>(channels)), shift(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) {
    A& mu = mean[size_t(c)];
    A& var = variance[size_t(c)];
    if (training) {
      if (rm != nullptr) rm[c] = (A(1) - A(momentum)) * rm[c] + A(momentum) * mu;
      if (rv != nullptr) rv[c] = (A(1) - A(momentum)) * rv[c] + A(momentum) * (var * A(count) / A(count - 1));
    } else {
      mu = rm[c], var = rv[c];
    }
    const A rstd = A(1) / std::sqrt(var + A(eps));
    static_cast<A*>(save_mean)[c] = mu;
    static_cast<A*>(save_rstd)[c] = rstd;
    scale[size_t(c)] = rstd * (w.empty() ? A(1) : w[size_t(c)]);
    shift[size_t(c)] = b.empty() ? A(0) : b[size_t(c)];
  }
  if (spatial >= kRunMin) {
    for_rows(batch, parallel, [&](int64_t n, Buffers& buffers) {
      for (int64_t c = 0; c < channels; ++c) {
        const A mu = mean[size_t(c)], a = scale[size_t(c)], z = shift[size_t(c)];
        for (int64_t s0 = 0; s0 < spatial; s0 += kChunk) {
          const int64_t offset = n * width + c * spatial + s0, len = std::min(kChunk, spatial - s0);
          const auto* xr = readable(x + offset, len, buffers.x);
          A* yr = result_row(y + offset, len, buffers.out);
#pragma omp simd
          for (int64_t s = 0; s < len; ++s) yr[s] = (A(xr[s]) - mu) * a + z;
          narrow(yr, y + offset, len);
        }
      }
    });
    return;
  }
  const std::vector<A> mu = per_column(mean, spatial), a = per_column(scale, spatial), z = per_column(shift, spatial);
  for_rows(batch, parallel, [&](int64_t n, Buffers& buffers) {
    const auto* xr = readable(x + n * width, width, buffers.x);
    A* yr = result_row(y + n * width, width, buffers.out);
#pragma omp simd
    for (int64_t p = 0; p < width; ++p) yr[p] = (A(xr[p]) - mu[size_t(p)]) * a[size_t(p)] + z[size_t(p)];
    narrow(yr, y + n * width, width);
  });
}

// dx = dy * a - (x - mean) * b - c per channel, from the backward's sums: with g = dy w, a = rstd w and,
// in training, b = rstd^2 mean(g xhat), c = rstd mean(g) (eval: b = c = 0).
template <class A>
struct InputGradient {
  A a, b, c;
};

template <class A>
InputGradient<A> input_gradient(A rstd, A weight, A sum_dy, A sum_dy_xhat, int64_t count, bool training) {
  if (!training) return {rstd * weight, A(0), A(0)};
  return {rstd * weight, rstd * rstd * weight * sum_dy_xhat / A(count), rstd * weight * sum_dy / A(count)};
}

template <class T>
void backward(const T* x, const void* weight, const void* save_mean, const void* save_rstd, const T* dy, T* dx,
              T* dweight, T* dbias, int64_t batch, int64_t channels, int64_t spatial, bool training) {
  using A = acc_t<T>;
  const std::vector<A> w = param_row<T>(weight, channels);
  const std::vector<A> mean(static_cast<const A*>(save_mean), static_cast<const A*>(save_mean) + channels);
  const A* rstd = static_cast<const A*>(save_rstd);
  const int64_t count = batch * spatial, width = channels * spatial;
  const bool parallel = count * channels >= kParallelMinElements;
  const bool runs = spatial >= kRunMin;
  const std::vector<A> center = runs ? std::vector<A>() : per_column(mean, spatial);

  // Per block: sum dy [C or P], then sum dy (x - mean) [C or P].
  const int64_t per_block = 2 * (runs ? channels : width);
  std::vector<A> partial(size_t(block_count(batch) * per_block), A(0));
  for_row_blocks(batch, parallel, [&](int64_t block, int64_t n, Buffers& buffers) {
    A* sums = partial.data() + block * per_block;
    if (runs) {
      for (int64_t c = 0; c < channels; ++c) {
        for (int64_t s = 0; s < spatial; s += kChunk) {
          const int64_t offset = n * width + c * spatial + s, len = std::min(kChunk, spatial - s);
          add_backward_sums(readable(x + offset, len, buffers.x), readable(dy + offset, len, buffers.dy), len,
                            mean[size_t(c)], sums[c], sums[channels + c]);
        }
      }
      return;
    }
    const auto* xr = readable(x + n * width, width, buffers.x);
    const auto* dyr = readable(dy + n * width, width, buffers.dy);
#pragma omp simd
    for (int64_t p = 0; p < width; ++p) {
      sums[p] += A(dyr[p]);
      sums[width + p] += A(dyr[p]) * (A(xr[p]) - center[size_t(p)]);
    }
  });
  const std::vector<A> totals = combine_blocks(partial, per_block);
  std::vector<A> db = runs ? std::vector<A>(totals.begin(), totals.begin() + channels)
                           : channel_totals(totals.data(), channels, spatial);
  std::vector<A> dw = runs ? std::vector<A>(totals.begin() + channels, totals.end())
                           : channel_totals(totals.data() + width, channels, spatial);
  std::vector<A> ka(static_cast<size_t>(channels)), kb(static_cast<size_t>(channels)),
      kc(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) {
    dw[size_t(c)] *= rstd[c];  // sum dy xhat
    const InputGradient<A> k =
        input_gradient(rstd[c], w.empty() ? A(1) : w[size_t(c)], db[size_t(c)], dw[size_t(c)], count, training);
    ka[size_t(c)] = k.a, kb[size_t(c)] = k.b, kc[size_t(c)] = k.c;
  }
  if (dx != nullptr && runs) {
    for_rows(batch, parallel, [&](int64_t n, Buffers& buffers) {
      for (int64_t c = 0; c < channels; ++c) {
        const A mu = mean[size_t(c)], a = ka[size_t(c)], b = kb[size_t(c)], k = kc[size_t(c)];
        for (int64_t s0 = 0; s0 < spatial; s0 += kChunk) {
          const int64_t offset = n * width + c * spatial + s0, len = std::min(kChunk, spatial - s0);
          const auto* xr = readable(x + offset, len, buffers.x);
          const auto* dyr = readable(dy + offset, len, buffers.dy);
          A* dxr = result_row(dx + offset, len, buffers.out);
#pragma omp simd
          for (int64_t s = 0; s < len; ++s) dxr[s] = A(dyr[s]) * a - (A(xr[s]) - mu) * b - k;
          narrow(dxr, dx + offset, len);
        }
      }
    });
  } else if (dx != nullptr) {
    const std::vector<A> a = per_column(ka, spatial), b = per_column(kb, spatial), k = per_column(kc, spatial);
    for_rows(batch, parallel, [&](int64_t n, Buffers& buffers) {
      const auto* xr = readable(x + n * width, width, buffers.x);
      const auto* dyr = readable(dy + n * width, width, buffers.dy);
      A* dxr = result_row(dx + n * width, width, buffers.out);
#pragma omp simd
      for (int64_t p = 0; p < width; ++p)
        dxr[p] = A(dyr[p]) * a[size_t(p)] - (A(xr[p]) - center[size_t(p)]) * b[size_t(p)] - k[size_t(p)];
      narrow(dxr, dx + n * width, width);
    });
  }
  if (dweight != nullptr) narrow(dw.data(), dweight, channels);
  if (dbias != nullptr) narrow(db.data(), dbias, channels);
}

}  // namespace

void batch_norm_forward(const void* x, const void* weight, const void* bias, void* running_mean, void* running_var,
                        void* y, void* save_mean, void* save_rstd, int64_t batch, int64_t channels, int64_t spatial,
                        bool training, double momentum, double eps, DType dtype) {
  check_positive("batch_norm_forward", {batch, channels, spatial});
  const int64_t count = batch * spatial;
  HG_CHECK(!training || count >= 2, "[batch_norm_forward] ", count,
           " value(s) per channel in training; expected at least 2 (the batch statistics need them)");
  HG_CHECK(training || (running_mean != nullptr && running_var != nullptr),
           "[batch_norm_forward] eval mode needs running_mean and running_var");
  dispatch_floating(dtype, "batch_norm_forward", [&]<class T>() {
    forward(static_cast<const T*>(x), weight, bias, running_mean, running_var, static_cast<T*>(y), save_mean, save_rstd,
            batch, channels, spatial, training, momentum, eps);
  });
}

void batch_norm_backward(const void* x, const void* weight, const void* save_mean, const void* save_rstd,
                         const void* dy, void* dx, void* dweight, void* dbias, int64_t batch, int64_t channels,
                         int64_t spatial, bool training, DType dtype) {
  check_positive("batch_norm_backward", {batch, channels, spatial});
  dispatch_floating(dtype, "batch_norm_backward", [&]<class T>() {
    backward(static_cast<const T*>(x), weight, save_mean, save_rstd, static_cast<const T*>(dy), static_cast<T*>(dx),
             static_cast<T*>(dweight), static_cast<T*>(dbias), batch, channels, spatial, training);
  });
}

}  // namespace hg::kernels::cpu
