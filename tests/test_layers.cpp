// layers/: Module bookkeeping, layer gradchecks, GPT against a float64 composition of primitive
// ops, and GPT checkpoints (native and Hugging Face layout).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <unistd.h>

#include "engine/random.h"
#include "engine/safetensors.h"
#include "layers/nn.h"
#include "support/gradcheck.h"
#include "support/tensor_compare.h"
#include "support/temp_dir.h"

using namespace hg;
using namespace hg::nn;

namespace {
using testing::max_abs_diff;

GPTConfig tiny_config() { return GPTConfig().vocab_size(11).context(8).n_layer(2).n_head(2).n_embd(8); }

std::string temp_path(const std::string& name) {
  return "/tmp/halfgrad_test_layers_" + std::to_string(getpid()) + "_" + name;
}

// GPT's forward written with primitive ops only: explicit head split with reshape/permute, an
// additive -inf mask and softmax, explicit Linear algebra.
Tensor reference_gpt_forward(GPT& model, const Tensor& ids) {
  const GPTConfig& c = model.config;
  const int64_t B = ids.size(0), T = ids.size(1), C = c.n_embd(), H = c.n_head(), D = C / H;
  std::map<std::string, Tensor> p;
  for (auto& [name, t] : model.named_parameters()) p[name] = t;
  auto linear = [&](const Tensor& x, const std::string& prefix) {
    return matmul(x, p[prefix + ".weight"].t()) + p[prefix + ".bias"];
  };
  std::vector<double> mask_values(size_t(T * T));
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j) mask_values[size_t(i * T + j)] = j <= i ? 0.0 : -INFINITY;
  const Tensor mask = from_vector(mask_values, {T, T}, f64);
  Tensor x = embedding(p["wte.weight"], ids) + embedding(p["wpe.weight"], arange(T));
  for (int64_t l = 0; l < c.n_layer(); ++l) {
    const std::string b = "h." + std::to_string(l);
    const Tensor a = layer_norm(x, p[b + ".ln_1.weight"], p[b + ".ln_1.bias"]);
    const Tensor qkv = linear(a, b + ".attn.c_attn").reshape({B, T, 3, H, D}).permute({2, 0, 3, 1, 4}).contiguous();
    const Tensor q = qkv.select(0, 0), k = qkv.select(0, 1), v = qkv.select(0, 2);
    const Tensor att = softmax(matmul(q, k.transpose(-1, -2)) * (1.0 / std::sqrt(double(D))) + mask, -1);
    const Tensor y = matmul(att, v).permute({0, 2, 1, 3}).contiguous().reshape({B, T, C});
    x = x + linear(y, b + ".attn.c_proj");
    const Tensor m = layer_norm(x, p[b + ".ln_2.weight"], p[b + ".ln_2.bias"]);
    x = x + linear(gelu(linear(m, b + ".mlp.c_fc")), b + ".mlp.c_proj");
  }
  x = layer_norm(x, p["ln_f.weight"], p["ln_f.bias"]);
  return matmul(x, p["wte.weight"].t());
}

}  // namespace

TEST_CASE("modules name parameters hierarchically and count them") {
  manual_seed(1);
  GPT model(tiny_config());
  const NamedTensors params = model.named_parameters();
  std::vector<std::string> names;
  for (auto& [n, t] : params) names.push_back(n);
  CHECK(names.front() == "wte.weight");
  CHECK(std::find(names.begin(), names.end(), "h.1.attn.c_attn.weight") != names.end());
  CHECK(std::find(names.begin(), names.end(), "h.0.mlp.c_proj.bias") != names.end());
  CHECK(names.back() == "ln_f.bias");
  // wte 11*8 + wpe 8*8 + per block (ln 2*16 + c_attn 8*24+24 + c_proj 8*8+8 + c_fc 8*32+32 + c_proj 32*8+8) + ln_f 16
  const int64_t per_block = 32 + (192 + 24) + (64 + 8) + (256 + 32) + (256 + 8);
  CHECK(model.parameter_count() == 88 + 64 + 2 * per_block + 16);
  for (const Tensor& t : model.parameters()) CHECK(t.requires_grad());
}

TEST_CASE("GPT-2 initialisation scales residual projections") {
  manual_seed(2);
  GPTConfig c = tiny_config().n_embd(64).n_layer(8);
  GPT model(c);
  auto std_of = [](const Tensor& t) {
    const std::vector<double> v = t.to_vector<double>();
    double s = 0, s2 = 0;
    for (double x : v) s += x, s2 += x * x;
    return std::sqrt(s2 / v.size() - (s / v.size()) * (s / v.size()));
  };
  CHECK(std_of(model.h[0]->mlp->c_fc->weight) == doctest::Approx(0.02).epsilon(0.05));
  CHECK(std_of(model.h[0]->mlp->c_proj->weight) == doctest::Approx(0.02 / std::sqrt(16.0)).epsilon(0.05));
  CHECK(max_abs_diff(model.h[0]->attn->c_attn->bias, zeros({192})) == 0.0);
}

TEST_CASE("options are validated with clear messages") {
  GPTConfig c = tiny_config().n_head(3);
  CHECK_THROWS_WITH_AS(GPT{c}, doctest::Contains("n_embd = 8 is not divisible by n_head = 3"), Error);
  c = tiny_config().context(0);
  CHECK_THROWS_WITH_AS(GPT{c}, doctest::Contains("expected context > 0"), Error);
  CHECK_THROWS_WITH_AS(Linear(0, 3), doctest::Contains("[Linear] expected positive sizes"), Error);
  CHECK_THROWS_WITH_AS(Dropout(1.5), doctest::Contains("outside [0, 1)"), Error);
  GPT model(tiny_config());
  CHECK_THROWS_WITH_AS(model.forward(zeros({1, 9}, i64)), doctest::Contains("exceeds the model's context of 8"), Error);
}

TEST_CASE("state_dict round trip and load_state_dict names the offending tensor") {
  manual_seed(3);
  GPT a(tiny_config());
  manual_seed(4);
  GPT b(tiny_config());
  b.load_state_dict(a.state_dict());
  for (size_t i = 0; i < a.parameters().size(); ++i) CHECK(max_abs_diff(a.parameters()[i], b.parameters()[i]) == 0);

  NamedTensors wrong = a.state_dict();
  wrong[3].second = zeros({5});
  const std::string name = wrong[3].first;
  CHECK_THROWS_WITH_AS(b.load_state_dict(wrong), doctest::Contains(("\"" + name + "\" has shape [5]").c_str()), Error);
  NamedTensors half = a.state_dict();
  half[0].second = half[0].second.to(bf16);
  CHECK_THROWS_WITH_AS(b.load_state_dict(half), doctest::Contains("\"wte.weight\" is bf16 in the state but f32"), Error);
  NamedTensors missing = a.state_dict();
  missing.pop_back();
  CHECK_THROWS_WITH_AS(b.load_state_dict(missing), doctest::Contains("missing from the state: ln_f.bias"), Error);
  NamedTensors extra = a.state_dict();
  extra.emplace_back("bogus", zeros({1}));
  CHECK_THROWS_WITH_AS(b.load_state_dict(extra), doctest::Contains("not in the model: bogus"), Error);
}

TEST_CASE("to dtype converts every parameter in place and train eval reach every child") {
  GPT model(tiny_config());
  const Tensor wte = model.wte->weight;
  model.to(f64);
  CHECK(wte.dtype() == f64);  // the same handle sees the conversion
  for (const Tensor& t : model.parameters()) CHECK(t.dtype() == f64);
  model.eval();
  CHECK_FALSE(model.h[1]->mlp->drop->is_training());
  model.train();
  CHECK(model.h[1]->attn->drop->is_training());
}

TEST_CASE("layer gradchecks in float64") {
  manual_seed(5);
  Linear linear(3, 4);
  linear.to(f64);
  const Tensor x = randn({2, 3}, f64).requires_grad_();
  const std::vector<Tensor> inputs{x, linear.weight, linear.bias};
  CHECK(hg::testing::gradcheck("Linear", [&](const std::vector<Tensor>& in) { return linear.forward(in[0]); }, inputs) == "");

  const auto o = TransformerOptions().n_embd(4).n_head(2);
  Block block(o);
  block.to(f64);
  const Tensor h = randn({1, 3, 4}, f64).requires_grad_();
  std::vector<Tensor> block_inputs{h};
  for (const Tensor& p : block.parameters()) block_inputs.push_back(p);
  CHECK(hg::testing::gradcheck("Block", [&](const std::vector<Tensor>& in) { return block.forward(in[0]); },
                               block_inputs) == "");
}

TEST_CASE("GPT forward and backward equal a float64 composition of primitive ops") {
  manual_seed(6);
  GPT model(tiny_config());
  model.to(f64);
  const Tensor ids = randint(0, 11, {2, 7});
  const Tensor logits = model.forward(ids);
  const Tensor expected = reference_gpt_forward(model, ids);
  CHECK(logits.shape() == Shape{2, 7, 11});
  CHECK(max_abs_diff(logits, expected) < 1e-12);

  const Tensor weights = randn({2, 7, 11}, f64);
  sum(logits * weights).backward();
  std::vector<Tensor> grads;
  for (const Tensor& p : model.parameters()) grads.push_back(p.grad().clone());
  model.zero_grad();
  sum(reference_gpt_forward(model, ids) * weights).backward();
  const std::vector<Tensor> params = model.parameters();
  for (size_t i = 0; i < params.size(); ++i) CHECK(max_abs_diff(grads[i], params[i].grad()) < 1e-12);
}

TEST_CASE("GPT saves and loads its own layout") {
  manual_seed(7);
  GPT model(tiny_config());
  const std::string path = temp_path("native.safetensors");
  model.save(path);
  std::shared_ptr<GPT> loaded = GPT::load(path);
  CHECK(loaded->config.n_layer() == 2);
  CHECK(loaded->config.n_head() == 2);
  const Tensor ids = randint(0, 11, {1, 8});
  CHECK(max_abs_diff(model.forward(ids), loaded->forward(ids)) == 0.0);
  std::remove(path.c_str());
}

TEST_CASE("GPT loads a Hugging Face GPT-2 layout with the same logits") {
  manual_seed(8);
  // GPT-2 files carry no head count: it comes from the config.json beside the file (2 heads, not width / 64).
  const GPTConfig c = tiny_config().n_embd(128).n_head(2).n_layer(2);
  GPT model(c);
  // Build the file exactly as transformers writes GPT2LMHeadModel: "transformer." prefix, Conv1D
  // weights [in, out], the tied lm_head and the causal-mask buffers.
  safetensors::NamedTensors hf;
  for (auto& [name, t] : model.state_dict()) {
    const bool conv1d = name.find("c_attn.weight") != std::string::npos || name.find("c_proj.weight") != std::string::npos ||
                        name.find("c_fc.weight") != std::string::npos;
    hf.emplace_back("transformer." + name, conv1d ? t.t().contiguous() : t);
  }
  for (int l = 0; l < 2; ++l)
    hf.emplace_back("transformer.h." + std::to_string(l) + ".attn.bias", ones({1, 1, c.context(), c.context()}));
  hf.emplace_back("lm_head.weight", model.wte->weight);
  const test::TempDir dir;
  const std::string path = (dir.path / "model.safetensors").string();
  safetensors::save(path, hf, {{"format", "pt"}});
  dir.write("config.json", R"({"model_type": "gpt2", "n_head": 2, "n_layer": 2, "n_embd": 128, "n_positions": 8,
                               "vocab_size": 11, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5})");
  std::shared_ptr<GPT> loaded = GPT::load(path);
  CHECK(loaded->config.n_embd() == 128);
  CHECK(loaded->config.n_head() == 2);
  CHECK(loaded->config.context() == c.context());
  CHECK(loaded->config.vocab_size() == 11);
  const Tensor ids = randint(0, 11, {2, 5});
  CHECK(max_abs_diff(model.forward(ids), loaded->forward(ids)) == 0.0);

  safetensors::NamedTensors broken(hf.begin() + 1, hf.end());  // no wte
  safetensors::save(path, broken, {{"format", "pt"}});
  CHECK_THROWS_WITH_AS(GPT::load(path), doctest::Contains("missing tensors wte.weight"), Error);
}
