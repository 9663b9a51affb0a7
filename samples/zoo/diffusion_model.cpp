#include "samples/zoo/diffusion_model.h"

#include <cmath>
#include <numeric>

namespace hg::samples::zoo {

namespace {

using Layers = std::vector<std::shared_ptr<nn::UnaryModule>>;

std::shared_ptr<nn::GroupNorm> group_norm(int64_t channels) {
  return std::make_shared<nn::GroupNorm>(std::gcd<int64_t>(8, channels), channels);
}

std::shared_ptr<nn::Conv2d> conv3x3(int64_t in, int64_t out, int64_t stride = 1) {
  return std::make_shared<nn::Conv2d>(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1));
}

std::shared_ptr<nn::Sequential> upsample(int64_t in, int64_t out) {
  return std::make_shared<nn::Sequential>(
      Layers{std::make_shared<nn::Upsample>(nn::UpsampleOptions().scale_factor(2.0)), conv3x3(in, out)});
}

// The f32 CPU tensor [B] of `table` at steps t [B] (i64).
Tensor at_steps(const std::vector<double>& table, const Tensor& t) {
  const Tensor steps = t.to(kCPU).to(DType::i64).contiguous();
  const auto* index = static_cast<const int64_t*>(steps.data_ptr());
  std::vector<float> values(static_cast<size_t>(steps.numel()));
  for (size_t i = 0; i < values.size(); ++i) {
    HG_INPUT_CHECK(index[i] >= 0 && index[i] < int64_t(table.size()), "[diffusion] step ", index[i],
                   " is outside the schedule's 0 .. ", table.size() - 1);
    values[i] = float(table[size_t(index[i])]);
  }
  return from_vector(values, {steps.numel()});
}

// `per_image` [B] as [B, 1, 1, 1] on `like`'s device in its dtype.
Tensor per_image(const Tensor& values, const Tensor& like) {
  return values.reshape({values.size(0), 1, 1, 1}).to(like.device()).to(like.dtype());
}

}  // namespace

Tensor timestep_embedding(const Tensor& t, int64_t dim) {
  HG_CHECK(dim >= 2 && dim % 2 == 0, "[timestep_embedding] expected an even dim >= 2, got ", dim);
  HG_CHECK(t.dim() == 1, "[timestep_embedding] expected steps [B], got ", t.describe());
  const int64_t half = dim / 2;
  std::vector<float> frequencies(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) frequencies[size_t(i)] = float(std::exp(-std::log(10000.0) * double(i) / half));
  const Tensor angles = t.to(DType::f32).unsqueeze(1) * from_vector(frequencies, {1, half}).to(t.device());
  return cat({sin(angles), cos(angles)}, 1);
}

ResBlock::ResBlock(int64_t in_channels, int64_t out_channels, int64_t time_dim) {
  norm1 = register_module("norm1", group_norm(in_channels));
  conv1 = register_module("conv1", conv3x3(in_channels, out_channels));
  time_proj = register_module("time_proj", std::make_shared<nn::Linear>(time_dim, out_channels));
  norm2 = register_module("norm2", group_norm(out_channels));
  conv2 = register_module("conv2", conv3x3(out_channels, out_channels));
  if (in_channels != out_channels)
    skip = register_module("skip", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(in_channels, out_channels, 1)));
}

Tensor ResBlock::forward(const Tensor& x, const Tensor& time_embedding) {
  const Tensor shift = (*time_proj)(silu(time_embedding));
  Tensor h = (*conv1)(silu((*norm1)(x))) + shift.reshape({shift.size(0), shift.size(1), 1, 1});
  h = (*conv2)(silu((*norm2)(h)));
  return h + (skip ? (*skip)(x) : x);
}

DiffusionUNet::DiffusionUNet(const ImageModelSpec& s) : width_(s.model_width > 0 ? s.model_width : 16) {
  HG_INPUT_CHECK(s.height % 4 == 0 && s.width % 4 == 0, "[zoo diffusion] the images are ", s.height, "x", s.width,
                 "; expected sides that are multiples of 4 (two stride-2 levels)");
  const int64_t w = width_, time_dim = 4 * w;
  time_mlp = register_module("time_mlp", std::make_shared<nn::Sequential>(Layers{
                                             std::make_shared<nn::Linear>(w, time_dim), std::make_shared<nn::SiLU>(),
                                             std::make_shared<nn::Linear>(time_dim, time_dim)}));
  conv_in = register_module("conv_in", conv3x3(s.channels, w));
  down1 = register_module("down1", std::make_shared<ResBlock>(w, w, time_dim));
  downsample1 = register_module("downsample1", conv3x3(w, w, 2));
  down2 = register_module("down2", std::make_shared<ResBlock>(w, 2 * w, time_dim));
  downsample2 = register_module("downsample2", conv3x3(2 * w, 2 * w, 2));
  mid = register_module("mid", std::make_shared<ResBlock>(2 * w, 2 * w, time_dim));
  upsample2 = register_module("upsample2", upsample(2 * w, 2 * w));
  up2 = register_module("up2", std::make_shared<ResBlock>(4 * w, 2 * w, time_dim));
  upsample1 = register_module("upsample1", upsample(2 * w, w));
  up1 = register_module("up1", std::make_shared<ResBlock>(2 * w, w, time_dim));
  norm_out = register_module("norm_out", group_norm(w));
  conv_out = register_module("conv_out", conv3x3(w, s.channels));
}

Tensor DiffusionUNet::forward(const Tensor& x, const Tensor& t) {
  HG_CHECK(x.dim() == 4 && t.dim() == 1 && t.size(0) == x.size(0),
           "[DiffusionUNet] expected x [B, C, H, W] and t [B], got ", x.describe(), " and ", t.describe());
  const Tensor temb = (*time_mlp)(timestep_embedding(t, width_).to(conv_in->weight.dtype()));
  const Tensor h1 = down1->forward((*conv_in)(x), temb);
  const Tensor h2 = down2->forward((*downsample1)(h1), temb);
  Tensor h = mid->forward((*downsample2)(h2), temb);
  h = up2->forward(cat({(*upsample2)(h), h2}, 1), temb);
  h = up1->forward(cat({(*upsample1)(h), h1}, 1), temb);
  return (*conv_out)(silu((*norm_out)(h)));
}

NoiseSchedule::NoiseSchedule(int64_t steps, double beta_first, double beta_last) {
  HG_CHECK(steps >= 2, "[NoiseSchedule] expected at least 2 steps, got ", steps);
  double product = 1.0;
  for (int64_t i = 0; i < steps; ++i) {
    beta.push_back(beta_first + (beta_last - beta_first) * double(i) / double(steps - 1));
    product *= 1.0 - beta.back();
    alpha_bar.push_back(product);
  }
}

Tensor NoiseSchedule::add_noise(const Tensor& x0, const Tensor& noise, const Tensor& t) const {
  std::vector<double> signal(alpha_bar.size()), spread(alpha_bar.size());
  for (size_t i = 0; i < alpha_bar.size(); ++i) {
    signal[i] = std::sqrt(alpha_bar[i]);
    spread[i] = std::sqrt(1.0 - alpha_bar[i]);
  }
  return x0 * per_image(at_steps(signal, t), x0) + noise * per_image(at_steps(spread, t), noise);
}

Tensor NoiseSchedule::denoise_step(const Tensor& x_t, const Tensor& predicted_noise, int64_t t, const Tensor& z) const {
  const size_t s = size_t(t);
  const double abar = alpha_bar[s], abar_before = t > 0 ? alpha_bar[s - 1] : 1.0;
  const Tensor x0 = clamp((x_t - predicted_noise * std::sqrt(1.0 - abar)) * (1.0 / std::sqrt(abar)), -1.0, 1.0);
  const Tensor mean = x0 * (beta[s] * std::sqrt(abar_before) / (1.0 - abar)) +
                      x_t * ((1.0 - abar_before) * std::sqrt(1.0 - beta[s]) / (1.0 - abar));
  if (t == 0) return mean;
  return mean + z * std::sqrt(beta[s] * (1.0 - abar_before) / (1.0 - abar));
}

Tensor diffusion_loss(DiffusionUNet& model, const NoiseSchedule& schedule, const Tensor& x0, const Tensor& noise,
                      const Tensor& t) {
  const Tensor x_t = schedule.add_noise(x0, noise, t);
  const Tensor predicted = model.forward(x_t, t.to(x0.device()).to(DType::f32));
  return mse_loss(predicted.to(DType::f32), noise.to(DType::f32));
}

Tensor sample_images(DiffusionUNet& model, const NoiseSchedule& schedule, const Shape& image_shape, int64_t count) {
  NoGradGuard no_grad;
  const Device device = model.conv_in->weight.device();
  const DType dtype = model.conv_in->weight.dtype();
  Shape shape{count};
  shape.insert(shape.end(), image_shape.begin(), image_shape.end());
  Tensor x = randn(shape, DType::f32, device);  // the chain in f32 whatever the model's dtype
  for (int64_t t = schedule.steps() - 1; t >= 0; --t) {
    const Tensor steps = full({count}, double(t), DType::f32, device);
    const Tensor predicted = model.forward(x.to(dtype), steps).to(DType::f32);
    x = schedule.denoise_step(x, predicted, t, t > 0 ? randn(shape, DType::f32, device) : Tensor());
  }
  return x.to(kCPU).contiguous();
}

}  // namespace hg::samples::zoo
