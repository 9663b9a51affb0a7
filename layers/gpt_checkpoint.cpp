// GPT checkpoints: the native safetensors layout and Hugging Face GPT-2 files, read strictly.
//
// NATIVE files (save) carry metadata {"format": "halfgrad-gpt", "vocab_size", "context", "n_layer",
// "n_head", "n_embd", "layer_norm_eps", "activation"} and Linear weights [out, in]; files written
// before "layer_norm_eps" / "activation" existed load with GPT-2's 1e-5 and gelu_new.
// A directory is read as its model.safetensors.
// HUGGING FACE files (anything without that format tag) are read as transformers writes GPT-2: names
// with or without "transformer.", the four Conv1D weights (attn.c_attn, attn.c_proj, mlp.c_fc,
// mlp.c_proj) [in, out] and transposed on load, the causal-mask buffers "h.{i}.attn.bias" /
// "h.{i}.attn.masked_bias" ignored, "lm_head.weight" accepted only when it equals wte (this GPT ties
// them); the architecture comes from the config.json beside the file (layers/gpt_hf_config.h) -- the
// head count is in no tensor, so without config.json the file is refused, never guessed.
//
// STRATEGY: everything is checked before the model is built (so a refused file allocates nothing and
// a file's size bounds what it can make load allocate): block indices parsed strictly (digits, below
// 100000, no leading zero), each config value against the tensor that fixes it (named), then every
// expected tensor's shape and dtype (named, with the expected shape), then the missing and unexpected
// names in one message, then lm_head. Only then the GPT is built and the tensors copied in (f32).
// SAVE_HF writes the published layout back: model.safetensors (f32, no prefix, Conv1D [in, out],
// lm_head and mask buffers omitted) and config.json, each atomically -- but not together, so the
// safetensors metadata repeats the architecture ("format": "pt" plus n_head, n_layer, n_embd,
// n_positions, vocab_size, layer_norm_eps, activation) and load refuses a config.json that disagrees
// with any of them (naming both files and the key): new weights never run with an old config.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <vector>

#include "engine/safetensors.h"
#include "layers/gpt.h"
#include "layers/gpt_hf_config.h"

namespace hg::nn {

namespace {

constexpr const char* kFormat = "halfgrad-gpt";
constexpr int64_t kMaxBlocks = 100000;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_conv1d_weight(const std::string& name) {
  for (const char* suffix : {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"})
    if (ends_with(name, suffix)) return true;
  return false;
}

std::string shape_text(const Shape& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// The block index of a name "h.<i>.<rest>"; any other name starting with "h." is refused.
int64_t block_index(const std::string& name, const std::string& path) {
  const size_t dot = name.find('.', 2);
  const std::string digits = name.substr(2, dot == std::string::npos ? std::string::npos : dot - 2);
  bool ok = dot != std::string::npos && dot + 1 < name.size() && !digits.empty() && digits.size() <= 5 &&
            (digits.size() == 1 || digits[0] != '0');
  int64_t index = 0;
  for (char ch : digits) {
    ok = ok && ch >= '0' && ch <= '9';
    if (ok) index = index * 10 + (ch - '0');
  }
  HG_INPUT_CHECK(ok && index < kMaxBlocks, "[GPT::load] ", path, ": tensor \"", printable(name),
                 "\" has block index \"", printable(digits),
                 "\"; expected h.<i>.<parameter> with <i> a decimal number below ", kMaxBlocks,
                 " without leading zeros");
  return index;
}

// A metadata value of a native file: a decimal integer in [1, 2^31).
int64_t metadata_int(const safetensors::Metadata& metadata, const std::string& key, const std::string& path) {
  auto it = metadata.find(key);
  HG_INPUT_CHECK(it != metadata.end(), "[GPT::load] ", path, ": metadata \"", key,
                 "\" is missing; expected a file written by GPT::save (format \"", kFormat, "\")");
  const std::string& text = it->second;
  bool ok = !text.empty() && text.size() <= 10 && text[0] != '0';
  int64_t value = 0;
  for (char ch : text) {
    ok = ok && ch >= '0' && ch <= '9';
    if (ok) value = value * 10 + (ch - '0');
  }
  HG_INPUT_CHECK(ok && value < (int64_t(1) << 31), "[GPT::load] ", path, ": metadata \"", key, "\" = \"",
                 printable(text), "\"; expected a positive decimal integer below 2^31");
  return value;
}

double metadata_eps(const safetensors::Metadata& metadata, const std::string& path) {
  auto it = metadata.find("layer_norm_eps");
  if (it == metadata.end()) return 1e-5;  // files from before the key existed
  char* end = nullptr;
  const double eps = std::strtod(it->second.c_str(), &end);
  HG_INPUT_CHECK(!it->second.empty() && end == it->second.c_str() + it->second.size() && std::isfinite(eps) && eps > 0,
                 "[GPT::load] ", path, ": metadata \"layer_norm_eps\" = \"", printable(it->second),
                 "\"; expected a positive number");
  return eps;
}

// The architecture, from a native file's metadata or the config.json beside a Hugging Face file.
struct Architecture {
  GPTConfig config;
  std::string source;  // "metadata" or the config.json path, for messages
};

Architecture native_architecture(const safetensors::File& file, const std::string& path) {
  const auto& m = file.metadata;
  GPTConfig c;
  c.vocab_size(metadata_int(m, "vocab_size", path))
      .context(metadata_int(m, "context", path))
      .n_layer(metadata_int(m, "n_layer", path))
      .n_head(metadata_int(m, "n_head", path))
      .n_embd(metadata_int(m, "n_embd", path))
      .layer_norm_eps(metadata_eps(m, path));
  if (auto it = m.find("activation"); it != m.end())
    c.activation(parse_activation(it->second, path + ": metadata \"activation\""));
  return {c, path + ": metadata"};
}

// The architecture keys save_hf also writes into a GPT-2 file's metadata (beside "format": "pt"), so
// that a model.safetensors paired with another model's config.json (a crash between save_hf's two
// renames, files copied from two places) is refused instead of computing wrong logits.
constexpr const char* kHfIntegerKeys[] = {"n_head", "n_layer", "n_embd", "n_positions", "vocab_size"};

int64_t hf_integer(const HfGpt2Config& hf, const std::string& key) {
  if (key == "n_head") return hf.n_head;
  if (key == "n_layer") return hf.n_layer;
  if (key == "n_embd") return hf.n_embd;
  if (key == "n_positions") return hf.n_positions;
  return hf.vocab_size;
}

// Each architecture key present in the file's metadata against config.json's value; a disagreement
// names both files and the key.
void check_metadata_against_config(const safetensors::Metadata& m, const std::string& path, const HfGpt2Config& hf,
                                   const std::string& config_path) {
  auto disagree = [&](const std::string& key, const std::string& in_file, const std::string& in_config) {
    HG_INPUT_FAIL("[GPT::load] ", path, ": metadata \"", key, "\" = ", printable(in_file), " disagrees with ",
                  config_path, ": \"", key, "\" = ", in_config,
                  "; the two files describe different models (expected the config.json written with these weights)");
  };
  for (const char* key : kHfIntegerKeys) {
    if (!m.count(key)) continue;
    const int64_t value = metadata_int(m, key, path);
    if (value != hf_integer(hf, key)) disagree(key, m.at(key), std::to_string(hf_integer(hf, key)));
  }
  if (m.count("layer_norm_eps") && metadata_eps(m, path) != hf.layer_norm_epsilon) {
    char text[32];
    std::snprintf(text, sizeof text, "%.17g", hf.layer_norm_epsilon);
    disagree("layer_norm_eps", m.at("layer_norm_eps"), text);
  }
  if (auto it = m.find("activation");
      it != m.end() && parse_activation(it->second, path + ": metadata \"activation\"") != hf.activation)
    disagree("activation", it->second, "\"" + activation_name(hf.activation) + "\"");
}

Architecture hf_architecture(const std::string& path, const safetensors::Metadata& metadata) {
  const std::filesystem::path config_path = std::filesystem::path(path).parent_path() / "config.json";
  std::error_code error;
  HG_INPUT_CHECK(
      std::filesystem::is_regular_file(config_path, error), "[GPT::load] ", path,
      " has no GPT::save metadata and there is no config.json beside it (", config_path.string(),
      "); a GPT-2 file's head count is in none of its tensors: put the model's config.json (n_head, n_layer, "
      "n_embd, n_positions, vocab_size) in the file's directory");
  const HfGpt2Config hf = read_hf_config(config_path.string());
  check_metadata_against_config(metadata, path, hf, config_path.string());
  GPTConfig c;
  c.vocab_size(hf.vocab_size)
      .context(hf.n_positions)
      .n_layer(hf.n_layer)
      .n_head(hf.n_head)
      .n_embd(hf.n_embd)
      .layer_norm_eps(hf.layer_norm_epsilon)
      .activation(hf.activation);
  return {c, config_path.string()};
}

// Every parameter's name and shape in the file's layout, in the model's order.
std::vector<std::pair<std::string, Shape>> expected_tensors(const GPTConfig& c, bool hf) {
  const int64_t C = c.n_embd();
  auto weight = [hf](int64_t in, int64_t out) { return hf ? Shape{in, out} : Shape{out, in}; };
  std::vector<std::pair<std::string, Shape>> expected{{"wte.weight", {c.vocab_size(), C}},
                                                      {"wpe.weight", {c.context(), C}}};
  for (int64_t i = 0; i < c.n_layer(); ++i) {
    const std::string b = "h." + std::to_string(i) + ".";
    expected.insert(expected.end(), {{b + "ln_1.weight", {C}},
                                     {b + "ln_1.bias", {C}},
                                     {b + "attn.c_attn.weight", weight(C, 3 * C)},
                                     {b + "attn.c_attn.bias", {3 * C}},
                                     {b + "attn.c_proj.weight", weight(C, C)},
                                     {b + "attn.c_proj.bias", {C}},
                                     {b + "ln_2.weight", {C}},
                                     {b + "ln_2.bias", {C}},
                                     {b + "mlp.c_fc.weight", weight(C, 4 * C)},
                                     {b + "mlp.c_fc.bias", {4 * C}},
                                     {b + "mlp.c_proj.weight", weight(4 * C, C)},
                                     {b + "mlp.c_proj.bias", {C}}});
  }
  expected.insert(expected.end(), {{"ln_f.weight", {C}}, {"ln_f.bias", {C}}});
  return expected;
}

bool floating(DType dtype) { return dtype == f32 || dtype == f64 || dtype == f16 || dtype == bf16; }

void check_floating(const std::string& name, const Tensor& t, const std::string& path) {
  HG_INPUT_CHECK(floating(t.dtype()), "[GPT::load] ", path, ": tensor \"", name, "\" is ", dtype_name(t.dtype()),
                 "; expected a floating-point dtype (F32, F16, BF16 or F64)");
}

// Up to 6 names, then how many more.
std::string name_list(const std::vector<std::string>& names) {
  std::string text;
  for (size_t i = 0; i < names.size() && i < 6; ++i) text += (i ? ", " : "") + printable(names[i]);
  if (names.size() > 6) text += " and " + std::to_string(names.size() - 6) + " more";
  return text;
}

// The config values against the tensors that fix them, each disagreement named.
void check_against_tensors(const Architecture& a, const std::map<std::string, Tensor>& tensors,
                           const std::set<int64_t>& blocks, const std::string& path) {
  const GPTConfig& c = a.config;
  HG_INPUT_CHECK(c.n_embd() % c.n_head() == 0, "[GPT::load] ", a.source, ": n_head = ", c.n_head(),
                 " does not divide n_embd = ", c.n_embd(), "; expected heads of equal width");
  auto agree = [&](const char* tensor, int64_t dim, const char* key, int64_t value) {
    auto it = tensors.find(tensor);
    if (it == tensors.end() || it->second.dim() != 2) return;  // named by the shape check
    HG_INPUT_CHECK(it->second.size(dim) == value, "[GPT::load] ", a.source, ": ", key, " = ", value, " disagrees with ",
                   path, ": tensor \"", tensor, "\" ", shape_text(it->second.shape()));
  };
  agree("wte.weight", 0, "vocab_size", c.vocab_size());
  agree("wte.weight", 1, "n_embd", c.n_embd());
  agree("wpe.weight", 0, "n_positions (context)", c.context());
  agree("wpe.weight", 1, "n_embd", c.n_embd());
  const int64_t found = blocks.empty() ? 0 : *blocks.rbegin() + 1;
  HG_INPUT_CHECK(found == c.n_layer(), "[GPT::load] ", a.source, ": n_layer = ", c.n_layer(), " disagrees with ", path,
                 ", whose blocks are ", found == 0 ? std::string("absent") : "h.0 ... h." + std::to_string(found - 1));
}

// The tied head: absent, or equal to wte.
void check_lm_head(const Tensor& lm_head, const Tensor& wte, const std::string& path) {
  check_floating("lm_head.weight", lm_head, path);
  HG_INPUT_CHECK(lm_head.shape() == wte.shape(), "[GPT::load] ", path, ": tensor \"lm_head.weight\" ",
                 shape_text(lm_head.shape()), " is not wte's shape ", shape_text(wte.shape()),
                 "; this GPT ties its output head to wte");
  const Tensor a = lm_head.to(f32).contiguous(), b = wte.to(f32).contiguous();
  const float* x = a.data<float>();
  const float* y = b.data<float>();
  int64_t differ = 0;
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i]))) continue;
    ++differ;
    worst = std::max(worst, std::fabs(double(x[i]) - double(y[i])));
  }
  HG_INPUT_CHECK(differ == 0, "[GPT::load] ", path, ": tensor \"lm_head.weight\" differs from \"wte.weight\" in ",
                 differ, " of ", a.numel(), " values (max |difference| ", worst,
                 "); this GPT ties its output head to wte, so a file with its own lm_head cannot load");
}

}  // namespace

void GPT::save(const std::string& path) const {
  char eps[32];
  std::snprintf(eps, sizeof eps, "%.17g", config.layer_norm_eps());
  safetensors::Metadata metadata{{"format", kFormat},
                                 {"vocab_size", std::to_string(config.vocab_size())},
                                 {"context", std::to_string(config.context())},
                                 {"n_layer", std::to_string(config.n_layer())},
                                 {"n_head", std::to_string(config.n_head())},
                                 {"n_embd", std::to_string(config.n_embd())},
                                 {"layer_norm_eps", eps},
                                 {"activation", activation_name(config.activation())}};
  safetensors::save(path, state_dict(), metadata);
}

std::shared_ptr<GPT> GPT::load(const std::string& given) {
  // A directory holding a published model: its model.safetensors (config.json beside it).
  std::error_code error;
  const std::string path = std::filesystem::is_directory(given, error)
                               ? (std::filesystem::path(given) / "model.safetensors").string()
                               : given;
  const safetensors::File file = safetensors::load(path);
  const auto format = file.metadata.find("format");
  const bool native = format != file.metadata.end() && format->second == kFormat;

  // Names without "transformer.", the mask buffers and lm_head set aside; block indices checked.
  std::map<std::string, Tensor> tensors;
  std::set<int64_t> blocks;
  const Tensor* lm_head = nullptr;
  for (const auto& [raw_name, tensor] : file.tensors) {
    const bool prefixed = !native && raw_name.rfind("transformer.", 0) == 0;
    const std::string name = prefixed ? raw_name.substr(12) : raw_name;
    if (name.rfind("h.", 0) == 0) blocks.insert(block_index(name, path));
    if (!native && name == "lm_head.weight" && !prefixed) {
      lm_head = &tensor;
      continue;
    }
    if (!native && (ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias")) &&
        name.rfind("h.", 0) == 0 && std::count(name.begin(), name.end(), '.') == 3)
      continue;
    HG_INPUT_CHECK(tensors.emplace(name, tensor).second, "[GPT::load] ", path, ": tensor \"", printable(name),
                   "\" appears both with and without the \"transformer.\" prefix; expected it once");
  }

  const Architecture architecture = native ? native_architecture(file, path) : hf_architecture(path, file.metadata);
  const GPTConfig& config = architecture.config;
  check_against_tensors(architecture, tensors, blocks, path);

  std::vector<std::string> missing;
  std::set<std::string> expected_names;
  for (const auto& [name, shape] : expected_tensors(config, !native)) {
    expected_names.insert(name);
    auto it = tensors.find(name);
    if (it == tensors.end()) {
      missing.push_back(name);
      continue;
    }
    check_floating(name, it->second, path);
    HG_INPUT_CHECK(it->second.shape() == shape, "[GPT::load] ", path, ": tensor \"", name, "\" has shape ",
                   shape_text(it->second.shape()), "; expected ", shape_text(shape), " (n_embd ", config.n_embd(),
                   native ? "" : ", GPT-2's Conv1D weights are [in, out]", ")");
  }
  std::vector<std::string> unexpected;
  for (const auto& [name, tensor] : tensors)
    if (!expected_names.count(name)) unexpected.push_back(name);
  HG_INPUT_CHECK(
      missing.empty() && unexpected.empty(), "[GPT::load] ", path, ": ",
      missing.empty() ? "" : "missing tensors " + name_list(missing), missing.empty() || unexpected.empty() ? "" : "; ",
      unexpected.empty() ? "" : "unexpected tensors " + name_list(unexpected), "; expected a GPT-2 checkpoint of ",
      config.n_layer(),
      " blocks (wte.weight, wpe.weight, h.<i>.ln_1 / attn.c_attn / attn.c_proj / ln_2 / mlp.c_fc / mlp.c_proj, "
      "ln_f)");
  if (lm_head) check_lm_head(*lm_head, tensors.at("wte.weight"), path);

  std::shared_ptr<GPT> model(new GPT(config, Uninitialised{}));
  NamedTensors state;
  NoGradGuard no_grad;
  for (const auto& [name, tensor] : tensors) {
    Tensor value = !native && is_conv1d_weight(name) ? tensor.t() : tensor;
    if (value.dtype() != f32) value = value.to(f32);
    state.emplace_back(name, value);
  }
  model->load_state_dict(state);
  return model;
}

void GPT::save_hf(const std::string& directory) const {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  HG_INPUT_CHECK(!error, "[GPT::save_hf] cannot create the directory ", directory, ": ", error.message());
  safetensors::NamedTensors tensors;
  NoGradGuard no_grad;
  for (const auto& [name, tensor] : state_dict()) {
    const Tensor value = tensor.to(f32);
    tensors.emplace_back(name, is_conv1d_weight(name) ? value.t().contiguous() : value);
  }
  const std::filesystem::path dir(directory);
  char eps[32];
  std::snprintf(eps, sizeof eps, "%.17g", config.layer_norm_eps());
  safetensors::save((dir / "model.safetensors").string(), tensors,
                    {{"format", "pt"},
                     {"n_head", std::to_string(config.n_head())},
                     {"n_layer", std::to_string(config.n_layer())},
                     {"n_embd", std::to_string(config.n_embd())},
                     {"n_positions", std::to_string(config.context())},
                     {"vocab_size", std::to_string(config.vocab_size())},
                     {"layer_norm_eps", eps},
                     {"activation", activation_name(config.activation())}});
  write_file_atomically((dir / "config.json").string(), hf_config_json(config));
}

}  // namespace hg::nn
