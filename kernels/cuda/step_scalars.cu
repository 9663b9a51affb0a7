// The scalar bookkeeping of a capturable training step on the device: the loss scaler's policy
// (kernels/unscale_math.h update_loss_scale), the count of steps taken, and the learning rate of the
// schedule at that count (kernels/lr_schedule_math.h lr_at). Each is a single-thread kernel over a
// few scalars in device memory: the CPU backend runs the very same functions, nothing is read back
// to the host, and the launches can be captured into a CUDA graph.
// Kernel audit (audit/exemptions.cpp): exempt from the 80% global-efficiency check -- one thread
// updates a few scalars, no warp to coalesce, a handful of sectors per step.
#include "kernels/cuda/device_math.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/kernels_cuda.h"
#include "kernels/step_kernels.h"

namespace hg::kernels::cuda {
namespace {

__global__ void loss_scale_update_kernel(LossScaleState* state, LossScalePolicy policy, bool count_skip) {
  update_loss_scale(*state, policy, count_skip);
}

__global__ void step_count_advance_kernel(int64_t* count, const float* found_inf) {
  if (found_inf == nullptr || *found_inf == 0.0f) *count += 1;
}

__global__ void lr_schedule_eval_kernel(LrScheduleDesc schedule, const int64_t* step, double* lr) {
  *lr = lr_at(schedule, *step);
}

}  // namespace

void loss_scale_update(LossScaleState* state, const LossScalePolicy& policy, bool count_skip, Stream stream) {
  HG_CHECK(state != nullptr, "[loss_scale_update] null state");
  launch(loss_scale_update_kernel, dim3(1), dim3(1), 0, stream, state, policy, count_skip);
}

void step_count_advance(int64_t* count, const float* found_inf, Stream stream) {
  HG_CHECK(count != nullptr, "[step_count_advance] null count");
  launch(step_count_advance_kernel, dim3(1), dim3(1), 0, stream, count, found_inf);
}

void lr_schedule_eval(const LrScheduleDesc& schedule, const int64_t* step, double* lr, Stream stream) {
  HG_CHECK(step != nullptr && lr != nullptr, "[lr_schedule_eval] null step or lr");
  HG_CHECK(schedule.count >= 1 && schedule.count <= kMaxLrPieces, "[lr_schedule_eval] ", schedule.count,
           " pieces; expected 1 to ", kMaxLrPieces);
  launch(lr_schedule_eval_kernel, dim3(1), dim3(1), 0, stream, schedule, step, lr);
}

}  // namespace hg::kernels::cuda
