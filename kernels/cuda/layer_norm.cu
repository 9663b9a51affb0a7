// LayerNorm over the last dimension of contiguous [rows, cols], forward and backward.
//
// Math: kernels/kernels.h, at layer_norm_forward and layer_norm_backward (per-row mean and rstd in
// A = acc_t<T>, fp32 for half types, then y; backward: the activation gradient dx per row, the
// parameter gradients dw and db summed over all rows; all three written (=), never accumulated into).
//
// Parallel strategy, forward: a warp per row when cols <= kWarpRowLimit (8 rows per 256-thread
// block), a block per row otherwise (RowGroup, device_math.h). Three passes over the row, the last
// two mostly from L2: sum -> mean, sum of squared deviations -> rstd (two passes, as the CPU, rather
// than E[x^2] - mean^2, which cancels), then y. 16-byte packs where x, y, w and b share alignment.
//
// Backward, deterministic two-stage reduction (no float atomics):
//   stage 1 (layer_norm_backward_kernel): the rows are cut into kRowBlocks contiguous ranges (fewer
//     when there are fewer rows; the split depends on `rows` alone), one thread block per range.
//     The block walks its rows in increasing order; per row it reduces sum g and sum g*xhat over
//     the block (shuffles + one pair per warp in shared memory), writes dx, and adds dy*xhat and
//     dy into its own partial row of a global scratch buffer, partial[block] = [dw(cols), db(cols)].
//     A column's partial is therefore the sum over the block's rows in row order; the barriers of
//     the next row's reduction order the read-modify-writes of successive rows.
//   stage 2 (layer_norm_param_grads_kernel): one thread per column adds the kRowBlocks partials in
//     block order and writes dweight[c] and dbias[c] (rounded once).
// The result is bitwise identical from run to run, whatever order the blocks run in.
// The partial rows are a Workspace (kernels/cuda/workspace.h) from the caching allocator on `stream`:
// stage 1 zeroes its own partial row before adding to it, so the buffer needs no clearing (only for
// rows == 0, a cudaMemsetAsync); both stages are enqueued before the workspace is handed back, and the
// allocator reuses a block only for later work on that same stream. No host wait, no cudaMalloc/Free.
#include "kernels/cuda/device_math.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/cuda/workspace.h"
#include "kernels/kernels_cuda.h"

namespace hg::kernels::cuda {
namespace {

constexpr int64_t kRowBlocks = 512;

template <class T, bool kWarpRows>
__global__ void __launch_bounds__(kMaxRowThreads)
    layer_norm_forward_kernel(const T* __restrict__ x, const T* __restrict__ weight, const T* __restrict__ bias,
                              T* __restrict__ y, acc_t<T>* __restrict__ mean, acc_t<T>* __restrict__ rstd, int64_t rows,
                              int64_t cols, acc_t<T> eps) {
  using A = acc_t<T>;
  __shared__ A shared[32];
  const RowGroup<kWarpRows> g = RowGroup<kWarpRows>::make();
  if (g.row >= rows) return;  // a whole warp (warp rows) or never (block rows: grid = rows)
  const T* xr = x + g.row * cols;
  T* yr = y + g.row * cols;
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

// Stage 1: block b owns rows [rows * b / blocks, rows * (b + 1) / blocks) and, when partial is not
// null, the partial row partial[b * 2 * cols, (b + 1) * 2 * cols) = [dw partial, db partial].
template <class T>
__global__ void layer_norm_backward_kernel(const T* __restrict__ x, const T* __restrict__ weight,
                                           const acc_t<T>* __restrict__ mean, const acc_t<T>* __restrict__ rstd,
                                           const T* __restrict__ dy, T* __restrict__ dx, acc_t<T>* __restrict__ partial,
                                           int64_t rows, int64_t cols) {
  using A = acc_t<T>;
  __shared__ GradSums<A> shared[32];
  const int64_t blocks = gridDim.x, b = blockIdx.x;
  const int64_t worker = threadIdx.x, size = blockDim.x;
  A* dw_partial = partial != nullptr ? partial + b * 2 * cols : nullptr;
  A* db_partial = partial != nullptr ? dw_partial + cols : nullptr;
  if (partial != nullptr) {
    for (int64_t c = worker; c < cols; c += size) dw_partial[c] = db_partial[c] = A(0);
  }
  // The zeroing above and the first row's accumulation below may map a column to different
  // threads; this barrier orders them (later rows are ordered by their reduction's barriers).
  __syncthreads();
  for (int64_t r = rows * b / blocks; r < rows * (b + 1) / blocks; ++r) {
    const T* xr = x + r * cols;
    const T* dyr = dy + r * cols;
    T* dxr = dx + r * cols;
    const A row_mean = mean[r], row_rstd = rstd[r];
    const T* w_align = weight != nullptr ? weight : xr;
    const int64_t head = pack_head<T>(cols, xr, dyr, dxr, w_align);

    GradSums<A> sums{A(0), A(0)};
    for_packs<kPack<T>>(cols, head, worker, size, [&](int64_t c, auto width) {
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

    for_packs<kPack<T>>(cols, head, worker, size, [&](int64_t c, auto width) {
      constexpr int W = decltype(width)::value;
      const Pack<T, W> xp = load_pack<W>(xr + c), gp = load_pack<W>(dyr + c);
      Pack<T, W> wp, out;
      if (weight != nullptr) wp = load_pack<W>(weight + c);
      HG_UNROLL
      for (int k = 0; k < W; ++k) {
        const A xhat = (to_acc(xp.v[k]) - row_mean) * row_rstd;
        const A dyv = to_acc(gp.v[k]);
        const A gv = dyv * (weight != nullptr ? to_acc(wp.v[k]) : A(1));
        out.v[k] = from_acc<T>(row_rstd * (gv - mean_g - xhat * mean_gx));
        if (dw_partial != nullptr) {
          dw_partial[c + k] += dyv * xhat;
          db_partial[c + k] += dyv;
        }
      }
      store_pack<W>(dxr + c, out);
    });
  }
}

// Stage 2: dweight[c] = sum_b partial[b].dw[c], dbias[c] = sum_b partial[b].db[c], in block order.
template <class T>
__global__ void layer_norm_param_grads_kernel(const acc_t<T>* __restrict__ partial, T* __restrict__ dweight,
                                              T* __restrict__ dbias, int64_t blocks, int64_t cols) {
  using A = acc_t<T>;
  for (int64_t c = flat_worker(); c < cols; c += flat_workers()) {
    A dw = 0, db = 0;
    for (int64_t b = 0; b < blocks; ++b) {
      dw += partial[b * 2 * cols + c];
      db += partial[b * 2 * cols + cols + c];
    }
    if (dweight != nullptr) dweight[c] = from_acc<T>(dw);
    if (dbias != nullptr) dbias[c] = from_acc<T>(db);
  }
}

}  // namespace

void layer_norm_forward(const void* x, const void* weight, const void* bias, void* y, void* mean, void* rstd,
                        int64_t rows, int64_t cols, double eps, DType dtype, Stream stream) {
  HG_CHECK(rows >= 0 && cols > 0, "[layer_norm_forward] rows = ", rows, ", cols = ", cols,
           ", expected rows >= 0 and cols >= 1");
  HG_CHECK(eps >= 0, "[layer_norm_forward] eps = ", eps, ", expected eps >= 0");
  if (rows == 0) return;
  dispatch_floating_cuda(dtype, "layer_norm_forward", [&]<class T>() {
    using A = acc_t<T>;
    const RowLaunch rl = row_launch(rows, cols);
    const auto kernel = rl.warp_rows ? layer_norm_forward_kernel<T, true> : layer_norm_forward_kernel<T, false>;
    launch(kernel, rl.grid, rl.block, 0, stream, static_cast<const T*>(x), static_cast<const T*>(weight),
           static_cast<const T*>(bias), static_cast<T*>(y), static_cast<A*>(mean), static_cast<A*>(rstd), rows, cols,
           A(eps));
  });
}

void layer_norm_backward(const void* x, const void* weight, const void* mean, const void* rstd, const void* dy,
                         void* dx, void* dweight, void* dbias, int64_t rows, int64_t cols, DType dtype, Stream stream) {
  HG_CHECK(rows >= 0 && cols > 0, "[layer_norm_backward] rows = ", rows, ", cols = ", cols,
           ", expected rows >= 0 and cols >= 1");
  const bool want_param_grads = dweight != nullptr || dbias != nullptr;
  dispatch_floating_cuda(dtype, "layer_norm_backward", [&]<class T>() {
    using A = acc_t<T>;
    const int64_t blocks = rows < kRowBlocks ? rows : kRowBlocks;
    // rows == 0: no row block runs, and the parameter gradients (sums over no rows) are 0.
    const int64_t partial_blocks = blocks > 0 ? blocks : 1;
    Workspace scratch(want_param_grads ? size_t(partial_blocks * 2 * cols) * sizeof(A) : 0, stream);
    A* partial = scratch.as<A>();
    if (want_param_grads && rows == 0) {
      HG_CUDA_CHECK(cudaMemsetAsync(partial, 0, size_t(2 * cols) * sizeof(A), stream));
    }
    const int64_t threads_wanted = (cols + kPack<T> - 1) / kPack<T>;
    const unsigned threads = threads_wanted >= 512 ? 512u : unsigned((threads_wanted + 31) / 32 * 32);
    launch(layer_norm_backward_kernel<T>, dim3(unsigned(blocks)), dim3(threads), 0, stream, static_cast<const T*>(x),
           static_cast<const T*>(weight), static_cast<const A*>(mean), static_cast<const A*>(rstd),
           static_cast<const T*>(dy), static_cast<T*>(dx), partial, rows, cols);
    if (want_param_grads) {
      launch(layer_norm_param_grads_kernel<T>, flat_grid(cols), dim3(kFlatThreads), 0, stream, partial,
             static_cast<T*>(dweight), static_cast<T*>(dbias), partial_blocks, cols);
    }
  });
}

}  // namespace hg::kernels::cuda
