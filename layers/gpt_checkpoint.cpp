// GPT checkpoints: the native safetensors layout and Hugging Face GPT-2 files.
//
// Native files carry metadata {"format": "halfgrad", "n_layer", "n_head", "n_embd", "context",
// "vocab_size"}. A Hugging Face file is recognised by the absence of that format tag: its four
// Conv1D weights (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) are [in, out] and are
// transposed; names may carry a "transformer." prefix; "lm_head.weight" (tied to wte) and the
// attention-mask buffers ("attn.bias", "attn.masked_bias") are skipped. The config is inferred from
// the tensors: vocab and width from wte, context from wpe, layers from the h.{i} indices; the head
// count from metadata "n_head" when present, else width / 64 (every GPT-2 size uses 64-wide heads).
#include <map>
#include <set>

#include "engine/safetensors.h"
#include "layers/gpt.h"

namespace hg::nn {

namespace {

constexpr const char* kFormat = "halfgrad-gpt";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_conv1d_weight(const std::string& name) {
  for (const char* suffix : {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"})
    if (ends_with(name, suffix)) return true;
  return false;
}

int64_t metadata_int(const safetensors::Metadata& metadata, const std::string& key, const std::string& path) {
  auto it = metadata.find(key);
  HG_CHECK(it != metadata.end(), "[GPT::load] ", path, ": metadata \"", key, "\" is missing");
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    HG_FAIL("[GPT::load] ", path, ": metadata \"", key, "\" = \"", it->second, "\" is not an integer");
  }
}

const Tensor& require(const std::map<std::string, Tensor>& tensors, const std::string& name, const std::string& path) {
  auto it = tensors.find(name);
  HG_CHECK(it != tensors.end(), "[GPT::load] ", path, ": tensor \"", name,
           "\" is missing; expected a GPT-2 checkpoint (wte.weight, wpe.weight, h.{i}.*, ln_f.*)");
  return it->second;
}

}  // namespace

void GPT::save(const std::string& path) const {
  safetensors::Metadata metadata{{"format", kFormat},
                                 {"vocab_size", std::to_string(config.vocab_size())},
                                 {"context", std::to_string(config.context())},
                                 {"n_layer", std::to_string(config.n_layer())},
                                 {"n_head", std::to_string(config.n_head())},
                                 {"n_embd", std::to_string(config.n_embd())}};
  safetensors::save(path, state_dict(), metadata);
}

std::shared_ptr<GPT> GPT::load(const std::string& path) {
  const safetensors::File file = safetensors::load(path);
  const auto format = file.metadata.find("format");
  const bool native = format != file.metadata.end() && format->second == kFormat;

  std::map<std::string, Tensor> tensors;
  std::set<int64_t> layers;
  for (const auto& [raw_name, tensor] : file.tensors) {
    std::string name = raw_name.rfind("transformer.", 0) == 0 ? raw_name.substr(12) : raw_name;
    if (!native && (name == "lm_head.weight" || ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias")))
      continue;
    if (name.rfind("h.", 0) == 0) layers.insert(std::stoll(name.substr(2, name.find('.', 2) - 2)));
    tensors[name] = tensor;
  }

  GPTConfig config;
  const Tensor& wte = require(tensors, "wte.weight", path);
  const Tensor& wpe = require(tensors, "wpe.weight", path);
  HG_CHECK(wte.dim() == 2 && wpe.dim() == 2 && wte.size(1) == wpe.size(1), "[GPT::load] ", path,
           ": expected wte [vocab, dim] and wpe [context, dim], got ", wte.describe(), " and ", wpe.describe());
  config.vocab_size(wte.size(0));
  config.n_embd(wte.size(1));
  config.context(wpe.size(0));
  config.n_layer(int64_t(layers.size()));
  HG_CHECK(config.n_layer() > 0 && *layers.rbegin() == config.n_layer() - 1, "[GPT::load] ", path,
           ": expected blocks h.0 ... h.{L-1}, found ", layers.size(), " distinct block indices");
  if (file.metadata.count("n_head")) {
    config.n_head(metadata_int(file.metadata, "n_head", path));
  } else {
    HG_CHECK(config.n_embd() % 64 == 0, "[GPT::load] ", path, ": cannot infer the head count of width ",
             config.n_embd(), " (not a multiple of 64); add metadata \"n_head\"");
    config.n_head(config.n_embd() / 64);
  }
  if (native) {
    HG_CHECK(metadata_int(file.metadata, "n_layer", path) == config.n_layer(), "[GPT::load] ", path,
             ": metadata n_layer disagrees with the tensors");
  }

  auto model = std::make_shared<GPT>(config);
  NamedTensors state;
  NoGradGuard no_grad;
  for (auto& [name, tensor] : tensors) {
    Tensor value = !native && is_conv1d_weight(name) ? tensor.t() : tensor;
    if (value.dtype() != f32) value = value.to(f32);
    state.emplace_back(name, value);
  }
  model->load_state_dict(state);
  return model;
}

}  // namespace hg::nn
