#pragma once
// Learning-rate schedules as plain data (optim/lr_schedule.h has the formulas and the classes), so a
// kernel can evaluate lr(t) from a step count t in device memory (kernels::*::lr_schedule_eval) and
// a captured step follows the schedule. The host classes call the same functions, so on the CPU the
// host's lr(t) and the device form agree to the last bit.
//
//   constant:       lr(s) = base
//   linear warmup:  lr(s) = base * (f0 + (1 - f0) * min(s, W) / W)
//   cosine decay:   lr(s) = min_lr + (base - min_lr) * (1 + cos(pi * min(s, S) / S)) / 2
//   step decay:     lr(s) = base * gamma^floor(s / S)                       (PyTorch's StepLR)
//   exponential:    lr(s) = base * gamma^s                                  (ExponentialLR)
//   anneal:         lr(s) = end + (start - end) / 2 * (cos(pi * p) + 1), or start + (end - start) * p (linear),
//                   p = clamp((origin + s - from) / (to - from), 0, 1)      (a OneCycleLR phase)
//   a sequence:     piece k for milestone[k-1] <= s < milestone[k], seeing s - milestone[k-1]
#include <cmath>
#include <cstdint>

#include "kernels/host_device.h"

namespace hg::kernels {

inline constexpr int kMaxLrPieces = 8;

struct LrPiece {
  enum Kind : int32_t { constant, linear_warmup, cosine_decay, step_decay, exponential, anneal_cos, anneal_linear };
  Kind kind = constant;
  double base = 0.0;   // anneal: start
  double extra = 0.0;  // linear warmup: start factor f0; cosine decay: min_lr; step decay, exponential: gamma;
                       // anneal: end
  int64_t steps = 1;   // W or S
  // Anneal only: the phase [from, to] in the owner's steps (fractional, as OneCycleLR computes them), and
  // origin, the owner's step where this piece starts (the piece sees s counted from there).
  int64_t origin = 0;
  double from = 0.0, to = 1.0;
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

// PyTorch's OneCycleLR._annealing_cos / _annealing_linear, with the phase fraction clamped to [0, 1].
HG_HOST_DEVICE inline double anneal_lr(const LrPiece& p, int64_t step) {
  double pct = (double(p.origin + step) - p.from) / (p.to - p.from);
  pct = pct < 0.0 ? 0.0 : (pct > 1.0 ? 1.0 : pct);
  if (p.kind == LrPiece::anneal_linear) return (p.extra - p.base) * pct + p.base;
  const double pi = 3.141592653589793238462643383279502884;
  const double cos_out = std::cos(pi * pct) + 1.0;
  return p.extra + (p.base - p.extra) / 2.0 * cos_out;
}

HG_HOST_DEVICE inline double lr_piece(const LrPiece& p, int64_t step) {
  switch (p.kind) {
    case LrPiece::linear_warmup:
      return linear_warmup_lr(p.base, p.steps, p.extra, step);
    case LrPiece::cosine_decay:
      return cosine_decay_lr(p.base, p.steps, p.extra, step);
    case LrPiece::step_decay:
      return p.base * std::pow(p.extra, double(step / p.steps));
    case LrPiece::exponential:
      return p.base * std::pow(p.extra, double(step));
    case LrPiece::anneal_cos:
    case LrPiece::anneal_linear:
      return anneal_lr(p, step);
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
