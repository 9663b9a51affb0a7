#pragma once
// hg::optim in one include: the Optimizer base (parameter groups, per-parameter state, checkpoint
// accessors), SGD, Adam, AdamW, RMSprop, Adagrad and Lion, learning-rate schedules, global gradient-norm
// clipping and the fp16 loss scaler (optim/loss_scaler.h: scale, unscale_, clip, step, update). A step:
//
//   opt.zero_grad(); loss.backward();
//   clip_grad_norm(params, 1.0); opt.set_lr(schedule.lr(step)); opt.step();
#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/clip_value.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/plateau.h"
#include "optim/lion.h"
#include "optim/optimizer.h"
#include "optim/rmsprop.h"
#include "optim/sgd.h"
