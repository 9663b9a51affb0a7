// ZeroOptimizer's device-resident step (dist/zero_optimizer.h; the protocol in optim/optimizer.h):
// the loss scaler's unscale with its found_inf, the gradient norm's sum of squares, the skip decision,
// the learning rate and the step count stay in device memory, so a step of stages 0-3 reads nothing on
// the host. What ranks must agree on is combined by device all-reduces ordered on the compute stream
// (Work::block: no host wait over NCCL; the host transports wait, as for every collective):
//
//   found_inf = MAX over ranks of (some gradient this rank owns is inf/NaN)   -> every rank skips alike
//   sum_sq    = SUM over ranks of (sum of squares of this rank's share)       -> every rank clips alike
//
// The update is adamw_step_device over every owned slice with one shared i64[2] count (each call reads
// slot 0 and writes slot 1; slot 1 is copied to slot 0 after the last call, in stream order, as
// optim/adamw.cpp does -- no host parity flip, so a captured step would replay correctly).
// Bits: the same as the host-decided path whenever the loss scale is a power of two (the dynamic
// scaler's always are) and no unscaled half gradient is subnormal: unscaling first and clipping the
// unscaled gradients then multiplies the same values by the same factors.
#include "dist/zero_optimizer.h"

#include <algorithm>
#include <cmath>

#include "dist/zero_layout.h"
#include "engine/autograd.h"
#include "engine/cuda/cuda_context.h"
#include "engine/kernel_dispatch.h"
#include "kernels/step_kernels.h"

namespace hg::dist {
namespace {
void* compute_stream_of(const Device& device) {
  return device.is_cuda() ? static_cast<void*>(cuda::compute_stream(device.index)) : nullptr;
}

void check_scalar(const Tensor& t, DType dtype, const Device& device, const char* what, const char* call) {
  HG_CHECK(t.numel() == 1 && t.dtype() == dtype && t.is_contiguous() && t.device() == device,
           "[ZeroOptimizer] device step ", call, ": expected ", what, " as a contiguous ", dtype_name(dtype),
           " scalar on ", device.str(), ", got ", t.describe());
}
}  // namespace

Tensor ZeroOptimizer::norm_share() const {
  if (options_.stage() == 0) {
    const int64_t part = partition_numel();
    return flat_grads_.narrow(0, comm_.rank() * part, part);
  }
  return owned_grads();
}

Tensor ZeroOptimizer::clipped_grads() const { return options_.stage() < 2 ? flat_grads_ : grad_shard_; }

class ZeroOptimizer::ZeroDeviceStep final : public optim::DeviceStep {
 public:
  explicit ZeroDeviceStep(ZeroOptimizer& owner) : owner_(owner) {}
  void unscale(const Tensor& scale, const Tensor& found_inf) override { owner_.unscale_on_device(scale, found_inf); }
  void clip_grad_norm(double max_norm, const Tensor& sum_sq) override {
    owner_.clip_grad_norm_on_device(max_norm, sum_sq);
  }
  bool step(const Tensor& lr, const Tensor& found_inf) override { return owner_.step_on_device(lr, found_inf); }

 private:
  ZeroOptimizer& owner_;
};

void ZeroOptimizer::enable_device_step() {
  if (!fused_adamw() || options_.offload_optimizer()) return;
  device_step_impl_ = std::make_unique<ZeroDeviceStep>(*this);
  set_device_step(device_step_impl_.get());
}

void ZeroOptimizer::unscale_on_device(const Tensor& scale, const Tensor& found_inf) {
  HG_CHECK(scale.defined() && found_inf.defined(), "[ZeroOptimizer] device step unscale: undefined scale or found_inf");
  check_scalar(scale, DType::f32, device_, "the loss scale", "unscale");
  check_scalar(found_inf, DType::f32, device_, "found_inf", "unscale");
  NoGradGuard no_grad;
  finish_gradient_sync();
  grad_scale_ = 1.0;  // the gradients themselves are unscaled here
  norm_ = -1.0;
  const Tensor g = owned_grads();
  const kernels::TensorSpan span{g.data_ptr(), g.numel(), g.dtype()};
  kernels::GradientMultiplier m;
  m.kind = kernels::GradientMultiplier::unscale;
  m.scale = static_cast<const float*>(scale.data_ptr());
  HG_KERNEL(device_, scale_gradients, &span, 1, m, static_cast<float*>(found_inf.data_ptr()));
  comm_.all_reduce(found_inf.data_ptr(), 1, DType::f32, ReduceOp::max, device_).block(compute_stream_of(device_));
}

// grad_norm's sum (zero_optimizer.cpp).
double ZeroOptimizer::global_sum_of_squares() {
  if (!device_.is_cuda() || !decides_on_device()) {
    double sum = local_sum_of_squares();
    comm_.all_reduce(&sum, 1, DType::f64, ReduceOp::sum).wait();
    return sum;
  }
  // On a CUDA device, the very reduction clip_grad_norm_on_device makes (the kernel into device
  // memory, the collective on the device), then one read: the host and the device decision then agree
  // bit for bit. (Two collectives may add the ranks' sums in different orders: at 4 ranks that is an
  // ulp of difference in the double sum.)
  NoGradGuard no_grad;
  const Tensor total = zeros({1}, DType::f64, device_);
  sum_of_squares_on_device(total);
  return total.item();
}

void ZeroOptimizer::sum_of_squares_on_device(const Tensor& sum_sq) {
  sum_sq.zero_();
  const Tensor share = norm_share();
  HG_KERNEL(device_, sum_of_squares_into, share.data_ptr(), share.numel(), dtype_, static_cast<double*>(sum_sq.data_ptr()));
  comm_.all_reduce(sum_sq.data_ptr(), 1, DType::f64, ReduceOp::sum, device_).block(compute_stream_of(device_));
}

void ZeroOptimizer::clip_grad_norm_on_device(double max_norm, const Tensor& sum_sq) {
  HG_CHECK(std::isfinite(max_norm) && max_norm > 0.0, "[ZeroOptimizer] device step clip_grad_norm: invalid max_norm ",
           max_norm, ": expected a finite max_norm > 0");
  HG_CHECK(sum_sq.defined(), "[ZeroOptimizer] device step clip_grad_norm: undefined sum_sq");
  check_scalar(sum_sq, DType::f64, device_, "the sum of squares", "clip_grad_norm");
  HG_CHECK(grad_scale_ == 1.0, "[ZeroOptimizer] device step clip_grad_norm after unscale_and_check: the gradients are "
           "still scaled; unscale with the device step's unscale");
  NoGradGuard no_grad;
  finish_gradient_sync();
  norm_ = -1.0;
  sum_of_squares_on_device(sum_sq);
  const auto* sum = static_cast<const double*>(sum_sq.data_ptr());
  const Tensor g = clipped_grads();
  const kernels::TensorSpan span{g.data_ptr(), g.numel(), g.dtype()};
  kernels::GradientMultiplier m;
  m.kind = kernels::GradientMultiplier::clip;
  m.sum_sq = sum;
  m.max_norm = max_norm;
  HG_KERNEL(device_, scale_gradients, &span, 1, m, nullptr);
}

bool ZeroOptimizer::step_on_device(const Tensor& lr, const Tensor& found_inf) {
  if (lr.defined()) check_scalar(lr, DType::f64, device_, "the learning rate", "step");
  if (found_inf.defined()) check_scalar(found_inf, DType::f32, device_, "found_inf", "step");
  struct Bound {
    ZeroOptimizer& o;
    ~Bound() { o.device_lr_ = o.skip_flag_ = Tensor(); }
  } bound{*this};
  device_lr_ = lr;
  skip_flag_ = found_inf;
  return step();
}

void ZeroOptimizer::update_on_device() {
  kernels::AdamWStepScalars s;
  s.lr_value = lr_;
  if (device_lr_.defined()) s.lr = static_cast<const double*>(device_lr_.data_ptr());
  if (skip_flag_.defined()) s.found_inf = static_cast<const float*>(skip_flag_.data_ptr());
  s.step = static_cast<int64_t*>(step_count_.data_ptr());
  s.parity = 0;
  const Tensor params = owned_params(), grads = owned_grads();
  bool counted = false;
  for (const StateSlice& slice : slices_) {
    const double weight_decay = weight_decay_of(slice.param);
    const optim::AdamWOptions o = adamw_options_of(slice.param);
    float* master = master_.defined() ? master_.data<float>() + slice.local : nullptr;
    void* param = params.narrow(0, slice.local, slice.count).data_ptr();
    const void* grad = grads.narrow(0, slice.local, slice.count).data_ptr();
    if (slice.quantized) {  // its blocks are the parameter's: slice.first is a multiple of the block
      const kernels::QuantizedMoments moments{q8_.exp_avg.data<uint8_t>() + slice.state,
                                              q8_.exp_avg_sq.data<uint8_t>() + slice.state,
                                              q8_.exp_avg_absmax.data<float>() + slice.block,
                                              q8_.exp_avg_sq_absmax.data<float>() + slice.block};
      HG_KERNEL(device_, adamw8bit_step_device, param, master, grad, moments, slice.count, s, o.beta1(), o.beta2(),
                o.eps(), weight_decay, dtype_);
    } else {
      HG_KERNEL(device_, adamw_step_device, param, master, grad, exp_avg_.data<float>() + slice.state,
                exp_avg_sq_.data<float>() + slice.state, slice.count, s, o.beta1(), o.beta2(), o.eps(), weight_decay,
                dtype_);
    }
    counted = true;
  }
  if (counted) {  // every call wrote the same count to slot 1; bring it to slot 0 in stream order
    step_count_.narrow(0, 0, 1).copy_(step_count_.narrow(0, 1, 1));
  } else {  // this rank owns only padding: count the step as the others do
    HG_KERNEL(device_, step_count_advance, s.step, s.found_inf);
  }
}

int64_t ZeroOptimizer::step_count() const {
  if (!step_count_.defined()) return step_;
  return step_count_.narrow(0, 0, 1).to(kCPU).to_vector<int64_t>()[0];
}

}  // namespace hg::dist
