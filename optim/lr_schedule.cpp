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

double DescribedSchedule::lr(int64_t step) const {
  check_step(step, name_);
  return kernels::lr_at(desc_, step);
}

StepLR::StepLR(double base_lr, int64_t step_size, double gamma) : DescribedSchedule("StepLR") {
  check_rate(base_lr, "StepLR", "base_lr");
  check_rate(gamma, "StepLR", "gamma");
  HG_CHECK(step_size >= 1, "[StepLR] invalid step_size ", step_size, ": expected step_size >= 1");
  desc_ = one_piece(kernels::LrPiece::step_decay, base_lr, gamma, step_size);
}

ExponentialLR::ExponentialLR(double base_lr, double gamma) : DescribedSchedule("ExponentialLR") {
  check_rate(base_lr, "ExponentialLR", "base_lr");
  check_rate(gamma, "ExponentialLR", "gamma");
  desc_ = one_piece(kernels::LrPiece::exponential, base_lr, gamma, 1);
}

namespace {
std::vector<LrSchedulePtr> multi_step_pieces(double base_lr, size_t milestones, double gamma) {
  check_rate(base_lr, "MultiStepLR", "base_lr");
  check_rate(gamma, "MultiStepLR", "gamma");
  std::vector<LrSchedulePtr> pieces;
  for (size_t i = 0; i <= milestones; ++i)
    pieces.push_back(std::make_shared<ConstantLr>(base_lr * std::pow(gamma, double(i))));
  return pieces;
}
}  // namespace

MultiStepLR::MultiStepLR(double base_lr, std::vector<int64_t> milestones, double gamma)
    : Sequential(multi_step_pieces(base_lr, milestones.size(), gamma), milestones) {}

// PyTorch's phases: each ends at a fractional step (float(pct_start * total) - 1, ...); a piece runs
// from the first whole step after the previous end, and keeps the phase's fractional start in `from`.
OneCycleLR::OneCycleLR(double max_lr, int64_t total_steps, const OneCycleOptions& o) : DescribedSchedule("OneCycleLR") {
  check_rate(max_lr, "OneCycleLR", "max_lr");
  HG_CHECK(total_steps >= 2, "[OneCycleLR] invalid total_steps ", total_steps, ": expected total_steps >= 2");
  HG_CHECK(o.pct_start() > 0.0 && o.pct_start() < 1.0, "[OneCycleLR] invalid pct_start ", o.pct_start(),
           ": expected 0 < pct_start < 1");
  HG_CHECK(o.div_factor() > 0.0 && o.final_div_factor() > 0.0, "[OneCycleLR] div_factor and final_div_factor must "
           "be > 0, got ", o.div_factor(), " and ", o.final_div_factor());
  const double initial = max_lr / o.div_factor(), min_lr = initial / o.final_div_factor();
  const double total = double(total_steps), up_end = o.pct_start() * total - 1.0;
  struct Phase {
    double end, start_lr, end_lr;
  };
  std::vector<Phase> phases;
  if (o.three_phase()) {
    phases = {{up_end, initial, max_lr},
              {2.0 * o.pct_start() * total - 2.0, max_lr, initial},
              {total - 1.0, initial, min_lr}};
  } else {
    phases = {{up_end, initial, max_lr}, {total - 1.0, max_lr, min_lr}};
  }
  double from = 0.0;
  int64_t previous_origin = 0;
  for (size_t i = 0; i < phases.size(); ++i) {
    HG_CHECK(phases[i].end > from || i + 1 == phases.size(), "[OneCycleLR] pct_start ", o.pct_start(), " over ",
             total_steps, " steps leaves a phase without steps");
    const int64_t origin = i == 0 ? 0 : int64_t(std::floor(from)) + 1;
    HG_CHECK(i == 0 || origin > previous_origin, "[OneCycleLR] pct_start ", o.pct_start(), " over ", total_steps,
             " steps ends two phases within one step");
    previous_origin = origin;
    kernels::LrPiece& p = desc_.pieces[desc_.count];
    p.kind = o.anneal_linear() ? kernels::LrPiece::anneal_linear : kernels::LrPiece::anneal_cos;
    p.base = phases[i].start_lr;
    p.extra = phases[i].end_lr;
    p.origin = origin;
    p.from = from;
    p.to = phases[i].end;
    if (desc_.count > 0) desc_.milestones[desc_.count - 1] = origin;
    ++desc_.count;
    from = phases[i].end;
  }
}

void write_lr_on_device(const kernels::LrScheduleDesc& form, const Tensor& step_count, const Tensor& lr) {
  HG_CHECK(step_count.numel() == 1 && step_count.dtype() == DType::i64 && lr.numel() == 1 && lr.dtype() == DType::f64 &&
               step_count.is_contiguous() && lr.is_contiguous() && step_count.device() == lr.device(),
           "write_lr_on_device: expected an i64 step count and an f64 lr, one element each on one device, got ",
           step_count.describe(), " and ", lr.describe());
  HG_KERNEL(lr.device(), lr_schedule_eval, form, static_cast<const int64_t*>(step_count.data_ptr()),
            static_cast<double*>(lr.data_ptr()));
}

}  // namespace hg::optim
