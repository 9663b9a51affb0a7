// Memory-bound CPU kernels in GB/s, at sizes far beyond the caches, with a memcpy baseline measured
// in the same process so each figure can be read as a fraction of what the machine's memory allows.
//
//   GB/s = (bytes read + bytes written by one call) / best time over `repeats` calls, after one
//          warm-up call. Buffers are allocated and first-touched (written) before any timing.
//   softmax_forward:    reads x [rows, cols], writes y            -> 2 * rows * cols * sizeof(dtype)
//   layer_norm_forward: reads x, weight, bias; writes y, mean, rstd
//   unary GELU (tanh):  reads x, writes y over rows * cols elements
//   memcpy:             one std::memcpy of the f32 tensor (read + write), on one thread, and the same
//                       bytes split into one memcpy per OpenMP thread; fraction_of_memcpy divides by the
//                       faster of the two.
//   copy:               copy_strided of the contiguous tensor (what a contiguous copy_ or clone runs)
//   accumulate:         y += x in place (a leaf's later gradients): reads x and y, writes y -> 3 * bytes;
//   add_then_copy:      the same sum as autograd made it before: binary_forward add into a temporary,
//                       then copy_strided back into y; its GB/s counts accumulate's bytes, so the two
//                       lines read as speeds of the same work.
//   compare_lt:         y = x < b for b a row broadcast over the rows (an attention-style mask): reads x
//                       and b, writes one bool per element
//   where:              y = where(cond, x, z), cond a random bool mask: reads cond, x and z, writes y
//   index_select:       y = x[index] along dim 0, index [rows] random rows: reads index and one row of
//                       x per index, writes y (its backward is index_add)
//   index_add:          y = base + src added by rows at index [rows] into rows / 2 rows (a graph
//                       network's aggregation): reads base, src, index, writes y
//   gather:             y = gather(x, 1, index), index [rows, cols / 4] random columns: reads x (every
//                       line holds picks), index, writes y
//   scatter_add:        gather's backward: src [rows, cols / 4] added at index into zeros [rows, cols]:
//                       reads src and index, writes y
//   cumsum_rows / cumsum_columns: y = cumsum(x) along cols / along rows: reads x, writes y
//   rms_norm_forward / _backward: over [rows, cols]; batch_norm_* and group_norm_* (8 groups) over
//                       [rows / 64, 64 channels, cols] in training: forward reads x, writes y; backward reads
//                       x and dy, writes dx (statistics and parameters are counted, a few KB)
//   upsample_nearest2x_forward, upsample_bilinear2x_forward / _backward, adaptive_avg_pool2d_forward:
//                       resample2d over rows / 4 planes of 64x64 (to 128x128, back for the backward, to 7x7):
//                       reads the input planes, writes the output planes
//   topk:               the 8 largest of each row of [rows, cols]: reads x (the k outputs are negligible)
// Full size: rows = 16384, cols = 4096 (256 MiB per f32 tensor); --quick: 1/16 of the rows.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "bench_sections.h"
#include "json_line.h"
#include "timing.h"
#include "kernels/kernels.h"
#include "kernels/resample_tables.h"

namespace hg::bench {
namespace {


struct Shape {
  int64_t rows, cols;
  int repeats;
};

// 64-byte aligned bytes, written once so the pages are resident before timing.
struct Bytes {
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, Free> memory;
  size_t size;
  explicit Bytes(size_t n) : memory(std::aligned_alloc(64, (n + 63) / 64 * 64)), size(n) {
    unsigned char* p = static_cast<unsigned char*>(memory.get());
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < int64_t(n); i += 4096) p[i] = 1;
  }
  void* get() const { return memory.get(); }
};

Bytes random_tensor(int64_t n, DType dtype, uint64_t seed) {
  Bytes b(size_t(n) * dtype_size(dtype));
  kernels::cpu::uniform_fill(b.get(), n, -3.0, 3.0, seed, 0, dtype);
  return b;
}

void print_line(const std::string& kernel, DType dtype, const Shape& shape, double bytes, double seconds,
                double memcpy_gbs) {
  const double gbs = bytes / seconds / 1e9;
  JsonLine(kernel)
      .add("dtype", dtype_name(dtype))
      .add("rows", (long long)shape.rows)
      .add("cols", (long long)shape.cols)
      .add("bytes", (long long)bytes)
      .add("best_ms", seconds * 1e3)
      .add("repeats", shape.repeats)
      .add("threads", omp_get_max_threads())
      .add("gbs", gbs)
      .add("memcpy_gbs", memcpy_gbs)
      .add("fraction_of_memcpy", gbs / memcpy_gbs)
      .print();
}

// Prints the single-thread and per-thread memcpy lines; returns the faster GB/s.
double memcpy_baseline(const Shape& shape) {
  const size_t bytes = size_t(shape.rows * shape.cols) * sizeof(float);
  const Bytes src(bytes), dst(bytes);
  const char* s = static_cast<const char*>(src.get());
  char* d = static_cast<char*>(dst.get());
  const double plain = best_seconds(shape.repeats, [&] { std::memcpy(d, s, bytes); });
  const double split = best_seconds(shape.repeats, [&] {
#pragma omp parallel
    {
      const size_t threads = size_t(omp_get_num_threads()), t = size_t(omp_get_thread_num());
      const size_t begin = bytes * t / threads, end = bytes * (t + 1) / threads;
      std::memcpy(d + begin, s + begin, end - begin);
    }
  });
  const double moved = 2.0 * double(bytes);
  JsonLine("memcpy")
      .add("threads", 1)
      .add("bytes", (long long)moved)
      .add("best_ms", plain * 1e3)
      .add("gbs", moved / plain / 1e9)
      .print();
  JsonLine("memcpy")
      .add("threads", omp_get_max_threads())
      .add("bytes", (long long)moved)
      .add("best_ms", split * 1e3)
      .add("gbs", moved / split / 1e9)
      .print();
  return moved / std::min(plain, split) / 1e9;
}

void bench_softmax(DType dtype, const Shape& shape, double memcpy_gbs) {
  const int64_t n = shape.rows * shape.cols;
  const Bytes x = random_tensor(n, dtype, 1);
  Bytes y(size_t(n) * dtype_size(dtype));
  const double seconds = best_seconds(
      shape.repeats, [&] { kernels::cpu::softmax_forward(x.get(), y.get(), shape.rows, shape.cols, false, 0, dtype); });
  print_line("softmax", dtype, shape, 2.0 * double(x.size), seconds, memcpy_gbs);
}

void bench_layer_norm(DType dtype, const Shape& shape, double memcpy_gbs) {
  const int64_t n = shape.rows * shape.cols;
  const size_t stat_bytes = size_t(shape.rows) * dtype_size(accumulate_dtype(dtype));
  const Bytes x = random_tensor(n, dtype, 2), weight = random_tensor(shape.cols, dtype, 3),
              bias = random_tensor(shape.cols, dtype, 4);
  Bytes y(size_t(n) * dtype_size(dtype)), mean(stat_bytes), rstd(stat_bytes);
  const double seconds = best_seconds(shape.repeats, [&] {
    kernels::cpu::layer_norm_forward(x.get(), weight.get(), bias.get(), y.get(), mean.get(), rstd.get(), shape.rows,
                                     shape.cols, 1e-5, dtype);
  });
  const double bytes = double(x.size + weight.size + bias.size + y.size + mean.size + rstd.size);
  print_line("layer_norm", dtype, shape, bytes, seconds, memcpy_gbs);
}

void bench_gelu(DType dtype, const Shape& shape, double memcpy_gbs) {
  const int64_t n = shape.rows * shape.cols;
  const Bytes x = random_tensor(n, dtype, 5);
  Bytes y(size_t(n) * dtype_size(dtype));
  const double seconds = best_seconds(
      shape.repeats, [&] { kernels::cpu::unary_forward(kernels::UnaryOp::GeluTanh, x.get(), y.get(), n, 0.0, dtype); });
  print_line("gelu", dtype, shape, 2.0 * double(x.size), seconds, memcpy_gbs);
}

void bench_copy(DType dtype, const Shape& shape, double memcpy_gbs) {
  const int64_t n = shape.rows * shape.cols;
  const Bytes x = random_tensor(n, dtype, 6);
  Bytes y(size_t(n) * dtype_size(dtype));
  const int64_t dims[2] = {shape.rows, shape.cols}, strides[2] = {shape.cols, 1};
  const double seconds = best_seconds(
      shape.repeats, [&] { kernels::cpu::copy_strided(x.get(), strides, y.get(), strides, dims, 2, dtype); });
  print_line("copy", dtype, shape, 2.0 * double(x.size), seconds, memcpy_gbs);
}

void bench_accumulate(DType dtype, const Shape& shape, double memcpy_gbs) {
  const int64_t n = shape.rows * shape.cols;
  const Bytes x = random_tensor(n, dtype, 7), y = random_tensor(n, dtype, 8);
  Bytes sum(size_t(n) * dtype_size(dtype));
  const int64_t dims[2] = {shape.rows, shape.cols}, strides[2] = {shape.cols, 1};
  const double in_place =
      best_seconds(shape.repeats, [&] { kernels::cpu::accumulate(y.get(), x.get(), n, dtype); });
  const double add_then_copy = best_seconds(shape.repeats, [&] {
    kernels::cpu::binary_forward(kernels::BinaryOp::Add, y.get(), strides, x.get(), strides, sum.get(), dims, 2,
                                 dtype);
    kernels::cpu::copy_strided(sum.get(), strides, y.get(), strides, dims, 2, dtype);
  });
  print_line("accumulate", dtype, shape, 3.0 * double(x.size), in_place, memcpy_gbs);
  print_line("add_then_copy", dtype, shape, 3.0 * double(x.size), add_then_copy, memcpy_gbs);
}

void bench_compare(DType dtype, const Shape& shape, double memcpy_gbs) {
  const int64_t n = shape.rows * shape.cols;
  const Bytes x = random_tensor(n, dtype, 9), b = random_tensor(shape.cols, dtype, 10);
  Bytes y{size_t(n)};
  const int64_t dims[2] = {shape.rows, shape.cols}, xs[2] = {shape.cols, 1}, bs[2] = {0, 1};
  const double seconds = best_seconds(shape.repeats, [&] {
    kernels::cpu::compare_forward(kernels::CompareOp::Lt, x.get(), xs, b.get(), bs, static_cast<bool*>(y.get()), dims,
                                  2, dtype);
  });
  print_line("compare_lt", dtype, shape, double(x.size + b.size + y.size), seconds, memcpy_gbs);
}

void bench_where(DType dtype, const Shape& shape, double memcpy_gbs) {
  const int64_t n = shape.rows * shape.cols;
  const Bytes u = random_tensor(n, DType::f32, 11), zero(sizeof(float)), x = random_tensor(n, dtype, 12),
              z = random_tensor(n, dtype, 13);
  Bytes cond{size_t(n)}, y{size_t(n) * dtype_size(dtype)};
  std::memset(zero.get(), 0, sizeof(float));
  const int64_t dims[2] = {shape.rows, shape.cols}, strides[2] = {shape.cols, 1}, none[2] = {0, 0};
  kernels::cpu::compare_forward(kernels::CompareOp::Gt, u.get(), strides, zero.get(), none,
                                static_cast<bool*>(cond.get()), dims, 2, DType::f32);
  const double seconds = best_seconds(shape.repeats, [&] {
    kernels::cpu::where_forward(static_cast<const bool*>(cond.get()), strides, x.get(), strides, z.get(), strides,
                                y.get(), dims, 2, dtype);
  });
  print_line("where", dtype, shape, double(cond.size + x.size + z.size + y.size), seconds, memcpy_gbs);
}

void bench_indexing(DType dtype, const Shape& shape, double memcpy_gbs) {
  const int64_t rows = shape.rows, cols = shape.cols, n = rows * cols, half_rows = rows / 2, picks = cols / 4;
  const size_t size = dtype_size(dtype);
  const Bytes x = random_tensor(n, dtype, 14), base = random_tensor(half_rows * cols, dtype, 15);
  Bytes row_index{size_t(rows) * sizeof(int64_t)}, target_index{size_t(rows) * sizeof(int64_t)},
      pick_index{size_t(rows * picks) * sizeof(int64_t)};
  uint64_t state = 88172645463325252ull;
  auto next = [&](int64_t bound) {  // xorshift64: random positions without a library generator
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return int64_t(state % uint64_t(bound));
  };
  for (int64_t i = 0; i < rows; ++i) static_cast<int64_t*>(row_index.get())[i] = next(rows);
  for (int64_t i = 0; i < rows; ++i) static_cast<int64_t*>(target_index.get())[i] = next(half_rows);
  for (int64_t i = 0; i < rows * picks; ++i) static_cast<int64_t*>(pick_index.get())[i] = next(cols);
  Bytes y{size_t(n) * size}, small{size_t(rows * picks) * size};
  const double index_bytes = double(rows) * sizeof(int64_t), pick_bytes = double(rows * picks) * sizeof(int64_t);

  double seconds = best_seconds(shape.repeats, [&] {
    kernels::cpu::index_gather(x.get(), row_index.get(), DType::i64, y.get(), 1, rows, rows, cols, false, dtype);
  });
  print_line("index_select", dtype, shape, index_bytes + 2.0 * double(n * size), seconds, memcpy_gbs);
  seconds = best_seconds(shape.repeats, [&] {
    kernels::cpu::index_scatter_add(base.get(), x.get(), target_index.get(), DType::i64, y.get(), 1, half_rows, rows,
                                    cols, false, 1.0, dtype);
  });
  print_line("index_add", dtype, shape, index_bytes + double(n * size) + 2.0 * double(half_rows * cols * size), seconds,
             memcpy_gbs);
  seconds = best_seconds(shape.repeats, [&] {
    kernels::cpu::index_gather(x.get(), pick_index.get(), DType::i64, small.get(), rows, cols, picks, 1, true, dtype);
  });
  print_line("gather", dtype, shape, pick_bytes + double(n * size) + double(rows * picks * size), seconds, memcpy_gbs);
  seconds = best_seconds(shape.repeats, [&] {
    kernels::cpu::index_scatter_add(nullptr, small.get(), pick_index.get(), DType::i64, y.get(), rows, cols, picks, 1,
                                    true, 1.0, dtype);
  });
  print_line("scatter_add", dtype, shape, pick_bytes + double(rows * picks * size) + double(n * size), seconds,
             memcpy_gbs);
  for (const bool along_rows : {false, true}) {
    seconds = best_seconds(shape.repeats, [&] {
      if (along_rows) {
        kernels::cpu::cumsum(x.get(), y.get(), 1, rows, cols, false, dtype);
      } else {
        kernels::cpu::cumsum(x.get(), y.get(), rows, cols, 1, false, dtype);
      }
    });
    print_line(along_rows ? "cumsum_columns" : "cumsum_rows", dtype, shape, 2.0 * double(n * size), seconds,
               memcpy_gbs);
  }
}

void bench_normalization(DType dtype, const Shape& shape, double memcpy_gbs) {
  const int64_t rows = shape.rows, cols = shape.cols, n = rows * cols;
  const int64_t channels = 64, batch = rows / channels, groups = 8;
  const DType acc = accumulate_dtype(dtype);
  const Bytes x = random_tensor(n, dtype, 16), dy = random_tensor(n, dtype, 17), w = random_tensor(cols, dtype, 18),
              b = random_tensor(cols, dtype, 19);
  Bytes y{size_t(n) * dtype_size(dtype)}, dx{size_t(n) * dtype_size(dtype)}, dw{size_t(cols) * dtype_size(dtype)},
      db{size_t(cols) * dtype_size(dtype)}, stat_a{size_t(rows) * dtype_size(acc)},
      stat_b{size_t(rows) * dtype_size(acc)};
  Bytes running_mean{size_t(channels) * dtype_size(acc)}, running_var{size_t(channels) * dtype_size(acc)};
  std::memset(running_mean.get(), 0, running_mean.size);
  kernels::cpu::fill(running_var.get(), channels, 1.0, acc);
  const double tensor = double(n * dtype_size(dtype));
  double seconds = best_seconds(shape.repeats, [&] {
    kernels::cpu::rms_norm_forward(x.get(), w.get(), y.get(), stat_a.get(), rows, cols, 1e-6, dtype);
  });
  print_line("rms_norm_forward", dtype, shape, 2.0 * tensor, seconds, memcpy_gbs);
  seconds = best_seconds(shape.repeats, [&] {
    kernels::cpu::rms_norm_backward(x.get(), w.get(), stat_a.get(), dy.get(), dx.get(), dw.get(), rows, cols, dtype);
  });
  print_line("rms_norm_backward", dtype, shape, 3.0 * tensor, seconds, memcpy_gbs);
  seconds = best_seconds(shape.repeats, [&] {
    kernels::cpu::batch_norm_forward(x.get(), w.get(), b.get(), running_mean.get(), running_var.get(), y.get(),
                                     stat_a.get(), stat_b.get(), batch, channels, cols, true, 0.1, 1e-5, dtype);
  });
  print_line("batch_norm_forward", dtype, shape, 2.0 * tensor, seconds, memcpy_gbs);
  seconds = best_seconds(shape.repeats, [&] {
    kernels::cpu::batch_norm_backward(x.get(), w.get(), stat_a.get(), stat_b.get(), dy.get(), dx.get(), dw.get(),
                                      db.get(), batch, channels, cols, true, dtype);
  });
  print_line("batch_norm_backward", dtype, shape, 3.0 * tensor, seconds, memcpy_gbs);
  seconds = best_seconds(shape.repeats, [&] {
    kernels::cpu::group_norm_forward(x.get(), w.get(), b.get(), y.get(), stat_a.get(), stat_b.get(), batch, channels,
                                     cols, groups, 1e-5, dtype);
  });
  print_line("group_norm_forward", dtype, shape, 2.0 * tensor, seconds, memcpy_gbs);
  seconds = best_seconds(shape.repeats, [&] {
    kernels::cpu::group_norm_backward(x.get(), w.get(), stat_a.get(), stat_b.get(), dy.get(), dx.get(), dw.get(),
                                      db.get(), batch, channels, cols, groups, dtype);
  });
  print_line("group_norm_backward", dtype, shape, 3.0 * tensor, seconds, memcpy_gbs);
}

void bench_topk(DType dtype, const Shape& shape, double memcpy_gbs) {
  constexpr int64_t kTop = 8;
  const int64_t n = shape.rows * shape.cols;
  const Bytes x = random_tensor(n, dtype, 22);
  Bytes values{size_t(shape.rows * kTop) * dtype_size(dtype)}, indices{size_t(shape.rows * kTop) * sizeof(int64_t)};
  const double seconds = best_seconds(shape.repeats, [&] {
    kernels::cpu::topk(x.get(), values.get(), static_cast<int64_t*>(indices.get()), shape.rows, shape.cols, kTop, true,
                       nullptr, 0, dtype);
  });
  print_line("topk", dtype, shape, double(n * dtype_size(dtype)), seconds, memcpy_gbs);
}

// The resample2d kernel on its host tables (kernels/resample_tables.h), pointers into the tables.
kernels::ResampleAxis axis_of(const kernels::ResampleTable& t) {
  kernels::ResampleAxis a;
  a.in = t.in, a.out = t.out, a.offset = t.offset.data(), a.index = t.index.data(), a.weight = t.weight.data();
  return a;
}

void bench_resample(DType dtype, const Shape& shape, double memcpy_gbs) {
  const int64_t side = 64, planes = shape.rows / 4, in = planes * side * side;
  const Bytes x = random_tensor(in, dtype, 20), big = random_tensor(4 * in, dtype, 21);
  Bytes y{size_t(4 * in) * dtype_size(dtype)};
  const double size = double(dtype_size(dtype));
  struct Line {
    const char* name;
    kernels::ResampleTable table;
    bool from_big;
  };
  const Line lines[] = {
      {"upsample_nearest2x_forward", kernels::nearest_table(side, 2 * side, 2.0, false), false},
      {"upsample_bilinear2x_forward", kernels::linear_table(side, 2 * side, 2.0, false), false},
      {"upsample_bilinear2x_backward", kernels::transposed(kernels::linear_table(side, 2 * side, 2.0, false)), true},
      {"adaptive_avg_pool2d_forward", kernels::adaptive_avg_table(side, 7), false},
  };
  for (const Line& line : lines) {
    const kernels::ResampleAxis a = axis_of(line.table);
    const void* source = line.from_big ? big.get() : x.get();
    const double seconds = best_seconds(
        shape.repeats, [&] { kernels::cpu::resample2d(source, y.get(), planes, a, a, dtype); });
    print_line(line.name, dtype, shape, double(planes) * (a.in * a.in + a.out * a.out) * size, seconds, memcpy_gbs);
  }
}

}  // namespace

double run_memcpy_baseline(int64_t rows, int64_t cols, int repeats) {
  return memcpy_baseline(Shape{rows, cols, repeats});
}

void run_bandwidth_bench(bool quick) {
  const Shape shape{quick ? 1024 : 16384, 4096, quick ? 3 : 5};
  const double memcpy_gbs = memcpy_baseline(shape);
  for (DType dtype : {DType::f32, DType::bf16}) {
    bench_softmax(dtype, shape, memcpy_gbs);
    bench_layer_norm(dtype, shape, memcpy_gbs);
    bench_gelu(dtype, shape, memcpy_gbs);
    bench_copy(dtype, shape, memcpy_gbs);
    bench_accumulate(dtype, shape, memcpy_gbs);
    bench_compare(dtype, shape, memcpy_gbs);
    bench_where(dtype, shape, memcpy_gbs);
    bench_indexing(dtype, shape, memcpy_gbs);
    bench_normalization(dtype, shape, memcpy_gbs);
    bench_resample(dtype, shape, memcpy_gbs);
    bench_topk(dtype, shape, memcpy_gbs);
  }
}

}  // namespace hg::bench
