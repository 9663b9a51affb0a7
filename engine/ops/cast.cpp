// cast between dtypes (floating <-> floating is differentiable: the gradient is cast back) and
// moves between devices (only the CPU exists in this build).
#include "engine/ops.h"
#include "engine/ops/op_support.h"

namespace hg {

Tensor cast(const Tensor& input, DType dtype) {
  ops::check_defined(input, "cast", "input");
  if (input.dtype() == dtype) return input;
  ops::check_backend(input, "cast");
  const Tensor x = input.contiguous();
  Tensor y = empty(x.shape(), dtype, x.device());
  kernels::cpu::cast(x.data_ptr(), x.dtype(), y.data_ptr(), dtype, x.numel());
  if (is_floating(dtype) && should_record({&input})) {
    const DType from = input.dtype();
    record_op("cast", {input}, y, [from](const Tensor& g, const NeedsGrad&) { return std::vector<Tensor>{cast(g, from)}; });
  }
  return y;
}

Tensor to_device(const Tensor& input, const Device& device) {
  ops::check_defined(input, "to", "input");
  if (input.device() == device) return input;
  HG_FAIL("[to] cannot move ", input.describe(), " to ", device.str(),
          ": this build has no CUDA backend; expected device \"cpu\"");
}

}  // namespace hg
