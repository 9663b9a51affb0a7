// Learning-rate schedules (formulas in optim/lr_schedule.h).
#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "engine/kernel_dispatch.h"
#include "kernels/error.h"
#include "kernels/step_kernels.h"

namespace hg::optim {
namespace {

void check_step(int64_t step, const char* schedule) {
  HG_CHECK(step >= 0, "[", schedule, "] lr(step) needs step >= 0, got ", step);
}

void check_rate(double value, const char* schedule, const char* what) {
  HG_CHECK(std::isfinite(value) && value >= 0.0, "[", schedule, "] invalid ", what, " ", value, ": expected ", what,
           " >= 0");
}

std::vector<LrSchedulePtr> warmup_cosine_pieces(double base_lr, int64_t warmup_steps, int64_t total_steps,
                                                double min_lr) {
  HG_CHECK(warmup_steps >= 0 && total_steps > warmup_steps, "[WarmupCosine] got warmup_steps ", warmup_steps,
           " and total_steps ", total_steps, "; expected 0 <= warmup_steps < total_steps");
  std::vector<LrSchedulePtr> pieces;
  if (warmup_steps > 0) pieces.push_back(std::make_shared<LinearWarmup>(base_lr, warmup_steps, 0.0));
  pieces.push_back(std::make_shared<CosineDecay>(base_lr, total_steps - warmup_steps, min_lr));
  return pieces;
}

std::vector<int64_t> warmup_cosine_milestones(int64_t warmup_steps) {
  if (warmup_steps > 0) return {warmup_steps};
  return {};
}

}  // namespace

ConstantLr::ConstantLr(double base_lr) : base_lr_(base_lr) { check_rate(base_lr, "ConstantLr", "base_lr"); }

double ConstantLr::lr(int64_t step) const {
  check_step(step, "ConstantLr");
  return base_lr_;
}

LinearWarmup::LinearWarmup(double base_lr, int64_t warmup_steps, double start_factor)
    : base_lr_(base_lr), warmup_steps_(warmup_steps), start_factor_(start_factor) {
  check_rate(base_lr, "LinearWarmup", "base_lr");
  HG_CHECK(warmup_steps >= 1, "[LinearWarmup] invalid warmup_steps ", warmup_steps, ": expected warmup_steps >= 1");
  HG_CHECK(start_factor >= 0.0 && start_factor <= 1.0, "[LinearWarmup] invalid start_factor ", start_factor,
           ": expected 0 <= start_factor <= 1");
}

double LinearWarmup::lr(int64_t step) const {
  check_step(step, "LinearWarmup");
  return kernels::linear_warmup_lr(base_lr_, warmup_steps_, start_factor_, step);
}

CosineDecay::CosineDecay(double base_lr, int64_t decay_steps, double min_lr)
    : base_lr_(base_lr), decay_steps_(decay_steps), min_lr_(min_lr) {
  check_rate(base_lr, "CosineDecay", "base_lr");
  check_rate(min_lr, "CosineDecay", "min_lr");
  HG_CHECK(decay_steps >= 1, "[CosineDecay] invalid decay_steps ", decay_steps, ": expected decay_steps >= 1");
  HG_CHECK(min_lr <= base_lr, "[CosineDecay] min_lr ", min_lr, " is above base_lr ", base_lr,
           ": expected min_lr <= base_lr");
}

double CosineDecay::lr(int64_t step) const {
  check_step(step, "CosineDecay");
  return kernels::cosine_decay_lr(base_lr_, decay_steps_, min_lr_, step);
}

Sequential::Sequential(std::vector<LrSchedulePtr> schedules, std::vector<int64_t> milestones)
    : schedules_(std::move(schedules)), milestones_(std::move(milestones)) {
  HG_CHECK(!schedules_.empty(), "[Sequential] needs at least one schedule");
  HG_CHECK(milestones_.size() + 1 == schedules_.size(), "[Sequential] got ", schedules_.size(), " schedules and ",
           milestones_.size(), " milestones; expected one milestone fewer than schedules");
  for (size_t i = 0; i < schedules_.size(); ++i) {
    HG_CHECK(schedules_[i] != nullptr, "[Sequential] schedule ", i, " is null");
  }
  for (size_t i = 0; i < milestones_.size(); ++i) {
    const int64_t previous = i == 0 ? 0 : milestones_[i - 1];
    HG_CHECK(milestones_[i] > previous, "[Sequential] milestone ", i, " is ", milestones_[i],
             "; expected milestones > 0 and strictly increasing (previous: ", previous, ")");
  }
}

double Sequential::lr(int64_t step) const {
  check_step(step, "Sequential");
  // The last milestone <= step selects the schedule, which sees steps counted from its milestone.
  const size_t k = size_t(std::upper_bound(milestones_.begin(), milestones_.end(), step) - milestones_.begin());
  const int64_t start = k == 0 ? 0 : milestones_[k - 1];
  return schedules_[k]->lr(step - start);
}

namespace {

kernels::LrScheduleDesc one_piece(kernels::LrPiece::Kind kind, double base, double extra, int64_t steps) {
  kernels::LrScheduleDesc d;
  d.count = 1;
  d.pieces[0] = {kind, base, extra, steps};
  return d;
}

}  // namespace

std::optional<kernels::LrScheduleDesc> ConstantLr::device_form() const {
  return one_piece(kernels::LrPiece::constant, base_lr_, 0.0, 1);
}

std::optional<kernels::LrScheduleDesc> LinearWarmup::device_form() const {
  return one_piece(kernels::LrPiece::linear_warmup, base_lr_, start_factor_, warmup_steps_);
}

std::optional<kernels::LrScheduleDesc> CosineDecay::device_form() const {
  return one_piece(kernels::LrPiece::cosine_decay, base_lr_, min_lr_, decay_steps_);
}

// Flattened: piece j of child k starts at milestone[k-1] + its own start, and is kept when that is
// before child k's end (milestone[k]); every piece then sees step - its start, as nesting gives it.
std::optional<kernels::LrScheduleDesc> Sequential::device_form() const {
  kernels::LrScheduleDesc out;
  for (size_t k = 0; k < schedules_.size(); ++k) {
    const std::optional<kernels::LrScheduleDesc> child = schedules_[k]->device_form();
    if (!child) return std::nullopt;
    const int64_t begin = k == 0 ? 0 : milestones_[k - 1];
    const bool last = k + 1 == schedules_.size();
    for (int j = 0; j < child->count; ++j) {
      const int64_t start = begin + (j == 0 ? 0 : child->milestones[j - 1]);
      if (!last && start >= milestones_[k]) break;
      if (out.count == kernels::kMaxLrPieces) return std::nullopt;  // too many pieces: host only
      if (out.count > 0) out.milestones[out.count - 1] = start;
      out.pieces[out.count++] = child->pieces[j];
    }
  }
  return out;
}

WarmupCosine::WarmupCosine(double base_lr, int64_t warmup_steps, int64_t total_steps, double min_lr)
    : Sequential(warmup_cosine_pieces(base_lr, warmup_steps, total_steps, min_lr),
                 warmup_cosine_milestones(warmup_steps)) {}

void write_lr_on_device(const kernels::LrScheduleDesc& form, const Tensor& step_count, const Tensor& lr) {
  HG_CHECK(step_count.numel() == 1 && step_count.dtype() == DType::i64 && lr.numel() == 1 && lr.dtype() == DType::f64 &&
               step_count.is_contiguous() && lr.is_contiguous() && step_count.device() == lr.device(),
           "write_lr_on_device: expected an i64 step count and an f64 lr, one element each on one device, got ",
           step_count.describe(), " and ", lr.describe());
  HG_KERNEL(lr.device(), lr_schedule_eval, form, static_cast<const int64_t*>(step_count.data_ptr()),
            static_cast<double*>(lr.data_ptr()));
}

}  // namespace hg::optim
