#pragma once
// Every kernel of halfgrad, on raw pointers, sizes and a dtype; no Tensor in sight. Each kernel is
// declared once, by HG_DECLARE_KERNEL, for both backends, with the same arguments and semantics:
//   kernels::cpu::name(args...)                   defined in kernels/cpu/*.cpp
//   kernels::cuda::name(args..., Stream stream)   defined in kernels/cuda/*.cu (kernels/kernels_cuda.h),
//                                                 linked when the build has a CUDA backend
// The comment above each declaration states its math; the kernel files refer to it.
//
// Conventions (all backends):
// - Pointers address the first element (any storage offset already applied).
// - "Contiguous" means row-major with no gaps. Strided arguments are element strides.
// - Floating kernels read and write their dtype and accumulate in acc_t (float; double for f64).
// - `stat` buffers (softmax/LayerNorm statistics, per-row losses) are in accumulate_dtype(dtype).
// - Outputs are written (=), never accumulated into, unless the name says `accumulate`.
// - Index tensors (targets, token ids) are i32 or i64, given by `index_dtype`.
// - CUDA: pointers are device pointers, except the stride and shape arrays (host arrays); every
//   call is asynchronous on `stream` (the emulator runs it at once) unless its comment says it
//   synchronises the stream (those that return a value read from the device).
#include <cstdint>

#include "kernels/declare_kernel.h"
#include "kernels/attention_problem.h"
#include "kernels/binary_math.h"
#include "kernels/compare_math.h"
#include "kernels/conv_geometry.h"
#include "kernels/dtype.h"
#include "kernels/resample_axis.h"
#include "kernels/rnn_cell.h"
#include "kernels/unary_math.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*, in the CUDA runtime and in the emulator alike

namespace hg::kernels {

inline constexpr int kMaxRank = 8;

enum class ReduceOp { Sum, Max };

// One tensor of a multi-tensor kernel: n contiguous elements of a floating dtype at data (a device
// pointer for the CUDA backend). The tensors of one call may differ in dtype and size.
struct TensorSpan {
  void* data = nullptr;
  int64_t n = 0;
  DType dtype = DType::f32;
};

// HG_DECLARE_KERNEL: kernels/declare_kernel.h.

// ---- memory and layout -------------------------------------------------------------------------
// y[i] = value for i < n (value converted to dtype).
HG_DECLARE_KERNEL(void, fill, (void* y, int64_t n, double value, DType dtype));
// y[i] = convert(x[i]) between any two dtypes (floating <-> floating rounds to nearest even).
HG_DECLARE_KERNEL(void, cast, (const void* x, DType x_dtype, void* y, DType y_dtype, int64_t n));
// Copies a strided view into another strided view of the same shape and dtype
// (e.g. contiguous() materialisation, or writing into a slice for cat).
HG_DECLARE_KERNEL(void, copy_strided,
                  (const void* src, const int64_t* src_strides, void* dst, const int64_t* dst_strides,
                   const int64_t* shape, int rank, DType dtype));

// ---- elementwise -------------------------------------------------------------------------------
// y = op(x) over n contiguous elements; `scalar` is Pow's exponent.
HG_DECLARE_KERNEL(void, unary_forward, (UnaryOp op, const void* x, void* y, int64_t n, double scalar, DType dtype));
// dx = dy * op'(x) over n contiguous elements (y = op(x) is passed for the ops that need it).
HG_DECLARE_KERNEL(void, unary_backward,
                  (UnaryOp op, const void* x, const void* y, const void* dy, void* dx, int64_t n, double scalar,
                   DType dtype));
// y = alpha * x + beta, computed in acc_t.
HG_DECLARE_KERNEL(void, affine, (const void* x, void* y, int64_t n, double alpha, double beta, DType dtype));
// y[idx] = a[idx . a_strides] op b[idx . b_strides] for every index of `shape`; y is contiguous.
// A broadcast dimension has stride 0.
HG_DECLARE_KERNEL(void, binary_forward,
                  (BinaryOp op, const void* a, const int64_t* a_strides, const void* b, const int64_t* b_strides,
                   void* y, const int64_t* shape, int rank, DType dtype));
// y[i] = y[i] + x[i] over n contiguous elements, in place: computed in acc_t and rounded once, the bits
// binary_forward(Add) writes for y + x, without its output buffer or the copy back (a leaf's gradient
// accumulation). x may be y itself; it must not overlap y otherwise.
HG_DECLARE_KERNEL(void, accumulate, (void* y, const void* x, int64_t n, DType dtype));

// ---- comparisons, masks and selection -----------------------------------------------------------
// y[idx] = a[idx . a_strides] op b[idx . b_strides] for every index of `shape` (CompareMath<op>, the
// op's row in kernels/compare_math.h: eq ne lt le gt ge, logical and/or/xor); y is contiguous bool.
// a and b share `dtype`, any dtype (floating, i32, i64, u8, bool). A stride of 0 broadcasts.
HG_DECLARE_KERNEL(void, compare_forward,
                  (CompareOp op, const void* a, const int64_t* a_strides, const void* b, const int64_t* b_strides,
                   bool* y, const int64_t* shape, int rank, DType dtype));
// y[idx] = cond[idx . cond_strides] ? a[idx . a_strides] : b[idx . b_strides] for every index of
// `shape`; cond is bool, a, b and the contiguous y share `dtype` (any dtype). Only the selected
// operand's value reaches y (a NaN in the other does not). The backward of where is where itself:
// da = where(cond, g, 0), db = where(cond, 0, g).
HG_DECLARE_KERNEL(void, where_forward,
                  (const bool* cond, const int64_t* cond_strides, const void* a, const int64_t* a_strides,
                   const void* b, const int64_t* b_strides, void* y, const int64_t* shape, int rank, DType dtype));

// ---- reductions --------------------------------------------------------------------------------
// x viewed as contiguous [outer, n, inner]; y[o, i] = reduce_j x[o, j, i], times `scale` for Sum
// (scale = 1/n gives the mean). For Max, `argmax` (nullable, i64) receives the first index of the
// maximum; NaN propagates (a NaN is the maximum).
HG_DECLARE_KERNEL(void, reduce,
                  (ReduceOp op, const void* x, void* y, int64_t* argmax, int64_t outer, int64_t n, int64_t inner,
                   double scale, DType dtype));

// x viewed as contiguous [outer, n, inner], index [outer, inner] (i64, values in [0, n)):
// y[o, index[o, i], i] = x[o, i]; every other element of y (shape [outer, n, inner]) is 0.
// The backward of max over a dimension.
HG_DECLARE_KERNEL(void, scatter_along,
                  (const void* x, const int64_t* index, void* y, int64_t outer, int64_t n, int64_t inner, DType dtype));

// ---- indexing along one dimension: gather, index_select, scatter_add, index_add ----------------
// Contiguous tensors seen as [outer, size, inner] around the indexed dimension. The index (i32 or
// i64, contiguous) is read as idx(o, i, k):
//   per_element (gather, scatter_add): index [outer, m, inner],  idx(o, i, k) = index[(o m + i) inner + k]
//   per slice (index_select, index_add): index [m],               idx(o, i, k) = index[i]
// index_gather, x [outer, n, inner] -> y [outer, m, inner] (any dtype: a copy of bits):
//   y[o, i, k] = x[o, idx(o, i, k), k]
// index_scatter_add, src [outer, m, inner] -> y [outer, n, inner] (floating):
//   y[o, j, k] = base[o, j, k] + alpha * (sum over i = 0, 1, ..., m - 1 with idx(o, i, k) == j of src[o, i, k])
//   summed in acc_t in increasing i and rounded once (deterministic); base nullable (taken as 0).
// The two are each other's backward: gather's dx is a scatter_add of dy, scatter_add's dsrc a gather.
// An index outside [0, n) is an hg::Error naming the op (gather / index_select for index_gather,
// scatter_add / index_add for index_scatter_add, by per_element), the flat position in the index and
// the bound ("[gather] index 5 at position 3 is out of range, expected 0 <= index < 4"). CPU: thrown
// by the call; CUDA: recorded on the device and thrown at the next host read (as embedding_forward).
HG_DECLARE_KERNEL(void, index_gather,
                  (const void* x, const void* index, DType index_dtype, void* y, int64_t outer, int64_t n, int64_t m,
                   int64_t inner, bool per_element, DType dtype));
HG_DECLARE_KERNEL(void, index_scatter_add,
                  (const void* base, const void* src, const void* index, DType index_dtype, void* y, int64_t outer,
                   int64_t n, int64_t m, int64_t inner, bool per_element, double alpha, DType dtype));

// ---- cumulative sum ----------------------------------------------------------------------------
// x viewed as contiguous [outer, n, inner]: y[o, i, k] = sum_{i' <= i} x[o, i', k] (reverse: over
// i' >= i, which is cumsum's backward: dx = reverse cumsum of dy). The running sum is kept in acc_t
// and each y rounded from it once; deterministic (a fixed order of additions on either backend).
HG_DECLARE_KERNEL(void, cumsum,
                  (const void* x, void* y, int64_t outer, int64_t n, int64_t inner, bool reverse, DType dtype));

// ---- GEMM --------------------------------------------------------------------------------------
// Row-major C[m, n] = alpha * op(A) op(B) + beta * C, op(A) = A^T when trans_a (A stored [k, m]).
// lda/ldb/ldc are row strides in elements. When beta == 0, C is not read (NaN in C is ignored).
// f32: a cache-blocked packed GEMM with an AVX-512 micro-kernel when the CPU has AVX-512 (checked at
// run time), Eigen otherwise; f64: Eigen; f16/bf16: converted to f32, multiplied, rounded back.
// CUDA: cuBLASLt on a GPU; the CPU backend on the emulator.
HG_DECLARE_KERNEL(void, gemm,
                  (bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a,
                   int64_t lda, const void* b, int64_t ldb, double beta, void* c, int64_t ldc, DType dtype));
namespace cpu {
// Reference triple loop (fp32/fp64 accumulation) used by tests and as the oracle.
void gemm_reference(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a,
                    int64_t lda, const void* b, int64_t ldb, double beta, void* c, int64_t ldc, DType dtype);
// Which f32 GEMM path gemm() takes on this CPU: "avx512" or "eigen".
const char* gemm_f32_path();
}  // namespace cpu
// GEMM with a bias epilogue: C[i, :] = alpha op(A) op(B)[i, :] + bias (bias [n], one value per
// output column, broadcast over the m rows). C is written, not read. (The Linear layer's forward.)
// CUDA: cuBLASLt's bias epilogue (CUBLASLT_EPILOGUE_BIAS): the bias is added before C is stored.
HG_DECLARE_KERNEL(void, gemm_bias,
                  (bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a,
                   int64_t lda, const void* b, int64_t ldb, const void* bias, void* c, int64_t ldc, DType dtype));

// ---- softmax -----------------------------------------------------------------------------------
// Row-wise over contiguous [rows, cols], max-subtracted for stability. log_softmax when `log`.
// causal_rows > 0 applies a causal mask for attention: row r sees columns
// c <= (r % causal_rows) + (cols - causal_rows), causal_rows <= cols; masked outputs are 0
// (softmax) or -inf (log_softmax). softmax_backward needs no mask for softmax (y = 0 there gives
// dx = 0); the engine never combines the mask with log_softmax, whose backward would not zero it.
HG_DECLARE_KERNEL(void, softmax_forward,
                  (const void* x, void* y, int64_t rows, int64_t cols, bool log, int64_t causal_rows, DType dtype));
// softmax:     dx = y * (dy - sum_c dy * y)
// log_softmax: dx = dy - exp(y) * sum_c dy
HG_DECLARE_KERNEL(void, softmax_backward,
                  (const void* y, const void* dy, void* dx, int64_t rows, int64_t cols, bool log, DType dtype));

// ---- cross entropy -----------------------------------------------------------------------------
// Fused log-softmax + NLL over logits [rows, cols] and targets [rows]:
//   loss[r] = logsumexp(x[r, :]) - x[r, t_r], lse[r] = logsumexp(x[r, :]);
// rows whose target == ignore_index get loss 0. loss and lse are in accumulate_dtype(dtype).
// Also writes the mean over the counted (non-ignored) rows, two scalars in accumulate_dtype(dtype):
//   inv_count[0] = 1 / (number of counted rows),  mean[0] = (sum_r loss[r]) * inv_count[0],
// both NaN when no row counts (a mean over nothing, as in PyTorch). The count never leaves the
// device: the loss op reads neither it nor the mean on the host.
// A target outside [0, cols) that is not ignore_index is an hg::Error naming the row, the value and
// the range ("[cross_entropy_forward] target 7 at row 3 is out of range, expected 0 <= target < 5
// (or ignore_index = -100)"; with several, the smallest row). CPU: thrown by the call. CUDA: no host
// wait; a kernel records it on the device and it is thrown LATER, at the next point where the host
// reads from the device (kernels/cuda/device_errors.h; the engine: copy_to_host, Tensor::item,
// hg::cuda::synchronize), like CUDA's own asynchronous errors; the outputs are then garbage.
HG_DECLARE_KERNEL(void, cross_entropy_forward,
                  (const void* logits, const void* targets, DType index_dtype, void* loss, void* lse, void* mean,
                   void* inv_count, int64_t rows, int64_t cols, int64_t ignore_index, DType dtype));
// dlogits[r, c] = dloss[r] * (exp(x[r, c] - lse[r]) - [c == t_r]); 0 for ignored rows.
// dloss is per row, in accumulate_dtype(dtype).
HG_DECLARE_KERNEL(void, cross_entropy_backward,
                  (const void* logits, const void* targets, DType index_dtype, const void* lse, const void* dloss,
                   void* dlogits, int64_t rows, int64_t cols, int64_t ignore_index, DType dtype));

// ---- fused attention (FlashAttention-2; the math: kernels/attention_problem.h) -----------------
// Forward: o (written) and lse [batch, heads, tq] contiguous in accumulate_dtype(dtype); the T x T
// scores and probabilities are never stored. q, k, v are read only.
// CPU: every floating dtype and head dimension. CUDA: cuda_attention_supports(d, dtype), else an
// hg::Error naming the head dimension and dtype.
HG_DECLARE_KERNEL(void, attention_forward,
                  (const AttentionProblem& p, AttentionTensor q, AttentionTensor k, AttentionTensor v,
                   AttentionTensor o, void* lse, DType dtype));
// Backward: dq, dk, dv written (=) from q, k, v, o, dout and the forward's lse; `delta` is scratch of
// batch * heads * tq elements in accumulate_dtype(dtype) (receives D = rowsum(dO * O)). The probabilities
// (and the dropout mask) are recomputed tile by tile from q, k and lse.
HG_DECLARE_KERNEL(void, attention_backward,
                  (const AttentionProblem& p, AttentionTensor q, AttentionTensor k, AttentionTensor v,
                   AttentionTensor o, AttentionTensor dout, const void* lse, void* delta, AttentionTensor dq,
                   AttentionTensor dk, AttentionTensor dv, DType dtype));

// ---- LayerNorm ---------------------------------------------------------------------------------
// The one statement of LayerNorm's math (kernels/cpu/layer_norm.cpp, kernels/cuda/layer_norm.cu and
// engine/ops/layer_norm.cpp refer to it). Forward, per row of contiguous [rows, cols], in acc_t:
//   mean = sum_c x / cols,  var = sum_c (x - mean)^2 / cols  (biased),  rstd = 1 / sqrt(var + eps)
//   y = (x - mean) * rstd * w + b          (w = 1, b = 0 when weight / bias are null)
// mean and rstd (nullable, in accumulate_dtype(dtype)) are saved per row for the backward.
HG_DECLARE_KERNEL(void, layer_norm_forward,
                  (const void* x, const void* weight, const void* bias, void* y, void* mean, void* rstd, int64_t rows,
                   int64_t cols, double eps, DType dtype));
// Backward, with xhat = (x - mean) * rstd and g = dy * w:
//   dx = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat))      per row
//   dw = sum_r dy * xhat,  db = sum_r dy                          summed over the rows
// All three are written (=); dweight/dbias are nullable. The sums over rows are done in a fixed
// order: the same bits from run to run, whatever the thread count or the order blocks run in.
HG_DECLARE_KERNEL(void, layer_norm_backward,
                  (const void* x, const void* weight, const void* mean, const void* rstd, const void* dy, void* dx,
                   void* dweight, void* dbias, int64_t rows, int64_t cols, DType dtype));

// ---- RMSNorm over the last dimension of contiguous [rows, cols] ---------------------------------
// Forward, per row, in acc_t:  rstd = 1 / sqrt(sum_c x^2 / cols + eps),  y = x * rstd * w  (w = 1 when
// weight is null); rstd [rows] (nullable, accumulate_dtype(dtype)) saved for the backward.
HG_DECLARE_KERNEL(void, rms_norm_forward,
                  (const void* x, const void* weight, void* y, void* rstd, int64_t rows, int64_t cols, double eps,
                   DType dtype));
// Backward, with xhat = x * rstd and g = dy * w:
//   dx = rstd * (g - xhat * mean_c(g * xhat))      per row
//   dw = sum_r dy * xhat                            summed over the rows in a fixed order (deterministic)
// dx written (=); dweight nullable (and ignored when weight is null).
HG_DECLARE_KERNEL(void, rms_norm_backward,
                  (const void* x, const void* weight, const void* rstd, const void* dy, void* dx, void* dweight,
                   int64_t rows, int64_t cols, DType dtype));

// ---- GroupNorm over contiguous [N, C, S]: C split into G groups of C / G channels -----------------
// (S: the spatial elements of a channel, 1 for [N, C].) Forward, per (n, group), over its (C / G) S
// contiguous elements, in acc_t: mean, var = mean of (x - mean)^2 (biased, two passes), rstd =
// 1 / sqrt(var + eps); then y = (x - mean) * rstd * w[c] + b[c] (weight / bias nullable: 1 / 0).
// mean and rstd [N, G] (nullable, accumulate_dtype(dtype)) are saved for the backward.
HG_DECLARE_KERNEL(void, group_norm_forward,
                  (const void* x, const void* weight, const void* bias, void* y, void* mean, void* rstd,
                   int64_t batch, int64_t channels, int64_t spatial, int64_t groups, double eps, DType dtype));
// Backward, with xhat = (x - mean) * rstd and g = dy * w[c]:
//   dx = rstd * (g - mean_group(g) - xhat * mean_group(g * xhat))    per (n, group)
//   dw[c] = sum_{n, s} dy * xhat,  db[c] = sum_{n, s} dy                per channel, in a fixed order
// dx written (=); dweight / dbias nullable (written = when given).
HG_DECLARE_KERNEL(void, group_norm_backward,
                  (const void* x, const void* weight, const void* mean, const void* rstd, const void* dy, void* dx,
                   void* dweight, void* dbias, int64_t batch, int64_t channels, int64_t spatial, int64_t groups,
                   DType dtype));

// ---- BatchNorm over contiguous [N, C, S]: statistics per channel c over its N S elements ----------
// Training (training = true), in acc_t:
//   mean = sum x / (N S),  var = sum (x - mean)^2 / (N S)  (biased, two passes),  rstd = 1 / sqrt(var + eps)
//   running_mean = (1 - momentum) * running_mean + momentum * mean
//   running_var  = (1 - momentum) * running_var + momentum * var * (N S) / (N S - 1)
// (PyTorch's momentum rule; the running variance takes the unbiased estimate; N S >= 2.) The running
// statistics [C] are nullable (then not updated), in accumulate_dtype(dtype), updated in place.
// Eval (training = false): mean = running_mean, rstd = 1 / sqrt(running_var + eps) (both required,
// read only). Either way y = (x - mean) * rstd * w[c] + b[c] (weight / bias nullable: 1 / 0), and
// save_mean / save_rstd [C] (accumulate_dtype(dtype), required) receive the mean and rstd used.
HG_DECLARE_KERNEL(void, batch_norm_forward,
                  (const void* x, const void* weight, const void* bias, void* running_mean, void* running_var,
                   void* y, void* save_mean, void* save_rstd, int64_t batch, int64_t channels, int64_t spatial,
                   bool training, double momentum, double eps, DType dtype));
// Backward, with xhat = (x - mean) * rstd and g = dy * w[c], sums per channel over its N S elements:
//   dw[c] = sum dy * xhat,  db[c] = sum dy
//   training: dx = rstd * (g - mean(g) - xhat * mean(g * xhat))  (the batch statistics depend on x)
//   eval:     dx = rstd * g                                       (the running statistics do not)
// dx, dweight and dbias are nullable (written = when given); the sums run in a fixed order (deterministic).
HG_DECLARE_KERNEL(void, batch_norm_backward,
                  (const void* x, const void* weight, const void* save_mean, const void* save_rstd, const void* dy,
                   void* dx, void* dweight, void* dbias, int64_t batch, int64_t channels, int64_t spatial,
                   bool training, DType dtype));

// Residual add fused with LayerNorm: a pre-LN transformer's h = x + f(x) followed by ln(h), in one
// pass per row (kernels/cpu/layer_norm.cpp, kernels/cuda/layer_norm.cu; the op: engine/ops/add_layer_norm.cpp).
// Forward, per row, with layer_norm_forward's math on h:
//   h = round_T(x + residual)      (added in acc_t and rounded to the dtype once: the composed add's h)
//   mean, rstd, y of h             (so y is bit-identical to add then layer_norm_forward)
// h and y are written (=); weight/bias, mean/rstd nullable as layer_norm_forward.
HG_DECLARE_KERNEL(void, add_layer_norm_forward,
                  (const void* x, const void* residual, const void* weight, const void* bias, void* h, void* y,
                   void* mean, void* rstd, int64_t rows, int64_t cols, double eps, DType dtype));
// Backward: the sum's total gradient, given to both x and residual, is
//   dx = dh + rstd * (g - mean_c(g) - xhat * mean_c(g * xhat))     per row (xhat, g of h as above)
// rounded as the composed ops round it: the LayerNorm term rounded to the dtype (as layer_norm_backward
// writes it), then added to dh in acc_t and rounded once (the add kernel), so dx is bit-identical to
// layer_norm_backward followed by the add. dh (the gradient reaching h directly) is nullable (taken
// as 0). dweight and dbias (nullable) as layer_norm_backward, in the same fixed order (deterministic).
HG_DECLARE_KERNEL(void, add_layer_norm_backward,
                  (const void* h, const void* weight, const void* mean, const void* rstd, const void* dy,
                   const void* dh, void* dx, void* dweight, void* dbias, int64_t rows, int64_t cols, DType dtype));

// ---- recurrent cells ---------------------------------------------------------------------------
// One time step of an RNN / LSTM / GRU layer, the pointwise part, over [batch, hidden] units (the cell kinds:
// kernels/rnn_cell.h; per-unit math and gate order: kernels/rnn_cell_math.h; kernels/cpu/rnn_cell.cpp,
// kernels/cuda/rnn_cell.cu; the op: engine/ops/recurrence.cpp). G = rnn_gates(cell), S = rnn_saved(cell); all buffers contiguous, in dtype:
//   x [batch, G hidden]   this step's input projection x_t W_ih^T + b_ih (gate k of unit j at k hidden + j)
//   hp [batch, G hidden]  h_prev W_hh^T (no bias);  bias [G hidden] = b_hh (nullable: 0)
//   h_prev, c_prev [batch, hidden] (c_prev: Lstm only)
// Forward writes h [batch, hidden], c [batch, hidden] (Lstm only) and saved [batch, S hidden] (what the
// backward reads: unit j's k-th value at k hidden + j; S = 0: nothing). Computed in acc_t, rounded once.
HG_DECLARE_KERNEL(void, rnn_cell_forward,
                  (RnnCell cell, const void* x, const void* hp, const void* bias, const void* h_prev,
                   const void* c_prev, void* h, void* c, void* saved, int64_t batch, int64_t hidden, DType dtype));
// Backward of one step. dh = dh_next + dy (dh_next: the gradient reaching h from the next step, required;
// dy: the layer output's gradient at this step, nullable: 0); dc (Lstm; nullable: 0) the one reaching c.
// Writes dx [batch, G hidden] (the pre-activation gradients: of x, and for RNN / LSTM of hp and b too);
// Lstm: dc_prev = the gradient reaching c_prev; Gru: dhp [batch, G hidden] (of hp: its r and z parts equal
// dx's, its n part is dx_n r) and dh_prev = dh z (the direct part; the caller adds dhp W_hh). Buffers
// another cell does not use may be null. h is this step's output, read by the plain RNN (act' from h).
HG_DECLARE_KERNEL(void, rnn_cell_backward,
                  (RnnCell cell, const void* saved, const void* h, const void* c, const void* h_prev,
                   const void* c_prev, const void* dh_next, const void* dy, const void* dc, void* dx, void* dhp,
                   void* dc_prev, void* dh_prev, int64_t batch, int64_t hidden, DType dtype));

// ---- embedding ---------------------------------------------------------------------------------
// y[i, :] = weight[ids[i], :] for weight [vocab, dim]. An id outside [0, vocab) is an hg::Error
// naming the first such position ("[embedding_forward] id 10 at position 3 is out of range, expected
// 0 <= id < 10"). CPU: thrown by the call. CUDA: no host wait; recorded on the device and thrown
// LATER, at the next host read (as cross_entropy_forward; kernels/cuda/device_errors.h); y is then
// garbage.
HG_DECLARE_KERNEL(void, embedding_forward,
                  (const void* weight, const void* ids, DType index_dtype, void* y, int64_t n_ids, int64_t vocab,
                   int64_t dim, DType dtype));
// dweight = sum over i with ids[i] = v of dy[i, :], accumulated in acc_t in increasing i
// (deterministic), written to all of dweight (rows with no id get 0). Bad ids: as embedding_forward
// ("[embedding_backward] ..."; CUDA: reported at the next host read).
HG_DECLARE_KERNEL(void, embedding_backward,
                  (const void* dy, const void* ids, DType index_dtype, void* dweight, int64_t n_ids, int64_t vocab,
                   int64_t dim, DType dtype));

// ---- dropout -----------------------------------------------------------------------------------
// y[i] = keep(i) ? x[i] / (1 - p) : 0, keep from philox.h's dropout_keep(seed, offset, i, p).
HG_DECLARE_KERNEL(void, dropout_forward,
                  (const void* x, void* y, int64_t n, double p, uint64_t seed, uint64_t offset, DType dtype));
// dx[i] = keep(i) ? dy[i] / (1 - p) : 0 (the mask is regenerated, never stored).
HG_DECLARE_KERNEL(void, dropout_backward,
                  (const void* dy, void* dx, int64_t n, double p, uint64_t seed, uint64_t offset, DType dtype));

// ---- random fill -------------------------------------------------------------------------------
// Uniform in [low, high) or normal(mean, std) (Box-Muller on pairs of Philox words), element i a
// pure function of (seed, offset, i). uniform_fill uses word i of the stream and consumes
// philox_blocks(n) blocks; normal_fill uses words 2i and 2i+1 and consumes philox_blocks(2 n).
HG_DECLARE_KERNEL(void, uniform_fill,
                  (void* y, int64_t n, double low, double high, uint64_t seed, uint64_t offset, DType dtype));
HG_DECLARE_KERNEL(void, normal_fill,
                  (void* y, int64_t n, double mean, double std, uint64_t seed, uint64_t offset, DType dtype));

// ---- stochastic rounding -----------------------------------------------------------------------
// y[i] = x[i] rounded to `dtype` (f16 or bf16) stochastically (kernels/stochastic_round.h): up or
// down with probabilities that make the expected result x[i]. Element i draws word i % 4 of Philox
// block offset + i / 4 (the convention of philox.h), so a call consumes philox_blocks(n) blocks and
// the CPU and CUDA backends round every element the same way.
HG_DECLARE_KERNEL(void, stochastic_round,
                  (const float* x, void* y, int64_t n, uint64_t seed, uint64_t offset, DType dtype));

// ---- optimizers --------------------------------------------------------------------------------
// One fused AdamW step over n contiguous elements (math: kernels/adamw_math.h), PyTorch's AdamW:
//   theta *= 1 - lr*weight_decay;  m = beta1 m + (1-beta1) g;  v = beta2 v + (1-beta2) g^2;
//   theta -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps),   step >= 1.
// param and grad are of `dtype` (f32, f64, f16, bf16); exp_avg, exp_avg_sq and master are in
// accumulate_dtype(dtype). master is nullable: without it theta is read from param, updated in acc_t
// and rounded once on store; with it (mixed precision) theta is read from and written to master and
// param receives its rounding. Elements are independent: the result does not depend on threads.
HG_DECLARE_KERNEL(void, adamw_step,
                  (void* param, void* master, const void* grad, void* exp_avg, void* exp_avg_sq, int64_t n, double lr,
                   double beta1, double beta2, double eps, double weight_decay, int64_t step, DType dtype));
namespace cpu {
// The optimizer-offload AdamW (ZeRO-Offload's CPU Adam; kernels/cpu/adamw_offload.cpp): one fused pass
// over an fp32 master copy and fp32 moments with the math of adamw_step with a master (to a few ulp:
// fused multiply-adds), g = grad * grad_scale (grad_scale folds in a loss scaler's 1/scale). grad is f32, f16 or
// bf16; param_out (nullable) receives the updated master rounded to param_dtype (f32, f16, bf16).
// SIMD (AVX-512, or AVX2 + FMA + F16C) chosen at run time; `isa` forces a narrower path (tests, bench).
enum class AdamWIsa : uint8_t { scalar, avx2, avx512 };
AdamWIsa adamw_offload_best_isa();
const char* adamw_isa_name(AdamWIsa isa);
void adamw_offload_step(float* master, const void* grad, DType grad_dtype, float* exp_avg, float* exp_avg_sq,
                        void* param_out, DType param_dtype, int64_t n, double lr, double beta1, double beta2,
                        double eps, double weight_decay, int64_t step, double grad_scale = 1.0,
                        AdamWIsa isa = adamw_offload_best_isa());
}  // namespace cpu
// sum_i x[i]^2 over n contiguous elements of a floating dtype, accumulated in double in fixed-size
// chunks whose partial sums are added in chunk order: the same bits whatever the thread count.
// inf/NaN elements give an inf/NaN result. CUDA: synchronises the stream to return the value.
HG_DECLARE_KERNEL(double, sum_of_squares, (const void* x, int64_t n, DType dtype));
// The loss scaler's fused pass (optim/loss_scaler.h) over `count` tensors of any floating dtypes:
//   x[i] = round(acc_t(x[i]) * acc_t(inv_scale))   for every element of every tensor, in place;
// returns true when some element is inf or NaN before or after the multiplication (found_inf).
// Every element is scaled even when one is not finite (the caller then discards the gradients).
// inv_scale == 1 only checks and writes nothing. The result does not depend on thread count.
// CUDA: one launch over every tensor (`tensors` is a host array of device spans); synchronises the
// stream to return found_inf.
HG_DECLARE_KERNEL(bool, unscale_and_check, (const TensorSpan* tensors, int64_t count, double inv_scale));

// ---- convolution and pooling over NCHW (geometry and output sizes: kernels/conv_geometry.h) ----
// x [N, C, H, W], weight [OC, C/groups, KH, KW], bias [OC] (nullable), y [N, OC, OH, OW], contiguous:
//   y[n, o, i, j] = bias[o] + sum_{c in group(o), p, q} w[o, c, p, q] x[n, c, i sh - ph + p dh, j sw - pw + q dw]
// with x = 0 outside the image. im2col + GEMM in acc_t: per image and group, col[(c, p, q), (i, j)] is
// the patch matrix, y = W col (forward), dcol = W^T dy scattered back by col2im (backward data),
// dW += dy col^T (backward filter). `workspace` (at least conv2d_workspace_bytes(g, pass, dtype)
// bytes, e.g. from the caching allocator) holds the patch matrices; outputs are written, not accumulated.
// CUDA (kernels/cuda/conv2d.cu): cuDNN on a GPU when built with it, else im2col + GEMM. The workspace
// size depends on the path and, with cuDNN, on the algorithm chosen for the shape (cached per shape):
// ask for it with the same geometry and dtype before each call.
HG_DECLARE_KERNEL(size_t, conv2d_workspace_bytes, (const Conv2dGeometry& g, ConvPass pass, DType dtype));
HG_DECLARE_KERNEL(void, conv2d_forward,
                  (const Conv2dGeometry& g, const void* x, const void* weight, const void* bias, void* y,
                   void* workspace, size_t workspace_bytes, DType dtype));
// dx[n, c, h, w] = sum over (o, p, q) with an output (i, j) that read x[n, c, h, w] of w[o, c, p, q] dy[n, o, i, j].
HG_DECLARE_KERNEL(void, conv2d_backward_data,
                  (const Conv2dGeometry& g, const void* dy, const void* weight, void* dx, void* workspace,
                   size_t workspace_bytes, DType dtype));
// dweight[o, c, p, q] = sum_{n, i, j} dy[n, o, i, j] x[n, c, i sh - ph + p dh, j sw - pw + q dw].
HG_DECLARE_KERNEL(void, conv2d_backward_filter,
                  (const Conv2dGeometry& g, const void* x, const void* dy, void* dweight, void* workspace,
                   size_t workspace_bytes, DType dtype));
namespace cpu {
// The same forward as direct nested loops with a double accumulator: the tests' oracle and the
// benchmark's baseline.
void conv2d_forward_reference(const Conv2dGeometry& g, const void* x, const void* weight, const void* bias, void* y,
                              DType dtype);
}  // namespace cpu
// Pooling over each [H, W] plane of x [N, C, H, W] into y [N, C, OH, OW] (kernels/conv_geometry.h:
// PoolMode). Max writes argmax[n, c, i, j] = h * W + w of the first maximum of the window (i32,
// required for Max, unused for Avg). Needs pad <= kernel / 2, so that every window holds an input.
HG_DECLARE_KERNEL(void, pool2d_forward,
                  (PoolMode mode, const Pool2dGeometry& g, const void* x, void* y, int32_t* argmax, DType dtype));
// dx[n, c, h, w] = sum over the windows (i, j) covering (h, w) of dy[n, c, i, j] times [argmax == h W + w]
// (Max) or 1 / (KH KW) (Avg); gathered per input element in a fixed order (deterministic, no atomics).
HG_DECLARE_KERNEL(void, pool2d_backward,
                  (PoolMode mode, const Pool2dGeometry& g, const void* dy, const int32_t* argmax, void* dx,
                   DType dtype));
// A separable linear map of each [H, W] plane of x [planes, h.in, w.in] into y [planes, h.out, w.out]
// (kernels/resample_axis.h has the tables; nearest / linear interpolation, adaptive average pooling
// and, with transposed tables, their backward passes):
//   y[p, i, j] = sum_{a in taps(h, i)} sum_{b in taps(w, j)} h.weight[a] w.weight[b] x[p, h.index[a], w.index[b]]
// summed in acc_t (the weights rounded to acc_t), each output written once, in a fixed order (no
// atomics: the same bits on every run). An output with no taps is 0. CUDA: the tables are device
// arrays like x and y.
HG_DECLARE_KERNEL(void, resample2d,
                  (const void* x, void* y, int64_t planes, ResampleAxis h, ResampleAxis w, DType dtype));

// The k first elements of each row of contiguous x [rows, n] (0 <= k <= n) in topk's order
// (kernels/topk_key.h: by value, descending for `largest` and ascending otherwise, NaN counted as the
// largest value, ties by increasing index): values [rows, k] in x's dtype, indices [rows, k] (i64,
// positions in the row). The output is always sorted (PyTorch's sorted = false leaves the order
// unspecified). CUDA: rows of n <= 2048 are sorted in shared memory, one block per row; longer rows
// by a bitonic network in `workspace` (topk_workspace_bytes; 0 for the CPU and for short rows).
HG_DECLARE_KERNEL(size_t, topk_workspace_bytes, (int64_t rows, int64_t n));
HG_DECLARE_KERNEL(void, topk,
                  (const void* x, void* values, int64_t* indices, int64_t rows, int64_t n, int64_t k, bool largest,
                   void* workspace, size_t workspace_bytes, DType dtype));

}  // namespace hg::kernels
