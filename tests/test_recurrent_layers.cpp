// RNN, LSTM, GRU and their cells against PyTorch: tests/data/torch/recurrent_layers.safetensors (written once
// by scripts/make-torch-recurrent-vectors, torch 1.13). Each case builds the module from PyTorch's
// arguments, checks its printed tree, loads PyTorch's state dict by its names, runs the same input and
// initial states (given or not; batched or not; batch first or not) and compares every output and every
// input and parameter gradient, to f32 rounding. Then: the layer equals its cell stepped by hand, dropout
// between layers, the CPU and CUDA kernels in f32 / f16 / bf16 (CUDA build only), and the errors.
// Built twice: on the CPU (test_recurrent_layers) and on the CUDA device (test_cuda_recurrent_layers; the
// emulator in CI).
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <map>

#include "engine/random.h"
#include "engine/safetensors.h"
#include "layers/nn.h"
#include "support/check_error.h"
#include "support/suite_device.h"
#include "support/tensor_compare.h"

using namespace hg;
using namespace hg::nn;
using json = nlohmann::json;

namespace {

const std::string kVectors = std::string(HG_TORCH_TEST_DATA) + "/recurrent_layers.safetensors";
constexpr double kTolerance = 5e-6;
constexpr int64_t kCases = 13;

template <class Options>
Options recurrent_options(const json& a, int64_t input_size, int64_t hidden_size) {
  Options o(input_size, hidden_size);
  o.num_layers(a.value("num_layers", int64_t(1)))
      .bias(a.value("bias", true))
      .batch_first(a.value("batch_first", false))
      .dropout(a.value("dropout", 0.0))
      .bidirectional(a.value("bidirectional", false));
  return o;
}

std::shared_ptr<Module> make_module(const std::string& layer, const json& a, int64_t in, int64_t hidden) {
  const bool bias = a.value("bias", true);
  const std::string nonlinearity = a.value("nonlinearity", std::string("tanh"));
  if (layer == "LSTM") return std::make_shared<LSTM>(recurrent_options<LSTMOptions>(a, in, hidden));
  if (layer == "GRU") return std::make_shared<GRU>(recurrent_options<GRUOptions>(a, in, hidden));
  if (layer == "RNN")
    return std::make_shared<RNN>(recurrent_options<RNNOptions>(a, in, hidden).nonlinearity(nonlinearity));
  if (layer == "LSTMCell") return std::make_shared<LSTMCell>(in, hidden, bias);
  if (layer == "GRUCell") return std::make_shared<GRUCell>(in, hidden, bias);
  if (layer == "RNNCell") return std::make_shared<RNNCell>(in, hidden, bias, nonlinearity);
  FAIL("no such module in the vectors' vocabulary: " << layer);
  return nullptr;
}

// The module's outputs under PyTorch's names ("output", "h_n", "c_n"; a cell's "h", "c").
std::map<std::string, Tensor> run(Module& module, const std::string& layer, std::map<std::string, Tensor>& in) {
  const Tensor none;
  const auto given = [&](const char* key) { return in.count(key) ? in[key] : none; };
  if (layer == "LSTM" || layer == "GRU" || layer == "RNN") {
    const RNNOutput o = layer == "LSTM"  ? dynamic_cast<LSTM&>(module).forward(in["input"], given("h0"), given("c0"))
                        : layer == "GRU" ? dynamic_cast<GRU&>(module).forward(in["input"], given("h0"))
                                         : dynamic_cast<RNN&>(module).forward(in["input"], given("h0"));
    std::map<std::string, Tensor> out{{"output", o.output}, {"h_n", o.h_n}};
    if (o.c_n.defined()) out["c_n"] = o.c_n;
    return out;
  }
  if (layer == "LSTMCell") {
    const LSTMState s = dynamic_cast<LSTMCell&>(module).forward(in["input"], given("hx"), given("cx"));
    return {{"h", s.h}, {"c", s.c}};
  }
  if (layer == "GRUCell") return {{"h", dynamic_cast<GRUCell&>(module).forward(in["input"], given("hx"))}};
  return {{"h", dynamic_cast<RNNCell&>(module).forward(in["input"], given("hx"))}};
}

std::string printed_tree(const Module& module) {  // each line without its "  # " comment
  std::string printed;
  for (std::string line, text = module.repr(); !text.empty();) {
    const size_t end = text.find('\n');
    line = text.substr(0, end);
    printed += (printed.empty() ? "" : "\n") + line.substr(0, line.find("  # "));
    text = end == std::string::npos ? "" : text.substr(end + 1);
  }
  return printed;
}

Tensor parameter(const Module& module, const std::string& key) {
  for (const auto& [name, p] : module.named_parameters())
    if (name == key) return p;
  FAIL("no parameter " << key);
  return Tensor();
}

double g_worst = 0;  // the largest error seen, reported at the end

void check_close(const Tensor& got, const Tensor& expected, const std::string& what) {
  testing::check_relative(got, expected, what, kTolerance, g_worst);
}

// sum_k (outputs[k] * weights[k]): one scalar whose backward gives each output its own gradient.
Tensor weighted_sum(const std::vector<Tensor>& outputs, const std::vector<Tensor>& weights) {
  Tensor total;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const Tensor term = sum(outputs[k] * weights[k]);
    total = total.defined() ? total + term : term;
  }
  return total;
}

}  // namespace

TEST_CASE(SUITE_PREFIX "RNN, LSTM, GRU and the cells match PyTorch 1.13: printed tree, outputs, gradients") {
  if (testing::skip_without_suite_device("test_cuda_recurrent_layers")) return;
  const Device kDevice = testing::suite_device();
  const safetensors::File file = safetensors::load(kVectors);
  const json cases = json::parse(file.metadata.at("cases"));
  const json sizes = json::parse(file.metadata.at("sizes"));
  REQUIRE(cases.size() == kCases);
  for (const json& c : cases) {
    const std::string name = c["name"], layer = c["layer"];
    INFO("case " << name);
    const std::shared_ptr<Module> module = make_module(layer, c["args"], sizes["input_size"], sizes["hidden_size"]);
    CHECK(printed_tree(*module) == c["repr"].get<std::string>());
    NamedTensors state;
    for (const auto& [key, t] : file.tensors)
      if (key.rfind(name + ".state.", 0) == 0) state.emplace_back(key.substr(name.size() + 7), t.to(kDevice));
    module->to(kDevice);
    const Module::LoadReport report = module->load_state_dict(state);
    CHECK(report.missing.empty());
    module->train(c["training"].get<bool>());
    std::map<std::string, Tensor> in;
    for (const std::string key : c["inputs"])
      in[key] = file.find(name + ".in." + key)->to(kDevice).detach().requires_grad_();
    const std::map<std::string, Tensor> out = run(*module, layer, in);
    REQUIRE(out.size() == c["outputs"].size());
    std::vector<Tensor> ys, gys;
    for (const std::string key : c["outputs"]) {
      REQUIRE(out.count(key) == 1);
      check_close(out.at(key), *file.find(name + ".out." + key), key);
      ys.push_back(out.at(key));
      gys.push_back(file.find(name + ".gout." + key)->to(kDevice));
    }
    weighted_sum(ys, gys).backward();
    for (auto& [key, t] : in) check_close(t.grad(), *file.find(name + ".gin." + key), key + "'s gradient");
    for (auto& [key, p] : module->named_parameters())
      check_close(p.grad(), *file.find(name + ".grad." + key), key + "'s gradient");
  }
  MESSAGE("largest relative error over every case: " << g_worst << " (bound " << kTolerance << ")");
}

TEST_CASE(SUITE_PREFIX "an LSTM and a GRU layer equal their cell stepped by hand, forward and backward") {
  if (testing::skip_without_suite_device("test_cuda_recurrent_layers")) return;
  const Device device = testing::suite_device();
  manual_seed(41);
  const int64_t steps = 5, batch = 3, in = 4, hidden = 7;
  for (const bool lstm : {true, false}) {
    INFO((lstm ? "LSTM" : "GRU"));
    std::shared_ptr<RNNBase> layer;
    std::shared_ptr<RNNCellBase> cell;
    if (lstm) {
      layer = std::make_shared<LSTM>(in, hidden);
      cell = std::make_shared<LSTMCell>(in, hidden);
    } else {
      layer = std::make_shared<GRU>(in, hidden);
      cell = std::make_shared<GRUCell>(in, hidden);
    }
    NamedTensors weights;
    for (const auto& [key, p] : layer->named_parameters()) weights.emplace_back(key.substr(0, key.size() - 3), p);
    cell->load_state_dict(weights);  // weight_ih_l0 -> weight_ih, ...
    layer->to(device);
    cell->to(device);
    const Tensor x = randn({steps, batch, in}).to(device).requires_grad_();
    const Tensor h0 = randn({1, batch, hidden}).to(device), c0 = randn({1, batch, hidden}).to(device);
    const RNNOutput whole =
        lstm ? dynamic_cast<LSTM&>(*layer).forward(x, h0, c0) : dynamic_cast<GRU&>(*layer).forward(x, h0);
    Tensor h = h0.select(0, 0), c = c0.select(0, 0);
    std::vector<Tensor> hs;
    for (int64_t t = 0; t < steps; ++t) {
      if (lstm) {
        const LSTMState s = dynamic_cast<LSTMCell&>(*cell).forward(x.select(0, t), h, c);
        h = s.h, c = s.c;
      } else {
        h = dynamic_cast<GRUCell&>(*cell).forward(x.select(0, t), h);
      }
      hs.push_back(h);
    }
    const Tensor stepped = stack(hs, 0);
    CHECK(testing::max_relative_error(whole.output, stepped) <= 1e-6);
    CHECK(testing::max_relative_error(whole.h_n.select(0, 0), h) <= 1e-6);
    const Tensor g = randn(stepped.shape()).to(device);
    sum(whole.output * g).backward();
    const Tensor dx_layer = x.grad().clone();
    x.set_grad(Tensor());
    sum(stepped * g).backward();
    CHECK(testing::max_relative_error(dx_layer, x.grad()) <= 1e-6);
    for (const auto& [key, p] : layer->named_parameters()) {
      INFO(key);
      CHECK(testing::max_relative_error(p.grad(), parameter(*cell, key.substr(0, key.size() - 3)).grad()) <= 1e-6);
    }
  }
}

TEST_CASE(SUITE_PREFIX "dropout between the layers acts in training only, and not after the last layer") {
  if (testing::skip_without_suite_device("test_cuda_recurrent_layers")) return;
  const Device device = testing::suite_device();
  manual_seed(43);
  // dropout 1 zeroes the first layer's output: the second layer then sees zeros.
  LSTM two(LSTMOptions(3, 5).num_layers(2).dropout(1.0));
  LSTM second(5, 5);
  NamedTensors second_layer;
  for (const char* key : {"weight_ih", "weight_hh", "bias_ih", "bias_hh"})
    second_layer.emplace_back(std::string(key) + "_l0", parameter(two, std::string(key) + "_l1"));
  second.load_state_dict(second_layer);
  two.to(device);
  second.to(device);
  const Tensor x = randn({4, 2, 3}).to(device);
  const RNNOutput trained = two.forward(x);
  const RNNOutput on_zeros = second.forward(zeros({4, 2, 5}, DType::f32, device));
  CHECK(testing::max_relative_error(trained.output, on_zeros.output) == 0.0);
  two.eval();
  const RNNOutput evaluated = two.forward(x);
  CHECK(testing::max_relative_error(evaluated.output, on_zeros.output) > 1e-3);
}

#if defined(HG_SUITE_ON_CUDA)
TEST_CASE(SUITE_PREFIX "the recurrence kernels on CUDA match the CPU in f32, f16 and bf16, forward and backward") {
  if (testing::skip_without_suite_device("test_cuda_recurrent_layers")) return;
  manual_seed(47);
  const int64_t steps = 6, batch = 5, hidden = 37;  // hidden not a multiple of a warp
  for (const RnnCell cell : {RnnCell::RnnTanh, RnnCell::RnnRelu, RnnCell::Lstm, RnnCell::Gru}) {
    const int64_t gh = kernels::rnn_gates(cell) * hidden;
    const bool lstm = cell == RnnCell::Lstm;
    const Tensor x = randn({steps, batch, gh}), w = randn({gh, hidden}) * 0.3, b = randn({gh}) * 0.1;
    const Tensor h0 = randn({batch, hidden}) * 0.5, c0 = randn({batch, hidden}) * 0.5;
    const Tensor gy = randn({steps, batch, hidden}), gh_n = randn({batch, hidden}), gc_n = randn({batch, hidden});
    for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      for (const bool reverse : {false, true}) {
        INFO(kernels::rnn_cell_name(cell) << " " << dtype_name(dtype) << (reverse ? " reverse" : ""));
        std::vector<std::vector<Tensor>> results;  // per device: output, h_n, c_n, then the input gradients
        for (const Device device : {kCPU, Device::cuda(0)}) {
          std::vector<Tensor> leaves;
          for (const Tensor* t : {&x, &w, &b, &h0, &c0})
            leaves.push_back(t->to(dtype).to(device).detach().requires_grad_(t != &c0 || lstm));
          const Recurrence r =
              recurrence(cell, leaves[0], leaves[1], leaves[2], leaves[3], lstm ? leaves[4] : Tensor(), reverse);
          std::vector<Tensor> ys{r.output, r.h_n}, gs{gy.to(dtype).to(device), gh_n.to(dtype).to(device)};
          if (lstm) ys.push_back(r.c_n), gs.push_back(gc_n.to(dtype).to(device));
          weighted_sum(ys, gs).backward();
          std::vector<Tensor> got = ys;
          for (size_t k = 0; k < (lstm ? 5u : 4u); ++k) got.push_back(leaves[k].grad());
          results.push_back(got);
        }
        const double tolerance = dtype == DType::f32 ? 2e-5 : dtype == DType::f16 ? 1e-2 : 4e-2;
        for (size_t k = 0; k < results[0].size(); ++k) {
          INFO("result " << k);
          CHECK(testing::max_relative_error(results[1][k].to(kCPU).to(DType::f64), results[0][k].to(DType::f64)) <=
                tolerance);
        }
      }
    }
  }
}
#endif

TEST_CASE(SUITE_PREFIX "the recurrent layers name what does not fit") {
  LSTM lstm(LSTMOptions(4, 6).num_layers(2).batch_first(true));
  CHECK_ERROR(lstm.forward(randn({2, 3, 5})), "[LSTM] expected input [N, T, 4] or unbatched [T, 4], got f32[2, 3, 5]");
  CHECK_ERROR(lstm.forward(randn({2, 3, 4, 1})), "[LSTM] expected input [N, T, 4]");
  CHECK_ERROR(lstm.forward(randn({2, 3, 4}), randn({2, 2, 6})), "expected h0 and c0 together");
  CHECK_ERROR(
      lstm.forward(randn({2, 3, 4}), randn({1, 2, 6}), randn({1, 2, 6})),
      "[LSTM] expected h0 of shape [2, 2, 6] (num_layers * num_directions, batch, hidden_size), got f32[1, 2, 6]");
  CHECK_ERROR(GRU(GRUOptions(4, 6)).forward(randn({3, 2, 4}), randn({1, 2, 5})),
              "[GRU] expected h0 of shape [1, 2, 6]");
  CHECK_ERROR(RNN(RNNOptions(4, 6).nonlinearity("gelu")),
              "[RNN] unknown nonlinearity \"gelu\", expected \"tanh\" or \"relu\"");
  CHECK_ERROR(LSTM(0, 6), "[LSTM] expected input_size > 0 and hidden_size > 0, got 0 and 6");
  CHECK_ERROR(LSTMCell(4, 6).forward(randn({2, 4}), randn({3, 6}), randn({3, 6})),
              "[LSTMCell] expected hx of shape [2, 6] (the input is f32[2, 4]", "got f32[3, 6]");
  CHECK_ERROR(GRUCell(4, 6).forward(randn({2, 5})), "[GRUCell] expected input [N, 4] or unbatched [4], got f32[2, 5]");
  // A state dict of another shape: load_state_dict names the parameter and both shapes.
  NamedTensors wrong{{"weight_hh_l0", randn({24, 5})}};
  CHECK_ERROR(LSTM(4, 6).load_state_dict(wrong, false), "weight_hh_l0", "[24, 5]", "[24, 6]");
  // The op itself.
  CHECK_ERROR(recurrence(RnnCell::Lstm, randn({3, 2, 12}), randn({10, 3})), "lstm cell has 4 gates",
              "expected w_hh [4 * hidden, hidden]");
  CHECK_ERROR(recurrence(RnnCell::Gru, randn({3, 2, 12}), randn({9, 3})), "expected x_proj [T, B, 9]");
  CHECK_ERROR(recurrence(RnnCell::Gru, randn({3, 2, 9}), randn({9, 3}), Tensor(), Tensor(), randn({2, 3})),
              "only the lstm cell has a cell state");
}
