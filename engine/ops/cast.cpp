// cast between dtypes (floating <-> floating is differentiable: the gradient is cast back) and
// moves between the CPU and a CUDA device (differentiable: the gradient moves back).
#include "engine/cuda/cuda_context.h"
#include "engine/host_reads.h"
#include "engine/ops.h"
#include "engine/ops/op_support.h"

namespace hg {

Tensor cast(const Tensor& input, DType dtype) {
  ops::check_defined(input, "cast", "input");
  if (input.dtype() == dtype) return input;
  ops::check_backend(input, "cast");
  const Tensor x = input.contiguous();
  Tensor y = empty(x.shape(), dtype, x.device());
  HG_KERNEL(x.device(), cast, x.data_ptr(), x.dtype(), y.data_ptr(), dtype, x.numel());
  if (is_floating(dtype) && should_record({&input})) {
    const DType from = input.dtype();
    record_op("cast", {input}, y,
              [from](const Tensor& g, const NeedsGrad&) { return std::vector<Tensor>{cast(g, from)}; });
  }
  return y;
}

Tensor to_device(const Tensor& input, const Device& device) {
  ops::check_defined(input, "to", "input");
  if (input.device() == device) return input;
  HG_CHECK(device.is_cpu() || device.index < cuda::device_count(), "[to] cannot move ", input.describe(), " to ",
           device.str(), ": the device is not available (",
           cuda::is_available() ? "this machine has " + std::to_string(cuda::device_count()) + " CUDA device(s)"
                                : cuda::unavailable_reason(),
           ")");
  const Tensor x = input.contiguous();
  Tensor y = empty(x.shape(), x.dtype(), device);
  const size_t bytes = size_t(x.numel()) * x.element_size();
  if (x.device().is_cpu())
    cuda::copy_to_device(y.data_ptr(), x.data_ptr(), bytes, device.index);
  else if (device.is_cpu())
    note_host_read("[to] " + x.describe() + " -> cpu"), cuda::copy_to_host(y.data_ptr(), x.data_ptr(), bytes, x.device().index);
  else
    HG_CHECK(x.device() == device, "[to] copies between two CUDA devices (", x.device().str(), " -> ", device.str(),
             ") are not supported; go through the CPU");
  if (is_floating(x.dtype()) && should_record({&input})) {
    const Device from = input.device();
    record_op("to", {input}, y, [from](const Tensor& g, const NeedsGrad&) { return std::vector<Tensor>{g.to(from)}; });
  }
  return y;
}

}  // namespace hg
