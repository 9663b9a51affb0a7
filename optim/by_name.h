#pragma once
// The local optimizers by name, for programs that pick one from a flag (train_mlp --optimizer, ...):
//
//   sgd      SGD with momentum 0.9 (PyTorch's default is none; with none, plain SGD trains poorly)
//   adam     Adam, L2 weight decay
//   adamw    AdamW, decoupled weight decay
//   rmsprop  RMSprop
//   adagrad  Adagrad
//   lion     Lion, decoupled weight decay (take an lr 3-10x below AdamW's)
//
// Every other hyperparameter is PyTorch's default (optim/sgd.h, adam.h, ...).
#include <memory>
#include <string>
#include <vector>

#include "optim/optimizer.h"

namespace hg::optim {

// The names above, in that order.
const std::vector<std::string>& optimizer_names();
// "sgd, adam, adamw, rmsprop, adagrad or lion" (for help texts and errors).
std::string optimizer_name_list();
// The optimizer `name` over `params` with `lr` and `weight_decay`; an hg::Error names the valid
// names when `name` is none of them.
std::unique_ptr<LocalOptimizer> make_optimizer(const std::string& name, std::vector<Tensor> params, double lr,
                                               double weight_decay);

}  // namespace hg::optim
