// embedding: y[..., :] = weight[ids[...], :]. Backward sums the gradient rows of equal ids in a
// fixed order (deterministic, no atomics): dweight[v] = sum_{i: ids[i] = v} dy[i].
// An id outside [0, vocab) throws hg::Error naming its position: on the CPU here; on CUDA, where the
// check runs on the device with no host wait, at the next host read (.item(), .to(kCPU),
// hg::cuda::synchronize), as CUDA reports its own kernel errors (kernels/cuda/device_errors.h).
#include "engine/ops.h"
#include "engine/ops/op_support.h"

namespace hg {

Tensor embedding(const Tensor& weight_in, const Tensor& ids_in) {
  const char* name = "embedding";
  ops::check_floating(weight_in, name, "weight");
  ops::check_index(ids_in, name, "ids");
  ops::check_backend(weight_in, name);
  HG_CHECK(weight_in.dim() == 2, "[", name, "] expected weight [vocab, dim], got ", weight_in.describe());
  HG_CHECK(ids_in.device() == weight_in.device(), "[", name, "] weight ", weight_in.describe(), " and ids ",
           ids_in.describe(), " are on different devices");
  const int64_t vocab = weight_in.size(0), dim = weight_in.size(1), n = ids_in.numel();
  const Tensor weight = weight_in.contiguous();
  const Tensor ids = ids_in.contiguous();
  Shape out_shape = ids.shape();
  out_shape.push_back(dim);
  Tensor y = ops::empty_as(out_shape, weight);
  HG_KERNEL(weight.device(), embedding_forward, weight.data_ptr(), ids.data_ptr(), ids.dtype(), y.data_ptr(), n, vocab,
            dim, weight.dtype());
  if (should_record({&weight_in})) {
    const SavedTensor saved_ids(ids);
    record_op(name, {weight_in, ids_in}, y, [saved_ids, n, vocab, dim](const Tensor& g, const NeedsGrad&) {
      const Tensor ids = saved_ids.unpack();
      const Tensor dy = g.contiguous();
      Tensor dweight = empty({vocab, dim}, dy.dtype(), dy.device());
      HG_KERNEL(dy.device(), embedding_backward, dy.data_ptr(), ids.data_ptr(), ids.dtype(), dweight.data_ptr(), n,
                vocab, dim, dy.dtype());
      return std::vector<Tensor>{dweight, Tensor()};
    });
  }
  return y;
}

}  // namespace hg
