// The JSON side of the samples' Flags (app/cli.h, RUN CONFIG FILES): a config file applied under
// the command line, the effective settings printed, and a checkpoint's run config restored on
// --resume. Every bad input is a usage error (exit 2) that names the source, the key, what was
// expected and what was found; nlohmann's own message (with its line and column) for malformed JSON.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "app/cli.h"
#include "engine/json_duplicate_key.h"

namespace hg::app {

using Json = nlohmann::ordered_json;  // keeps the file's key order (and declaration order when printing)

struct FlagsJson {
  using Flag = Flags::Flag;

  [[noreturn]] static void fail(const Flags& flags, const std::string& source, const std::string& message) {
    exit_with_usage_error(flags.program_, source + ": " + message);
  }

  // A key or text value as it reads in JSON, quoted and escaped (a newline stays "\n": one line).
  static std::string quoted(const std::string& text) { return FlagsJson::text(Json(text)); }

  // What a JSON value is, for "expected ..., got <this>".
  static std::string describe(const Json& v) {
    switch (v.type()) {
      case Json::value_t::string: {
        // A long string is cut after at most 56 bytes, at a character boundary, then quoted.
        std::string text = v.get<std::string>();
        if (text.size() <= 56) return "the string " + quoted(text);
        size_t cut = 56;
        while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
        text = quoted(text.substr(0, cut));
        return "the string " + text.insert(text.size() - 1, "...");
      }
      case Json::value_t::boolean: return std::string("the boolean ") + (v.get<bool>() ? "true" : "false");
      case Json::value_t::null: return "null";
      case Json::value_t::array: return "an array";
      case Json::value_t::object: return "an object";
      case Json::value_t::number_float: return "the number " + v.dump();
      default: return "the integer " + v.dump();
    }
  }

  static const char* expected(const Flag& f) {
    if (f.kind == "int") return "an integer";
    if (f.kind == "float") return "a number";
    if (f.kind == "text") return "a string";
    return "true or false";
  }

  // Edit distance, for "did you mean".
  static size_t distance(const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t diagonal = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        const size_t above = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
        diagonal = above;
      }
    }
    return row[b.size()];
  }

  static std::string unknown_key(const Flags& flags, const std::string& key) {
    const Flag* nearest = nullptr;
    size_t best = SIZE_MAX;
    for (const Flag& f : flags.flags_) {
      const size_t d = distance(key, f.name);
      if (d < best) best = d, nearest = &f;
    }
    std::string message = "unknown key " + quoted(key);
    if (key == "config" || key == "print-config") return message + " (a config file holds settings, not --" + key + ")";
    if (nearest && best <= std::max<size_t>(2, nearest->name.size() / 3))
      message += "; did you mean \"" + nearest->name + "\"?";
    else
      message += "; expected a flag name of " + flags.program_ + " (see --help)";
    return message;
  }

  static Json parse_object(const Flags& flags, const std::string& text, const std::string& source) {
    TopLevelDuplicateKey duplicates;
    Json parsed;
    try {
      parsed = Json::parse(text, std::ref(duplicates));
    } catch (const Json::exception& e) {  // a parse_error, or out_of_range for a number beyond double
      std::string what = e.what();
      const size_t bracket = what.find("] ");
      if (what.rfind("[json.exception", 0) == 0 && bracket != std::string::npos) what = what.substr(bracket + 2);
      fail(flags, source, "not valid JSON: " + what);
    }
    if (!parsed.is_object())
      fail(flags, source, "expected a JSON object of settings ({\"steps\": 100, ...}), got " + describe(parsed));
    if (duplicates.duplicate) fail(flags, source, "key " + quoted(*duplicates.duplicate) + " appears twice");
    return parsed;
  }

  // Checks `v` against the flag's kind and bounds, then stores it when `assign`.
  static void set(Flags& flags, Flag& f, const Json& v, const std::string& source, bool assign) {
    const std::string key = "key \"" + f.name + "\": ";
    auto wrong_type = [&] { fail(flags, source, key + "expected " + expected(f) + ", got " + describe(v)); };
    if (f.kind == "int") {
      // An integer literal beyond uint64 reads as a float: integral and at least 2^63 in magnitude.
      if (v.is_number_float() && std::isfinite(v.get<double>()) && std::floor(v.get<double>()) == v.get<double>() &&
          std::fabs(v.get<double>()) >= 9223372036854775808.0)
        fail(flags, source, key + "got " + v.dump() + ", out of range for an integer; expected an integer in [" +
                                std::to_string(f.int_min) + ", " + std::to_string(f.int_max) + "]");
      if (!v.is_number_integer()) wrong_type();
      if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
        fail(flags, source, key + "must be <= " + std::to_string(f.int_max) + ", got " + v.dump());
      const int64_t value = v.get<int64_t>();
      if (value < f.int_min) fail(flags, source, key + "must be >= " + std::to_string(f.int_min) + ", got " + v.dump());
      if (value > f.int_max) fail(flags, source, key + "must be <= " + std::to_string(f.int_max) + ", got " + v.dump());
      if (assign) *static_cast<int64_t*>(f.target) = value;
    } else if (f.kind == "float") {
      if (!v.is_number()) wrong_type();
      const double value = v.get<double>();
      if (!std::isfinite(value) || value < f.min || value > f.max) {
        std::ostringstream range;
        range << key << "must be in [" << f.min << ", " << f.max << "], got " << v.dump();
        fail(flags, source, range.str());
      }
      if (assign) *static_cast<double*>(f.target) = value;
    } else if (f.kind == "text") {
      if (!v.is_string()) wrong_type();
      if (assign) *static_cast<std::string*>(f.target) = v.get<std::string>();
    } else {
      if (!v.is_boolean()) wrong_type();
      if (assign) *static_cast<bool*>(f.target) = v.get<bool>();
    }
  }

  static Json value(const Flag& f) {
    if (f.kind == "int") return *static_cast<const int64_t*>(f.target);
    if (f.kind == "float") return *static_cast<const double*>(f.target);
    if (f.kind == "text") return *static_cast<const std::string*>(f.target);
    return *static_cast<const bool*>(f.target);
  }

  static std::string text(const Json& v) { return v.dump(-1, ' ', false, Json::error_handler_t::replace); }

  // Comma-separated file lists naming the same files in order: each pair the same file
  // (std::filesystem::equivalent) where both exist, the same text otherwise.
  static bool same_files(const std::string& stored, const std::string& now) {
    auto split = [](const std::string& list) {
      std::vector<std::string> out;
      for (size_t start = 0; start <= list.size();) {
        const size_t comma = std::min(list.find(',', start), list.size());
        out.push_back(list.substr(start, comma - start));
        start = comma + 1;
      }
      return out;
    };
    const std::vector<std::string> a = split(stored), b = split(now);
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      std::error_code error;
      const bool both_exist = std::filesystem::exists(a[i], error) && std::filesystem::exists(b[i], error);
      if (both_exist ? !std::filesystem::equivalent(a[i], b[i], error) || error : a[i] != b[i]) return false;
    }
    return true;
  }
};

std::string Flags::to_json(const std::vector<std::string>& omit) const {
  Json out = Json::object();
  for (const Flag& f : flags_)
    if (std::find(omit.begin(), omit.end(), f.name) == omit.end()) out[f.name] = FlagsJson::value(f);
  return out.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

void Flags::apply_json(const std::string& text, const std::string& source) {
  const Json object = FlagsJson::parse_object(*this, text, source);
  std::vector<std::pair<Flag*, const Json*>> settings;
  std::vector<std::string> keys;
  for (const auto& [key, v] : object.items()) {
    Flag* flag = find(key);
    if (flag == nullptr) FlagsJson::fail(*this, source, FlagsJson::unknown_key(*this, key));
    for (size_t i = 0; i < settings.size(); ++i)
      if (settings[i].first == flag)  // a flag's name and its former name (rename)
        FlagsJson::fail(*this, source,
                        "keys " + FlagsJson::quoted(keys[i]) + " and " + FlagsJson::quoted(key) +
                            " set the same flag (one is its former name); expected one of them");
    FlagsJson::set(*this, *flag, v, source, false);  // every key checked, also those the command line overrides
    settings.emplace_back(flag, &v);
    keys.push_back(key);
  }
  for (const auto& [flag, v] : settings) {
    if (flag->given) continue;
    FlagsJson::set(*this, *flag, *v, source, true);
    flag->given = true;
  }
}

std::string Flags::run_config(const ResumeRules& rules) const { return to_json(rules.per_invocation); }

void Flags::restore(const std::string& text, const std::string& source, const ResumeRules& rules) {
  for (const auto* list : {&rules.fixed, &rules.per_invocation, &rules.paths})
    for (const std::string& name : *list)
      HG_CHECK(find(name) != nullptr, "[Flags] ResumeRules name '", name, "', which is not a flag of ", program_);
  for (const std::string& name : rules.paths)
    HG_CHECK(find(name)->kind == "text", "[Flags] ResumeRules paths name '", name, "', which is not a text flag");
  auto listed = [](const std::vector<std::string>& list, const std::string& name) {
    return std::find(list.begin(), list.end(), name) != list.end();
  };
  const Json object = FlagsJson::parse_object(*this, text, source);
  for (const auto& [key, v] : object.items()) {
    Flag* flag = find(key);
    if (flag == nullptr) {  // a setting this build no longer has: nothing to restore it into
      std::fprintf(stderr, "%s: warning: run config of %s: ignoring unknown key %s\n", program_.c_str(),
                   source.c_str(), FlagsJson::quoted(key).c_str());
      continue;
    }
    const std::string& name = flag->name;  // an older run config may hold a flag's former name (rename)
    if (listed(rules.per_invocation, name)) continue;
    if (!flag->given) {
      FlagsJson::set(*this, *flag, v, source, true);
      flag->given = true;
      continue;
    }
    if (!listed(rules.fixed, name)) continue;  // given now, may change: the stored value is not used
    FlagsJson::set(*this, *flag, v, source, false);
    const Json now = FlagsJson::value(*flag);
    bool same = flag->kind == "float" ? now.get<double>() == v.get<double>() : now == v;
    const bool as_files = listed(rules.paths, name);
    if (as_files && !same) same = FlagsJson::same_files(v.get<std::string>(), now.get<std::string>());
    if (!same)
      exit_with_usage_error(program_, "--resume: \"" + name + "\" is " + FlagsJson::text(v) +
                                          " in the checkpoint's run config, " + FlagsJson::text(now) + " now" +
                                          (as_files ? " (compared file by file: the same file where both exist, "
                                                      "the same text otherwise)"
                                                    : "") +
                                          "; it cannot change mid-run");
  }
}

}  // namespace hg::app
