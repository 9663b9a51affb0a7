// MultiheadAttention and the Transformer layers against PyTorch: tests/data/torch/attention_layers.safetensors
// (written once by scripts/make-torch-attention-vectors, torch 1.13). Each case builds the module from
// PyTorch's arguments, checks its printed tree, loads PyTorch's state dict by its names, runs the same
// inputs and masks (bool and additive, key padding, causal patterns, batch first or not, kdim / vdim,
// cross attention) and compares the output and every input and parameter gradient, to f32 rounding;
// MultiheadAttention's need_weights calls (averaged and per head) compare the weights too, with backward
// through both outputs.
// Built twice: on the CPU (test_attention_layers) and on the CUDA device (test_cuda_attention_layers;
// the emulator in CI).
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>

#include "engine/safetensors.h"
#include "layers/nn.h"
#include "support/check_error.h"
#include "support/suite_device.h"
#include "support/tensor_compare.h"

using namespace hg;
using namespace hg::nn;
using json = nlohmann::json;

namespace {

const std::string kVectors = std::string(HG_TORCH_TEST_DATA) + "/attention_layers.safetensors";
constexpr double kTolerance = 5e-6;

TransformerLayerOptions layer_options(const json& a) {
  TransformerLayerOptions o(a["d_model"], a["nhead"]);
  o.dim_feedforward(a.value("dim_feedforward", int64_t(2048)))
      .dropout(a.value("dropout", 0.1))
      .batch_first(a.value("batch_first", false))
      .norm_first(a.value("norm_first", false))
      .activation(a.value("activation", std::string("relu")) == "gelu" ? TransformerActivation::gelu
                                                                       : TransformerActivation::relu);
  return o;
}

std::shared_ptr<Module> make_module(const std::string& layer, const json& a) {
  if (layer == "MultiheadAttention")
    return std::make_shared<MultiheadAttention>(MultiheadAttentionOptions(a["embed_dim"], a["num_heads"])
                                                    .kdim(a.value("kdim", int64_t(0)))
                                                    .vdim(a.value("vdim", int64_t(0)))
                                                    .bias(a.value("bias", true))
                                                    .batch_first(a.value("batch_first", false)));
  if (layer == "TransformerEncoderLayer") return std::make_shared<TransformerEncoderLayer>(layer_options(a));
  if (layer == "TransformerDecoderLayer") return std::make_shared<TransformerDecoderLayer>(layer_options(a));
  if (layer == "Transformer")
    return std::make_shared<Transformer>(layer_options(a), a["num_encoder_layers"], a["num_decoder_layers"]);
  FAIL("no such module in the vectors' vocabulary: " << layer);
  return nullptr;
}

// The masks PyTorch took as keywords, as MultiheadAttention's AttentionMasks: `attn` names the
// attention mask's keyword and `padding` the key-padding mask's.
AttentionMasks masks_of(const std::map<std::string, Tensor>& given, const char* attn, const char* padding) {
  AttentionMasks m;
  if (auto it = given.find(attn); it != given.end()) m.attn_mask = it->second;
  if (auto it = given.find(padding); it != given.end()) m.key_padding_mask = it->second;
  return m;
}

// The output; `weights` receives the attention weights of the need_weights calls.
Tensor run(Module& module, const std::string& call, std::map<std::string, Tensor>& in,
           const std::map<std::string, Tensor>& masks, Tensor& weights) {
  if (call == "self_weights" || call == "qkv_weights_per_head") {
    auto& mha = dynamic_cast<MultiheadAttention&>(module);
    const bool self = call == "self_weights";
    const AttentionOutput out =
        mha.forward_with_weights(in[self ? "x" : "query"], in[self ? "x" : "key"], in[self ? "x" : "value"],
                                 masks_of(masks, "attn_mask", "key_padding_mask"), self);
    weights = out.weights;
    return out.output;
  }
  if (call == "self") {
    auto& mha = dynamic_cast<MultiheadAttention&>(module);
    return mha.forward(in["x"], in["x"], in["x"], masks_of(masks, "attn_mask", "key_padding_mask"));
  }
  if (call == "qkv")
    return dynamic_cast<MultiheadAttention&>(module).forward(in["query"], in["key"], in["value"],
                                                             masks_of(masks, "attn_mask", "key_padding_mask"));
  if (call == "src")
    return dynamic_cast<TransformerEncoderLayer&>(module).forward(in["src"],
                                                                  masks_of(masks, "src_mask", "src_key_padding_mask"));
  if (call == "tgt_memory")
    return dynamic_cast<TransformerDecoderLayer&>(module).forward(
        in["tgt"], in["memory"], masks_of(masks, "tgt_mask", "tgt_key_padding_mask"),
        masks_of(masks, "memory_mask", "memory_key_padding_mask"));
  return dynamic_cast<Transformer&>(module).forward(
      in["src"], in["tgt"], masks_of(masks, "src_mask", "src_key_padding_mask"),
      masks_of(masks, "tgt_mask", "tgt_key_padding_mask"), masks_of(masks, "memory_mask", "memory_key_padding_mask"));
}

double g_worst = 0;  // the largest error seen, reported at the end

void check_close(const Tensor& got, const Tensor& expected, const std::string& what) {
  testing::check_relative(got, expected, what, kTolerance, g_worst);
}

}  // namespace

TEST_CASE(SUITE_PREFIX
          "MultiheadAttention and the Transformer layers match PyTorch 1.13: printed tree, output, "
          "gradients") {
  if (testing::skip_without_suite_device("test_cuda_attention_layers")) return;
  const Device kDevice = testing::suite_device();
  const safetensors::File file = safetensors::load(kVectors);
  const json cases = json::parse(file.metadata.at("cases"));
  REQUIRE(cases.size() == 9);
  for (const json& c : cases) {
    const std::string name = c["name"];
    INFO("case " << name);
    const std::shared_ptr<Module> module = make_module(c["layer"], c["args"]);
    std::string printed;
    for (std::string line, text = module->repr(); !text.empty();) {  // each line without its "  # " comment
      const size_t end = text.find('\n');
      line = text.substr(0, end);
      printed += (printed.empty() ? "" : "\n") + line.substr(0, line.find("  # "));
      text = end == std::string::npos ? "" : text.substr(end + 1);
    }
    CHECK(printed == c["repr"].get<std::string>());
    NamedTensors state;
    for (const auto& [key, t] : file.tensors)
      if (key.rfind(name + ".state.", 0) == 0) state.emplace_back(key.substr(name.size() + 7), t.to(kDevice));
    module->to(kDevice);
    const Module::LoadReport report = module->load_state_dict(state);
    CHECK(report.missing.empty());
    module->train();
    std::map<std::string, Tensor> in, masks;
    for (const std::string key : c["inputs"])
      in[key] = file.find(name + ".in." + key)->to(kDevice).detach().requires_grad_();
    for (const std::string key : c["masks"]) masks[key] = file.find(name + ".mask." + key)->to(kDevice);
    Tensor weights;
    const Tensor y = run(*module, c["call"], in, masks, weights);
    check_close(y, *file.find(name + ".y"), "output");
    const Tensor gy = file.find(name + ".gy")->to(kDevice);
    if (weights.defined()) {  // need_weights: backward through both outputs
      check_close(weights, *file.find(name + ".w"), "attention weights");
      const Tensor gw = file.find(name + ".gw")->to(kDevice);
      (sum(y * gy) + sum(weights * gw)).backward();
    } else {
      y.backward(gy);
    }
    for (auto& [key, t] : in) check_close(t.grad(), *file.find(name + ".gin." + key), key + "'s gradient");
    for (auto& [key, p] : module->named_parameters())
      check_close(p.grad(), *file.find(name + ".grad." + key), key + "'s gradient");
  }
  MESSAGE("largest relative error over every case: " << g_worst << " (bound " << kTolerance << ")");
}

TEST_CASE(SUITE_PREFIX "MultiheadAttention names what does not fit") {
  MultiheadAttention mha(MultiheadAttentionOptions(8, 2).batch_first(true));
  const Tensor x = randn({2, 3, 8});
  AttentionMasks wrong_attn, wrong_padding;
  wrong_attn.attn_mask = zeros({3, 4}, DType::b8);
  wrong_padding.key_padding_mask = zeros({3, 3}, DType::b8);
  CHECK_ERROR(mha.forward(x, x, x, wrong_attn), "[MultiheadAttention] attn_mask bool[3, 4]",
              "expected [3, 3] or [4, 3, 3]");
  CHECK_ERROR(mha.forward(x, x, x, wrong_padding), "key_padding_mask", "expected [2, 3]");
  CHECK_ERROR(mha.forward(x, randn({2, 3, 5}), x), "expected query [.., .., 8], key [.., .., 8]");
  CHECK_ERROR(MultiheadAttention(10, 3), "embed_dim (10) must be a positive multiple of num_heads (3)");
}
