// The benchmark cases of the hand-written CUDA kernels (kernel_cases.h): one entry per op and variant,
// with its shapes, its random inputs and its minimum traffic. Minimum bytes list every buffer the op's
// contract reads or writes (kernels/kernels.h), in its dtype; a buffer read and written counts twice.
#include "kernel_cases.h"

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <random>
#include <set>
#include <sstream>

#include "kernels/cuda/check.h"
#include "kernels/kernels_cuda.h"
#include "kernels/optimizer_kernels.h"
#include "kernels/pointwise_loss.h"
#include "kernels/resample_tables.h"
#include "kernels/step_kernels.h"

namespace hg::bench {

namespace k = hg::kernels::cuda;
using kernels::UnaryOp;
using kernels::BinaryOp;
using kernels::ReduceOp;
using kernels::RnnCell;
using kernels::rnn_cell_name;
using kernels::rnn_gates;
using kernels::rnn_saved;
using audit::FlopKind;

uint64_t sector_bytes(uint64_t bytes) { return (bytes + 31) / 32 * 32; }

DeviceArena::~DeviceArena() {
  cudaStreamSynchronize(stream_);
  for (void* p : buffers_) cudaFree(p);
}

void* DeviceArena::zeros(size_t bytes) {
  void* p = nullptr;
  HG_CUDA_CHECK(cudaMalloc(&p, bytes == 0 ? 1 : bytes));
  buffers_.push_back(p);
  HG_CUDA_CHECK(cudaMemset(p, 0, bytes));
  return p;
}

void* DeviceArena::uniform(int64_t n, DType dtype, double low, double high) {
  void* p = zeros(size_t(n) * dtype_size(dtype));
  k::uniform_fill(p, n, low, high, seed_++, 0, dtype, stream_);
  return p;
}

void* DeviceArena::upload(const void* values, size_t bytes) {
  void* p = zeros(bytes);
  HG_CUDA_CHECK(cudaMemcpy(p, values, bytes, cudaMemcpyHostToDevice));
  return p;
}

namespace {

const std::vector<DType> kFloats = {DType::f32, DType::bf16, DType::f16};

uint64_t bytes_of(int64_t n, DType dtype) { return uint64_t(n) * dtype_size(dtype); }

// The minimum traffic of buffers of these sizes in bytes (each rounded up to whole sectors).
uint64_t io(std::initializer_list<uint64_t> buffers) {
  uint64_t sum = 0;
  for (uint64_t b : buffers) sum += sector_bytes(b);
  return sum;
}

std::string dims(std::initializer_list<int64_t> d) {
  std::ostringstream out;
  const char* sep = "";
  for (int64_t v : d) {
    out << sep << v;
    sep = "x";
  }
  return out.str();
}

// n random indices in [0, bound), seeded.
std::vector<int64_t> random_indices(int64_t n, int64_t bound, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t& v : out) v = int64_t(rng() % uint64_t(bound));
  return out;
}

// Pooling over [N = rows/16, C = 16, H = W = sqrt(cols)] planes, 2x2 windows, stride 2.
kernels::Pool2dGeometry pool_geometry(const CaseSize& s) {
  kernels::Pool2dGeometry g;
  const int64_t side = int64_t(std::lround(std::sqrt(double(s.cols))));
  g.batch = std::max<int64_t>(1, s.rows / 16);
  g.channels = 16;
  g.height = g.width = side;
  g.kernel_h = g.kernel_w = 2;
  g.stride_h = g.stride_w = 2;
  return g;
}

// A 3x3 convolution, padding 1: [N = rows/64, C = 16, H = W = sqrt(cols)] -> 32 channels.
kernels::Conv2dGeometry conv_geometry(const CaseSize& s) {
  kernels::Conv2dGeometry g;
  const int64_t side = int64_t(std::lround(std::sqrt(double(s.cols))));
  g.batch = std::max<int64_t>(1, s.rows / 64);
  g.in_channels = 16;
  g.height = g.width = side;
  g.out_channels = 32;
  g.kernel_h = g.kernel_w = 3;
  g.pad_h = g.pad_w = 1;
  return g;
}

FlopKind gemm_kind(DType dtype) { return dtype == DType::f32 ? FlopKind::fp32_fma : FlopKind::bf16_tensor; }

// A memory-bound case (flops not counted).
PreparedCase memory_case(std::string shape, uint64_t min_bytes, std::function<void()> run) {
  PreparedCase c;
  c.shape = std::move(shape);
  c.min_bytes = min_bytes;
  c.run = std::move(run);
  return c;
}

// The scalars of a capturable optimizer step, as the optimizers pass them (kernels/optimizer_kernels.h): the
// learning rate (1e-3) and found_inf (0) in device memory and the count [current 6, next, blocks done],
// settled by the last block. *bytes: what reading them and writing the counts moves.
kernels::AdamWStepScalars device_step_scalars(DeviceArena& a, uint64_t* bytes) {
  const double lr = 1e-3;
  const int64_t steps[3] = {6, 0, 0};
  const float found_inf = 0.0f;
  kernels::AdamWStepScalars scalars;
  scalars.lr = static_cast<const double*>(a.upload(&lr, sizeof lr));
  scalars.found_inf = static_cast<const float*>(a.upload(&found_inf, sizeof found_inf));
  scalars.step = static_cast<int64_t*>(a.upload(steps, sizeof steps));
  scalars.blocks_done = reinterpret_cast<unsigned long long*>(scalars.step + 2);
  *bytes = io({sizeof lr, sizeof found_inf, sizeof steps, sizeof steps});
  return scalars;
}

std::vector<KernelCase> make_cases() {
  std::vector<KernelCase> cases;
  auto add = [&](std::string name, std::vector<DType> dtypes,
                 std::function<PreparedCase(const CaseSize&, DType, DeviceArena&)> prepare, bool audit_only = false) {
    cases.push_back(KernelCase{std::move(name), std::move(dtypes), audit_only, std::move(prepare)});
  };
  using S = const CaseSize&;
  using A = DeviceArena&;

  // ---- memory and layout ----
  add("fill", kFloats, [](S s, DType dt, A a) {
    void* y = a.zeros(bytes_of(s.n(), dt));
    return memory_case(dims({s.n()}), io({bytes_of(s.n(), dt)}),
                       [=, st = a.stream()] { k::fill(y, s.n(), 0.5, dt, st); });
  });
  // cast to f32 (f32: to bf16), the mixed-precision copies.
  add("cast", kFloats, [](S s, DType dt, A a) {
    const DType to = dt == DType::f32 ? DType::bf16 : DType::f32;
    void* x = a.uniform(s.n(), dt);
    void* y = a.zeros(bytes_of(s.n(), to));
    return memory_case(dims({s.n()}) + " to " + dtype_name(to), io({bytes_of(s.n(), dt), bytes_of(s.n(), to)}),
                       [=, st = a.stream()] { k::cast(x, dt, y, to, s.n(), st); });
  });
  add("copy_contiguous", kFloats, [](S s, DType dt, A a) {
    void* x = a.uniform(s.n(), dt);
    void* y = a.zeros(bytes_of(s.n(), dt));
    return memory_case(dims({s.n()}), io({bytes_of(s.n(), dt), bytes_of(s.n(), dt)}), [=, st = a.stream()] {
      const int64_t shape[1] = {s.n()}, strides[1] = {1};
      k::copy_strided(x, strides, y, strides, shape, 1, dt, st);
    });
  });
  // contiguous() of attention's head permutation: [B, T, H, D] viewed as [B, H, T, D], D = 64.
  add("copy_strided", kFloats, [](S s, DType dt, A a) {
    const int64_t B = 4, T = std::max<int64_t>(1, s.rows / 4), D = 64, H = std::max<int64_t>(1, s.cols / 64);
    const int64_t n = B * T * H * D;
    void* x = a.uniform(n, dt);
    void* y = a.zeros(bytes_of(n, dt));
    return memory_case(dims({B, T, H, D}) + " as " + dims({B, H, T, D}), io({bytes_of(n, dt), bytes_of(n, dt)}),
                       [=, st = a.stream()] {
                         const int64_t shape[4] = {B, H, T, D};
                         const int64_t src[4] = {T * H * D, D, H * D, 1}, dst[4] = {H * T * D, T * D, D, 1};
                         k::copy_strided(x, src, y, dst, shape, 4, dt, st);
                       });
  });

  // ---- elementwise ----
  add("gelu_forward", kFloats, [](S s, DType dt, A a) {
    void* x = a.uniform(s.n(), dt);
    void* y = a.zeros(bytes_of(s.n(), dt));
    return memory_case(dims({s.n()}), io({bytes_of(s.n(), dt), bytes_of(s.n(), dt)}), [=, st = a.stream()] {
      k::unary_forward(UnaryOp::GeluTanh, x, y, s.n(), 0.0, dt, st);
    });
  });
  add("gelu_backward", kFloats, [](S s, DType dt, A a) {
    void* x = a.uniform(s.n(), dt);
    void* y = a.uniform(s.n(), dt);
    void* dy = a.uniform(s.n(), dt);
    void* dx = a.zeros(bytes_of(s.n(), dt));
    // GELU's derivative needs x and dy, not y.
    return memory_case(dims({s.n()}), io({bytes_of(s.n(), dt), bytes_of(s.n(), dt), bytes_of(s.n(), dt)}),
                       [=, st = a.stream()] { k::unary_backward(UnaryOp::GeluTanh, x, y, dy, dx, s.n(), 0.0, dt, st); });
  });
  // The pointwise losses (kernels/pointwise_loss.h; every kind is the same map_elements kernel), Huber's:
  // the per-element values, and the backward of their mean (one upstream value, read by every thread).
  add("huber_loss_forward", kFloats, [](S s, DType dt, A a) {
    void* x = a.uniform(s.n(), dt);
    void* t = a.uniform(s.n(), dt);
    void* y = a.zeros(bytes_of(s.n(), dt));
    return memory_case(dims({s.n()}), io({bytes_of(s.n(), dt), bytes_of(s.n(), dt), bytes_of(s.n(), dt)}),
                       [=, st = a.stream()] {
                         k::pointwise_loss_forward(kernels::PointwiseLoss::Huber, 0.5, 1.0, x, t, y, s.n(), dt, st);
                       });
  });
  add("huber_loss_backward", kFloats, [](S s, DType dt, A a) {
    void* x = a.uniform(s.n(), dt);
    void* t = a.uniform(s.n(), dt);
    void* g = a.uniform(1, dt);
    void* dx = a.zeros(bytes_of(s.n(), dt));
    return memory_case(dims({s.n()}) + " mean",
                       io({bytes_of(s.n(), dt), bytes_of(s.n(), dt), bytes_of(1, dt), bytes_of(s.n(), dt)}),
                       [=, st = a.stream()] {
                         k::pointwise_loss_backward(kernels::PointwiseLoss::Huber, 0.5, 1.0 / double(s.n()), x, t, g,
                                                    false, dx, nullptr, s.n(), dt, st);
                       });
  });
  add("affine", kFloats, [](S s, DType dt, A a) {
    void* x = a.uniform(s.n(), dt);
    void* y = a.zeros(bytes_of(s.n(), dt));
    return memory_case(dims({s.n()}), io({bytes_of(s.n(), dt), bytes_of(s.n(), dt)}),
                       [=, st = a.stream()] { k::affine(x, y, s.n(), 2.0, 0.5, dt, st); });
  });
  add("add", kFloats, [](S s, DType dt, A a) {
    void* x = a.uniform(s.n(), dt);
    void* b = a.uniform(s.n(), dt);
    void* y = a.zeros(bytes_of(s.n(), dt));
    return memory_case(dims({s.rows, s.cols}), io({bytes_of(s.n(), dt), bytes_of(s.n(), dt), bytes_of(s.n(), dt)}),
                       [=, st = a.stream()] {
                         const int64_t shape[2] = {s.rows, s.cols}, strides[2] = {s.cols, 1};
                         k::binary_forward(BinaryOp::Add, x, strides, b, strides, y, shape, 2, dt, st);
                       });
  });
  // A leaf's gradient accumulation, y += x in place: y read and written, x read.
  add("accumulate", kFloats, [](S s, DType dt, A a) {
    void* y = a.uniform(s.n(), dt);
    void* x = a.uniform(s.n(), dt);
    return memory_case(dims({s.n()}), io({bytes_of(s.n(), dt), bytes_of(s.n(), dt), bytes_of(s.n(), dt)}),
                       [=, st = a.stream()] { k::accumulate(y, x, s.n(), dt, st); });
  });
  // A bias over the rows: y[r, c] = x[r, c] + b[c] (the broadcast kernel).
  add("add_bias", kFloats, [](S s, DType dt, A a) {
    void* x = a.uniform(s.n(), dt);
    void* b = a.uniform(s.cols, dt);
    void* y = a.zeros(bytes_of(s.n(), dt));
    return memory_case(dims({s.rows, s.cols}) + " + " + dims({s.cols}),
                       io({bytes_of(s.n(), dt), bytes_of(s.cols, dt), bytes_of(s.n(), dt)}), [=, st = a.stream()] {
                         const int64_t shape[2] = {s.rows, s.cols}, xs[2] = {s.cols, 1}, bs[2] = {0, 1};
                         k::binary_forward(BinaryOp::Add, x, xs, b, bs, y, shape, 2, dt, st);
                       });
  });
  add("mul_scalar", kFloats, [](S s, DType dt, A a) {
    void* x = a.uniform(s.n(), dt);
    void* b = a.uniform(1, dt);
    void* y = a.zeros(bytes_of(s.n(), dt));
    return memory_case(dims({s.n()}) + " * scalar", io({bytes_of(s.n(), dt), bytes_of(1, dt), bytes_of(s.n(), dt)}),
                       [=, st = a.stream()] {
                         const int64_t shape[1] = {s.n()}, xs[1] = {1}, bs[1] = {0};
                         k::binary_forward(BinaryOp::Mul, x, xs, b, bs, y, shape, 1, dt, st);
                       });
  });

  // ---- masks: compare_forward, where_forward ----
  // y[r, c] = x[r, c] < b[c] (an attention-mask style comparison against a broadcast row): bool out.
  add("compare_lt", kFloats, [](S s, DType dt, A a) {
    void* x = a.uniform(s.n(), dt);
    void* b = a.uniform(s.cols, dt);
    void* y = a.zeros(size_t(s.n()));
    return memory_case(dims({s.rows, s.cols}) + " < " + dims({s.cols}),
                       io({bytes_of(s.n(), dt), bytes_of(s.cols, dt), bytes_of(s.n(), DType::b8)}),
                       [=, st = a.stream()] {
                         const int64_t shape[2] = {s.rows, s.cols}, xs[2] = {s.cols, 1}, bs[2] = {0, 1};
                         k::compare_forward(kernels::CompareOp::Lt, x, xs, b, bs, static_cast<bool*>(y), shape, 2, dt,
                                            st);
                       });
  });
  // y = where(cond, a, b) over [rows, cols], cond random (half true): the mask made by compare_forward
  // during setup.
  add("where", kFloats, [](S s, DType dt, A a) {
    void* u = a.uniform(s.n(), DType::f32, -1.0, 1.0);
    void* zero = a.zeros(sizeof(float));
    bool* cond = static_cast<bool*>(a.zeros(size_t(s.n())));
    const int64_t flat[1] = {s.n()}, unit[1] = {1}, none[1] = {0};
    k::compare_forward(kernels::CompareOp::Gt, u, unit, zero, none, cond, flat, 1, DType::f32, a.stream());
    void* x = a.uniform(s.n(), dt);
    void* b = a.uniform(s.n(), dt);
    void* y = a.zeros(bytes_of(s.n(), dt));
    return memory_case(dims({s.rows, s.cols}),
                       io({bytes_of(s.n(), DType::b8), bytes_of(s.n(), dt), bytes_of(s.n(), dt), bytes_of(s.n(), dt)}),
                       [=, st = a.stream()] {
                         const int64_t shape[2] = {s.rows, s.cols}, strides[2] = {s.cols, 1};
                         k::where_forward(cond, strides, x, strides, b, strides, y, shape, 2, dt, st);
                       });
  });

  // ---- reductions ----
  add("reduce_sum_rows", kFloats, [](S s, DType dt, A a) {
    void* x = a.uniform(s.n(), dt);
    void* y = a.zeros(bytes_of(s.rows, dt));
    return memory_case(dims({s.rows, s.cols}) + " over cols", io({bytes_of(s.n(), dt), bytes_of(s.rows, dt)}),
                       [=, st = a.stream()] { k::reduce(ReduceOp::Sum, x, y, nullptr, s.rows, s.cols, 1, 1.0, dt, st); });
  });
  add("reduce_max_rows", kFloats, [](S s, DType dt, A a) {
    void* x = a.uniform(s.n(), dt);
    void* y = a.zeros(bytes_of(s.rows, dt));
    auto* argmax = static_cast<int64_t*>(a.zeros(bytes_of(s.rows, DType::i64)));
    return memory_case(dims({s.rows, s.cols}) + " over cols, argmax",
                       io({bytes_of(s.n(), dt), bytes_of(s.rows, dt), bytes_of(s.rows, DType::i64)}),
                       [=, st = a.stream()] { k::reduce(ReduceOp::Max, x, y, argmax, s.rows, s.cols, 1, 1.0, dt, st); });
  });
  add("reduce_sum_columns", kFloats, [](S s, DType dt, A a) {
    void* x = a.uniform(s.n(), dt);
    void* y = a.zeros(bytes_of(s.cols, dt));
    return memory_case(dims({s.rows, s.cols}) + " over rows", io({bytes_of(s.n(), dt), bytes_of(s.cols, dt)}),
                       [=, st = a.stream()] { k::reduce(ReduceOp::Sum, x, y, nullptr, 1, s.rows, s.cols, 1.0, dt, st); });
  });
  // The backward of max over the columns: y [rows, cols] zero but at index[r].
  add("scatter_along", kFloats, [](S s, DType dt, A a) {
    void* x = a.uniform(s.rows, dt);
    auto* index = a.upload(random_indices(s.rows, s.cols, 5));
    void* y = a.zeros(bytes_of(s.n(), dt));
    return memory_case(dims({s.rows}) + " into " + dims({s.rows, s.cols}),
                       io({bytes_of(s.rows, dt), bytes_of(s.rows, DType::i64), bytes_of(s.n(), dt)}),
                       [=, st = a.stream()] { k::scatter_along(x, index, y, s.rows, s.cols, 1, dt, st); });
  });

  // ---- softmax ----
  for (const bool log : {false, true}) {
    add(log ? "log_softmax_forward" : "softmax_forward", kFloats, [log](S s, DType dt, A a) {
      void* x = a.uniform(s.n(), dt);
      void* y = a.zeros(bytes_of(s.n(), dt));
      return memory_case(dims({s.rows, s.cols}), io({bytes_of(s.n(), dt), bytes_of(s.n(), dt)}),
                         [=, st = a.stream()] { k::softmax_forward(x, y, s.rows, s.cols, log, 0, dt, st); });
    });
  }
  // Attention's masked softmax: row r sees columns <= r % rows + (cols - rows); masked inputs need not be read.
  add("softmax_forward_causal", kFloats, [](S s, DType dt, A a) {
    const int64_t causal = std::min(s.rows, s.cols);
    void* x = a.uniform(s.n(), dt);
    void* y = a.zeros(bytes_of(s.n(), dt));
    return memory_case(dims({s.rows, s.cols}) + " causal", io({bytes_of(s.n(), dt), bytes_of(s.n(), dt)}),
                       [=, st = a.stream()] { k::softmax_forward(x, y, s.rows, s.cols, false, causal, dt, st); });
  });
  for (const bool log : {false, true}) {
    add(log ? "log_softmax_backward" : "softmax_backward", kFloats, [log](S s, DType dt, A a) {
      void* y = a.uniform(s.n(), dt, 0.0, 1.0 / double(s.cols));
      void* dy = a.uniform(s.n(), dt);
      void* dx = a.zeros(bytes_of(s.n(), dt));
      return memory_case(dims({s.rows, s.cols}), io({bytes_of(s.n(), dt), bytes_of(s.n(), dt), bytes_of(s.n(), dt)}),
                         [=, st = a.stream()] { k::softmax_backward(y, dy, dx, s.rows, s.cols, log, dt, st); });
    });
  }

  // ---- cross entropy ----
  add("cross_entropy_forward", kFloats, [](S s, DType dt, A a) {
    const DType acc = accumulate_dtype(dt);
    void* logits = a.uniform(s.n(), dt, -4.0, 4.0);
    void* targets = a.upload(random_indices(s.rows, s.cols, 7));
    void* loss = a.zeros(bytes_of(s.rows, acc));
    void* lse = a.zeros(bytes_of(s.rows, acc));
    void* mean = a.zeros(bytes_of(1, acc));
    void* inv_count = a.zeros(bytes_of(1, acc));
    return memory_case(dims({s.rows, s.cols}),
                       io({bytes_of(s.n(), dt), bytes_of(s.rows, DType::i64), bytes_of(s.rows, acc), bytes_of(s.rows, acc),
                           bytes_of(1, acc), bytes_of(1, acc)}),
                       [=, st = a.stream()] {
                         k::cross_entropy_forward(logits, targets, DType::i64, loss, lse, mean, inv_count, s.rows, s.cols,
                                                  -100, dt, st);
                       });
  });
  add("cross_entropy_backward", kFloats, [](S s, DType dt, A a) {
    const DType acc = accumulate_dtype(dt);
    void* logits = a.uniform(s.n(), dt, -4.0, 4.0);
    void* targets = a.upload(random_indices(s.rows, s.cols, 7));
    void* loss = a.zeros(bytes_of(s.rows, acc));
    void* lse = a.zeros(bytes_of(s.rows, acc));
    void* scalars = a.zeros(bytes_of(2, acc));
    k::cross_entropy_forward(logits, targets, DType::i64, loss, lse, scalars, static_cast<char*>(scalars) + dtype_size(acc),
                             s.rows, s.cols, -100, dt, a.stream());
    void* dloss = a.uniform(s.rows, acc);
    void* dlogits = a.zeros(bytes_of(s.n(), dt));
    return memory_case(dims({s.rows, s.cols}),
                       io({bytes_of(s.n(), dt), bytes_of(s.rows, DType::i64), bytes_of(s.rows, acc), bytes_of(s.rows, acc),
                           bytes_of(s.n(), dt)}),
                       [=, st = a.stream()] {
                         k::cross_entropy_backward(logits, targets, DType::i64, lse, dloss, dlogits, s.rows, s.cols, -100,
                                                   dt, st);
                       });
  });

  // ---- LayerNorm ----
  add("layer_norm_forward", kFloats, [](S s, DType dt, A a) {
    const DType acc = accumulate_dtype(dt);
    void* x = a.uniform(s.n(), dt);
    void* w = a.uniform(s.cols, dt);
    void* b = a.uniform(s.cols, dt);
    void* y = a.zeros(bytes_of(s.n(), dt));
    void* mean = a.zeros(bytes_of(s.rows, acc));
    void* rstd = a.zeros(bytes_of(s.rows, acc));
    return memory_case(dims({s.rows, s.cols}),
                       io({bytes_of(s.n(), dt), bytes_of(s.cols, dt), bytes_of(s.cols, dt), bytes_of(s.n(), dt),
                           bytes_of(s.rows, acc), bytes_of(s.rows, acc)}),
                       [=, st = a.stream()] { k::layer_norm_forward(x, w, b, y, mean, rstd, s.rows, s.cols, 1e-5, dt, st); });
  });
  add("layer_norm_backward", kFloats, [](S s, DType dt, A a) {
    const DType acc = accumulate_dtype(dt);
    void* x = a.uniform(s.n(), dt);
    void* w = a.uniform(s.cols, dt);
    void* b = a.uniform(s.cols, dt);
    void* y = a.zeros(bytes_of(s.n(), dt));
    void* mean = a.zeros(bytes_of(s.rows, acc));
    void* rstd = a.zeros(bytes_of(s.rows, acc));
    k::layer_norm_forward(x, w, b, y, mean, rstd, s.rows, s.cols, 1e-5, dt, a.stream());
    void* dy = a.uniform(s.n(), dt);
    void* dx = a.zeros(bytes_of(s.n(), dt));
    void* dw = a.zeros(bytes_of(s.cols, dt));
    void* db = a.zeros(bytes_of(s.cols, dt));
    return memory_case(dims({s.rows, s.cols}),
                       io({bytes_of(s.n(), dt), bytes_of(s.cols, dt), bytes_of(s.rows, acc), bytes_of(s.rows, acc),
                           bytes_of(s.n(), dt), bytes_of(s.n(), dt), bytes_of(s.cols, dt), bytes_of(s.cols, dt)}),
                       [=, st = a.stream()] {
                         k::layer_norm_backward(x, w, mean, rstd, dy, dx, dw, db, s.rows, s.cols, dt, st);
                       });
  });

  // ---- LayerNorm fused with the residual add before it (a GPT block's h = x + f(x); ln(h)) ----
  add("add_layer_norm_forward", kFloats, [](S s, DType dt, A a) {
    const DType acc = accumulate_dtype(dt);
    void* x = a.uniform(s.n(), dt);
    void* residual = a.uniform(s.n(), dt);
    void* w = a.uniform(s.cols, dt);
    void* b = a.uniform(s.cols, dt);
    void* h = a.zeros(bytes_of(s.n(), dt));
    void* y = a.zeros(bytes_of(s.n(), dt));
    void* mean = a.zeros(bytes_of(s.rows, acc));
    void* rstd = a.zeros(bytes_of(s.rows, acc));
    // x and residual read, h and y written; the passes that re-read h come from L2.
    return memory_case(dims({s.rows, s.cols}),
                       io({bytes_of(s.n(), dt), bytes_of(s.n(), dt), bytes_of(s.cols, dt), bytes_of(s.cols, dt),
                           bytes_of(s.n(), dt), bytes_of(s.n(), dt), bytes_of(s.rows, acc), bytes_of(s.rows, acc)}),
                       [=, st = a.stream()] {
                         k::add_layer_norm_forward(x, residual, w, b, h, y, mean, rstd, s.rows, s.cols, 1e-5, dt, st);
                       });
  });
  add("add_layer_norm_backward", kFloats, [](S s, DType dt, A a) {
    const DType acc = accumulate_dtype(dt);
    void* x = a.uniform(s.n(), dt);
    void* residual = a.uniform(s.n(), dt);
    void* w = a.uniform(s.cols, dt);
    void* b = a.uniform(s.cols, dt);
    void* h = a.zeros(bytes_of(s.n(), dt));
    void* y = a.zeros(bytes_of(s.n(), dt));
    void* mean = a.zeros(bytes_of(s.rows, acc));
    void* rstd = a.zeros(bytes_of(s.rows, acc));
    k::add_layer_norm_forward(x, residual, w, b, h, y, mean, rstd, s.rows, s.cols, 1e-5, dt, a.stream());
    void* dy = a.uniform(s.n(), dt);
    void* dh = a.uniform(s.n(), dt);
    void* dx = a.zeros(bytes_of(s.n(), dt));
    void* dw = a.zeros(bytes_of(s.cols, dt));
    void* db = a.zeros(bytes_of(s.cols, dt));
    // layer_norm_backward's buffers plus dh, the gradient reaching h directly, read once.
    return memory_case(dims({s.rows, s.cols}),
                       io({bytes_of(s.n(), dt), bytes_of(s.cols, dt), bytes_of(s.rows, acc), bytes_of(s.rows, acc),
                           bytes_of(s.n(), dt), bytes_of(s.n(), dt), bytes_of(s.n(), dt), bytes_of(s.cols, dt),
                           bytes_of(s.cols, dt)}),
                       [=, st = a.stream()] {
                         k::add_layer_norm_backward(h, w, mean, rstd, dy, dh, dx, dw, db, s.rows, s.cols, dt, st);
                       });
  });

  // ---- embedding: ids [rows], rows of cols, a vocabulary of rows / 2 (ids repeat, as tokens do) ----
  add("embedding_forward", kFloats, [](S s, DType dt, A a) {
    const int64_t vocab = std::max<int64_t>(1, s.rows / 2), dim = s.cols;
    const std::vector<int64_t> ids_host = random_indices(s.rows, vocab, 11);
    const int64_t distinct = int64_t(std::set<int64_t>(ids_host.begin(), ids_host.end()).size());
    void* weight = a.uniform(vocab * dim, dt);
    void* ids = a.upload(ids_host);
    void* y = a.zeros(bytes_of(s.rows * dim, dt));
    // The rows the ids name, each read once.
    return memory_case(dims({s.rows}) + " ids of " + dims({vocab, dim}),
                       io({bytes_of(distinct * dim, dt), bytes_of(s.rows, DType::i64), bytes_of(s.rows * dim, dt)}),
                       [=, st = a.stream()] { k::embedding_forward(weight, ids, DType::i64, y, s.rows, vocab, dim, dt, st); });
  });
  add("embedding_backward", kFloats, [](S s, DType dt, A a) {
    const int64_t vocab = std::max<int64_t>(1, s.rows / 2), dim = s.cols;
    void* dy = a.uniform(s.rows * dim, dt);
    void* ids = a.upload(random_indices(s.rows, vocab, 11));
    void* dweight = a.zeros(bytes_of(vocab * dim, dt));
    return memory_case(dims({s.rows}) + " ids into " + dims({vocab, dim}),
                       io({bytes_of(s.rows * dim, dt), bytes_of(s.rows, DType::i64), bytes_of(vocab * dim, dt)}),
                       [=, st = a.stream()] {
                         k::embedding_backward(dy, ids, DType::i64, dweight, s.rows, vocab, dim, dt, st);
                       });
  });

  // ---- rms_norm over [rows, cols]; group_norm and batch_norm over [N, C, S] = [rows / 16, 16, cols] ----
  add("rms_norm_forward", kFloats, [](S s, DType dt, A a) {
    const DType acc = accumulate_dtype(dt);
    void* x = a.uniform(s.n(), dt);
    void* w = a.uniform(s.cols, dt);
    void* y = a.zeros(bytes_of(s.n(), dt));
    void* rstd = a.zeros(bytes_of(s.rows, acc));
    return memory_case(dims({s.rows, s.cols}),
                       io({bytes_of(s.n(), dt), bytes_of(s.cols, dt), bytes_of(s.n(), dt), bytes_of(s.rows, acc)}),
                       [=, st = a.stream()] { k::rms_norm_forward(x, w, y, rstd, s.rows, s.cols, 1e-5, dt, st); });
  });
  add("rms_norm_backward", kFloats, [](S s, DType dt, A a) {
    const DType acc = accumulate_dtype(dt);
    void* x = a.uniform(s.n(), dt);
    void* w = a.uniform(s.cols, dt);
    void* y = a.zeros(bytes_of(s.n(), dt));
    void* rstd = a.zeros(bytes_of(s.rows, acc));
    k::rms_norm_forward(x, w, y, rstd, s.rows, s.cols, 1e-5, dt, a.stream());
    void* dy = a.uniform(s.n(), dt);
    void* dx = a.zeros(bytes_of(s.n(), dt));
    void* dw = a.zeros(bytes_of(s.cols, dt));
    return memory_case(dims({s.rows, s.cols}),
                       io({bytes_of(s.n(), dt), bytes_of(s.cols, dt), bytes_of(s.rows, acc), bytes_of(s.n(), dt),
                           bytes_of(s.n(), dt), bytes_of(s.cols, dt)}),
                       [=, st = a.stream()] { k::rms_norm_backward(x, w, rstd, dy, dx, dw, s.rows, s.cols, dt, st); });
  });
  // ---- one recurrent step over [batch, hidden] = [rows, cols]: LSTM (4 gates), GRU (3) and the tanh RNN ----
  for (const RnnCell cell : {RnnCell::Lstm, RnnCell::Gru, RnnCell::RnnTanh}) {
    const std::string name = std::string(rnn_cell_name(cell)) + "_cell";
    add(name + "_forward", kFloats, [cell](S s, DType dt, A a) {
      const int64_t n = s.n(), g = rnn_gates(cell), saved = rnn_saved(cell);
      const bool lstm = cell == RnnCell::Lstm, gru = cell == RnnCell::Gru;
      void* x = a.uniform(g * n, dt);
      void* hp = a.uniform(g * n, dt);
      void* bias = a.uniform(g * s.cols, dt);
      void* h_prev = a.uniform(n, dt);
      void* c_prev = a.uniform(n, dt);
      void* h = a.zeros(bytes_of(n, dt));
      void* c = a.zeros(bytes_of(n, dt));
      void* keep = a.zeros(bytes_of(saved * n + 1, dt));
      return memory_case(dims({s.rows, g * s.cols}) + " gates",
                         io({bytes_of(g * n, dt), bytes_of(g * n, dt), bytes_of(g * s.cols, dt),
                             gru ? bytes_of(n, dt) : 0, lstm ? bytes_of(n, dt) : 0, bytes_of(n, dt),
                             lstm ? bytes_of(n, dt) : 0, bytes_of(saved * n, dt)}),
                         [=, st = a.stream()] {
                           k::rnn_cell_forward(cell, x, hp, bias, h_prev, c_prev, h, c, keep, s.rows, s.cols, dt, st);
                         });
    });
    add(name + "_backward", kFloats, [cell](S s, DType dt, A a) {
      const int64_t n = s.n(), g = rnn_gates(cell), saved = rnn_saved(cell);
      const bool lstm = cell == RnnCell::Lstm, gru = cell == RnnCell::Gru;
      void* keep = a.uniform(saved * n + 1, dt, 0.05, 0.95);  // activated gates
      void* h = a.uniform(n, dt);
      void* c = a.uniform(n, dt);
      void* h_prev = a.uniform(n, dt);
      void* c_prev = a.uniform(n, dt);
      void* dh_next = a.uniform(n, dt);
      void* dy = a.uniform(n, dt);
      void* dc = a.uniform(n, dt);
      void* dx = a.zeros(bytes_of(g * n, dt));
      void* dhp = a.zeros(bytes_of(g * n, dt));
      void* dc_prev = a.zeros(bytes_of(n, dt));
      void* dh_prev = a.zeros(bytes_of(n, dt));
      const uint64_t unit = bytes_of(n, dt);
      return memory_case(dims({s.rows, g * s.cols}) + " gates",
                         io({bytes_of(saved * n, dt), saved == 0 ? unit : 0, lstm ? 2 * unit : 0, gru ? unit : 0,
                             2 * unit, lstm ? unit : 0, bytes_of(g * n, dt), gru ? bytes_of(g * n, dt) + unit : 0,
                             lstm ? unit : 0}),
                         [=, st = a.stream()] {
                           k::rnn_cell_backward(cell, keep, h, c, h_prev, c_prev, dh_next, dy, dc, dx, dhp, dc_prev,
                                                dh_prev, s.rows, s.cols, dt, st);
                         });
    });
  }
  for (const bool backward : {false, true}) {
    add(backward ? "group_norm_backward" : "group_norm_forward", kFloats, [backward](S s, DType dt, A a) {
      const DType acc = accumulate_dtype(dt);
      constexpr int64_t kChannels = 16, kGroups = 4;
      const int64_t batch = std::max<int64_t>(1, s.rows / kChannels), spatial = s.cols, n = batch * kChannels * spatial;
      void* x = a.uniform(n, dt);
      void* w = a.uniform(kChannels, dt);
      void* b = a.uniform(kChannels, dt);
      void* y = a.zeros(bytes_of(n, dt));
      void* mean = a.zeros(bytes_of(batch * kGroups, acc));
      void* rstd = a.zeros(bytes_of(batch * kGroups, acc));
      const std::string shape = dims({batch, kChannels, spatial}) + " in " + std::to_string(kGroups) + " groups";
      const uint64_t params = 2 * bytes_of(kChannels, dt), stats = 2 * bytes_of(batch * kGroups, acc);
      if (!backward) {
        return memory_case(shape, io({bytes_of(n, dt), params, bytes_of(n, dt), stats}), [=, st = a.stream()] {
          k::group_norm_forward(x, w, b, y, mean, rstd, batch, kChannels, spatial, kGroups, 1e-5, dt, st);
        });
      }
      k::group_norm_forward(x, w, b, y, mean, rstd, batch, kChannels, spatial, kGroups, 1e-5, dt, a.stream());
      void* dy = a.uniform(n, dt);
      void* dx = a.zeros(bytes_of(n, dt));
      void* dw = a.zeros(bytes_of(kChannels, dt));
      void* db = a.zeros(bytes_of(kChannels, dt));
      return memory_case(
          shape, io({bytes_of(n, dt), bytes_of(n, dt), bytes_of(n, dt), params, stats, params}), [=, st = a.stream()] {
            k::group_norm_backward(x, w, mean, rstd, dy, dx, dw, db, batch, kChannels, spatial, kGroups, dt, st);
          });
    });
  }
  // batch_norm in training, over feature maps ([rows / 16, 16, cols]: a block per channel) and over
  // features ([rows, cols], S = 1: a thread per channel).
  for (const bool maps : {true, false}) {
    for (const bool backward : {false, true}) {
      const std::string name = std::string("batch_norm_") + (maps ? "" : "1d_") + (backward ? "backward" : "forward");
      add(name, kFloats, [maps, backward](S s, DType dt, A a) {
        const DType acc = accumulate_dtype(dt);
        const int64_t channels = maps ? 16 : s.cols, batch = maps ? std::max<int64_t>(1, s.rows / 16) : s.rows,
                      spatial = maps ? s.cols : 1, n = batch * channels * spatial;
        void* x = a.uniform(n, dt);
        void* w = a.uniform(channels, dt);
        void* b = a.uniform(channels, dt);
        void* running_mean = a.zeros(bytes_of(channels, acc));
        void* running_var = a.uniform(channels, acc, 0.5, 1.5);
        void* y = a.zeros(bytes_of(n, dt));
        void* save_mean = a.zeros(bytes_of(channels, acc));
        void* save_rstd = a.zeros(bytes_of(channels, acc));
        const std::string shape = maps ? dims({batch, channels, spatial}) : dims({batch, channels});
        const uint64_t params = 2 * bytes_of(channels, dt), stats = 2 * bytes_of(channels, acc);
        if (!backward) {
          // x read, y written; the running statistics read and written, the saved ones written.
          return memory_case(shape, io({bytes_of(n, dt), params, 2 * stats, bytes_of(n, dt), stats}),
                             [=, st = a.stream()] {
                               k::batch_norm_forward(x, w, b, running_mean, running_var, y, save_mean, save_rstd, batch,
                                                     channels, spatial, true, 0.1, 1e-5, dt, st);
                             });
        }
        k::batch_norm_forward(x, w, b, running_mean, running_var, y, save_mean, save_rstd, batch, channels, spatial,
                              true, 0.1, 1e-5, dt, a.stream());
        void* dy = a.uniform(n, dt);
        void* dx = a.zeros(bytes_of(n, dt));
        void* dw = a.zeros(bytes_of(channels, dt));
        void* db = a.zeros(bytes_of(channels, dt));
        return memory_case(shape, io({bytes_of(n, dt), bytes_of(n, dt), bytes_of(n, dt), params, stats, params}),
                           [=, st = a.stream()] {
                             k::batch_norm_backward(x, w, save_mean, save_rstd, dy, dx, dw, db, batch, channels,
                                                    spatial, true, dt, st);
                           });
      });
    }
  }

  // ---- indexing along a dimension: index_gather, index_scatter_add ----
  // index_select of rows: x [rows, cols], index [rows] (random rows, repeats) -> y [rows, cols].
  add("index_select", kFloats, [](S s, DType dt, A a) {
    const std::vector<int64_t> index_host = random_indices(s.rows, s.rows, 13);
    const int64_t distinct = int64_t(std::set<int64_t>(index_host.begin(), index_host.end()).size());
    void* x = a.uniform(s.n(), dt);
    void* index = a.upload(index_host);
    void* y = a.zeros(bytes_of(s.n(), dt));
    return memory_case(
        dims({s.rows}) + " rows of " + dims({s.rows, s.cols}),
        io({bytes_of(distinct * s.cols, dt), bytes_of(s.rows, DType::i64), bytes_of(s.n(), dt)}),
        [=, st = a.stream()] { k::index_gather(x, index, DType::i64, y, 1, s.rows, s.rows, s.cols, false, dt, st); });
  });
  // index_add, a graph network's aggregation: rows messages of cols features summed into rows / 2
  // nodes (random targets) on top of a base.
  add("index_add", kFloats, [](S s, DType dt, A a) {
    const int64_t nodes = std::max<int64_t>(1, s.rows / 2);
    void* base = a.uniform(nodes * s.cols, dt);
    void* src = a.uniform(s.n(), dt);
    void* index = a.upload(random_indices(s.rows, nodes, 14));
    void* y = a.zeros(bytes_of(nodes * s.cols, dt));
    return memory_case(dims({s.rows, s.cols}) + " into " + dims({nodes, s.cols}),
                       io({bytes_of(nodes * s.cols, dt), bytes_of(s.n(), dt), bytes_of(s.rows, DType::i64),
                           bytes_of(nodes * s.cols, dt)}),
                       [=, st = a.stream()] {
                         k::index_scatter_add(base, src, index, DType::i64, y, 1, nodes, s.rows, s.cols, false, 1.0, dt,
                                              st);
                       });
  });
  // gather's backward along the last dimension: dy [rows, 8] picked from [rows, cols] (the
  // gradient of a gather of 8 classes per row) scattered into a zero-based dx [rows, cols].
  add("gather_backward", kFloats, [](S s, DType dt, A a) {
    constexpr int64_t kPicked = 8;
    void* dy = a.uniform(s.rows * kPicked, dt);
    void* index = a.upload(random_indices(s.rows * kPicked, s.cols, 15));
    void* dx = a.zeros(bytes_of(s.n(), dt));
    return memory_case(
        dims({s.rows, kPicked}) + " into " + dims({s.rows, s.cols}),
        io({bytes_of(s.rows * kPicked, dt), bytes_of(s.rows * kPicked, DType::i64), bytes_of(s.n(), dt)}),
        [=, st = a.stream()] {
          k::index_scatter_add(nullptr, dy, index, DType::i64, dx, s.rows, s.cols, kPicked, 1, true, 1.0, dt, st);
        });
  });

  // ---- cumsum: along the rows' last dimension (the warp scan) and down the columns ----
  for (const bool rows : {true, false}) {
    add(rows ? "cumsum_rows" : "cumsum_columns", kFloats, [rows](S s, DType dt, A a) {
      void* x = a.uniform(s.n(), dt);
      void* y = a.zeros(bytes_of(s.n(), dt));
      return memory_case(dims({s.rows, s.cols}) + (rows ? " along cols" : " along rows"),
                         io({bytes_of(s.n(), dt), bytes_of(s.n(), dt)}), [=, st = a.stream()] {
                           if (rows) {
                             k::cumsum(x, y, s.rows, s.cols, 1, false, dt, st);
                           } else {
                             k::cumsum(x, y, 1, s.rows, s.cols, false, dt, st);
                           }
                         });
    });
  }

  // ---- topk: the 8 largest of each row (a classifier's top-k), rows sorted in shared memory ----
  add("topk", kFloats, [](S s, DType dt, A a) {
    constexpr int64_t kTop = 8;
    void* x = a.uniform(s.n(), dt);
    void* values = a.zeros(bytes_of(s.rows * kTop, dt));
    auto* indices = static_cast<int64_t*>(a.zeros(bytes_of(s.rows * kTop, DType::i64)));
    return memory_case(dims({s.rows, s.cols}) + " k 8",
                       io({bytes_of(s.n(), dt), bytes_of(s.rows * kTop, dt), bytes_of(s.rows * kTop, DType::i64)}),
                       [=, st = a.stream()] { k::topk(x, values, indices, s.rows, s.cols, kTop, true, nullptr, 0, dt, st); });
  });

  // ---- dropout, random fill, stochastic rounding ----
  for (const bool backward : {false, true}) {
    add(backward ? "dropout_backward" : "dropout_forward", kFloats, [backward](S s, DType dt, A a) {
      void* x = a.uniform(s.n(), dt);
      void* y = a.zeros(bytes_of(s.n(), dt));
      return memory_case(dims({s.n()}) + " p 0.1", io({bytes_of(s.n(), dt), bytes_of(s.n(), dt)}), [=, st = a.stream()] {
        if (backward) k::dropout_backward(x, y, s.n(), 0.1, 42, 0, dt, st);
        else k::dropout_forward(x, y, s.n(), 0.1, 42, 0, dt, st);
      });
    });
  }
  for (const bool normal : {false, true}) {
    add(normal ? "normal_fill" : "uniform_fill", kFloats, [normal](S s, DType dt, A a) {
      void* y = a.zeros(bytes_of(s.n(), dt));
      return memory_case(dims({s.n()}), io({bytes_of(s.n(), dt)}), [=, st = a.stream()] {
        if (normal) k::normal_fill(y, s.n(), 0.0, 0.02, 3, 0, dt, st);
        else k::uniform_fill(y, s.n(), -1.0, 1.0, 3, 0, dt, st);
      });
    });
  }
  add("stochastic_round", {DType::bf16, DType::f16}, [](S s, DType dt, A a) {
    auto* x = static_cast<const float*>(a.uniform(s.n(), DType::f32));
    void* y = a.zeros(bytes_of(s.n(), dt));
    return memory_case(dims({s.n()}) + " from f32", io({bytes_of(s.n(), DType::f32), bytes_of(s.n(), dt)}),
                       [=, st = a.stream()] { k::stochastic_round(x, y, s.n(), 9, 0, dt, st); });
  });

  // ---- optimizer: f32 without a master copy, bf16/f16 with an f32 master (mixed precision) ----
  for (const bool on_device : {false, true}) {
    add(on_device ? "adamw_step_device" : "adamw_step", kFloats, [on_device](S s, DType dt, A a) {
      const DType acc = accumulate_dtype(dt);
      const bool mixed = dt != acc;
      const uint64_t p = bytes_of(s.n(), dt), f = bytes_of(s.n(), acc);
      void* param = a.uniform(s.n(), dt);
      void* master = mixed ? a.uniform(s.n(), acc) : nullptr;
      void* grad = a.uniform(s.n(), dt);
      void* m = a.uniform(s.n(), acc);
      void* v = a.uniform(s.n(), acc, 0.0, 1.0);
      // param: read and written (written only, with a master, which is read and written); grad read;
      // both moments read and written.
      uint64_t min = mixed ? io({p, f, f, p, f, f, f, f}) : io({p, p, p, f, f, f, f});
      std::string shape = dims({s.n()}) + (mixed ? " with f32 master" : "");
      if (!on_device) {
        return memory_case(shape, min, [=, st = a.stream()] {
          k::adamw_step(param, master, grad, m, v, s.n(), 1e-3, 0.9, 0.999, 1e-8, 0.01, 7, dt, st);
        });
      }
      uint64_t scalar_bytes = 0;
      const kernels::AdamWStepScalars scalars = device_step_scalars(a, &scalar_bytes);
      min += scalar_bytes;
      return memory_case(shape + ", scalars on the device", min, [=, st = a.stream()] {
        k::adamw_step_device(param, master, grad, m, v, s.n(), scalars, 0.9, 0.999, 1e-8, 0.01, dt, st);
      });
    });
  }
  // ---- the fused SGD, Adam, RMSprop, Adagrad and Lion steps (kernels/optimizer_kernels.h), each with its
  // widest state (SGD's momentum; AMSGrad; momentum and centered) and its scalars on the device, as a device
  // step runs them: f32 without a master copy, bf16/f16 with an f32 master ----
  for (const char* name : {"sgd_step", "adam_step", "rmsprop_step", "adagrad_step", "lion_step"}) {
    add(name, kFloats, [kernel = std::string(name)](S s, DType dt, A a) {
      const DType acc = accumulate_dtype(dt);
      const bool mixed = dt != acc;
      const int states = kernel == "adam_step" || kernel == "rmsprop_step" ? 3 : 1;
      const uint64_t p = bytes_of(s.n(), dt), f = bytes_of(s.n(), acc);
      void* param = a.uniform(s.n(), dt);
      void* master = mixed ? a.uniform(s.n(), acc) : nullptr;
      void* grad = a.uniform(s.n(), dt);
      void* b[3] = {};
      for (int k = 0; k < states; ++k) b[k] = a.uniform(s.n(), acc, 0.5, 1.0);  // sums of squares above means^2
      uint64_t scalar_bytes = 0;
      const kernels::AdamWStepScalars scalars = device_step_scalars(a, &scalar_bytes);
      // param read and written (written only with a master, which is read and written), grad read, every
      // state buffer read and written; the scalars read and the step counts written.
      uint64_t min = mixed ? io({p, f, f, p}) : io({p, p, p});
      for (int k = 0; k < states; ++k) min += io({f, f});
      min += scalar_bytes;
      const std::string shape = dims({s.n()}) + (mixed ? " with f32 master" : "") + ", scalars on the device";
      return memory_case(shape, min, [=, st = a.stream()] {
        const int64_t n = s.n();
        if (kernel == "sgd_step") {
          k::sgd_step(param, master, grad, b[0], n, scalars, 0.01, 0.9, 0.1, false, dt, st);
        } else if (kernel == "adam_step") {
          k::adam_step(param, master, grad, b[0], b[1], b[2], n, scalars, 0.9, 0.999, 1e-8, 0.01, dt, st);
        } else if (kernel == "rmsprop_step") {
          k::rmsprop_step(param, master, grad, b[0], b[1], b[2], n, scalars, 0.99, 1e-8, 0.01, 0.9, dt, st);
        } else if (kernel == "adagrad_step") {
          k::adagrad_step(param, master, grad, b[0], n, scalars, 0.01, 1e-10, 0.01, dt, st);
        } else {
          k::lion_step(param, master, grad, b[0], n, scalars, 0.9, 0.99, 0.1, dt, st);
        }
      });
    });
  }
  // ---- 8-bit AdamW (kernels/adamw8bit_math.h): one-byte codes for m and v, an f32 absmax per 2048 ----
  add("adamw8bit_step_device", kFloats, [](S s, DType dt, A a) {
    const bool mixed = dt != DType::f32;
    const int64_t n = s.n(), blocks = kernels::adamw8bit_blocks(n);
    const uint64_t p = bytes_of(n, dt), f = bytes_of(n, DType::f32), c = uint64_t(n), b = uint64_t(blocks) * 4;
    void* param = a.uniform(n, dt);
    void* master = mixed ? a.uniform(n, DType::f32) : nullptr;
    void* grad = a.uniform(n, dt);
    // Random codes (the bytes of uniform floats) and positive block scales: a state mid-training.
    kernels::QuantizedMoments q;
    q.exp_avg = static_cast<uint8_t*>(a.uniform((n + 3) / 4, DType::f32));
    q.exp_avg_sq = static_cast<uint8_t*>(a.uniform((n + 3) / 4, DType::f32));
    q.absmax_exp_avg = static_cast<float*>(a.uniform(blocks, DType::f32, 0.5, 1.0));
    q.absmax_exp_avg_sq = static_cast<float*>(a.uniform(blocks, DType::f32, 0.5, 1.0));
    uint64_t scalar_bytes = 0;
    const kernels::AdamWStepScalars scalars = device_step_scalars(a, &scalar_bytes);
    // param read and written (written only, with a master, which is read and written); grad read; the
    // codes and the block scales of both moments read and written; the step's scalars.
    uint64_t min = mixed ? io({p, f, f, p}) : io({p, p, p});
    min += io({c, c, c, c, b, b, b, b}) + scalar_bytes;
    PreparedCase prepared = memory_case(dims({n}) + (mixed ? " with f32 master" : "") + ", scalars on the device", min,
                                        [=, st = a.stream()] {
                                          k::adamw8bit_step_device(param, master, grad, q, n, scalars, 0.9, 0.999,
                                                                   1e-8, 0.01, dt, st);
                                        });
    // The requantisation's binary search reads the shared-memory tables at data-dependent indices.
    prepared.claims_no_bank_conflicts = false;
    return prepared;
  });
  // ---- gradient norm and loss scaling ----
  add("sum_of_squares", kFloats, [](S s, DType dt, A a) {
    void* x = a.uniform(s.n(), dt);
    return memory_case(dims({s.n()}) + ", read back", io({bytes_of(s.n(), dt), 8}),
                       [=, st = a.stream()] { (void)k::sum_of_squares(x, s.n(), dt, st); });
  });
  add("sum_of_squares_into", kFloats, [](S s, DType dt, A a) {
    void* x = a.uniform(s.n(), dt);
    auto* acc = static_cast<double*>(a.zeros(8));
    return memory_case(dims({s.n()}), io({bytes_of(s.n(), dt), 8, 8}),
                       [=, st = a.stream()] { k::sum_of_squares_into(x, s.n(), dt, acc, st); });
  });
  // Four gradients of n/4 elements each, scaled in place (read and written).
  for (const bool device_scale : {false, true}) {
    add(device_scale ? "scale_gradients" : "unscale_and_check", kFloats, [device_scale](S s, DType dt, A a) {
      const int64_t part = s.n() / 4;
      std::vector<kernels::TensorSpan> spans;
      uint64_t min = 0;
      for (int i = 0; i < 4; ++i) {
        spans.push_back(kernels::TensorSpan{a.uniform(part, dt), part, dt});
        min += 2 * sector_bytes(bytes_of(part, dt));
      }
      const std::string shape = "4 x " + dims({part});
      if (!device_scale) {
        return memory_case(shape + ", read back", min + io({4}),
                           [=, st = a.stream()] { (void)k::unscale_and_check(spans.data(), 4, 1.0 / 1024, st); });
      }
      const float scale = 1024.0f;
      kernels::GradientMultiplier multiplier;
      multiplier.kind = kernels::GradientMultiplier::unscale;
      multiplier.scale = static_cast<const float*>(a.upload(&scale, sizeof scale));
      auto* found_inf = static_cast<float*>(a.zeros(4));
      return memory_case(shape, min + io({4, 4}), [=, st = a.stream()] {
        k::scale_gradients(spans.data(), 4, multiplier, found_inf, st);
      });
    });
  }
  // ---- the step's one-thread scalar kernels (no dtype) ----
  add("loss_scale_update", {}, [](S, DType, A a) {
    kernels::LossScaleState state;
    auto* d_state = static_cast<kernels::LossScaleState*>(a.upload(&state, sizeof state));
    kernels::LossScalePolicy policy;
    return memory_case("1 state", io({sizeof state, sizeof state}),
                       [=, st = a.stream()] { k::loss_scale_update(d_state, policy, true, st); });
  });
  add("step_count_advance", {}, [](S, DType, A a) {
    auto* count = static_cast<int64_t*>(a.zeros(8));
    auto* found_inf = static_cast<const float*>(a.zeros(4));
    return memory_case("1 count", io({8, 4, 8}), [=, st = a.stream()] { k::step_count_advance(count, found_inf, st); });
  });
  add("lr_schedule_eval", {}, [](S, DType, A a) {
    kernels::LrScheduleDesc schedule;
    schedule.count = 2;
    schedule.pieces[0] = kernels::LrPiece{kernels::LrPiece::linear_warmup, 1e-3, 0.1, 100};
    schedule.pieces[1] = kernels::LrPiece{kernels::LrPiece::cosine_decay, 1e-3, 1e-5, 1000};
    schedule.milestones[0] = 100;
    const int64_t step_host = 150;
    auto* step = static_cast<const int64_t*>(a.upload(&step_host, sizeof step_host));
    auto* lr = static_cast<double*>(a.zeros(8));
    return memory_case("2 pieces", io({8, 8}), [=, st = a.stream()] { k::lr_schedule_eval(schedule, step, lr, st); });
  });

  // ---- pooling ----
  for (const kernels::PoolMode mode : {kernels::PoolMode::Max, kernels::PoolMode::Avg}) {
    const bool max = mode == kernels::PoolMode::Max;
    add(max ? "max_pool2d_forward" : "avg_pool2d_forward", kFloats, [mode, max](S s, DType dt, A a) {
      const kernels::Pool2dGeometry g = pool_geometry(s);
      const int64_t in = g.planes() * g.height * g.width, out = g.planes() * g.out_h() * g.out_w();
      void* x = a.uniform(in, dt);
      void* y = a.zeros(bytes_of(out, dt));
      auto* argmax = static_cast<int32_t*>(a.zeros(bytes_of(out, DType::i32)));
      return memory_case(dims({g.batch, g.channels, g.height, g.width}) + " 2x2/2",
                         io({bytes_of(in, dt), bytes_of(out, dt), max ? bytes_of(out, DType::i32) : 0}),
                         [=, st = a.stream()] { k::pool2d_forward(mode, g, x, y, argmax, dt, st); });
    });
    add(max ? "max_pool2d_backward" : "avg_pool2d_backward", kFloats, [mode, max](S s, DType dt, A a) {
      const kernels::Pool2dGeometry g = pool_geometry(s);
      const int64_t in = g.planes() * g.height * g.width, out = g.planes() * g.out_h() * g.out_w();
      void* x = a.uniform(in, dt);
      void* y = a.zeros(bytes_of(out, dt));
      auto* argmax = static_cast<int32_t*>(a.zeros(bytes_of(out, DType::i32)));
      k::pool2d_forward(mode, g, x, y, argmax, dt, a.stream());
      void* dy = a.uniform(out, dt);
      void* dx = a.zeros(bytes_of(in, dt));
      return memory_case(dims({g.batch, g.channels, g.height, g.width}) + " 2x2/2",
                         io({bytes_of(out, dt), max ? bytes_of(out, DType::i32) : 0, bytes_of(in, dt)}),
                         [=, st = a.stream()] { k::pool2d_backward(mode, g, dy, argmax, dx, dt, st); });
    });
  }

  // ---- resampling (resample2d): a U-Net's bilinear 2x upsampling, forward and backward (the
  // transposed tables), and a ResNet-style adaptive average pooling of [N, C, side, side] to 7x7 ----
  struct ResampleCase {
    const char* name;
    bool upsample, backward;
  };
  for (const ResampleCase rc : {ResampleCase{"bilinear2x_forward", true, false},
                                ResampleCase{"bilinear2x_backward", true, true},
                                ResampleCase{"adaptive_avg_pool2d_forward", false, false}}) {
    add(rc.name, kFloats, [rc](S s, DType dt, A a) {
      const int64_t side = int64_t(std::lround(std::sqrt(double(s.cols))));
      const int64_t planes = s.rows, big = rc.upsample ? 2 * side : 7;
      kernels::ResampleTable table = rc.upsample ? kernels::linear_table(side, big, 2.0, false)
                                                 : kernels::adaptive_avg_table(side, big);
      if (rc.backward) table = kernels::transposed(table);
      kernels::ResampleAxis axis;
      axis.in = table.in, axis.out = table.out;
      axis.offset = a.upload(table.offset);
      axis.index = a.upload(table.index);
      axis.weight = a.upload(table.weight);
      const int64_t in = planes * axis.in * axis.in, out = planes * axis.out * axis.out;
      void* x = a.uniform(in, dt);
      void* y = a.zeros(bytes_of(out, dt));
      return memory_case(dims({planes, axis.in, axis.in}) + " to " + dims({axis.out, axis.out}),
                         io({bytes_of(in, dt), bytes_of(out, dt)}),
                         [=, st = a.stream()] { k::resample2d(x, y, planes, axis, axis, dt, st); });
    });
  }

  // ---- fused attention (FlashAttention-2; the math: kernels/attention_problem.h) ----
  // A GPT's causal self-attention as the engine calls it: q, k and v strided slices of one
  // [B, T, 3, H, D] projection, o written [B, T, H, D], lse [B, H, T] in fp32. B = 1, T = rows * 64 / D,
  // H = max(1, cols / 1024): every operand holds rows * cols / 16 elements. At the audited 256 x 1024
  // that is H1 T256 D64 (four 64-query tiles) and H1 T128 D128 (two); at the timed 16384 x 4096,
  // H4 T16384 D64 and H4 T8192 D128.
  //
  // Minimum bytes: one pass. The forward reads q, k and v once and writes o and lse; every query tile
  // of a head re-reads that head's K and V, but the grid runs the tiles of one head back to back, so the
  // re-reads come from the L2: a head's K and V (2 T D elements) are at most 128 KiB (f32) at the
  // audited size against the audit's 200 KiB model L2, and at most 16 MiB at the timed size against the
  // H200's 50 MiB, with ~264 blocks (a head's query tiles) resident. So DRAM / min stays near 1 when the
  // kernel keeps the K/V re-reads in the L2, and the gate (1.3x) fails one that streams them from DRAM
  // once per query tile: with the d64 case's four causal tiles per head that is 1.75x (two tiles, the
  // d128 case, would give 1.25x, unnoticed; its T is halved so that its f32 K and V, 2 T D floats, stay
  // within the model L2 as they do within the H200's at the timed size). The backward's
  // minimum is the same one pass of its contract: q, k, v, o, dO and lse read, dq, dk, dv written, the
  // `delta` scratch (B H T fp32, D = rowsum(dO o)) written once and read once.
  struct Attention {
    kernels::AttentionProblem p;
    uint64_t qkv_bytes = 0, o_bytes = 0, lse_bytes = 0, mask_bytes = 0;
    std::string shape;
    // Views of the [B, T, 3, H, D] projection (which = 0, 1, 2: q, k, v) and of a [B, T, H, D] tensor.
    kernels::AttentionTensor projection(void* base, int which, DType dt) const {
      return {static_cast<char*>(base) + bytes_of(which * p.heads * p.d, dt), p.tq * 3 * p.heads * p.d, p.d,
              3 * p.heads * p.d};
    }
    kernels::AttentionTensor heads(void* base) const { return {base, p.tq * p.heads * p.d, p.d, p.heads * p.d}; }
  };
  // The forward and backward cases over a prepared problem; a mask (mask_bytes) counts once in the minimum.
  auto forward_case = [](const Attention& at, DType dt, A a) {
    void* qkv = a.uniform(at.qkv_bytes / dtype_size(dt), dt);
    void* o = a.zeros(at.o_bytes);
    void* lse = a.zeros(at.lse_bytes);
    return memory_case(at.shape, io({at.qkv_bytes, at.mask_bytes, at.o_bytes, at.lse_bytes}), [=, st = a.stream()] {
      k::attention_forward(at.p, at.projection(qkv, 0, dt), at.projection(qkv, 1, dt), at.projection(qkv, 2, dt),
                           at.heads(o), lse, dt, st);
    });
  };
  auto backward_case = [](const Attention& at, DType dt, A a) {
    void* qkv = a.uniform(at.qkv_bytes / dtype_size(dt), dt);
    void* o = a.zeros(at.o_bytes);
    void* lse = a.zeros(at.lse_bytes);
    // o and lse from the forward (with recording off), so the backward sees a real softmax.
    k::attention_forward(at.p, at.projection(qkv, 0, dt), at.projection(qkv, 1, dt), at.projection(qkv, 2, dt),
                         at.heads(o), lse, dt, a.stream());
    void* dout = a.uniform(at.o_bytes / dtype_size(dt), dt);
    void* delta = a.zeros(at.lse_bytes);
    void* dqkv = a.zeros(at.qkv_bytes);
    const uint64_t min_bytes = io({at.qkv_bytes, at.mask_bytes, at.o_bytes, at.o_bytes, at.lse_bytes, at.qkv_bytes}) +
                               2 * sector_bytes(at.lse_bytes);
    return memory_case(at.shape, min_bytes, [=, st = a.stream()] {
      k::attention_backward(at.p, at.projection(qkv, 0, dt), at.projection(qkv, 1, dt), at.projection(qkv, 2, dt),
                            at.heads(o), at.heads(dout), lse, delta, at.projection(dqkv, 0, dt),
                            at.projection(dqkv, 1, dt), at.projection(dqkv, 2, dt), dt, st);
    });
  };
  for (const int64_t head_dim : {int64_t(64), int64_t(128)}) {
    const std::string suffix = head_dim == 64 ? "" : "_d128";
    auto attention = [head_dim](S s, DType dt) {
      Attention at;
      at.p.batch = 1;
      at.p.tq = at.p.tk = std::max<int64_t>(1, s.rows * 64 / head_dim);
      at.p.heads = std::max<int64_t>(1, s.cols / 1024);
      at.p.d = head_dim;
      at.p.scale = 1.0 / std::sqrt(double(head_dim));
      at.p.causal = true;
      const int64_t elements = at.p.batch * at.p.tq * at.p.heads * head_dim;
      at.qkv_bytes = bytes_of(3 * elements, dt);
      at.o_bytes = bytes_of(elements, dt);
      at.lse_bytes = bytes_of(at.p.rows(), DType::f32);
      at.shape = "qkv " + dims({at.p.batch, at.p.tq, 3, at.p.heads, head_dim}) + " causal";
      return at;
    };
    add("attention_forward" + suffix, kFloats,
        [attention, forward_case](S s, DType dt, A a) { return forward_case(attention(s, dt), dt, a); });
    add("attention_backward" + suffix, kFloats,
        [attention, backward_case](S s, DType dt, A a) { return backward_case(attention(s, dt), dt, a); });
  }

  // ---- fused attention with a key-padding mask: a seq2seq encoder's self-attention (not causal) over
  // the GPT case's q, k, v layout with B = 2, its per-batch bool mask [B, 1, 1, T] (stride 0 over heads
  // and queries) hiding the last quarter of batch 0's keys and the last eighth of batch 1's. The mask is
  // B T bytes, read once per tile pair from L1 after the first; its minimum adds those bytes once. ----
  auto padded = [](S s, DType dt, A a) {
    Attention at;
    at.p.batch = 2;
    at.p.tq = at.p.tk = std::max<int64_t>(1, s.rows * 32 / 64);
    at.p.heads = std::max<int64_t>(1, s.cols / 1024);
    at.p.d = 64;
    at.p.scale = 1.0 / std::sqrt(64.0);
    at.p.causal = false;
    const int64_t elements = at.p.batch * at.p.tq * at.p.heads * at.p.d;
    at.qkv_bytes = bytes_of(3 * elements, dt);
    at.o_bytes = bytes_of(elements, dt);
    at.lse_bytes = bytes_of(at.p.rows(), DType::f32);
    at.shape = "qkv " + dims({at.p.batch, at.p.tq, 3, at.p.heads, at.p.d}) + " key padding";
    std::vector<uint8_t> keep(size_t(at.p.batch * at.p.tk));
    for (int64_t b = 0; b < at.p.batch; ++b)
      for (int64_t j = 0; j < at.p.tk; ++j) keep[size_t(b * at.p.tk + j)] = j < at.p.tk - at.p.tk / (4 << b);
    at.p.mask.data = a.upload(keep);
    at.p.mask.batch_stride = at.p.tk, at.p.mask.key_stride = 1;
    at.mask_bytes = keep.size();
    return at;
  };
  add("attention_forward_padded", kFloats,
      [padded, forward_case](S s, DType dt, A a) { return forward_case(padded(s, dt, a), dt, a); });
  add("attention_backward_padded", kFloats,
      [padded, backward_case](S s, DType dt, A a) { return backward_case(padded(s, dt, a), dt, a); });

  // ---- convolution: the im2col + GEMM fallback (cuDNN's path on a GPU; the audit turns cuDNN off) ----
  const char* conv_names[3] = {"conv2d_forward_im2col", "conv2d_backward_data_im2col", "conv2d_backward_filter_im2col"};
  for (int pass = 0; pass < 3; ++pass) {
    add(conv_names[pass], kFloats, [pass](S s, DType dt, A a) {
      const kernels::Conv2dGeometry g = conv_geometry(s);
      const int64_t xn = g.batch * g.in_channels * g.height * g.width;
      const int64_t yn = g.batch * g.out_channels * g.out_pixels();
      const kernels::ConvPass which = pass == 0   ? kernels::ConvPass::Forward
                                      : pass == 1 ? kernels::ConvPass::BackwardData
                                                  : kernels::ConvPass::BackwardFilter;
      const size_t ws_bytes = k::conv2d_workspace_bytes(g, which, dt, a.stream());
      void* ws = a.zeros(ws_bytes);
      void* x = a.uniform(xn, dt);
      void* w = a.uniform(g.weight_numel(), dt);
      void* bias = a.uniform(g.out_channels, dt);
      void* y = a.uniform(yn, dt);
      void* out = a.zeros(bytes_of(std::max(xn, std::max(yn, g.weight_numel())), dt));
      PreparedCase c;
      c.shape = dims({g.batch, g.in_channels, g.height, g.width}) + " * " +
                dims({g.out_channels, g.in_channels, g.kernel_h, g.kernel_w}) + " pad 1";
      c.flops = 2.0 * double(yn) * double(g.col_rows());
      c.flop_kind = gemm_kind(dt);
      const uint64_t xb = bytes_of(xn, dt), wb = bytes_of(g.weight_numel(), dt), yb = bytes_of(yn, dt);
      if (pass == 0) {
        c.min_bytes = io({xb, wb, bytes_of(g.out_channels, dt), yb});
        c.run = [=, st = a.stream()] { k::conv2d_forward(g, x, w, bias, out, ws, ws_bytes, dt, st); };
      } else if (pass == 1) {
        c.min_bytes = io({yb, wb, xb});
        c.run = [=, st = a.stream()] { k::conv2d_backward_data(g, y, w, out, ws, ws_bytes, dt, st); };
      } else {
        c.min_bytes = io({xb, yb, wb});
        c.run = [=, st = a.stream()] { k::conv2d_backward_filter(g, x, y, out, ws, ws_bytes, dt, st); };
      }
      return c;
    }, /*audit_only=*/true);
  }
  return cases;
}

}  // namespace

const std::vector<KernelCase>& kernel_cases() {
  static const std::vector<KernelCase> cases = make_cases();
  return cases;
}

}  // namespace hg::bench
