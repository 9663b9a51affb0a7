#pragma once
// Parameter initialisers (in place, drawn from the default generator).
#include "engine/tensor.h"

namespace hg::nn::init {

void normal_(const Tensor& t, double mean, double std);
void uniform_(const Tensor& t, double low, double high);
void constant_(const Tensor& t, double value);

}  // namespace hg::nn::init
