#pragma once
// The zoo's image classifiers, each a UnaryModule from images [B, C, H, W] to logits [B, classes], with
// PyTorch's submodule names so that a state dict loads key for key into the same model written with
// torch.nn (bench/peers/zoo_models.py builds them):
//
//   mlp     Flatten -> Linear(C*H*W, w) -> ReLU -> Linear(w, w) -> ReLU -> Linear(w, classes)
//   lenet   [Conv2d(5x5, pad 2) -> ReLU -> MaxPool2d(2)] with w and 2w channels -> Flatten
//           -> Linear(2w * H/4 * W/4, 128) -> ReLU -> Linear(128, classes)        (H, W multiples of 4)
//   resnet  conv3x3(C, w) -> BatchNorm2d -> ReLU -> three stages of `blocks` BasicBlocks with w, 2w, 4w
//           channels (the 2nd and 3rd start with stride 2 and a 1x1 conv + BatchNorm shortcut)
//           -> AdaptiveAvgPool2d(1) -> Linear(4w, classes)                   (He et al. 2015, CIFAR form)
//   vit     patches p x p embedded by Conv2d(C, w, p, stride p) -> [class token; patches] + learned
//           positions -> pre-norm TransformerEncoder (GELU, feed-forward 2w, final LayerNorm) -> the class
//           token's row -> Linear(w, classes)                           (Dosovitskiy et al. 2020)
#include <memory>
#include <string>
#include <vector>

#include "layers/nn.h"

namespace hg::samples::zoo {

// What the zoo's image models are built for: the data's image shape and class count, and the model's
// width (hidden units of the MLP, first-stage channels of LeNet and the ResNet, the ViT's model dim).
struct ImageModelSpec {
  int64_t channels = 1, height = 28, width = 28, classes = 10;
  int64_t model_width = 0;  // 0: the model's default
};

// "mlp", "lenet", "resnet", "vit".
const std::vector<std::string>& image_model_names();
// The model `name` for `spec`; an hg::Error names the shape rule a spec breaks (LeNet: H and W multiples
// of 4; ViT: the patch size dividing H and W).
std::shared_ptr<nn::UnaryModule> make_image_model(const std::string& name, const ImageModelSpec& spec);

// A ResNet basic block: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), the shortcut the identity or,
// when the stride or the channels change, `downsample` (a 1x1 conv with the stride, then BatchNorm2d).
class BasicBlock : public nn::UnaryModule {
 public:
  BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;
  std::shared_ptr<nn::Sequential> downsample;  // null for the identity
};

class ResNet : public nn::UnaryModule {
 public:
  ResNet(const ImageModelSpec& spec, int64_t blocks_per_stage);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::Conv2d> conv1;
  std::shared_ptr<nn::BatchNorm2d> bn1;
  std::shared_ptr<nn::Sequential> layer1, layer2, layer3;
  std::shared_ptr<nn::Linear> fc;
};

class VisionTransformer : public nn::UnaryModule {
 public:
  VisionTransformer(const ImageModelSpec& spec, int64_t patch, int64_t depth, int64_t heads);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::Conv2d> patch_embed;
  Tensor class_token, pos_embedding;  // [1, 1, w] zeros; [1, 1 + patches, w] N(0, 0.02^2) truncated at 2 std
  std::shared_ptr<nn::TransformerEncoder> encoder;
  std::shared_ptr<nn::Linear> head;
};

}  // namespace hg::samples::zoo
