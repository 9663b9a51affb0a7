#pragma once
// The zoo's diffusion model: a tiny DDPM (Ho et al. 2020) whose network is a U-Net with GroupNorm and a
// sinusoidal time embedding, with PyTorch's submodule names so that a state dict loads key for key into the
// same model written with torch.nn (bench/peers/zoo_models.py builds it). Images are [B, C, H, W] with pixels
// in [-1, 1]; `w` is ImageModelSpec::model_width (default 16); H and W are multiples of 4.
//
//   time_mlp   sinusoidal(t, w) -> Linear(w, 4w) -> SiLU -> Linear(4w, 4w)              the step's embedding
//   conv_in    Conv2d(C, w, 3, pad 1)                                                           at H x W
//   down1      ResBlock(w, w)            -> downsample1 Conv2d(w, w, 3, stride 2, pad 1)        to H/2
//   down2      ResBlock(w, 2w)           -> downsample2 Conv2d(2w, 2w, 3, stride 2, pad 1)      to H/4
//   mid        ResBlock(2w, 2w)
//   upsample2  nearest x2, Conv2d(2w, 2w, 3, pad 1)   up2 ResBlock(2w + 2w, 2w) on [that; down2's output]
//   upsample1  nearest x2, Conv2d(2w, w, 3, pad 1)    up1 ResBlock(w + w, w)    on [that; down1's output]
//   out        norm_out GroupNorm -> SiLU -> conv_out Conv2d(w, C, 3, pad 1): the predicted noise
//
// ResBlock(in, out): h = conv1(silu(norm1(x))) + time_proj(silu(temb))[:, :, None, None];
//                    h = conv2(silu(norm2(h))); return h + skip(x), skip a 1x1 conv when in != out.
// Every GroupNorm has gcd(8, channels) groups.
#include <memory>
#include <vector>

#include "layers/nn.h"
#include "samples/zoo/image_models.h"

namespace hg::samples::zoo {

// The sinusoidal embedding of diffusion steps t [B] (any float dtype): [B, dim] f32, the first dim / 2
// columns sin(t f_i), the rest cos(t f_i), f_i = 10000^(-i / (dim / 2)) (the Transformer's positions).
Tensor timestep_embedding(const Tensor& t, int64_t dim);

class ResBlock : public nn::Module {
 public:
  ResBlock(int64_t in_channels, int64_t out_channels, int64_t time_dim);
  Tensor forward(const Tensor& x, const Tensor& time_embedding);
  std::shared_ptr<nn::GroupNorm> norm1, norm2;
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::Linear> time_proj;
  std::shared_ptr<nn::Conv2d> skip;  // null for the identity
};

class DiffusionUNet : public nn::Module {
 public:
  explicit DiffusionUNet(const ImageModelSpec& spec);
  // The noise predicted in x_t [B, C, H, W] at steps t [B] (float, 0 .. T - 1).
  Tensor forward(const Tensor& x, const Tensor& t);
  int64_t width() const { return width_; }

  std::shared_ptr<nn::Sequential> time_mlp;
  std::shared_ptr<nn::Conv2d> conv_in, downsample1, downsample2, conv_out;
  std::shared_ptr<ResBlock> down1, down2, mid, up2, up1;
  std::shared_ptr<nn::Sequential> upsample2, upsample1;
  std::shared_ptr<nn::GroupNorm> norm_out;

 private:
  int64_t width_;
};

// DDPM's forward process over T steps with betas linear from beta_1 to beta_T (Ho et al.: 1e-4, 0.02,
// T = 1000): q(x_t | x_0) = N(sqrt(abar_t) x_0, (1 - abar_t) I), abar_t = prod_{s <= t} (1 - beta_s).
// Steps are numbered 0 .. T - 1 as in PyTorch ports of the paper. The tables are f64 on the CPU.
struct NoiseSchedule {
  explicit NoiseSchedule(int64_t steps = 1000, double beta_first = 1e-4, double beta_last = 0.02);
  int64_t steps() const { return int64_t(beta.size()); }
  std::vector<double> beta, alpha_bar;

  // x_t = sqrt(abar_t) x0 + sqrt(1 - abar_t) noise, for t [B] (i64) and x0, noise [B, C, H, W].
  Tensor add_noise(const Tensor& x0, const Tensor& noise, const Tensor& t) const;
  // One step of ancestral sampling, x_{t-1} from x_t and the predicted noise, every image at the same t:
  // x0 = clamp((x_t - sqrt(1 - abar_t) noise) / sqrt(abar_t), -1, 1), then the posterior q(x_{t-1} | x_t, x0)
  // = N(c0 x0 + ct x_t, beta~_t I) with c0 = beta_t sqrt(abar_{t-1}) / (1 - abar_t),
  // ct = (1 - abar_{t-1}) sqrt(1 - beta_t) / (1 - abar_t), beta~_t = beta_t (1 - abar_{t-1}) / (1 - abar_t);
  // `z` the N(0, I) draw (unused at t = 0, which returns the mean).
  Tensor denoise_step(const Tensor& x_t, const Tensor& predicted_noise, int64_t t, const Tensor& z) const;
};

// DDPM's simplified loss: the mean squared error between `noise` and the model's prediction of it from
// x_t = add_noise(x0, noise, t); in f32 whatever the model's dtype.
Tensor diffusion_loss(DiffusionUNet& model, const NoiseSchedule& schedule, const Tensor& x0, const Tensor& noise,
                      const Tensor& t);

// `count` images drawn by ancestral sampling from x_T ~ N(0, I) through every step, on the model's device in
// its dtype, with the default generator's noise; returned as f32 on the CPU in [-1, 1].
Tensor sample_images(DiffusionUNet& model, const NoiseSchedule& schedule, const Shape& image_shape, int64_t count);

}  // namespace hg::samples::zoo
