// cross_entropy: fused log-softmax + negative log-likelihood, mean over non-ignored targets.
//   loss = (1 / |valid|) sum_{r valid} (logsumexp(x_r) - x_r[t_r])
//   dx_r = g / |valid| * (softmax(x_r) - onehot(t_r))  for valid rows, 0 for ignored rows.
// The forward keeps only the per-row logsumexp (fp32) for backward, never the probabilities.
// With no valid target the mean is 0/0 = NaN, as in PyTorch.
// No host read: the kernel writes the mean and 1/|valid| on the device, and the backward scales by
// that device scalar. A bad target (outside [0, C), not ignore_index) throws hg::Error naming the
// row: on the CPU here; on CUDA at the next host read (loss.item(), .to(kCPU), hg::cuda::synchronize),
// as CUDA reports its own kernel errors (kernels/cuda/device_errors.h, docs/cuda.md).

#include "engine/ops.h"
#include "engine/ops/op_support.h"

namespace hg {

Tensor cross_entropy(const Tensor& logits_in, const Tensor& targets_in, int64_t ignore_index) {
  const char* name = "cross_entropy";
  ops::check_floating(logits_in, name, "logits");
  ops::check_index(targets_in, name, "targets");
  ops::check_backend(logits_in, name);
  HG_CHECK(targets_in.device() == logits_in.device(), "[", name, "] logits ", logits_in.describe(), " and targets ",
           targets_in.describe(), " are on different devices");
  HG_CHECK(logits_in.dim() == 1 || logits_in.dim() == 2, "[", name, "] expected logits [N, C] or [C], got ",
           logits_in.describe());
  const int64_t rows = logits_in.dim() == 2 ? logits_in.size(0) : 1;
  const int64_t cols = logits_in.size(-1);
  const Shape expected_targets = logits_in.dim() == 2 ? Shape{rows} : Shape{};
  HG_CHECK(targets_in.shape() == expected_targets, "[", name, "] targets ", targets_in.describe(),
           " do not match logits ", logits_in.describe(), "; expected targets of shape ", shape_str(expected_targets));
  HG_CHECK(cols > 0, "[", name, "] logits ", logits_in.describe(), " have no classes");

  const Tensor logits = logits_in.contiguous();
  const Tensor targets = targets_in.contiguous();
  const DType stat = accumulate_dtype(logits.dtype());
  Tensor row_loss = empty({rows}, stat, logits.device());
  Tensor lse = empty({rows}, stat, logits.device());
  Tensor loss = empty({}, stat, logits.device());
  Tensor inv_count = empty({}, stat, logits.device());  // 1 / |valid|, NaN when none
  HG_KERNEL(logits.device(), cross_entropy_forward, logits.data_ptr(), targets.data_ptr(), targets.dtype(),
            row_loss.data_ptr(), lse.data_ptr(), loss.data_ptr(), inv_count.data_ptr(), rows, cols, ignore_index,
            logits.dtype());

  if (should_record({&logits_in})) {
    const SavedTensor saved(logits), saved_targets(targets), saved_lse(lse), saved_scale(inv_count);
    record_op(name, {logits_in, targets_in}, loss,
              [saved, saved_targets, saved_lse, saved_scale, rows, cols, ignore_index](const Tensor& g,
                                                                                      const NeedsGrad&) {
                const Tensor saved_logits = saved.unpack(), targets = saved_targets.unpack();
                const Tensor lse = saved_lse.unpack();
                const Tensor dloss = (g * saved_scale.unpack()).reshape({1}).expand({rows}).contiguous();
                Tensor dlogits = empty_like(saved_logits);
                HG_KERNEL(saved_logits.device(), cross_entropy_backward, saved_logits.data_ptr(), targets.data_ptr(),
                          targets.dtype(), lse.data_ptr(), dloss.data_ptr(), dlogits.data_ptr(), rows, cols,
                          ignore_index, saved_logits.dtype());
                return std::vector<Tensor>{dlogits, Tensor()};
              });
  }
  return loss;
}

}  // namespace hg
