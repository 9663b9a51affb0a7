#include "samples/zoo/generative_models.h"

namespace hg::samples::zoo {

namespace {

using Layers = std::vector<std::shared_ptr<nn::UnaryModule>>;

int64_t pixels_of(const ImageModelSpec& s) { return s.channels * s.height * s.width; }

}  // namespace

VAE::VAE(const ImageModelSpec& s, int64_t latent) : image_shape_{s.channels, s.height, s.width}, latent_(latent) {
  const int64_t w = s.model_width > 0 ? s.model_width : 400;
  fc1 = register_module("fc1", std::make_shared<nn::Linear>(pixels_of(s), w));
  fc_mu = register_module("fc_mu", std::make_shared<nn::Linear>(w, latent));
  fc_logvar = register_module("fc_logvar", std::make_shared<nn::Linear>(w, latent));
  fc3 = register_module("fc3", std::make_shared<nn::Linear>(latent, w));
  fc4 = register_module("fc4", std::make_shared<nn::Linear>(w, pixels_of(s)));
}

VAE::Output VAE::forward(const Tensor& x, const Tensor& eps) {
  const Tensor h = relu((*fc1)(x.reshape({x.size(0), -1})));
  Output out{Tensor(), (*fc_mu)(h), (*fc_logvar)(h)};
  HG_CHECK(eps.shape() == out.mu.shape(), "[VAE] expected noise ", shape_str(out.mu.shape()), ", got ", eps.describe());
  out.logits = decode(out.mu + eps * exp(out.logvar * 0.5));
  return out;
}

VAE::Output VAE::forward(const Tensor& x) {
  return forward(x, randn({x.size(0), latent_}, fc1->weight.dtype(), fc1->weight.device()));
}

Tensor VAE::decode(const Tensor& z) {
  Shape shape{z.size(0)};
  shape.insert(shape.end(), image_shape_.begin(), image_shape_.end());
  return (*fc4)(relu((*fc3)(z))).reshape(shape);
}

Tensor vae_loss(const VAE::Output& out, const Tensor& x) {
  // In f32 whatever the model's dtype: a batch's sum passes f16's largest value (an untrained model's 784 ln 2
  // = 543 nats an image) and loses bf16's digits.
  const double batch = double(x.size(0));
  const Tensor mu = out.mu.to(DType::f32), logvar = out.logvar.to(DType::f32);
  const Tensor reconstruction =
      binary_cross_entropy_with_logits(out.logits.to(DType::f32), x.to(DType::f32), Tensor(), Tensor(), Reduction::Sum);
  const Tensor kl = sum(1.0 + logvar - mu * mu - exp(logvar)) * -0.5;
  return (reconstruction + kl) * (1.0 / batch);
}

DCGAN::DCGAN(const ImageModelSpec& s, int64_t latent) : latent_(latent) {
  HG_INPUT_CHECK(s.height % 4 == 0 && s.width % 4 == 0, "[zoo dcgan] the images are ", s.height, "x", s.width,
                 "; expected sides that are multiples of 4 (two stride-2 layers)");
  const int64_t w = s.model_width > 0 ? s.model_width : 32;
  const int64_t h4 = s.height / 4, w4 = s.width / 4;
  generator = register_module(
      "generator",
      std::make_shared<nn::Sequential>(Layers{
          std::make_shared<nn::Linear>(latent, 2 * w * h4 * w4, false),
          std::make_shared<nn::BatchNorm1d>(2 * w * h4 * w4), std::make_shared<nn::ReLU>(),
          std::make_shared<nn::Unflatten>(Shape{2 * w, h4, w4}),
          std::make_shared<nn::ConvTranspose2d>(
              nn::ConvTranspose2dOptions(2 * w, w, 4).stride(2).padding(1).bias(false)),
          std::make_shared<nn::BatchNorm2d>(w), std::make_shared<nn::ReLU>(),
          std::make_shared<nn::ConvTranspose2d>(nn::ConvTranspose2dOptions(w, s.channels, 4).stride(2).padding(1)),
          std::make_shared<nn::Tanh>()}));
  discriminator =
      register_module("discriminator",
                      std::make_shared<nn::Sequential>(Layers{
                          std::make_shared<nn::Conv2d>(nn::Conv2dOptions(s.channels, w, 4).stride(2).padding(1)),
                          std::make_shared<nn::LeakyReLU>(0.2),
                          std::make_shared<nn::Conv2d>(nn::Conv2dOptions(w, 2 * w, 4).stride(2).padding(1).bias(false)),
                          std::make_shared<nn::BatchNorm2d>(2 * w), std::make_shared<nn::LeakyReLU>(0.2),
                          std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(2 * w * h4 * w4, 1)}));
  // Radford et al.: every weight N(0, 0.02), BatchNorm's scale N(1, 0.02), every bias 0.
  for (const auto& [name, p] : named_parameters()) {
    const bool norm_scale = p.dim() == 1 && name.ends_with(".weight");
    if (name.ends_with(".bias"))
      nn::init::zeros_(p);
    else
      nn::init::normal_(p, norm_scale ? 1.0 : 0.0, 0.02);
  }
}

}  // namespace hg::samples::zoo
