// The scalar bookkeeping of a capturable training step, on the CPU (declarations and math in
// kernels/kernels.h, kernels/unscale_math.h, kernels/lr_schedule_math.h): the loss scaler's policy,
// the count of steps taken and the learning rate of the schedule at that count. Each is one scalar
// computation on values in memory; the CUDA backend runs the same functions in one thread.
#include "kernels/kernels.h"
#include "kernels/step_kernels.h"

namespace hg::kernels::cpu {

void loss_scale_update(LossScaleState* state, const LossScalePolicy& policy, bool count_skip) {
  HG_CHECK(state != nullptr, "[loss_scale_update] null state");
  update_loss_scale(*state, policy, count_skip);
}

void step_count_advance(int64_t* count, const float* found_inf) {
  HG_CHECK(count != nullptr, "[step_count_advance] null count");
  if (found_inf == nullptr || *found_inf == 0.0f) *count += 1;
}

void lr_schedule_eval(const LrScheduleDesc& schedule, const int64_t* step, double* lr) {
  HG_CHECK(step != nullptr && lr != nullptr, "[lr_schedule_eval] null step or lr");
  HG_CHECK(schedule.count >= 1 && schedule.count <= kMaxLrPieces, "[lr_schedule_eval] ", schedule.count,
           " pieces; expected 1 to ", kMaxLrPieces);
  HG_CHECK(*step >= 0, "[lr_schedule_eval] step ", *step, "; expected >= 0");
  *lr = lr_at(schedule, *step);
}

}  // namespace hg::kernels::cpu
