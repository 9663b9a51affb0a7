// LayerNorm over the last dimension of contiguous [rows, cols], forward and backward, alone and fused
// with the residual add before it (add_layer_norm_forward / add_layer_norm_backward).
//
// Math: kernels/kernels.h, at layer_norm_forward and layer_norm_backward (per-row mean and rstd in
// A = acc_t<T>, fp32 for half types, then y; backward: the activation gradient dx per row, the
// parameter gradients dw and db summed over all rows; all three written (=), never accumulated into)
// and at add_layer_norm_forward / add_layer_norm_backward.
//
// Fused residual add (the forward kernel's kResidual flag): a first pass reads x and residual and
// writes h = round_T(x + residual); after a barrier of the row's group (__syncwarp / __syncthreads)
// the plain kernel's three passes run on h, read back from L1/L2, with the plain kernel's pack splits,
// so y, mean and rstd are bit-identical to layer_norm_forward of h whatever the alignments (a split
// shared by all passes would change the order of the row sums when x, residual and h align differently). The backward kernel takes a nullable dh, added to dx in the same pass the way the
// composed add would (dx rounded to T first, then dx + dh in acc_t rounded once), so the fused
// backward is bit-identical to layer_norm_backward then add. The dh path is a template flag
// (kResidualGrad), as the forward's kResidual, not a run-time null check: with the check both uses
// compiled to 44-56 registers on sm_90; with the flag the plain one is back to 32-38, the fused one 40.
//
// Parallel strategy, forward: a warp per row when cols <= kWarpRowLimit (8 rows per 256-thread
// block), a block per row otherwise (RowGroup, device_math.h). Three passes over the row, the last
// two mostly from L2: sum -> mean, sum of squared deviations -> rstd (two passes, as the CPU, rather
// than E[x^2] - mean^2, which cancels), then y. 16-byte packs where x, y, w and b share alignment.
//
// Backward, deterministic two-stage reduction (no float atomics), x and dy read from DRAM once:
//   stage 1 (layer_norm_backward_kernel): the rows are cut into `blocks` contiguous ranges of at least
//     kMinRowsPerBlock rows (at most kMaxRowBlocks ranges; the split depends on `rows` alone), one
//     thread block per range. The block walks its rows in increasing order; per row it reduces
//     sum g and sum g*xhat over the block (shuffles + one pair per warp in shared memory), then
//     writes dx, re-reading the row it has just read (L1 hits; the DRAM sees it once), and adds
//     dy*xhat and dy into the block's accumulator of dw and db partial sums. The accumulator lives in
//     dynamic shared memory (in the block's partial row of global memory when 2 * cols sums do not
//     fit kMaxSharedAccBytes), in a column-slot layout (ColumnSlots) that makes each per-element
//     update conflict-free: lanes own consecutive 16-byte packs, so element k of the packs goes to
//     slots k * stride + pack. When cols is not a multiple of the pack, rows start at varying
//     alignments; they are then read element by element and the layout is plain (slot = column).
//     A column's partial is the sum over the block's rows in row order; the barriers of the next
//     row's reduction order the read-modify-writes of successive rows. At the end the block writes
//     its partials once, coalesced, to its row of a global scratch buffer: [dw(cols), db(cols)].
//     At least kMinRowsPerBlock rows per block keep that write-then-read of partials a small share
//     of the op's traffic: 2 sums x 4 bytes, written then read, is 16 bytes per column per block,
//     against >= 16 x 6 bytes per column for x, dy and dx in a half type (<= 1.17x the minimum).
//   stage 2 (layer_norm_param_grads_kernel): one thread per column adds the blocks' partials in
//     block order and writes dweight[c] and dbias[c] (rounded once). (With the accumulator in global
//     memory it reads the interleaved layout: half-efficient loads, but only for cols in the
//     thousands, where the partials are a small share of the traffic.)
// The result is bitwise identical from run to run, whatever order the blocks run in.
// The partial rows are a Workspace (kernels/cuda/workspace.h) from the caching allocator on `stream`:
// stage 1 zeroes its accumulator before adding to it, so the buffer needs no clearing (only for
// rows == 0, a cudaMemsetAsync); both stages are enqueued before the workspace is handed back, and the
// allocator reuses a block only for later work on that same stream. No host wait, no cudaMalloc/Free.
#include "kernels/cuda/device_math.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/cuda/workspace.h"
#include "kernels/kernels_cuda.h"

namespace hg::kernels::cuda {
namespace {

constexpr int64_t kMaxRowBlocks = 512;
constexpr int64_t kMinRowsPerBlock = 16;
// Largest shared accumulator (dynamic shared memory) of the backward stage 1; with the kernel's
// static shared memory it stays within the 48 KiB a block gets without an opt-in.
constexpr size_t kMaxSharedAccBytes = 46 * 1024;

// kResidual: normalises h = round_T(x + residual), also written to h (residual and h not null).
template <class T, bool kWarpRows, bool kResidual>
__global__ void __launch_bounds__(kMaxRowThreads)
    layer_norm_forward_kernel(const T* __restrict__ x, const T* __restrict__ residual, T* __restrict__ h,
                              const T* __restrict__ weight, const T* __restrict__ bias, T* __restrict__ y,
                              acc_t<T>* __restrict__ mean, acc_t<T>* __restrict__ rstd, int64_t rows, int64_t cols,
                              acc_t<T> eps) {
  using A = acc_t<T>;
  __shared__ A shared[32];
  const RowGroup<kWarpRows> g = RowGroup<kWarpRows>::make();
  if (g.row >= rows) return;  // a whole warp (warp rows) or never (block rows: grid = rows)
  const T* xr = x + g.row * cols;
  T* yr = y + g.row * cols;
  if constexpr (kResidual) {
    // h = round_T(x + residual), written; then the plain kernel's passes below run on h, with the
    // plain kernel's pack split of h, so y, mean and rstd are those of layer_norm_forward of h, bit
    // for bit. The barrier orders the writes of h before the reads, which may split it differently.
    const T* rr = residual + g.row * cols;
    T* hr = h + g.row * cols;
    for_packs<kPack<T>>(cols, pack_head<T>(cols, xr, rr, hr), g.worker, g.size, [&](int64_t c, auto width) {
      constexpr int W = decltype(width)::value;
      const Pack<T, W> xp = load_pack<W>(xr + c), rp = load_pack<W>(rr + c);
      Pack<T, W> hp;
      HG_UNROLL
      for (int k = 0; k < W; ++k) hp.v[k] = from_acc<T>(add_rn(to_acc(xp.v[k]), to_acc(rp.v[k])));
      store_pack<W>(hr + c, hp);
    });
    if constexpr (kWarpRows) {
      __syncwarp();
    } else {
      __syncthreads();
    }
    xr = hr;
  }
  const int64_t x_head = pack_head<T>(cols, xr);

  A sum = 0;
  for_packs<kPack<T>>(cols, x_head, g.worker, g.size, [&](int64_t c, auto width) {
    constexpr int W = decltype(width)::value;
    const Pack<T, W> p = load_pack<W>(xr + c);
    HG_UNROLL
    for (int k = 0; k < W; ++k) sum += to_acc(p.v[k]);
  });
  const A row_mean = g.reduce(sum, SumOp{}, A(0), shared) / A(cols);

  A squares = 0;
  for_packs<kPack<T>>(cols, x_head, g.worker, g.size, [&](int64_t c, auto width) {
    constexpr int W = decltype(width)::value;
    const Pack<T, W> p = load_pack<W>(xr + c);
    HG_UNROLL
    for (int k = 0; k < W; ++k) {
      const A d = to_acc(p.v[k]) - row_mean;
      squares += d * d;
    }
  });
  const A row_rstd = A(1) / sqrt_acc(g.reduce(squares, SumOp{}, A(0), shared) / A(cols) + eps);

  const T* w_align = weight != nullptr ? weight : xr;
  const T* b_align = bias != nullptr ? bias : xr;
  for_packs<kPack<T>>(cols, pack_head<T>(cols, xr, yr, w_align, b_align), g.worker, g.size, [&](int64_t c, auto width) {
    constexpr int W = decltype(width)::value;
    const Pack<T, W> p = load_pack<W>(xr + c);
    Pack<T, W> wp, bp, out;
    if (weight != nullptr) wp = load_pack<W>(weight + c);
    if (bias != nullptr) bp = load_pack<W>(bias + c);
    HG_UNROLL
    for (int k = 0; k < W; ++k) {
      const A wv = weight != nullptr ? to_acc(wp.v[k]) : A(1);
      const A bv = bias != nullptr ? to_acc(bp.v[k]) : A(0);
      out.v[k] = from_acc<T>((to_acc(p.v[k]) - row_mean) * row_rstd * wv + bv);
    }
    store_pack<W>(yr + c, out);
  });
  if (g.worker == 0) {
    if (mean != nullptr) mean[g.row] = row_mean;
    if (rstd != nullptr) rstd[g.row] = row_rstd;
  }
}

// The two row sums of the backward pass, reduced together.
template <class A>
struct GradSums {
  A g;   // sum_c dy * w
  A gx;  // sum_c dy * w * xhat
};

template <class A>
HG_DEVICE GradSums<A> shuffle_xor(GradSums<A> v, int lane_mask) {
  return {cuda::shuffle_xor(v.g, lane_mask), cuda::shuffle_xor(v.gx, lane_mask)};
}

struct GradSumsOp {
  template <class A>
  HG_DEVICE GradSums<A> operator()(GradSums<A> a, GradSums<A> b) const {
    return {a.g + b.g, a.gx + b.gx};
  }
};

// Where column c's partial sum lives in an accumulator of 2^shift interleaved rows of `stride`
// slots: slot(c) = (c % 2^shift) * stride + c / 2^shift. With 2^shift = kPack<T>, the threads
// updating element k of consecutive packs touch consecutive slots; stride = 32 / kPack<T> (mod 32)
// puts consecutive columns (the final copy-out) on distinct banks too. shift 0, stride cols: plain.
struct ColumnSlots {
  int shift;
  int64_t stride;
  HG_HOST_DEVICE int64_t operator()(int64_t c) const {
    return (c & ((int64_t(1) << shift) - 1)) * stride + (c >> shift);
  }
  HG_HOST_DEVICE int64_t size() const { return (int64_t(1) << shift) * stride; }
};

// The accumulator's layout: interleaved by packs when every row can be read in packs (cols a
// multiple of kPack<T>); otherwise rows start at varying alignments, stage 1 reads them element by
// element (consecutive lanes, consecutive columns), and the plain layout is the conflict-free one.
template <class T>
ColumnSlots accumulator_slots(int64_t cols) {
  constexpr int64_t kWidth = kPack<T>, kBankPhase = 32 / kWidth;
  if (cols % kWidth != 0) return {0, cols};
  const int64_t per_row = cols / kWidth;
  int shift = 0;
  while ((int64_t(1) << shift) < kWidth) ++shift;
  return {shift, per_row + ((kBankPhase - per_row % 32) % 32 + 32) % 32};
}

// a * b rounded on its own, never contracted with a following add into an fma (the emulator's host
// compiler contracts across statements too, hence the volatile there): the fused backward's LayerNorm
// dx is then rounded exactly as the plain one before dh is added, as the composed add would.
template <class A>
HG_DEVICE A rounded_product(A a, A b) {
#if defined(__CUDA_ARCH__)
  return mul_rn(a, b);
#else
  volatile A product = a * b;
  return product;
#endif
}

// Stage 1: block b owns rows [rows * b / blocks, rows * (b + 1) / blocks) and, when partial is not
// null, the partial row partial[b * pitch, (b + 1) * pitch) = [dw partial, db partial] in the layout
// `out_slots`. The accumulator (`acc_slots`) is the dynamic shared memory when acc_in_shared, else
// the partial row itself (then out_slots == acc_slots and nothing is copied). With the plain layout
// (cols not a multiple of kPack<T>) every row is read element by element (head -1). dh (read only when
// kResidualGrad, then not null): the fused residual's gradient, added to dx before rounding.
template <class T, bool kResidualGrad>
__global__ void layer_norm_backward_kernel(const T* __restrict__ x, const T* __restrict__ weight,
                                           const acc_t<T>* __restrict__ mean, const acc_t<T>* __restrict__ rstd,
                                           const T* __restrict__ dy, const T* __restrict__ dh, T* __restrict__ dx,
                                           acc_t<T>* __restrict__ partial,
                                           int64_t pitch, ColumnSlots acc_slots, ColumnSlots out_slots,
                                           bool acc_in_shared, int64_t rows, int64_t cols) {
  using A = acc_t<T>;
  constexpr int kWidth = kPack<T>;
  __shared__ GradSums<A> shared[32];
  HG_DYNAMIC_SHARED(A, shared_acc);
  const int64_t blocks = gridDim.x, b = blockIdx.x;
  const int64_t worker = threadIdx.x, size = blockDim.x;
  A* const out = partial != nullptr ? partial + b * pitch : nullptr;
  A* const acc = out == nullptr ? nullptr : acc_in_shared ? shared_acc : out;
  const ColumnSlots slots = acc_slots;
  const bool packs = slots.shift > 0 || kWidth == 1;
  A* const dw_acc = acc;
  A* const db_acc = acc != nullptr ? acc + slots.size() : nullptr;
  if (acc != nullptr) {
    for (int64_t i = worker; i < 2 * slots.size(); i += size) acc[i] = A(0);
  }
  // The zeroing above and the first row's accumulation below may map a slot to different
  // threads; this barrier orders them (later rows are ordered by their reduction's barriers).
  __syncthreads();
  for (int64_t r = rows * b / blocks; r < rows * (b + 1) / blocks; ++r) {
    const T* xr = x + r * cols;
    const T* dyr = dy + r * cols;
    T* dxr = dx + r * cols;
    const T* dhr = kResidualGrad ? dh + r * cols : nullptr;
    const A row_mean = mean[r], row_rstd = rstd[r];
    const T* w_align = weight != nullptr ? weight : xr;
    const T* dh_align = kResidualGrad ? dhr : xr;
    const int64_t head = packs ? pack_head<T>(cols, xr, dyr, dxr, w_align, dh_align) : -1;

    GradSums<A> sums{A(0), A(0)};
    for_packs<kWidth>(cols, head, worker, size, [&](int64_t c, auto width) {
      constexpr int W = decltype(width)::value;
      const Pack<T, W> xp = load_pack<W>(xr + c), gp = load_pack<W>(dyr + c);
      Pack<T, W> wp;
      if (weight != nullptr) wp = load_pack<W>(weight + c);
      HG_UNROLL
      for (int k = 0; k < W; ++k) {
        const A xhat = (to_acc(xp.v[k]) - row_mean) * row_rstd;
        const A gv = to_acc(gp.v[k]) * (weight != nullptr ? to_acc(wp.v[k]) : A(1));
        sums.g += gv;
        sums.gx += gv * xhat;
      }
    });
    sums = block_reduce(sums, GradSumsOp{}, GradSums<A>{A(0), A(0)}, shared);
    const A mean_g = sums.g / A(cols), mean_gx = sums.gx / A(cols);

    for_packs<kWidth>(cols, head, worker, size, [&](int64_t c, auto width) {
      constexpr int W = decltype(width)::value;
      const Pack<T, W> xp = load_pack<W>(xr + c), gp = load_pack<W>(dyr + c);
      Pack<T, W> wp, hp, o;
      if (weight != nullptr) wp = load_pack<W>(weight + c);
      if constexpr (kResidualGrad) hp = load_pack<W>(dhr + c);
      HG_UNROLL
      for (int k = 0; k < W; ++k) {
        const A xhat = (to_acc(xp.v[k]) - row_mean) * row_rstd;
        const A dyv = to_acc(gp.v[k]);
        const A gv = dyv * (weight != nullptr ? to_acc(wp.v[k]) : A(1));
        o.v[k] = from_acc<T>(rounded_product(row_rstd, gv - mean_g - xhat * mean_gx));
        if constexpr (kResidualGrad) o.v[k] = from_acc<T>(add_rn(to_acc(o.v[k]), to_acc(hp.v[k])));
        if (acc != nullptr) {
          const int64_t slot = slots(c + k);
          dw_acc[slot] += dyv * xhat;
          db_acc[slot] += dyv;
        }
      }
      store_pack<W>(dxr + c, o);
    });
  }
  if (acc != nullptr && acc_in_shared) {
    __syncthreads();  // the last row's updates, made by other threads, before the copy-out
    for (int64_t c = worker; c < cols; c += size) {
      out[out_slots(c)] = dw_acc[slots(c)];
      out[pitch / 2 + out_slots(c)] = db_acc[slots(c)];
    }
  }
}

// Stage 2: dweight[c] = sum_b partial[b].dw[c], dbias[c] = sum_b partial[b].db[c], in block order.
template <class T>
__global__ void layer_norm_param_grads_kernel(const acc_t<T>* __restrict__ partial, T* __restrict__ dweight,
                                              T* __restrict__ dbias, int64_t blocks, int64_t pitch, ColumnSlots slots,
                                              int64_t cols) {
  using A = acc_t<T>;
  for (int64_t c = flat_worker(); c < cols; c += flat_workers()) {
    const int64_t slot = slots(c);
    A dw = 0, db = 0;
    for (int64_t b = 0; b < blocks; ++b) {
      dw += partial[b * pitch + slot];
      db += partial[b * pitch + pitch / 2 + slot];
    }
    if (dweight != nullptr) dweight[c] = from_acc<T>(dw);
    if (dbias != nullptr) dbias[c] = from_acc<T>(db);
  }
}

void forward_launch(const void* x, const void* residual, void* h, const void* weight, const void* bias, void* y,
                    void* mean, void* rstd, int64_t rows, int64_t cols, double eps, DType dtype, Stream stream,
                    const char* name) {
  HG_CHECK(rows >= 0 && cols > 0, "[", name, "] rows = ", rows, ", cols = ", cols,
           ", expected rows >= 0 and cols >= 1");
  HG_CHECK(eps >= 0, "[", name, "] eps = ", eps, ", expected eps >= 0");
  if (rows == 0) return;
  dispatch_floating_cuda(dtype, name, [&]<class T>() {
    using A = acc_t<T>;
    const RowLaunch rl = row_launch(rows, cols);
    const bool fused = residual != nullptr;
    const auto kernel = fused ? (rl.warp_rows ? layer_norm_forward_kernel<T, true, true>
                                              : layer_norm_forward_kernel<T, false, true>)
                              : (rl.warp_rows ? layer_norm_forward_kernel<T, true, false>
                                              : layer_norm_forward_kernel<T, false, false>);
    launch(kernel, rl.grid, rl.block, 0, stream, static_cast<const T*>(x), static_cast<const T*>(residual),
           static_cast<T*>(h), static_cast<const T*>(weight), static_cast<const T*>(bias), static_cast<T*>(y),
           static_cast<A*>(mean), static_cast<A*>(rstd), rows, cols, A(eps));
  });
}

void backward_launch(const void* x, const void* weight, const void* mean, const void* rstd, const void* dy,
                     const void* dh, void* dx, void* dweight, void* dbias, int64_t rows, int64_t cols, DType dtype,
                     Stream stream, const char* name) {
  HG_CHECK(rows >= 0 && cols > 0, "[", name, "] rows = ", rows, ", cols = ", cols,
           ", expected rows >= 0 and cols >= 1");
  const bool want_param_grads = dweight != nullptr || dbias != nullptr;
  dispatch_floating_cuda(dtype, name, [&]<class T>() {
    using A = acc_t<T>;
    const int64_t wanted_blocks = (rows + kMinRowsPerBlock - 1) / kMinRowsPerBlock;
    const int64_t blocks = wanted_blocks < kMaxRowBlocks ? wanted_blocks : kMaxRowBlocks;
    // rows == 0: no row block runs, and the parameter gradients (sums over no rows) are 0.
    const int64_t partial_blocks = blocks > 0 ? blocks : 1;
    const ColumnSlots acc_slots = accumulator_slots<T>(cols);
    const size_t shared_acc_bytes = size_t(2 * acc_slots.size()) * sizeof(A);
    const bool acc_in_shared = shared_acc_bytes <= kMaxSharedAccBytes;
    const ColumnSlots out_slots = acc_in_shared ? ColumnSlots{0, cols} : acc_slots;
    const int64_t pitch = 2 * out_slots.size();
    Workspace scratch(want_param_grads ? size_t(partial_blocks * pitch) * sizeof(A) : 0, stream);
    A* partial = scratch.as<A>();
    if (want_param_grads && rows == 0) {
      HG_CUDA_CHECK(cudaMemsetAsync(partial, 0, size_t(pitch) * sizeof(A), stream));
    }
    const int64_t threads_wanted = (cols + kPack<T> - 1) / kPack<T>;
    const unsigned threads = threads_wanted >= 512 ? 512u : unsigned((threads_wanted + 31) / 32 * 32);
    const auto stage1 = dh != nullptr ? layer_norm_backward_kernel<T, true> : layer_norm_backward_kernel<T, false>;
    launch(stage1, dim3(unsigned(blocks)), dim3(threads),
           want_param_grads && acc_in_shared ? shared_acc_bytes : 0, stream, static_cast<const T*>(x),
           static_cast<const T*>(weight), static_cast<const A*>(mean), static_cast<const A*>(rstd),
           static_cast<const T*>(dy), static_cast<const T*>(dh), static_cast<T*>(dx), partial, pitch, acc_slots, out_slots, acc_in_shared, rows,
           cols);
    if (want_param_grads) {
      launch(layer_norm_param_grads_kernel<T>, flat_grid(cols), dim3(kFlatThreads), 0, stream, partial,
             static_cast<T*>(dweight), static_cast<T*>(dbias), partial_blocks, pitch, out_slots, cols);
    }
  });
}

}  // namespace

void layer_norm_forward(const void* x, const void* weight, const void* bias, void* y, void* mean, void* rstd,
                        int64_t rows, int64_t cols, double eps, DType dtype, Stream stream) {
  forward_launch(x, nullptr, nullptr, weight, bias, y, mean, rstd, rows, cols, eps, dtype, stream,
                 "layer_norm_forward");
}

void add_layer_norm_forward(const void* x, const void* residual, const void* weight, const void* bias, void* h,
                            void* y, void* mean, void* rstd, int64_t rows, int64_t cols, double eps, DType dtype,
                            Stream stream) {
  HG_CHECK(x != nullptr && residual != nullptr && h != nullptr, "[add_layer_norm_forward] expected x, residual and h");
  forward_launch(x, residual, h, weight, bias, y, mean, rstd, rows, cols, eps, dtype, stream,
                 "add_layer_norm_forward");
}

void layer_norm_backward(const void* x, const void* weight, const void* mean, const void* rstd, const void* dy,
                         void* dx, void* dweight, void* dbias, int64_t rows, int64_t cols, DType dtype, Stream stream) {
  backward_launch(x, weight, mean, rstd, dy, nullptr, dx, dweight, dbias, rows, cols, dtype, stream,
                  "layer_norm_backward");
}

void add_layer_norm_backward(const void* h, const void* weight, const void* mean, const void* rstd, const void* dy,
                             const void* dh, void* dx, void* dweight, void* dbias, int64_t rows, int64_t cols,
                             DType dtype, Stream stream) {
  backward_launch(h, weight, mean, rstd, dy, dh, dx, dweight, dbias, rows, cols, dtype, stream,
                  "add_layer_norm_backward");
}

}  // namespace hg::kernels::cuda
