#include "layers/init.h"

#include "engine/ops.h"

namespace hg::nn::init {

void normal_(const Tensor& t, double mean, double std) {
  NoGradGuard no_grad;
  t.copy_(affine(randn(t.shape(), accumulate_dtype(t.dtype()), t.device()), std, mean));
}

void uniform_(const Tensor& t, double low, double high) {
  NoGradGuard no_grad;
  t.copy_(affine(rand(t.shape(), accumulate_dtype(t.dtype()), t.device()), high - low, low));
}

void constant_(const Tensor& t, double value) {
  NoGradGuard no_grad;
  t.fill_(value);
}

}  // namespace hg::nn::init
