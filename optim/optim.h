#pragma once
// hg::optim in one include: the Optimizer base (parameter groups, per-parameter state, checkpoint
// accessors), SGD and AdamW, learning-rate schedules and global gradient-norm clipping. A step:
//
//   opt.zero_grad(); loss.backward();
//   clip_grad_norm(params, 1.0); opt.set_lr(schedule.lr(step)); opt.step();
#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/early_stopping.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "optim/sgd.h"
