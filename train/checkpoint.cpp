// Training checkpoints: a TrainingState to named tensors and back, checked before anything changes;
// atomic files and a directory that keeps the last K (layout and rules in train/checkpoint.h).
#include "train/checkpoint.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <system_error>

#include "engine/autograd.h"

namespace hg::train {
namespace {

constexpr const char* kFormat = "halfgrad.training_checkpoint";
// Version 2: written with every tensor's and the header's checksum (engine/safetensors.h CHECKSUMS),
// which its loads require; version 1 files (the same layout, written before) load unverified.
constexpr const char* kVersion = "2";
constexpr const char* kUncheckedVersion = "1";

// u64/i64 words stored exactly (no detour through double) as an i64 tensor.
Tensor words_tensor(const std::vector<uint64_t>& words) {
  std::vector<int64_t> values(words.size());
  for (size_t i = 0; i < words.size(); ++i) values[i] = int64_t(words[i]);
  return from_vector(values, {int64_t(values.size())});
}

std::vector<uint64_t> tensor_words(const Tensor& t) {
  const std::vector<int64_t> values = t.to(kCPU).contiguous().to_vector<int64_t>();
  return std::vector<uint64_t>(values.begin(), values.end());
}

// The engine's state as the standard's text form (its state words and position), as numbers.
std::vector<uint64_t> engine_words(const std::mt19937_64& engine) {
  std::ostringstream text;
  text << engine;
  std::vector<uint64_t> words;
  std::istringstream in(text.str());
  for (uint64_t w; in >> w;) words.push_back(w);
  return words;
}

size_t engine_word_count() {
  static const size_t count = engine_words(std::mt19937_64()).size();
  return count;
}

void check_name(const std::string& kind, const std::string& name) {
  HG_CHECK(!name.empty() && name.find('.') == std::string::npos, "[TrainingState] ", kind, " name '", name,
           "' is invalid; expected a non-empty name without '.'");
}

template <class T>
void check_unique(const std::vector<std::pair<std::string, T>>& list, const std::string& kind,
                  const std::string& name) {
  check_name(kind, name);
  for (const auto& [existing, _] : list) {
    HG_CHECK(existing != name, "[TrainingState] ", kind, " '", name, "' is registered twice");
  }
}

std::string metadata_value(const safetensors::File& file, const std::string& key) {
  const auto it = file.metadata.find(key);
  return it == file.metadata.end() ? std::string() : it->second;
}

void check_format(const safetensors::File& file, const std::string& source) {
  const std::string format = metadata_value(file, "format"), version = metadata_value(file, "version");
  HG_INPUT_CHECK(format == kFormat, "[load_checkpoint] '", source,
                 "': is not a halfgrad training checkpoint (metadata format '", format, "', expected '", kFormat,
                 "'); a model-only file loads with GPT::load or --load");
  HG_INPUT_CHECK(version == kVersion || version == kUncheckedVersion, "[load_checkpoint] '", source,
                 "': has checkpoint version '", version, "'; this build reads ", kVersion, " and ", kUncheckedVersion);
  // A flipped bit in a checksum key's name makes the file look unverified: version 2 refuses that.
  HG_INPUT_CHECK(!safetensors::lacks_promised_checksums(file, "version", kVersion), "[load_checkpoint] '", source,
                 "': a version-", kVersion,
                 " checkpoint without its checksums (the header's 'halfgrad.crc32c.' keys are missing or misspelt); "
                 "the header is damaged");
}

std::string describe_tensor(const Tensor& t) { return std::string(dtype_name(t.dtype())) + shape_str(t.shape()); }

}  // namespace

// ---- registration ----------------------------------------------------------------------------------

TrainingState& TrainingState::model(nn::Module& model) {
  HG_CHECK(model_ == nullptr, "[TrainingState] a model is registered twice");
  model_ = &model;
  return *this;
}

TrainingState& TrainingState::optimizer(optim::Optimizer& optimizer) {
  HG_CHECK(optimizer_ == nullptr, "[TrainingState] an optimizer is registered twice");
  optimizer_ = &optimizer;
  return *this;
}

TrainingState& TrainingState::scaler(optim::LossScaler& scaler) {
  HG_CHECK(scaler_ == nullptr, "[TrainingState] a loss scaler is registered twice");
  scaler_ = &scaler;
  return *this;
}

TrainingState& TrainingState::optimizer(const std::string& name, optim::Optimizer& optimizer) {
  check_unique(named_optimizers_, "optimizer", name);
  HG_CHECK(!optimizer.is_sharded(), "[TrainingState] optimizer '", name, "' is sharded (", optimizer.name(),
           "); expected a local optimizer (a sharded one saves its shards itself, unnamed)");
  named_optimizers_.emplace_back(name, &optimizer);
  return *this;
}

TrainingState& TrainingState::scaler(const std::string& name, optim::LossScaler& scaler) {
  check_unique(named_scalers_, "scaler", name);
  named_scalers_.emplace_back(name, &scaler);
  return *this;
}

TrainingState& TrainingState::counter(const std::string& name, int64_t& value) {
  check_unique(counters_, "counter", name);
  counters_.emplace_back(name, &value);
  return *this;
}

TrainingState& TrainingState::generator(const std::string& name, Generator& generator) {
  check_unique(generators_, "generator", name);
  generators_.emplace_back(name, &generator);
  return *this;
}

TrainingState& TrainingState::mt19937_64(const std::string& name, std::mt19937_64& engine) {
  check_unique(engines_, "mt19937_64", name);
  engines_.emplace_back(name, &engine);
  return *this;
}

TrainingState& TrainingState::extra(const std::string& name, Tensor& value, std::function<void(const Tensor&)> check) {
  check_unique(extras_, "extra", name);
  HG_CHECK(value.defined(), "[TrainingState] extra '", name, "' is an undefined tensor; give it its initial value");
  extras_.emplace_back(name, &value);
  extra_checks_.push_back(std::move(check));
  return *this;
}

std::string TrainingState::describe() const {
  std::string out;
  auto add = [&](const std::string& part) { out += (out.empty() ? "" : " ") + part; };
  if (model_) add("model");
  if (optimizer_) add(optimizer_->is_sharded() ? "optimizer:sharded" : "optimizer");
  if (scaler_) add("scaler");
  for (const auto& [name, _] : named_optimizers_) add("optimizers:" + name);
  for (const auto& [name, _] : named_scalers_) add("scalers:" + name);
  for (const auto& [name, _] : counters_) add("counter:" + name);
  for (const auto& [name, _] : generators_) add("generator:" + name);
  for (const auto& [name, _] : engines_) add("mt19937_64:" + name);
  for (const auto& [name, _] : extras_) add("extra:" + name);
  return out;
}

// ---- to tensors ------------------------------------------------------------------------------------

safetensors::NamedTensors TrainingState::tensors() const {
  safetensors::NamedTensors out;
  if (model_) {
    for (const auto& [name, t] : model_->state_dict()) out.emplace_back("model." + name, t);
  }
  if (optimizer_ && !optimizer_->is_sharded()) {  // a sharded one saves its shards itself
    for (const auto& [name, t] : optimizer_->state_tensors()) out.emplace_back("optimizer." + name, t);
  }
  if (scaler_) {
    for (const auto& [name, t] : scaler_->state_tensors()) out.emplace_back("scaler." + name, t);
  }
  for (const auto& [name, o] : named_optimizers_)
    for (const auto& [entry, t] : o->state_tensors()) out.emplace_back("optimizers." + name + "." + entry, t);
  for (const auto& [name, sc] : named_scalers_)
    for (const auto& [entry, t] : sc->state_tensors()) out.emplace_back("scalers." + name + "." + entry, t);
  for (const auto& [name, value] : counters_) out.emplace_back("counter." + name, words_tensor({uint64_t(*value)}));
  for (const auto& [name, g] : generators_) {
    const GeneratorState s = g->state();
    out.emplace_back("generator." + name, words_tensor({s.seed, s.offset}));
  }
  for (const auto& [name, e] : engines_) out.emplace_back("mt19937_64." + name, words_tensor(engine_words(*e)));
  for (const auto& [name, t] : extras_) out.emplace_back("extra." + name, *t);
  return out;
}

// ---- from tensors ----------------------------------------------------------------------------------

void TrainingState::restore(const safetensors::File& file, const std::string& source) const {
  const std::string where = "[load_checkpoint] '" + source + "':";
  auto meta = [&](const std::string& key) { return metadata_value(file, key); };
  check_format(file, source);

  // Sort the file's entries by kind; anything of a kind not registered, or unknown, is an error.
  std::map<std::string, safetensors::NamedTensors> by_kind;
  for (const auto& [key, t] : file.tensors) {
    const size_t dot = key.find('.');
    HG_INPUT_CHECK(dot != std::string::npos && dot > 0 && dot + 1 < key.size(), where, " entry '", key,
                   "' is not named '<kind>.<name>'");
    by_kind[key.substr(0, dot)].emplace_back(key.substr(dot + 1), t);
  }
  const std::map<std::string, bool> registered = {
      {"model", model_ != nullptr},        {"optimizer", optimizer_ != nullptr && !optimizer_->is_sharded()},
      {"scaler", scaler_ != nullptr},      {"counter", !counters_.empty()},
      {"generator", !generators_.empty()}, {"mt19937_64", !engines_.empty()},
      {"extra", !extras_.empty()},        {"optimizers", !named_optimizers_.empty()},
      {"scalers", !named_scalers_.empty()}};
  for (const auto& [kind, entries] : by_kind) {
    const auto it = registered.find(kind);
    HG_INPUT_CHECK(it != registered.end(), where, " entry '", kind, ".", entries.front().first,
                   "' is of unknown kind '", kind, "'");
    HG_INPUT_CHECK(it->second, where, " holds ", kind, " state ('", kind, ".", entries.front().first,
                   "', ...) but this run registers no ", kind, "; the checkpoint holds: ", meta("contents"));
  }
  auto lookup = [&](const std::string& kind) -> std::map<std::string, Tensor> {
    std::map<std::string, Tensor> out;
    for (const auto& [name, t] : by_kind[kind]) out.emplace(name, t);
    return out;
  };
  // One-by-one parts: present, the expected dtype and element count, nothing left over.
  auto take_named = [&](const std::string& kind, const std::vector<std::string>& names, DType dtype,
                        std::vector<int64_t> numels) {
    std::map<std::string, Tensor> present = lookup(kind);
    std::vector<Tensor> out;
    for (size_t i = 0; i < names.size(); ++i) {
      const auto it = present.find(names[i]);
      HG_INPUT_CHECK(it != present.end(), where, " has no '", kind, ".", names[i],
                     "'; the checkpoint holds: ", meta("contents"));
      const Tensor& t = it->second;
      HG_INPUT_CHECK(t.dtype() == dtype && t.dim() == 1 && t.numel() == numels[i], where, " entry '", kind, ".",
                     names[i], "' is ", describe_tensor(t), "; expected ", dtype_name(dtype), "[", numels[i], "]");
      out.push_back(t);
      present.erase(it);
    }
    HG_INPUT_CHECK(present.empty(), where, " entry '", kind, ".", present.empty() ? "" : present.begin()->first,
                   "' is not registered in this run");
    return out;
  };

  // ---- check everything ----
  std::vector<std::pair<Tensor, Tensor>> model_copies;  // (live, saved)
  if (model_) {
    std::map<std::string, Tensor> saved = lookup("model");
    std::vector<std::string> missing;
    for (const auto& [name, live] : model_->state_dict()) {
      const auto it = saved.find(name);
      if (it == saved.end()) {
        missing.push_back(name);
        continue;
      }
      HG_INPUT_CHECK(it->second.shape() == live.shape() && it->second.dtype() == live.dtype(), where, " tensor 'model.",
                     name, "' is ", describe_tensor(it->second), " but the model's is ", describe_tensor(live),
                     "; the checkpoint was written for another model configuration or precision");
      model_copies.emplace_back(live, it->second);
      saved.erase(it);
    }
    std::string names;
    for (size_t i = 0; i < missing.size() && i < 5; ++i) names += (i ? ", " : "") + missing[i];
    HG_INPUT_CHECK(missing.empty(), where, " lacks ", missing.size(), " tensor(s) of the model (", names,
                   missing.size() > 5 ? ", ..." : "", "); the checkpoint was written for another model");
    HG_INPUT_CHECK(saved.empty(), where, " holds 'model.", saved.empty() ? "" : saved.begin()->first, "' (and ",
                   saved.size() > 0 ? saved.size() - 1 : 0,
                   " more) that this model does not have; the checkpoint was written for another model");
  }
  std::optional<optim::LossScaler> scaler;
  if (scaler_) {
    scaler = *scaler_;
    try {
      scaler->load_state_tensors(by_kind["scaler"]);  // checks it all before changing the copy
    } catch (const Error& e) {
      throw Error(where + " scaler state: " + e.what());
    }
  }
  // Named parts: "<name>.<rest>" entries split by name; an entry of a name not registered is refused.
  auto split_named = [&](const std::string& kind, const std::vector<std::string>& registered_names) {
    std::map<std::string, safetensors::NamedTensors> out;
    for (const std::string& name : registered_names) out[name];
    for (const auto& [entry, t] : by_kind[kind]) {
      const size_t dot = entry.find('.');
      const std::string name = entry.substr(0, dot);
      HG_INPUT_CHECK(dot != std::string::npos && out.count(name) > 0, where, " entry '", kind, ".", entry,
                     "' names no ", kind == "scalers" ? "scaler" : "optimizer", " of this run; the checkpoint holds: ",
                     meta("contents"));
      out[name].emplace_back(entry.substr(dot + 1), t);
    }
    return out;
  };
  std::vector<std::string> names;
  for (const auto& [name, _] : named_scalers_) names.push_back(name);
  std::map<std::string, safetensors::NamedTensors> scaler_entries = split_named("scalers", names);
  std::vector<optim::LossScaler> named_scalers;
  for (const auto& [name, live] : named_scalers_) {
    named_scalers.push_back(*live);
    try {
      named_scalers.back().load_state_tensors(scaler_entries[name]);
    } catch (const Error& e) {
      throw Error(where + " scaler '" + name + "' state: " + e.what());
    }
  }
  names.clear();
  for (const auto& [name, _] : named_optimizers_) names.push_back(name);
  std::map<std::string, safetensors::NamedTensors> optimizer_entries = split_named("optimizers", names);
  names.clear();
  for (const auto& [name, _] : counters_) names.push_back(name);
  const std::vector<Tensor> counters = take_named("counter", names, DType::i64, std::vector<int64_t>(names.size(), 1));
  names.clear();
  for (const auto& [name, _] : generators_) names.push_back(name);
  const std::vector<Tensor> generators =
      take_named("generator", names, DType::i64, std::vector<int64_t>(names.size(), 2));
  names.clear();
  for (const auto& [name, _] : engines_) names.push_back(name);
  const std::vector<Tensor> engine_tensors =
      take_named("mt19937_64", names, DType::i64, std::vector<int64_t>(names.size(), int64_t(engine_word_count())));
  std::vector<std::mt19937_64> engines;
  for (size_t i = 0; i < engine_tensors.size(); ++i) {
    std::ostringstream text;
    for (uint64_t w : tensor_words(engine_tensors[i])) text << w << ' ';
    std::mt19937_64 engine;
    std::istringstream in(text.str());
    in >> engine;
    HG_INPUT_CHECK(!in.fail(), where, " entry 'mt19937_64.", engines_[i].first, "' is not a valid mt19937_64 state");
    engines.push_back(engine);
  }
  std::vector<Tensor> extras;
  {
    std::map<std::string, Tensor> present = lookup("extra");
    for (size_t i = 0; i < extras_.size(); ++i) {
      const auto& [name, live] = extras_[i];
      const auto it = present.find(name);
      HG_INPUT_CHECK(it != present.end(), where, " has no 'extra.", name,
                     "'; the checkpoint holds: ", meta("contents"));
      HG_INPUT_CHECK(it->second.shape() == live->shape() && it->second.dtype() == live->dtype(), where,
                     " entry 'extra.", name, "' is ", describe_tensor(it->second), "; expected ",
                     describe_tensor(*live));
      if (extra_checks_[i]) {
        try {
          extra_checks_[i](it->second);
        } catch (const Error& e) {
          throw Error(where + " entry 'extra." + name + "': " + e.what());
        }
      }
      extras.push_back(it->second);
      present.erase(it);
    }
    HG_INPUT_CHECK(present.empty(), where, " entry 'extra.", present.empty() ? "" : present.begin()->first,
                   "' is not registered in this run");
  }

  // ---- apply: the optimizer first (its load checks everything before it changes anything), then
  // the parts that cannot fail any more ----
  // Buffers go to their parameter's device (the file's tensors are on the CPU).
  auto load_optimizer = [&](optim::Optimizer& optimizer, safetensors::NamedTensors entries, const std::string& what) {
    const std::vector<Tensor> params = optimizer.parameters();
    for (auto& [name, t] : entries) {
      size_t index = 0;
      const size_t dot = name.find('.');
      const auto parsed = std::from_chars(name.data(), name.data() + std::min(dot, name.size()), index);
      if (dot != std::string::npos && parsed.ec == std::errc() && index < params.size() &&
          name.substr(dot + 1) != "step")
        t = t.to(params[index].device());
    }
    try {
      optimizer.load_state_tensors(entries);
    } catch (const Error& e) {
      throw Error(where + " " + what + " state: " + e.what());
    }
  };
  if (optimizer_ && !optimizer_->is_sharded()) load_optimizer(*optimizer_, by_kind["optimizer"], "optimizer");
  for (const auto& [name, optimizer] : named_optimizers_)
    load_optimizer(*optimizer, optimizer_entries[name], "optimizer '" + name + "'");
  NoGradGuard no_grad;
  for (const auto& [live, saved] : model_copies) live.copy_(saved);
  if (scaler_) *scaler_ = std::move(*scaler);
  for (size_t i = 0; i < named_scalers_.size(); ++i) *named_scalers_[i].second = std::move(named_scalers[i]);
  for (size_t i = 0; i < counters_.size(); ++i) *counters_[i].second = int64_t(tensor_words(counters[i])[0]);
  for (size_t i = 0; i < generators_.size(); ++i) {
    const std::vector<uint64_t> w = tensor_words(generators[i]);
    generators_[i].second->set_state(GeneratorState{w[0], w[1]});
  }
  for (size_t i = 0; i < engines_.size(); ++i) *engines_[i].second = engines[i];
  for (size_t i = 0; i < extras_.size(); ++i) {
    Tensor copy = empty(extras[i].shape(), extras[i].dtype(), extras_[i].second->device());
    copy.copy_(extras[i]);
    *extras_[i].second = copy;
  }
}

// ---- files -----------------------------------------------------------------------------------------

void save_checkpoint(const std::string& path, const TrainingState& state, int64_t step) {
  safetensors::Metadata metadata = {
      {"format", kFormat}, {"version", kVersion}, {"step", std::to_string(step)}, {"contents", state.describe()}};
  if (!state.run_config().empty()) metadata.emplace("run_config", state.run_config());
  safetensors::save(path, state.tensors(), metadata);
}

std::optional<std::string> checkpoint_run_config(const std::string& path) {
  // Only the header is read (a memory map; no checksum pass): the entry's bytes are verified when it loads.
  const safetensors::File file = safetensors::load(path, safetensors::Verify::structure_only);
  check_format(file, path);
  const auto it = file.metadata.find("run_config");
  if (it == file.metadata.end()) return std::nullopt;
  return it->second;
}

int64_t load_checkpoint(const std::string& path, const TrainingState& state) {
  const safetensors::File file = safetensors::load(path);
  const auto it = file.metadata.find("step");
  int64_t step = -1;
  if (it != file.metadata.end()) {
    const auto parsed = std::from_chars(it->second.data(), it->second.data() + it->second.size(), step);
    if (parsed.ec != std::errc() || parsed.ptr != it->second.data() + it->second.size()) step = -1;
  }
  check_format(file, path);
  HG_INPUT_CHECK(step >= 0, "[load_checkpoint] '", path, "' has no valid 'step' in its metadata");
  state.restore(file, path);
  return step;
}

}  // namespace hg::train
