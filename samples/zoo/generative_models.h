#pragma once
// The zoo's generative image models, with PyTorch's submodule names so that a state dict loads key for key
// into the same model written with torch.nn (bench/peers/zoo_models.py builds them). Images are
// [B, C, H, W]; `w` is ImageModelSpec::model_width.
//
//   vae     (Kingma & Welling 2013, PyTorch's examples/vae) on pixels in [0, 1]:
//           encoder  Flatten -> fc1 Linear(C*H*W, w) -> ReLU -> fc_mu, fc_logvar Linear(w, latent)
//           sample   z = mu + eps * exp(logvar / 2), eps ~ N(0, I)            (the reparameterisation)
//           decoder  fc3 Linear(latent, w) -> ReLU -> fc4 Linear(w, C*H*W) -> the logits of p(x | z)
//   dcgan   (Radford et al. 2015, at 28x28: a Linear to H/4 x W/4 feature maps, two 4x4 stride-2 layers)
//           on pixels in [-1, 1]:
//           generator      z [B, latent] -> Linear(latent, 2w*H/4*W/4, bias=False) -> BatchNorm1d -> ReLU
//                          -> Unflatten -> ConvTranspose2d(2w, w, 4, 2, 1, bias=False) -> BatchNorm2d -> ReLU
//                          -> ConvTranspose2d(w, C, 4, 2, 1) -> Tanh
//           discriminator  x -> Conv2d(C, w, 4, 2, 1) -> LeakyReLU(0.2) -> Conv2d(w, 2w, 4, 2, 1, bias=False)
//                          -> BatchNorm2d -> LeakyReLU(0.2) -> Flatten -> Linear(2w*H/4*W/4, 1): a logit
//           initialised as the paper says: weights N(0, 0.02), BatchNorm scales N(1, 0.02), biases 0.
#include <memory>

#include "layers/nn.h"
#include "samples/zoo/image_models.h"

namespace hg::samples::zoo {

inline constexpr int64_t kVaeLatent = 20, kGanLatent = 64;

class VAE : public nn::Module {
 public:
  explicit VAE(const ImageModelSpec& spec, int64_t latent = kVaeLatent);  // w 0: 400
  struct Output {
    Tensor logits, mu, logvar;  // logits [B, C, H, W] of p(x | z); mu and logvar [B, latent] of q(z | x)
  };
  // The encoder, z from `eps` [B, latent] (N(0, I) noise), the decoder.
  Output forward(const Tensor& x, const Tensor& eps);
  Output forward(const Tensor& x);  // eps drawn from the default generator
  // The decoder's logits [B, C, H, W] for z [B, latent].
  Tensor decode(const Tensor& z);
  int64_t latent() const { return latent_; }

  std::shared_ptr<nn::Linear> fc1, fc_mu, fc_logvar, fc3, fc4;

 private:
  Shape image_shape_;
  int64_t latent_;
};

// The negative ELBO, in nats per image: the decoder's Bernoulli cross-entropy summed over the pixels plus
// KL(q(z | x) || N(0, I)) = -1/2 sum(1 + logvar - mu^2 - exp(logvar)), averaged over the batch; computed in
// f32 for a half model (its sums would overflow f16). `x` is the batch of pixels in [0, 1] the output was
// computed from.
Tensor vae_loss(const VAE::Output& out, const Tensor& x);

class DCGAN : public nn::Module {
 public:
  explicit DCGAN(const ImageModelSpec& spec, int64_t latent = kGanLatent);  // w 0: 32; H, W multiples of 4
  int64_t latent() const { return latent_; }
  std::shared_ptr<nn::Sequential> generator, discriminator;

 private:
  int64_t latent_;
};

}  // namespace hg::samples::zoo
