// Hugging Face GPT-2 config.json, read and written (rules: layers/gpt_hf_config.h). Parsed by
// nlohmann::json with a callback that records a key given twice (nlohmann would keep the last one);
// each key is fetched through one checked accessor per JSON type, so every refusal reads the same way:
// "<file>: key "<k>" is <what was found>; expected <what>".
#include "layers/gpt_hf_config.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>

#include "engine/json_duplicate_key.h"

namespace hg::nn {

namespace {

using Json = nlohmann::ordered_json;

constexpr size_t kMaxConfigBytes = size_t(1) << 20;
constexpr int64_t kMaxInt = (int64_t(1) << 31) - 1;

// The value as the message shows it: its JSON text, cut to 60 characters.
std::string shown(const Json& value) {
  std::string text = value.dump(-1, ' ', /*ensure_ascii=*/true, Json::error_handler_t::replace);
  return text.size() > 60 ? text.substr(0, 57) + "..." : text;
}

struct ConfigFile {
  std::string path;
  Json json;

  [[noreturn]] void fail_key(const std::string& key, const Json& value, const std::string& expected) const {
    HG_INPUT_FAIL("[GPT::load] ", path, ": key \"", key, "\" is ", value.type_name(), " ", shown(value), "; expected ",
                  expected);
  }

  const Json* find(const std::string& key) const {
    auto it = json.find(key);
    return it == json.end() ? nullptr : &*it;
  }

  std::optional<int64_t> integer(const std::string& key) const {
    const Json* value = find(key);
    if (!value) return std::nullopt;
    const bool integral = value->is_number_integer() || value->is_number_unsigned();
    if (!integral || value->get<int64_t>() < 1 || value->get<int64_t>() > kMaxInt ||
        (value->is_number_unsigned() && value->get<uint64_t>() > uint64_t(kMaxInt)))
      fail_key(key, *value, "a positive integer below 2^31");
    return value->get<int64_t>();
  }

  // `key`, or transformers' generic name for it (GPT2Config's attribute_map) when `key` is absent; both
  // given must agree.
  std::optional<int64_t> aliased_integer(const std::string& key, const std::string& alias) const {
    const std::optional<int64_t> value = integer(key), aliased = integer(alias);
    HG_INPUT_CHECK(!value || !aliased || *value == *aliased, "[GPT::load] ", path, ": key \"", key, "\" = ", *value,
                   " and its alias \"", alias, "\" = ", *aliased, " disagree; expected one value");
    return value ? value : aliased;
  }

  int64_t required_integer(const std::string& key, const std::string& alias) const {
    const std::optional<int64_t> value = aliased_integer(key, alias);
    HG_INPUT_CHECK(
        value.has_value(), "[GPT::load] ", path, ": key \"", key, "\" (or its alias \"", alias,
        "\") is missing; expected a GPT-2 config.json with n_head, n_layer, n_embd, vocab_size and n_positions");
    return *value;
  }

  // A flag this GPT fixes: absent, or `required`.
  void flag(const std::string& key, bool required, const std::string& why) const {
    const Json* value = find(key);
    if (value && (!value->is_boolean() || value->get<bool>() != required))
      fail_key(key, *value, std::string(required ? "true" : "false") + " (" + why + ")");
  }
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  HG_INPUT_CHECK(in.good(), "[GPT::load] cannot read ", path, ": ", std::strerror(errno));
  std::string text;
  char buffer[65536];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
    text.append(buffer, size_t(in.gcount()));
    HG_INPUT_CHECK(text.size() <= kMaxConfigBytes, "[GPT::load] ", path, " is larger than ", kMaxConfigBytes,
                   " bytes; expected a GPT-2 config.json (about 1 KB)");
  }
  HG_INPUT_CHECK(!in.bad(), "[GPT::load] cannot read ", path, ": ", std::strerror(errno));
  return text;
}

}  // namespace

std::string printable(const std::string& text) {
  std::string json = Json(text).dump(-1, ' ', /*ensure_ascii=*/true, Json::error_handler_t::replace);
  json = json.substr(1, json.size() - 2);
  return json.size() > 80 ? json.substr(0, 77) + "..." : json;
}

std::string activation_name(GeluApproximation activation) {
  return activation == GeluApproximation::Erf ? "gelu" : "gelu_new";
}

GeluApproximation parse_activation(const std::string& name, const std::string& where) {
  if (name == "gelu_new" || name == "gelu_pytorch_tanh") return GeluApproximation::Tanh;
  if (name == "gelu") return GeluApproximation::Erf;
  HG_INPUT_FAIL("[GPT::load] ", where, " is \"", printable(name),
                "\"; expected \"gelu_new\" or \"gelu_pytorch_tanh\" (GELU's tanh approximation) or \"gelu\" (exact)");
}

HfGpt2Config read_hf_config(const std::string& path) {
  const std::string text = read_text(path);
  ConfigFile file{path, {}};
  TopLevelDuplicateKey duplicates;
  try {
    file.json = Json::parse(text, std::ref(duplicates), /*allow_exceptions=*/true);
  } catch (const Json::exception& e) {
    HG_INPUT_FAIL("[GPT::load] ", path, " is not valid JSON: ", e.what());
  }
  HG_INPUT_CHECK(file.json.is_object(), "[GPT::load] ", path, " is a JSON ", file.json.type_name(),
                 "; expected a JSON object (GPT-2's config.json)");
  HG_INPUT_CHECK(!duplicates.duplicate, "[GPT::load] ", path, ": key \"", printable(*duplicates.duplicate),
                 "\" appears twice; expected each key once");

  if (const Json* type = file.find("model_type"); type && (!type->is_string() || type->get<std::string>() != "gpt2"))
    file.fail_key("model_type", *type, "\"gpt2\"");

  HfGpt2Config c;
  c.n_head = file.required_integer("n_head", "num_attention_heads");
  c.n_layer = file.required_integer("n_layer", "num_hidden_layers");
  c.n_embd = file.required_integer("n_embd", "hidden_size");
  c.vocab_size = file.required_integer("vocab_size", "vocab_size");
  // The context is n_positions (wpe's rows); transformers ignores n_ctx, read only when n_positions
  // (and its alias) is absent, as old configs had only n_ctx.
  const std::optional<int64_t> positions = file.aliased_integer("n_positions", "max_position_embeddings");
  const std::optional<int64_t> ctx = positions ? std::nullopt : file.integer("n_ctx");
  HG_INPUT_CHECK(positions || ctx, "[GPT::load] ", path,
                 ": key \"n_positions\" is missing (and no \"max_position_embeddings\" or \"n_ctx\"); expected the "
                 "model's context length");
  c.n_positions = positions ? *positions : *ctx;

  if (const Json* inner = file.find("n_inner"); inner && !inner->is_null()) {
    const bool four_wide =
        (inner->is_number_integer() || inner->is_number_unsigned()) && inner->get<int64_t>() == 4 * c.n_embd;
    if (!four_wide) file.fail_key("n_inner", *inner, "null or 4 n_embd = " + std::to_string(4 * c.n_embd));
  }
  if (const Json* eps = file.find("layer_norm_epsilon")) {
    if (!eps->is_number() || !std::isfinite(eps->get<double>()) || eps->get<double>() <= 0)
      file.fail_key("layer_norm_epsilon", *eps, "a positive number");
    c.layer_norm_epsilon = eps->get<double>();
  }
  if (const Json* activation = file.find("activation_function")) {
    if (!activation->is_string()) file.fail_key("activation_function", *activation, "a string such as \"gelu_new\"");
    c.activation = parse_activation(activation->get<std::string>(), path + ": key \"activation_function\"");
  }
  file.flag("scale_attn_weights", true, "this GPT scales attention scores by 1/sqrt(head width)");
  file.flag("scale_attn_by_inverse_layer_idx", false, "this GPT does not scale scores by layer");
  file.flag("add_cross_attention", false, "this GPT is decoder-only");
  file.flag("tie_word_embeddings", true, "this GPT ties the output head to wte");
  return c;
}

std::string hf_config_json(const GPTConfig& config) {
  Json json = Json::object();
  json["activation_function"] = activation_name(config.activation());
  json["architectures"] = Json::array({"GPT2LMHeadModel"});
  json["attn_pdrop"] = config.dropout();
  json["embd_pdrop"] = config.dropout();
  json["layer_norm_epsilon"] = config.layer_norm_eps();
  json["model_type"] = "gpt2";
  json["n_ctx"] = config.context();
  json["n_embd"] = config.n_embd();
  json["n_head"] = config.n_head();
  json["n_inner"] = nullptr;
  json["n_layer"] = config.n_layer();
  json["n_positions"] = config.context();
  json["resid_pdrop"] = config.dropout();
  json["scale_attn_weights"] = true;
  json["tie_word_embeddings"] = true;
  json["vocab_size"] = config.vocab_size();
  return json.dump(2) + "\n";
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  auto fail = [&](const char* what) {
    const int error = errno;
    ::unlink(tmp.c_str());
    HG_INPUT_FAIL("cannot write ", path, ": ", what, " failed: ", std::strerror(error));
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("open");
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      fail("write");
    }
    done += size_t(n);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    fail("fsync");
  }
  if (::close(fd) != 0) fail("close");
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("rename");
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int dir_fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

}  // namespace hg::nn
