#pragma once
// Hugging Face GPT-2 config.json: the keys that shape a GPT, read strictly and written back.
//
// READ (read_hf_config): the file is a JSON object (at most 1 MiB, no key twice) whose keys are taken
// as transformers' GPT2Config reads them:
//   required  n_head, n_layer, n_embd, vocab_size, n_positions (positive integers); the head count in
//             particular cannot be inferred from the tensors. transformers' generic names are accepted
//             for an absent key (GPT2Config's attribute_map): num_attention_heads, num_hidden_layers,
//             hidden_size, max_position_embeddings (both given: they must agree). Without n_positions
//             (or its alias) n_ctx is the context; otherwise n_ctx is ignored, as transformers does.
//   optional  layer_norm_epsilon (a positive finite number; default 1e-5), activation_function
//             ("gelu_new" / "gelu_pytorch_tanh": GELU's tanh approximation, "gelu": the exact erf one;
//             default "gelu_new"; any other refused by name), model_type ("gpt2"), n_inner (null or
//             4 n_embd), and the flags this GPT fixes: scale_attn_weights true,
//             scale_attn_by_inverse_layer_idx false, add_cross_attention false, tie_word_embeddings true
//   other keys (dropouts, token ids, task parameters ...) are ignored.
// Every refusal is an hg::Error naming the file, the key, what was found and what was expected.
//
// WRITE (hf_config_json): the keys of GPT-2's published config.json that the model determines,
// model_type "gpt2"; write_file_atomically puts text at a path by temporary file, fsync and rename.
#include <string>

#include "layers/gpt.h"

namespace hg::nn {

struct HfGpt2Config {
  int64_t n_head = 0, n_layer = 0, n_embd = 0, n_positions = 0, vocab_size = 0;
  double layer_norm_epsilon = 1e-5;
  GeluApproximation activation = GeluApproximation::Tanh;
};

// Reads and checks `path` (see READ above).
HfGpt2Config read_hf_config(const std::string& path);

// GPT-2's name of an activation ("gelu_new" for Tanh, "gelu" for Erf), and back: `name` as config.json
// spells it; anything else is an hg::Error naming `where` (the file and key).
std::string activation_name(GeluApproximation activation);
GeluApproximation parse_activation(const std::string& name, const std::string& where);

// `text` safe in a one-line message: control and non-ASCII characters escaped as JSON does, cut to
// 80 characters ("..." at the end when cut).
std::string printable(const std::string& text);

// The config.json text of `config` (indented, keys sorted as GPT-2's own file).
std::string hf_config_json(const GPTConfig& config);

// Writes `text` to `path` atomically ("<path>.tmp.<pid>", fsync, rename, fsync of the directory);
// an hg::Error names the path and the system's reason.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace hg::nn
