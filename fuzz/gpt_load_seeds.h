#pragma once
// The seed corpus of fuzz_gpt_load (written by make_fuzz_seeds): tiny GPTs (vocab 8, context 4, one
// block, 2 heads of width 2) in every layout GPT::load reads -- native files with and without the
// layer_norm_eps / activation metadata, GPT-2 layouts from save_hf with their config.json, with
// "transformer." prefixes, mask buffers and a tied lm_head, with gelu and another epsilon -- and the
// refusals it must name: no config.json, a bad block key, an untied lm_head, a bad activation.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "engine/random.h"
#include "engine/safetensors.h"
#include "fuzz/gpt_load_input.h"
#include "layers/gpt.h"

namespace hg::fuzz {

inline void write_gpt_load_seeds(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  auto read = [](const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<char>{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  };
  auto write = [](const fs::path& path, const std::vector<char>& bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), std::streamsize(bytes.size()));
  };
  const fs::path work = dir / ".work";
  fs::create_directories(work);
  manual_seed(11);
  const auto config = nn::GPTConfig().vocab_size(8).context(4).n_layer(1).n_head(2).n_embd(4);
  nn::GPT model(config);

  // Native: the current metadata, and a file from before layer_norm_eps / activation.
  model.save((dir / "native.safetensors").string());
  safetensors::save((dir / "native_old_metadata.safetensors").string(), model.state_dict(),
                    {{"format", "halfgrad-gpt"},
                     {"vocab_size", "8"},
                     {"context", "4"},
                     {"n_layer", "1"},
                     {"n_head", "2"},
                     {"n_embd", "4"}});

  // GPT-2 layout as save_hf writes it, with its config.json; the file alone (refused).
  model.save_hf(work.string());
  const std::vector<char> hf = read(work / "model.safetensors");
  const std::vector<char> config_json = read(work / "config.json");
  const std::string config_text(config_json.begin(), config_json.end());
  write(dir / "hf_with_config", join_gpt_load_input(config_text, hf));
  write(dir / "hf_without_config.safetensors", hf);

  // As transformers writes GPT2LMHeadModel: "transformer." names, the mask buffers, lm_head = wte.
  const safetensors::File file = safetensors::load((work / "model.safetensors").string());
  safetensors::NamedTensors published, untied, bad_block;
  for (const auto& [name, tensor] : file.tensors) published.emplace_back("transformer." + name, tensor.clone());
  published.emplace_back("transformer.h.0.attn.bias", ones({1, 1, 4, 4}));
  published.emplace_back("transformer.h.0.attn.masked_bias", full({}, -1e4));
  untied = published;
  bad_block = published;
  published.emplace_back("lm_head.weight", file.find("wte.weight")->clone());
  untied.emplace_back("lm_head.weight", file.find("wte.weight")->clone() * 2.0);
  bad_block.emplace_back("h.x.attn.bias", ones({1}));
  auto save_with_config = [&](const std::string& name, const safetensors::NamedTensors& tensors,
                              const std::string& cfg) {
    safetensors::save((work / "file.safetensors").string(), tensors, {{"format", "pt"}});
    write(dir / name, join_gpt_load_input(cfg, read(work / "file.safetensors")));
  };
  save_with_config("hf_published_names", published, config_text);
  save_with_config("hf_untied_lm_head", untied, config_text);
  save_with_config("hf_bad_block_key", bad_block, config_text);

  // config.json variants: the exact GELU and another epsilon (loads), an activation it lacks (refused).
  std::string gelu = config_text;
  gelu.replace(gelu.find("\"gelu_new\""), 10, "\"gelu\"");
  gelu.replace(gelu.find("1e-05"), 5, "1e-06");
  save_with_config("hf_gelu_eps", published, gelu);
  std::string relu = config_text;
  relu.replace(relu.find("\"gelu_new\""), 10, "\"relu\"");
  save_with_config("hf_relu", published, relu);
  fs::remove_all(work);
}

}  // namespace hg::fuzz
