// The layers against PyTorch: tests/data/torch/layers.safetensors (written once by
// scripts/make-torch-layer-vectors, torch 1.13). For each case the layer is built from PyTorch's
// constructor arguments, prints as PyTorch printed it, loads PyTorch's state dict by its names and
// dtypes, and replays the steps: outputs, input and parameter gradients, running statistics and the eval
// output after training, to f32 rounding. Built twice: on the CPU (test_layer_parity) and with every
// tensor on the CUDA device (test_cuda_layer_parity; the emulator on a machine without a GPU).
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>
#include <sstream>

#include "engine/safetensors.h"
#include "layers/nn.h"
#include "support/suite_device.h"
#include "support/tensor_compare.h"

using namespace hg;
using namespace hg::nn;
using json = nlohmann::json;

namespace {

const std::string kVectors = std::string(HG_TORCH_TEST_DATA) + "/layers.safetensors";

Shape shape_of(const json& j) { return j.get<std::vector<int64_t>>(); }
Size2d pair_of(const json& j) {
  if (j.is_number()) return {j.get<int64_t>(), j.get<int64_t>()};
  return {j[0].get<int64_t>(), j[1].get<int64_t>()};
}

// The layer PyTorch built from `args` (its keyword arguments; the defaults where absent).
std::shared_ptr<UnaryModule> make_layer(const std::string& layer, const json& a) {
  auto number = [&](const char* key, double otherwise) { return a.contains(key) ? a[key].get<double>() : otherwise; };
  auto flag = [&](const char* key, bool otherwise) { return a.contains(key) ? a[key].get<bool>() : otherwise; };
  auto integer = [&](const char* key, int64_t otherwise) {
    return a.contains(key) ? a[key].get<int64_t>() : otherwise;
  };
  if (layer == "BatchNorm1d" || layer == "BatchNorm2d") {
    BatchNormOptions o(a["num_features"].get<int64_t>());
    o.eps(number("eps", 1e-5)).affine(flag("affine", true)).track_running_stats(flag("track_running_stats", true));
    if (a.contains("momentum"))
      o.momentum(a["momentum"].is_null() ? std::nullopt : std::optional<double>(a["momentum"].get<double>()));
    if (layer == "BatchNorm1d") return std::make_shared<BatchNorm1d>(o);
    return std::make_shared<BatchNorm2d>(o);
  }
  if (layer == "GroupNorm")
    return std::make_shared<GroupNorm>(a["num_groups"].get<int64_t>(), a["num_channels"].get<int64_t>(),
                                       number("eps", 1e-5), flag("affine", true));
  if (layer == "RMSNorm")
    return std::make_shared<RMSNorm>(shape_of(a["normalized_shape"]),
                                     a.contains("eps") ? std::optional<double>(a["eps"].get<double>()) : std::nullopt);
  if (layer == "LayerNorm") return std::make_shared<LayerNorm>(shape_of(a["normalized_shape"]), number("eps", 1e-5));
  if (layer == "Conv1d")
    return std::make_shared<Conv1d>(Conv1dOptions(a["in_channels"], a["out_channels"], a["kernel_size"])
                                        .stride(integer("stride", 1))
                                        .padding(integer("padding", 0))
                                        .groups(integer("groups", 1))
                                        .bias(flag("bias", true)));
  if (layer == "ConvTranspose2d")
    return std::make_shared<ConvTranspose2d>(
        ConvTranspose2dOptions(a["in_channels"], a["out_channels"], pair_of(a["kernel_size"]))
            .stride(pair_of(a.value("stride", json(1))))
            .padding(pair_of(a.value("padding", json(0))))
            .output_padding(pair_of(a.value("output_padding", json(0))))
            .groups(integer("groups", 1))
            .bias(flag("bias", true)));
  if (layer == "Upsample") {
    UpsampleOptions o;
    if (a.contains("size")) o.size(a["size"].get<std::vector<int64_t>>());
    if (a.contains("scale_factor")) o.scale_factor(a["scale_factor"].get<double>());
    const std::string mode = a.value("mode", "nearest");
    o.mode(mode == "bilinear" ? InterpolateMode::Bilinear : InterpolateMode::Nearest);
    if (a.contains("align_corners")) o.align_corners(a["align_corners"].get<bool>());
    return std::make_shared<Upsample>(o);
  }
  if (layer == "AdaptiveAvgPool2d") return std::make_shared<AdaptiveAvgPool2d>(pair_of(a["output_size"]));
  if (layer == "Embedding")
    return std::make_shared<Embedding>(
        a["num_embeddings"], a["embedding_dim"],
        a.contains("padding_idx") ? std::optional<int64_t>(a["padding_idx"]) : std::nullopt);
  if (layer == "LeakyReLU") return std::make_shared<LeakyReLU>(number("negative_slope", 0.01));
  if (layer == "SiLU") return std::make_shared<SiLU>();
  if (layer == "Tanh") return std::make_shared<Tanh>();
  if (layer == "Sigmoid") return std::make_shared<Sigmoid>();
  if (layer == "Softplus") return std::make_shared<Softplus>(number("beta", 1), number("threshold", 20));
  if (layer == "ELU") return std::make_shared<ELU>(number("alpha", 1.0));
  if (layer == "Identity") return std::make_shared<Identity>();
  FAIL("no such layer in the vectors' vocabulary: " << layer);
  return nullptr;
}

// The entries under `prefix` with it removed, on `device`.
NamedTensors under(const safetensors::File& file, const std::string& prefix, const Device& device) {
  NamedTensors out;
  for (const auto& [name, t] : file.tensors)
    if (name.rfind(prefix, 0) == 0) out.emplace_back(name.substr(prefix.size()), t.to(device));
  return out;
}

// f32 rounding of the layers' arithmetic (reductions over at most a few hundred elements).
constexpr double kTolerance = 5e-6;  // measured: 3.7e-7
double g_worst = 0;  // the largest error seen, reported at the end

void check_close(const Tensor& got, const Tensor& expected, const std::string& what) {
  testing::check_relative(got, expected, what, kTolerance, g_worst);
}

}  // namespace

TEST_CASE(SUITE_PREFIX "every layer matches PyTorch 1.13: printed form, outputs, gradients, running statistics") {
  if (testing::skip_without_suite_device("test_cuda_layer_parity")) return;
  const Device device = testing::suite_device();
  const safetensors::File file = safetensors::load(kVectors);
  const json cases = json::parse(file.metadata.at("cases"));
  REQUIRE(cases.size() >= 25);
  MESSAGE("vectors written by torch " << file.metadata.at("torch"));
  for (const json& c : cases) {
    const std::string name = c["name"];
    INFO("case " << name);
    const std::shared_ptr<UnaryModule> layer = make_layer(c["layer"], c["args"]);
    const std::string printed = layer->repr();
    CHECK(printed.substr(0, printed.find("  # ")) == c["repr"].get<std::string>());
    layer->to(device);
    const Module::LoadReport report = layer->load_state_dict(under(file, name + ".state.", device));
    CHECK(report.missing.empty());
    layer->train(c["train"].get<bool>());
    for (int k = 0; k < c["steps"].get<int>(); ++k) {
      const std::string step = std::to_string(k);
      Tensor x = file.find(name + ".x" + step)->to(device);
      if (is_floating(x.dtype())) x = x.detach().requires_grad_();
      const Tensor y = layer->forward(x);
      check_close(y, *file.find(name + ".y" + step), "output " + step);
      y.backward(file.find(name + ".gy" + step)->to(device));
      if (is_floating(x.dtype())) check_close(x.grad(), *file.find(name + ".gx" + step), "input gradient " + step);
      for (auto& [key, p] : layer->named_parameters()) {
        REQUIRE(p.grad().defined());
        check_close(p.grad(), *file.find(name + ".grad" + step + "." + key), key + "'s gradient " + step);
      }
      layer->zero_grad();
    }
    for (auto& [key, t] : layer->state_dict()) check_close(t, *file.find(name + ".after." + key), "after: " + key);
    if (const Tensor* eval_y = file.find(name + ".eval_y")) {
      layer->eval();
      NoGradGuard no_grad;
      check_close(layer->forward(file.find(name + ".x0")->to(device)), *eval_y, "eval output");
    }
  }
  MESSAGE("largest relative error over every case: " << g_worst << " (bound " << kTolerance << ")");
}
