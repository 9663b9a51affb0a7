#include "samples/zoo/image_models.h"

#include <algorithm>

namespace hg::samples::zoo {

namespace {

using nn::UnaryModule;

std::shared_ptr<UnaryModule> make_mlp(const ImageModelSpec& s) {
  const int64_t w = s.model_width > 0 ? s.model_width : 256;
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<UnaryModule>>{
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(s.channels * s.height * s.width, w),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(w, w), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(w, s.classes)});
}

std::shared_ptr<UnaryModule> make_lenet(const ImageModelSpec& s) {
  HG_INPUT_CHECK(s.height % 4 == 0 && s.width % 4 == 0, "[zoo lenet] the images are ", s.height, "x", s.width,
                 "; expected sides that are multiples of 4 (two 2x2 poolings)");
  const int64_t w = s.model_width > 0 ? s.model_width : 16;
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<UnaryModule>>{
      std::make_shared<nn::Conv2d>(nn::Conv2dOptions(s.channels, w, 5).padding(2)), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Conv2d>(nn::Conv2dOptions(w, 2 * w, 5).padding(2)),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(2 * w * (s.height / 4) * (s.width / 4), 128), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(128, s.classes)});
}

std::shared_ptr<nn::Conv2d> conv3x3(int64_t in, int64_t out, int64_t stride) {
  return std::make_shared<nn::Conv2d>(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}

// A ResNet stage: `blocks` BasicBlocks, the first with `stride`.
std::shared_ptr<nn::Sequential> make_stage(int64_t in, int64_t out, int64_t blocks, int64_t stride) {
  auto stage = std::make_shared<nn::Sequential>();
  for (int64_t b = 0; b < blocks; ++b)
    stage->push_back(std::make_shared<BasicBlock>(b == 0 ? in : out, out, b == 0 ? stride : 1));
  return stage;
}

}  // namespace

const std::vector<std::string>& image_model_names() {
  static const std::vector<std::string> names{"mlp", "lenet", "resnet", "vit"};
  return names;
}

std::shared_ptr<nn::UnaryModule> make_image_model(const std::string& name, const ImageModelSpec& spec) {
  if (name == "mlp") return make_mlp(spec);
  if (name == "lenet") return make_lenet(spec);
  if (name == "resnet") return std::make_shared<ResNet>(spec, 1);
  if (name == "vit") return std::make_shared<VisionTransformer>(spec, 4, 4, 4);
  HG_INPUT_FAIL("[zoo] no image model \"", name, "\"; expected mlp, lenet, resnet or vit");
}

BasicBlock::BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride) {
  conv1 = register_module("conv1", conv3x3(in_channels, out_channels, stride));
  bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(out_channels));
  conv2 = register_module("conv2", conv3x3(out_channels, out_channels, 1));
  bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(out_channels));
  if (stride != 1 || in_channels != out_channels)
    downsample = register_module(
        "downsample",
        std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::UnaryModule>>{
            std::make_shared<nn::Conv2d>(nn::Conv2dOptions(in_channels, out_channels, 1).stride(stride).bias(false)),
            std::make_shared<nn::BatchNorm2d>(out_channels)}));
}

Tensor BasicBlock::forward(const Tensor& x) {
  const Tensor out = (*bn2)((*conv2)(relu((*bn1)((*conv1)(x)))));
  return relu(out + (downsample ? (*downsample)(x) : x));
}

ResNet::ResNet(const ImageModelSpec& s, int64_t blocks_per_stage) {
  const int64_t w = s.model_width > 0 ? s.model_width : 16;
  conv1 = register_module("conv1", conv3x3(s.channels, w, 1));
  bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(w));
  layer1 = register_module("layer1", make_stage(w, w, blocks_per_stage, 1));
  layer2 = register_module("layer2", make_stage(w, 2 * w, blocks_per_stage, 2));
  layer3 = register_module("layer3", make_stage(2 * w, 4 * w, blocks_per_stage, 2));
  fc = register_module("fc", std::make_shared<nn::Linear>(4 * w, s.classes));
  // He et al.'s initialisation (torchvision's ResNet): kaiming_normal_ fan_out for the convolutions.
  for (const auto& [name, p] : named_parameters())
    if (p.dim() == 4) nn::init::kaiming_normal_(p, 0.0, nn::init::FanMode::fan_out, "relu");
}

Tensor ResNet::forward(const Tensor& x) {
  Tensor h = relu((*bn1)((*conv1)(x)));
  h = (*layer3)((*layer2)((*layer1)(h)));
  return (*fc)(mean(h, {2, 3}));  // AdaptiveAvgPool2d(1) then flatten
}

VisionTransformer::VisionTransformer(const ImageModelSpec& s, int64_t patch, int64_t depth, int64_t heads) {
  HG_INPUT_CHECK(s.height % patch == 0 && s.width % patch == 0, "[zoo vit] the images are ", s.height, "x", s.width,
                 "; expected sides that are multiples of the patch size ", patch);
  const int64_t w = s.model_width > 0 ? s.model_width : 64;
  HG_INPUT_CHECK(w % heads == 0, "[zoo vit] width ", w, " is not a multiple of the ", heads, " heads");
  const int64_t patches = (s.height / patch) * (s.width / patch);
  patch_embed = register_module("patch_embed",
                                std::make_shared<nn::Conv2d>(nn::Conv2dOptions(s.channels, w, patch).stride(patch)));
  class_token = register_parameter("class_token", zeros({1, 1, w}));
  pos_embedding = register_parameter("pos_embedding", zeros({1, 1 + patches, w}));
  nn::init::trunc_normal_(pos_embedding, 0.0, 0.02, -0.04, 0.04);
  const auto layer = nn::TransformerLayerOptions(w, heads)
                         .dim_feedforward(2 * w)
                         .dropout(0.0)
                         .activation(nn::TransformerActivation::gelu)
                         .batch_first(true)
                         .norm_first(true);
  encoder = register_module("encoder", std::make_shared<nn::TransformerEncoder>(layer, depth, true));
  head = register_module("head", std::make_shared<nn::Linear>(w, s.classes));
}

Tensor VisionTransformer::forward(const Tensor& x) {
  const int64_t batch = x.size(0);
  const Tensor patches = transpose(flatten((*patch_embed)(x), 2), 1, 2);  // [B, patches, w]
  const Tensor cls = expand(class_token, {batch, 1, class_token.size(2)});
  const Tensor tokens = cat({cls, patches}, 1) + pos_embedding;
  return (*head)(select(encoder->forward(tokens), 1, 0));
}

}  // namespace hg::samples::zoo
