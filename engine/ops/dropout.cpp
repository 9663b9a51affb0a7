// dropout: y = x * keep / (1 - p), keep drawn from the default generator's Philox stream. The op
// saves only (seed, offset) and regenerates the mask in backward: dx = dy * keep / (1 - p).
// Restoring the generator state (checkpoint recomputation) reproduces the same mask.
#include "engine/ops.h"
#include "engine/ops/op_support.h"
#include "engine/random.h"
#include "kernels/philox.h"

namespace hg {

Tensor dropout(const Tensor& input, double p, bool training) {
  const char* name = "dropout";
  ops::check_floating(input, name, "input");
  HG_CHECK(p >= 0.0 && p < 1.0, "[", name, "] probability ", p, " is outside [0, 1)");
  if (!training || p == 0.0) return input;
  ops::check_backend(input, name);
  const Tensor x = input.contiguous();
  const int64_t n = x.numel();
  const GeneratorState state = default_generator().reserve(philox_blocks(uint64_t(n)));
  Tensor y = ops::empty_as(x.shape(), x);
  HG_KERNEL(x.device(), dropout_forward, x.data_ptr(), y.data_ptr(), n, p, state.seed, state.offset, x.dtype());
  if (should_record({&input})) {
    record_op(name, {input}, y, [n, p, state](const Tensor& g, const NeedsGrad&) {
      const Tensor dy = g.contiguous();
      Tensor dx = ops::empty_as(dy.shape(), dy);
      HG_KERNEL(dy.device(), dropout_backward, dy.data_ptr(), dx.data_ptr(), n, p, state.seed, state.offset,
                dy.dtype());
      return std::vector<Tensor>{dx};
    });
  }
  return y;
}

}  // namespace hg
