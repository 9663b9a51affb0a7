#pragma once
// Learning-rate schedules as plain data (optim/lr_schedule.h has the formulas and the classes), so a
// kernel can evaluate lr(t) from a step count t in device memory (kernels::*::lr_schedule_eval) and
// a captured step follows the schedule. The host classes call the same functions, so on the CPU the
// host's lr(t) and the device form agree to the last bit.
//
//   constant:       lr(s) = base
//   linear warmup:  lr(s) = base * (f0 + (1 - f0) * min(s, W) / W)
//   cosine decay:   lr(s) = min_lr + (base - min_lr) * (1 + cos(pi * min(s, S) / S)) / 2
//   a sequence:     piece k for milestone[k-1] <= s < milestone[k], seeing s - milestone[k-1]
#include <cmath>
#include <cstdint>

#include "kernels/host_device.h"

namespace hg::kernels {

inline constexpr int kMaxLrPieces = 8;

struct LrPiece {
  enum Kind : int32_t { constant, linear_warmup, cosine_decay };
  Kind kind = constant;
  double base = 0.0;
  double extra = 0.0;  // linear warmup: start factor f0; cosine decay: min_lr
  int64_t steps = 1;   // W or S
};

struct LrScheduleDesc {
  int32_t count = 0;                     // pieces in use, 1..kMaxLrPieces
  LrPiece pieces[kMaxLrPieces];
  int64_t milestones[kMaxLrPieces - 1];  // count - 1 strictly increasing starts of pieces 1..
};

HG_HOST_DEVICE inline double linear_warmup_lr(double base, int64_t warmup, double start_factor, int64_t step) {
  const double progress = double(step < warmup ? step : warmup) / double(warmup);
  return base * (start_factor + (1.0 - start_factor) * progress);
}

HG_HOST_DEVICE inline double cosine_decay_lr(double base, int64_t steps, double min_lr, int64_t step) {
  const double pi = 3.141592653589793238462643383279502884;  // std::numbers::pi
  const double progress = double(step < steps ? step : steps) / double(steps);
  return min_lr + (base - min_lr) * 0.5 * (1.0 + std::cos(pi * progress));
}

HG_HOST_DEVICE inline double lr_piece(const LrPiece& p, int64_t step) {
  switch (p.kind) {
    case LrPiece::linear_warmup:
      return linear_warmup_lr(p.base, p.steps, p.extra, step);
    case LrPiece::cosine_decay:
      return cosine_decay_lr(p.base, p.steps, p.extra, step);
    default:
      return p.base;
  }
}

// lr at step >= 0: the last milestone <= step selects the piece.
HG_HOST_DEVICE inline double lr_at(const LrScheduleDesc& d, int64_t step) {
  int k = 0;
  while (k + 1 < d.count && d.milestones[k] <= step) ++k;
  return lr_piece(d.pieces[k], step - (k == 0 ? 0 : d.milestones[k - 1]));
}

}  // namespace hg::kernels
