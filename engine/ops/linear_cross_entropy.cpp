// linear_cross_entropy: the fused classifier. The projection onto the vocabulary and the mean
// cross-entropy, computed in chunks of rows so that the logits [N, V] are never stored whole:
//   logits = x W^T                         x [N, C], W [V, C] (the GPT's tied lm_head)
//   loss   = (1 / |valid|) sum_{r valid} (logsumexp(logits_r) - logits_r[t_r])
//   dx = g / |valid| * P W,   dW = g / |valid| * P^T x,   P_r = softmax(logits_r) - onehot(t_r)
// (P_r = 0 for ignored rows), g the incoming gradient of the loss.
//
// Strategy (Liger's fused linear cross-entropy, llm.c's fused classifier): for each chunk of R rows,
//   logits_c = x_c W^T                        (gemm into ONE chunk buffer, reused)
//   row losses and lse of the chunk           (cross_entropy_forward into the rows of [N] buffers)
// and, when a gradient is needed, in the same pass (the logits of the chunk are still there):
//   P_c = softmax - onehot                    (cross_entropy_backward with dloss = 1 per row)
//   dx_c = P_c W                              (gemm into rows of dx [N, C])
//   dW  += P_c^T x_c                          (gemm with beta = 1 into dW [V, C])
// The forward keeps dx and dW (unscaled) for backward; the backward only multiplies them by
// s = g / |valid|, a device scalar. Without a gradient (eval, no_grad) only the loss is computed.
// Peak extra memory: one chunk of logits and one of P (+ their fp32 copies for half dtypes, below)
// instead of N x V for the logits plus N x V for their gradient, plus dx and dW kept from forward to
// backward, and two fp32 numbers per row.
//
// The count |valid| stays on the device (the engine never reads the loss on the host): an ignored
// row has float(t) == ignore_index, so ignored_r = relu(1 - |t_r - ignore_index|) is 1 for it and 0
// for every other integer target; |valid| = N - sum_r ignored_r, exact in fp32 for N <= 2^24 rows
// and for targets and ignore_index that fp32 holds exactly (|value| <= 2^24; a valid target is
// below V, which is checked to be <= 2^24). loss = (sum_r row_loss_r) / |valid| is 0/0 = NaN when
// no row counts (ignored rows have loss 0), as in cross_entropy; the gradients are then 0 (every P_r
// is 0), as cross_entropy's are: s uses 1 / max(|valid|, 1).
//
// Precision. f32/f64: every GEMM is in the dtype, dW accumulates in it across chunks (beta = 1), the
// sum over rows split into chunks, as one GEMM's k loop would be. f16/bf16: logits_c, P_c and dx_c
// are rounded to the dtype exactly as the composed path (matmul, cross_entropy) rounds logits,
// dlogits and dx, but dW is accumulated in fp32: P_c and x_c are widened to fp32 (exact) and
// multiplied by an fp32 GEMM with beta = 1 into an fp32 dW, rounded to the dtype once, in backward,
// after the scaling. A half accumulator would instead round the running sum after every chunk,
// adding up to u |dW| per chunk (u = 2^-8 for bf16, 2^-11 for f16): an error growing with the number
// of chunks, where the composed path rounds its fp32-accumulated product once. P_c carries no 1 / |valid|
// (dloss = 1), so the small probabilities of a large batch do not sink into f16's subnormals.
// The backward scales in fp32 (dx widened, times s, rounded once; dW times s, rounded once).
//
// Chunk size (chunk_rows = 0): the rows whose logits take at most max(bytes of x, 8 MiB), at least one
// row and at most N, rounded down to a multiple of 16 above 16 rows (GEMM tiles). The chunk's logits
// are then no larger than the activation x already is (or a few MiB for small batches), and a GPT's
// head costs one chunk of V-wide buffers instead of N. linear_cross_entropy_chunk_rows() states it.
//
// Targets: i32/i64, ignore_index rows skipped; a target outside [0, V) that is not ignore_index is an
// hg::Error naming the row. CPU: checked here before any work (the same message as cross_entropy's,
// with this op's name, the row counted over all N rows). CUDA: the chunk's cross_entropy_forward
// records it on the device and it is raised at the next host read, as cross_entropy's is; the row it
// names is then counted from the start of that chunk.
#include <algorithm>

#include "engine/ops.h"
#include "engine/ops/op_support.h"

namespace hg {

namespace {

constexpr const char* kName = "linear_cross_entropy";
constexpr int64_t kMinChunkBytes = int64_t(8) << 20;
constexpr int64_t kChunkRowMultiple = 16;
constexpr int64_t kExactFloatIntegers = int64_t(1) << 24;  // integers fp32 holds exactly: |i| <= 2^24

template <class I>
void check_targets_on_host(const I* targets, int64_t rows, int64_t classes, int64_t ignore_index) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = int64_t(targets[r]);
    HG_CHECK(t == ignore_index || (t >= 0 && t < classes), "[", kName, "] target ", t, " at row ", r,
             " is out of range, expected 0 <= target < ", classes, " (or ignore_index = ", ignore_index, ")");
  }
}

// The CPU backend's targets are host memory: check them all before any work, naming the global row.
void check_cpu_targets(const Tensor& targets, int64_t classes, int64_t ignore_index) {
  if (!targets.device().is_cpu()) return;
  if (targets.dtype() == i32)
    check_targets_on_host(targets.data<int32_t>(), targets.numel(), classes, ignore_index);
  else
    check_targets_on_host(targets.data<int64_t>(), targets.numel(), classes, ignore_index);
}

const char* at(const Tensor& t, int64_t elements) {
  return static_cast<const char*>(t.data_ptr()) + elements * int64_t(t.element_size());
}
char* at(Tensor& t, int64_t elements) {
  return static_cast<char*>(t.data_ptr()) + elements * int64_t(t.element_size());
}

// |valid| as a device scalar in `stat` (see the header): N - sum_r relu(1 - |t_r - ignore_index|).
Tensor count_valid_rows(const Tensor& targets, int64_t ignore_index, DType stat) {
  const Tensor t = cast(targets, stat);
  const Tensor ignored = relu(1.0 - abs(t - double(ignore_index)));
  return double(targets.numel()) - sum(ignored);
}

}  // namespace

int64_t linear_cross_entropy_chunk_rows(int64_t rows, int64_t features, int64_t classes, DType dtype) {
  HG_CHECK(rows >= 0 && features >= 0 && classes > 0, "[", kName, "] chunk rows of rows = ", rows,
           ", features = ", features, ", classes = ", classes, ": expected rows >= 0, features >= 0, classes >= 1");
  const int64_t esize = int64_t(dtype_size(dtype));
  const int64_t budget = std::max(rows * features * esize, kMinChunkBytes);
  int64_t chunk = std::max<int64_t>(1, budget / (classes * esize));
  if (chunk > kChunkRowMultiple) chunk = chunk / kChunkRowMultiple * kChunkRowMultiple;
  return std::max<int64_t>(1, std::min(chunk, rows));
}

Tensor linear_cross_entropy(const Tensor& x_in, const Tensor& weight_in, const Tensor& targets_in, int64_t ignore_index,
                            int64_t chunk_rows) {
  ops::check_floating(x_in, kName, "x");
  ops::check_floating(weight_in, kName, "weight");
  ops::check_same({&x_in, &weight_in}, {"x", "weight"}, kName);
  ops::check_index(targets_in, kName, "targets");
  ops::check_backend(x_in, kName);
  HG_CHECK(targets_in.device() == x_in.device(), "[", kName, "] x ", x_in.describe(), " and targets ",
           targets_in.describe(), " are on different devices");
  HG_CHECK(x_in.dim() == 2, "[", kName, "] expected x [N, C], got ", x_in.describe());
  HG_CHECK(weight_in.dim() == 2 && weight_in.size(1) == x_in.size(1), "[", kName,
           "] expected weight [V, C] with C = ", x_in.size(1), " (x's features), got weight ", weight_in.describe(),
           " for x ", x_in.describe());
  const int64_t N = x_in.size(0), C = x_in.size(1), V = weight_in.size(0);
  HG_CHECK(V > 0, "[", kName, "] weight ", weight_in.describe(), " has no classes; expected V >= 1 rows");
  HG_CHECK(C > 0, "[", kName, "] x ", x_in.describe(), " has no features; expected C >= 1");
  HG_CHECK(targets_in.shape() == Shape{N}, "[", kName, "] targets ", targets_in.describe(), " do not match x ",
           x_in.describe(), "; expected targets of shape [", N, "]");
  HG_CHECK(chunk_rows >= 0, "[", kName, "] chunk_rows = ", chunk_rows, ", expected >= 1 (or 0: choose)");
  HG_CHECK(V <= kExactFloatIntegers && N <= kExactFloatIntegers, "[", kName, "] ", N, " rows of ", V,
           " classes: expected at most 2^24 of each (the valid-row count is kept exactly in fp32)");

  const Tensor x = x_in.contiguous(), weight = weight_in.contiguous(), targets = targets_in.contiguous();
  check_cpu_targets(targets, V, ignore_index);
  const Device device = x.device();
  const DType dtype = x.dtype(), stat = accumulate_dtype(dtype);
  const DType dw_dtype = is_half(dtype) ? f32 : dtype;  // dW accumulates in fp32 for half weights
  const int64_t R =
      chunk_rows > 0 ? std::max<int64_t>(1, std::min(chunk_rows, N)) : linear_cross_entropy_chunk_rows(N, C, V, dtype);
  const bool record = should_record({&x_in, &weight_in});
  const bool need_dx = record && x_in.requires_grad(), need_dw = record && weight_in.requires_grad();
  const bool need_grad = need_dx || need_dw;

  Tensor row_loss = empty({N}, stat, device), lse = empty({N}, stat, device);
  Tensor chunk_mean = empty({}, stat, device), chunk_inv_count = empty({}, stat, device);  // unused per chunk
  Tensor logits = empty({R, V}, dtype, device);
  Tensor probs_minus_onehot, ones_per_row, dx, dw, x_wide, p_wide;
  if (need_grad) {
    probs_minus_onehot = empty({R, V}, dtype, device);
    ones_per_row = full({R}, 1.0, stat, device);
  }
  if (need_dx) dx = empty({N, C}, dtype, device);
  if (need_dw) {
    dw = zeros({V, C}, dw_dtype, device);
    if (dw_dtype != dtype) {
      x_wide = empty({R, C}, f32, device);
      p_wide = empty({R, V}, f32, device);
    }
  }

  const int64_t index_size = int64_t(targets.element_size());
  for (int64_t r0 = 0; r0 < N; r0 += R) {
    const int64_t rows = std::min(R, N - r0);
    const void* x_chunk = at(x, r0 * C);
    const void* targets_chunk = static_cast<const char*>(targets.data_ptr()) + r0 * index_size;
    HG_KERNEL(device, gemm, false, true, rows, V, C, 1.0, x_chunk, C, weight.data_ptr(), C, 0.0, logits.data_ptr(), V,
              dtype);
    HG_KERNEL(device, cross_entropy_forward, logits.data_ptr(), targets_chunk, targets.dtype(), at(row_loss, r0),
              at(lse, r0), chunk_mean.data_ptr(), chunk_inv_count.data_ptr(), rows, V, ignore_index, dtype);
    if (!need_grad) continue;
    HG_KERNEL(device, cross_entropy_backward, logits.data_ptr(), targets_chunk, targets.dtype(), at(lse, r0),
              ones_per_row.data_ptr(), probs_minus_onehot.data_ptr(), rows, V, ignore_index, dtype);
    if (need_dx)
      HG_KERNEL(device, gemm, false, false, rows, C, V, 1.0, probs_minus_onehot.data_ptr(), V, weight.data_ptr(), C,
                0.0, at(dx, r0 * C), C, dtype);
    if (need_dw && dw_dtype == dtype) {
      HG_KERNEL(device, gemm, true, false, V, C, rows, 1.0, probs_minus_onehot.data_ptr(), V, x_chunk, C, 1.0,
                dw.data_ptr(), C, dtype);
    } else if (need_dw) {
      HG_KERNEL(device, cast, probs_minus_onehot.data_ptr(), dtype, p_wide.data_ptr(), f32, rows * V);
      HG_KERNEL(device, cast, x_chunk, dtype, x_wide.data_ptr(), f32, rows * C);
      HG_KERNEL(device, gemm, true, false, V, C, rows, 1.0, p_wide.data_ptr(), V, x_wide.data_ptr(), C, 1.0,
                dw.data_ptr(), C, f32);
    }
  }
  // The chunk buffers go back to the allocator before the loss's few scalars are computed.
  logits = Tensor(), probs_minus_onehot = Tensor(), p_wide = Tensor(), x_wide = Tensor();

  Tensor loss, grad_scale;
  {
    NoGradGuard no_grad;
    const Tensor count = count_valid_rows(targets, ignore_index, stat);
    loss = sum(row_loss) / count;                                 // 0 / 0 = NaN when no row counts
    if (need_grad) grad_scale = 1.0 / (relu(count - 1.0) + 1.0);  // 1 / max(|valid|, 1)
  }
  if (!record) return loss;

  const SavedTensor saved_dx(dx), saved_dw(dw), saved_scale(grad_scale);
  record_op(kName, {x_in, weight_in}, loss,
            [saved_dx, saved_dw, saved_scale, dtype](const Tensor& g, const NeedsGrad& needs) {
              const Tensor s = g * saved_scale.unpack();  // g / |valid|: a device scalar in accumulate_dtype
              Tensor gx, gw;
              // Scaled in s's dtype (fp32 for half dtypes), rounded to the dtype once.
              if (needs[0] && saved_dx.defined()) gx = cast(cast(saved_dx.unpack(), s.dtype()) * s, dtype);
              if (needs[1] && saved_dw.defined()) gw = cast(saved_dw.unpack() * s, dtype);
              return std::vector<Tensor>{gx, gw};
            });
  return loss;
}

}  // namespace hg
