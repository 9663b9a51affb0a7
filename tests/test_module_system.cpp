// The module system (layers/module.h, layers/containers.h): a model assembled through the public
// register_* calls, ModuleList / ModuleDict / Functional, named_modules and apply, freezing, the printed
// tree, and load_state_dict with its report. The PyTorch side is tests/data/torch/module_*.safetensors
// (scripts/make-torch-module-vectors, torch 1.13): the same model's state dict under PyTorch's names,
// its printed tree and its eval forward.
#include <doctest/doctest.h>

#include <cmath>
#include <sstream>

#include "engine/random.h"
#include "engine/safetensors.h"
#include "layers/nn.h"
#include "optim/sgd.h"
#include "support/check_error.h"
#include "support/tensor_compare.h"
#include "support/temp_dir.h"

using namespace hg;
using namespace hg::nn;

namespace {

const std::string kData = HG_TORCH_TEST_DATA;

// scripts/make-torch-module-vectors' Net, written as a user would: a Module subclass whose constructor
// registers its children, the containers filled in place.
struct Net : Module {
  std::shared_ptr<Sequential> features;
  std::shared_ptr<ModuleList> blocks;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<ModuleDict> heads;
  std::shared_ptr<Embedding> embed;

  Net() {
    features = register_module(
        "features", std::make_shared<Sequential>(std::vector<std::shared_ptr<UnaryModule>>{
                        std::make_shared<Conv2d>(Conv2dOptions(1, 4, 3).padding(1)), std::make_shared<ReLU>(),
                        std::make_shared<MaxPool2d>(2), std::make_shared<Flatten>()}));
    blocks = register_module("blocks", std::make_shared<ModuleList>());
    blocks->push_back(std::make_shared<Linear>(64, 64))
        .push_back(std::make_shared<GELU>(GeluApproximation::Tanh))
        .push_back(std::make_shared<LayerNorm>(64));
    drop = register_module("drop", std::make_shared<Dropout>(0.1));
    heads = register_module("heads", std::make_shared<ModuleDict>());
    heads->insert("cls", std::make_shared<Linear>(64, 10)).insert("aux", std::make_shared<Linear>(64, 2, false));
    embed = register_module("embed", std::make_shared<Embedding>(10, 8));
  }
  Tensor forward(const Tensor& x) {
    ModuleScope scope(*this);
    Tensor h = features->forward(x);
    for (const auto& block : *blocks) h = std::dynamic_pointer_cast<UnaryModule>(block)->forward(h);
    return heads->at<Linear>("cls")->forward(drop->forward(h));
  }
};

// The printed tree without halfgrad's "  # ..." comments: what PyTorch prints.
std::string without_comments(const std::string& text) {
  std::istringstream in(text);
  std::string out;
  for (std::string line; std::getline(in, line);) {
    const size_t hash = line.find("  # ");
    out += (out.empty() ? "" : "\n") + line.substr(0, hash);
  }
  return out;
}

}  // namespace

TEST_CASE("a PyTorch state dict loads by its own names, and the model then gives PyTorch's output") {
  manual_seed(1);
  Net net;
  const std::vector<float> before = net.blocks->at<LayerNorm>(2)->weight.to_vector<float>();
  const Module::LoadReport report = net.load_state_dict(kData + "/module_state.safetensors");
  CHECK(report.missing.empty());
  CHECK(report.unexpected.empty());
  CHECK(net.blocks->at<LayerNorm>(2)->weight.to_vector<float>() != before);  // the non-default values arrived
  const safetensors::File io = safetensors::load(kData + "/module_io.safetensors");
  net.eval();
  const Tensor y = net.forward(*io.find("x"));
  const Tensor& expected = *io.find("y");
  INFO("torch " << io.metadata.at("torch"));
  CHECK(y.shape() == expected.shape());
  CHECK(testing::max_abs_diff(y, expected) < 1e-5);  // f32 rounding: the logits are O(1)
}

TEST_CASE("the printed tree is PyTorch's, with each module's shapes and parameter counts after '#'") {
  Net net;
  const safetensors::File io = safetensors::load(kData + "/module_io.safetensors");
  const std::string printed = net.repr();
  CHECK(without_comments(printed) == io.metadata.at("repr"));
  const int64_t total = 4 * 9 + 4 + 64 * 64 + 64 + 64 + 64 + 64 * 10 + 10 + 64 * 2 + 10 * 8;
  CHECK(net.parameter_count() == total);
  const std::string top = "Net(  # " + std::to_string(total) + " parameters, " + std::to_string(total) + " trainable\n";
  CHECK(printed.find(top) == 0);
  CHECK(printed.find("(0): Conv2d(1, 4, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))  # weight [4, 1, 3, 3], "
                     "bias [4]: 40 parameters\n") != std::string::npos);
  CHECK(printed.find("(heads): ModuleDict(  # 778 parameters\n") != std::string::npos);
  CHECK(printed.find("(1): ReLU()\n") != std::string::npos);  // no comment without parameters
  net.features->freeze();
  CHECK(net.repr().find("weight [4, 1, 3, 3] (frozen), bias [4] (frozen): 40 parameters") != std::string::npos);
  CHECK(net.repr().find(std::to_string(total - 40) + " trainable") != std::string::npos);
}

TEST_CASE("load_state_dict reports missing and unexpected names, and lists every shape or dtype mismatch") {
  Net net;
  NamedTensors state = safetensors::load(kData + "/module_state.safetensors").tensors;
  NamedTensors partial(state.begin() + 2, state.end());  // without features.0.*
  partial.emplace_back("extra.weight", zeros({3}));
  const auto before = net.features->named_parameters().front().second.to_vector<float>();
  CHECK_ERROR(net.load_state_dict(partial),
              "[load_state_dict] missing from the state: features.0.weight, "
              "features.0.bias; not in the model: extra.weight (strict");
  CHECK(net.features->named_parameters().front().second.to_vector<float>() == before);  // nothing changed
  const Module::LoadReport report = net.load_state_dict(partial, /*strict=*/false);
  CHECK(report.missing == std::vector<std::string>{"features.0.weight", "features.0.bias"});
  CHECK(report.unexpected == std::vector<std::string>{"extra.weight"});
  CHECK(net.heads->at<Linear>("cls")->bias.to_vector<float>() == state[7].second.to_vector<float>());

  NamedTensors wrong = state;
  wrong[0].second = zeros({4, 1, 5, 5});
  wrong[2].second = wrong[2].second.to(DType::bf16);
  CHECK_ERROR(net.load_state_dict(wrong, /*strict=*/false),
              "\"features.0.weight\" has shape [4, 1, 5, 5] in the state but [4, 1, 3, 3] in the model; "
              "\"blocks.0.weight\" is bf16 in the state but f32 in the model");
  const test::TempDir dir;
  const std::string path = (dir.path / "bad.safetensors").string();
  safetensors::save(path, wrong);
  const std::string named = path + ": [load_state_dict] \"features.0.weight\" has shape";
  CHECK_ERROR(net.load_state_dict(path), named.c_str());
  NamedTensors twice = {state[0], state[0]};
  CHECK_ERROR(net.load_state_dict(twice), "names \"features.0.weight\" twice");
}

TEST_CASE("named_modules lists the tree once, depth first; apply visits children before their parent") {
  Net net;
  std::vector<std::string> names;
  for (auto& [name, module] : net.named_modules()) names.push_back(name + ":" + module->type_name());
  CHECK(names == std::vector<std::string>{":Net", "features:Sequential", "features.0:Conv2d", "features.1:ReLU",
                                          "features.2:MaxPool2d", "features.3:Flatten", "blocks:ModuleList",
                                          "blocks.0:Linear", "blocks.1:GELU", "blocks.2:LayerNorm", "drop:Dropout",
                                          "heads:ModuleDict", "heads.cls:Linear", "heads.aux:Linear",
                                          "embed:Embedding"});
  CHECK(net.modules().size() == 15);

  // A module registered twice (a shared layer) is listed once, under its first path.
  Module outer;
  auto shared = std::make_shared<Linear>(2, 2);
  outer.register_module("a", shared);
  outer.register_module("b", shared);
  CHECK(outer.named_modules().size() == 2);
  CHECK(outer.parameter_count() == 6);

  std::vector<std::string> order;
  net.apply([&](Module& m) { order.push_back(m.type_name()); });
  CHECK(order.front() == "Conv2d");
  CHECK(order.back() == "Net");
  CHECK(order[4] == "Sequential");  // after its four children
  net.apply([](Module& m) {
    if (auto* linear = dynamic_cast<Linear*>(&m); linear && linear->bias.defined()) init::constant_(linear->bias, 0.25);
  });
  CHECK(net.heads->at<Linear>("cls")->bias.to_vector<float>() == std::vector<float>(10, 0.25f));
}

TEST_CASE("a frozen subtree gets no gradient and an optimizer over the whole model trains the rest") {
  manual_seed(3);
  Net net;
  net.eval();  // no dropout: the two runs see the same function
  net.features->freeze();
  CHECK(net.trainable_parameter_count() == net.parameter_count() - 40);
  optim::SGD sgd(net.parameters(), optim::SGDOptions().lr(0.1));  // frozen parameters are accepted
  const Tensor x = randn({2, 1, 8, 8});
  const auto conv_before = net.features->named_parameters()[0].second.to_vector<float>();
  const auto head_before = net.heads->at<Linear>("cls")->weight.to_vector<float>();
  sum(net.forward(x)).backward();
  CHECK(!net.features->named_parameters()[0].second.grad().defined());
  CHECK(net.heads->at<Linear>("cls")->weight.grad().defined());
  sgd.step();
  CHECK(net.features->named_parameters()[0].second.to_vector<float>() == conv_before);
  CHECK(net.heads->at<Linear>("cls")->weight.to_vector<float>() != head_before);
  sgd.zero_grad();

  net.features->unfreeze();
  sum(net.forward(x)).backward();
  sgd.step();
  CHECK(net.features->named_parameters()[0].second.to_vector<float>() != conv_before);
  CHECK(net.trainable_parameter_count() == net.parameter_count());
}

TEST_CASE("Sequential takes an Embedding and a Functional; the containers name their errors") {
  manual_seed(4);
  auto embed = std::make_shared<Embedding>(10, 4);
  auto linear = std::make_shared<Linear>(4, 3);
  Sequential seq({embed, std::make_shared<Functional>([](const Tensor& x) { return tanh(x); }, "tanh"), linear});
  const Tensor ids = from_vector<int64_t>({1, 7, 3}, {3});
  const Tensor expected = linear->forward(tanh(embed->forward(ids)));
  CHECK(testing::max_abs_diff(seq.forward(ids), expected) == 0.0);
  CHECK(seq.repr().find("(1): Functional(tanh)\n") != std::string::npos);

  ModuleList list;
  list.push_back(linear);
  CHECK_ERROR(list[3], "[ModuleList] index 3 is out of range: the list holds 1 modules");
  CHECK_ERROR(list.at<Conv2d>(0), "entry \"0\" is a Linear, not the requested class");
  CHECK_ERROR(list.push_back(nullptr), "[ModuleList] cannot add a null module");
  ModuleDict dict({{"enc", linear}});
  CHECK(dict.contains("enc"));
  CHECK(!dict.contains("dec"));
  CHECK_ERROR(dict["dec"], "[ModuleDict] no module under \"dec\"; the keys are: enc");
  CHECK_ERROR(dict.insert("enc", linear), "the key \"enc\" is already present");
  CHECK_ERROR(dict.insert("a.b", linear), "invalid name \"a.b\"");
  CHECK_ERROR(Functional(nullptr), "[Functional] expected a function");
}

TEST_CASE("a model assembled from outside through the public register calls") {
  Module model;
  Tensor scale = model.register_parameter("scale", full({3}, 2.0));
  model.register_buffer("count", zeros({1}, DType::i64));
  model.register_module("proj", std::make_shared<Linear>(3, 3));
  CHECK(scale.requires_grad());
  std::vector<std::string> names;
  for (auto& [name, t] : model.state_dict()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"scale", "proj.weight", "proj.bias", "count"});
  CHECK_ERROR(model.register_module("proj", std::make_shared<ReLU>()), "the name \"proj\" is already registered");
  CHECK_ERROR(model.register_module("relu", std::shared_ptr<ReLU>()), "child \"relu\" is a null pointer");
  CHECK(repr_float(0.1) == "0.1");
  CHECK(repr_float(1e-5) == "1e-05");
  CHECK(repr_float(2.0) == "2.0");
  CHECK(repr_float(1e-4) == "0.0001");
  CHECK(repr_float(-0.001) == "-0.001");
  CHECK(repr_float(123.25) == "123.25");
  CHECK(repr_float(1e16) == "1e+16");
  CHECK(repr_float(1.5e-7) == "1.5e-07");
  CHECK(repr_float(100.0) == "100.0");
}

TEST_CASE("an error raised inside a forward names the module's path in the model") {
  manual_seed(3);
  Net net;
  // Conv2d (features.0) given 3 channels where it takes 1: its own check, with the path appended.
  CHECK_ERROR(net.forward(randn({2, 3, 8, 8})), "[Conv2d]", "(in features.0 (Conv2d) of Net)");
  // A shape error of an op inside a layer (the Linear of blocks.0 given 72 features) names the layer too.
  struct Wider : Module {
    std::shared_ptr<Net> net = register_module("net", std::make_shared<Net>());
    Tensor forward(const Tensor& x) {
      ModuleScope scope(*this);
      return net->blocks->at<Linear>(0)->forward(x);
    }
  } wider;
  CHECK_ERROR(wider.forward(randn({2, 72})), "[Linear]", "(in net.blocks.0 (Linear) of Wider)");
  // A module called by a module that does not own it is named by its class after " > ".
  struct Borrower : Module {
    std::shared_ptr<Linear> outside = std::make_shared<Linear>(4, 4);  // not registered
    Tensor forward(const Tensor& x) {
      ModuleScope scope(*this);
      return outside->forward(x);
    }
  } borrower;
  CHECK_ERROR(borrower.forward(randn({2, 5})), "(in Linear (Linear) of Borrower)");
  // At the top, the class alone; outside every forward (the stack unwound by the throws above), nothing.
  Linear alone(4, 4);
  CHECK_ERROR(alone.forward(randn({2, 5})), "[Linear]", "(in Linear)");
  try {
    (void)matmul(randn({2, 3}), randn({4, 5}));
    FAIL("matmul of [2, 3] and [4, 5] did not throw");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("(in ") == std::string::npos);
  }
}

TEST_CASE("a tied tensor loads from any of its names, as PyTorch's state dicts list them all") {
  // GPT-2's tie, written as a user would: the head's weight is the embedding's (one tensor, two names).
  struct TiedLM : Module {
    std::shared_ptr<Embedding> embed = register_module("embed", std::make_shared<Embedding>(10, 4));
    std::shared_ptr<Module> lm_head = register_module("lm_head", std::make_shared<Module>());
    TiedLM() { lm_head->register_parameter("weight", embed->weight); }
  } model;
  const NamedTensors listed = model.state_dict();
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].first == "embed.weight");
  const Tensor x = randn({10, 4}), y = randn({10, 4});
  // PyTorch's state_dict: both names, the same values.
  CHECK(model.load_state_dict({{"embed.weight", x}, {"lm_head.weight", x.clone()}}).missing.empty());
  CHECK(model.embed->weight.to_vector<float>() == x.to_vector<float>());
  // A deduplicated file that kept the other name.
  CHECK(model.load_state_dict({{"lm_head.weight", y}}).unexpected.empty());
  CHECK(model.embed->weight.to_vector<float>() == y.to_vector<float>());
  // Two names of one tensor with different values, or one of them of another shape, are errors; nothing loads.
  CHECK_ERROR(model.load_state_dict({{"embed.weight", x}, {"lm_head.weight", y}}),
              "\"embed.weight\" and \"lm_head.weight\" are one tied tensor in the model but hold different values");
  CHECK_ERROR(model.load_state_dict({{"embed.weight", x}, {"lm_head.weight", randn({4, 10})}}),
              "\"lm_head.weight\" has shape [4, 10] in the state but [10, 4] in the model");
  CHECK(model.embed->weight.to_vector<float>() == y.to_vector<float>());
  // Neither name: missing, under its state_dict name.
  const Module::LoadReport report = model.load_state_dict(NamedTensors{}, false);
  CHECK(report.missing == std::vector<std::string>{"embed.weight"});
}
