#pragma once
// zoo --model vae, dcgan and diffusion: generative models of Fashion-MNIST's images, judged by what they
// draw (PNG grids with --images) and by a held-out loss (the VAE's negative ELBO, the DDPM's noise prediction).
#include "samples/zoo/zoo_config.h"

namespace hg::samples::zoo {

int train_vae(const ZooConfig& c);
int train_dcgan(const ZooConfig& c);
int train_diffusion(const ZooConfig& c);

}  // namespace hg::samples::zoo
