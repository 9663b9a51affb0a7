#pragma once
// zoo --model vae and --model dcgan: generative models of Fashion-MNIST's images, judged by what they
// draw (PNG grids with --images) and, for the VAE, by the negative ELBO of held-out images.
#include "samples/zoo/zoo_config.h"

namespace hg::samples::zoo {

int train_vae(const ZooConfig& c);
int train_dcgan(const ZooConfig& c);

}  // namespace hg::samples::zoo
