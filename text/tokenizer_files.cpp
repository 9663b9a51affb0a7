// The tokenizer's files (text/tokenizer.h): Hugging Face's tokenizer.json and GPT-2's vocab.json +
// merges.txt, read with every error naming the file and the line or JSON key, written atomically
// (a temporary file beside the target, then rename()).
//   tokenizer.json: only what halfgrad encodes exactly as `tokenizers` does is accepted -- a BPE model
//   without dropout, subword prefixes/suffixes or ignore_merges, the ByteLevel pre-tokenizer with
//   add_prefix_space false and use_regex true, no normalizer, no truncation or padding, a ByteLevel
//   (or no) decoder and post-processor, added tokens without lstrip/rstrip/single_word. Every added
//   token (special or not) is cut out of the text before pre-tokenisation, as `tokenizers` does, and is
//   a special token here (its "special" flag kept and written back as read). `tokenizers` cuts out the
//   "normalized": false added tokens first and the "normalized": true ones in what remains; halfgrad cuts
//   all of them in one leftmost-longest pass, so a file whose tokens of the two kinds can overlap (one
//   contains the other, or one ends with the other's start) is refused: there the passes could differ.
//   vocab.json + merges.txt: "#version" lines and blank lines of merges.txt are skipped; the special
//   tokens are the vocabulary entries spelled "<|...|>" that no merge produces (GPT-2's "<|endoftext|>").
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <unordered_map>

#include "kernels/error.h"
#include "text/byte_alphabet.h"
#include "text/tokenizer_impl.h"
#include "text/utf8.h"

namespace hg::text {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

template <class... Parts>
[[noreturn]] void fail(const std::string& file, const Parts&... parts) {
  throw Error(detail::concat("tokenizer: ", file, ": ", parts...));
}

// The largest tokenizer file read (GPT-2's tokenizer.json is 1.4 MB; the biggest published ones ~30 MB).
constexpr uint64_t kMaxTokenizerFileBytes = uint64_t(1) << 30;

// Reads a whole regular file. Opened with O_NONBLOCK and checked with fstat before any read, so a FIFO
// (no writer: open would block) or a device (/dev/zero: endless) is refused, not waited on or read to OOM.
std::string read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) fail(path, "cannot open it: ", std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info {};
  if (::fstat(fd, &info) != 0) fail(path, "cannot stat it: ", std::strerror(errno));
  if (!S_ISREG(info.st_mode)) fail(path, "not a regular file; expected a tokenizer file (JSON or merges text)");
  if (uint64_t(info.st_size) > kMaxTokenizerFileBytes)
    fail(path, "the file is ", uint64_t(info.st_size), " bytes; expected at most ", kMaxTokenizerFileBytes,
         " (1 GiB) for a tokenizer file");
  std::string bytes(size_t(info.st_size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail(path, "cannot read it: ", std::strerror(errno));
    if (got == 0) break;  // shrank while being read: parse what is there (it fails or is whole)
    done += size_t(got);
  }
  bytes.resize(done);
  return bytes;
}

void write_file_atomically(const std::string& path, const std::string& bytes) {
  const std::string temp = path + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out) fail(path, "cannot create the temporary file ", temp, ": ", std::strerror(errno));
    out.write(bytes.data(), std::streamsize(bytes.size()));
    out.flush();
    if (!out) {
      const std::string why = std::strerror(errno);
      std::remove(temp.c_str());
      fail(path, "cannot write ", bytes.size(), " bytes to ", temp, ": ", why);
    }
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(temp.c_str());
    fail(path, "cannot rename ", temp, " to it: ", why);
  }
}

// Parses JSON, refusing duplicate keys and nesting deeper than 64 (files of this kind are 3 deep).
Json parse_json(const std::string& file, const std::string& text) {
  std::vector<std::set<std::string>> open;  // keys seen in each object being parsed
  std::string duplicate;
  auto callback = [&](int depth, nlohmann::detail::parse_event_t event, Json& parsed) {
    using Event = nlohmann::detail::parse_event_t;
    if (depth > 64) fail(file, "JSON nested deeper than 64 levels (expected a tokenizer file, 3 levels deep)");
    if (event == Event::object_start) {
      open.emplace_back();
    } else if (event == Event::object_end) {
      if (!open.empty()) open.pop_back();
    } else if (event == Event::key && !open.empty()) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!open.back().insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  Json j;
  try {
    j = Json::parse(text, callback, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const Json::exception& e) {
    fail(file, "not valid UTF-8 JSON: ", e.what());
  }
  if (!duplicate.empty()) fail(file, "the key ", Json(duplicate).dump(), " appears twice in one object");
  return j;
}

std::string type_of(const Json& v) { return v.type_name(); }

// A vocabulary being assembled: bytes by id, with the file's key for each (for messages). Ids run
// below the number of entries + kMaxIdHoles, so a file cannot make us allocate more than that.
struct VocabBuilder {
  std::string file;
  size_t entries = 0;  // how many the file lists
  std::vector<std::optional<std::string>> tokens;
  std::vector<std::string> keys;

  void add(uint64_t id, std::string bytes, const std::string& key) {
    if (id >= tokens.size()) {
      if (id >= entries + kMaxIdHoles)
        fail(file, key, ": id ", id, " is too large (the file has ", entries, " tokens, and at most ", kMaxIdHoles,
             " ids below the largest may be unused)");
      tokens.resize(id + 1);
      keys.resize(id + 1);
    }
    if (tokens[id]) {
      if (*tokens[id] == bytes) return;
      fail(file, key, ": id ", id, " is already the id of ", keys[id], " (expected each id once)");
    }
    tokens[id] = std::move(bytes);
    keys[id] = key;
  }
};

uint64_t read_id(const std::string& file, const std::string& key, const Json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return uint64_t(v.get<int64_t>());
  fail(file, key, ": the id is ", v.dump(), " (", type_of(v), "); expected a non-negative integer");
}

std::string spelled(const std::string& file, const std::string& key, const std::string& spelling) {
  std::optional<std::string> bytes = spelling_to_bytes(spelling);
  if (!bytes)
    fail(file, key, ": the token ", Json(spelling).dump(),
         " is not spelled in GPT-2's byte alphabet (expected a byte-level BPE vocabulary)");
  if (bytes->empty()) fail(file, key, ": the token is empty (expected at least one byte)");
  return *bytes;
}

// Checks a merge's parts and result against the vocabulary (bytes -> id) and records it.
void add_merge(const std::string& file, const std::string& where, const std::unordered_map<std::string, uint32_t>& vocab,
               const std::string& left_spelling, const std::string& right_spelling,
               std::vector<std::pair<std::string, std::string>>& merges, std::set<std::pair<std::string, std::string>>& seen) {
  std::string left = spelled(file, where, left_spelling), right = spelled(file, where, right_spelling);
  if (!vocab.count(left)) fail(file, where, ": the merge's left part ", Json(left_spelling).dump(), " is not in the vocabulary");
  if (!vocab.count(right))
    fail(file, where, ": the merge's right part ", Json(right_spelling).dump(), " is not in the vocabulary");
  if (!vocab.count(left + right))
    fail(file, where, ": the merged token ", Json(left_spelling + right_spelling).dump(), " is not in the vocabulary");
  if (!seen.emplace(left, right).second)
    fail(file, where, ": the merge ", Json(left_spelling + " " + right_spelling).dump(), " appears twice");
  merges.emplace_back(std::move(left), std::move(right));
}

// Whether occurrences of a and b can overlap in a text: one contains the other, or a proper suffix of
// one is a prefix of the other.
bool can_overlap(const std::string& a, const std::string& b) {
  if (a.find(b) != std::string::npos || b.find(a) != std::string::npos) return true;
  for (const auto& [x, y] : {std::pair(&a, &b), std::pair(&b, &a)})
    for (size_t n = 1; n < std::min(x->size(), y->size()); ++n)
      if (x->compare(x->size() - n, n, *y, 0, n) == 0) return true;
  return false;
}

std::unordered_map<std::string, uint32_t> index_of(const VocabBuilder& v) {
  std::unordered_map<std::string, uint32_t> index;
  for (size_t id = 0; id < v.tokens.size(); ++id)
    if (v.tokens[id]) index.emplace(*v.tokens[id], uint32_t(id));
  return index;
}

Tokenizer::Impl* build_in(const std::string& file, std::vector<std::optional<std::string>> tokens,
                          const std::vector<std::pair<std::string, std::string>>& merges, std::vector<SpecialToken> specials,
                          std::unique_ptr<Tokenizer::Impl>& out) {
  try {
    out = build_tokenizer(std::move(tokens), merges, std::move(specials));
  } catch (const Error& e) {
    // build_tokenizer's HG_CHECK message, as one line about the file: without its own "tokenizer: "
    // prefix and without the " [source.cpp:line]" location HG_CHECK appends.
    std::string_view what = e.what();
    if (what.starts_with("tokenizer: ")) what.remove_prefix(11);
    if (const size_t at = what.rfind(" ["); at != std::string_view::npos && what.ends_with("]") &&
                                            what.substr(at).find(".cpp:") != std::string_view::npos)
      what = what.substr(0, at);
    fail(file, what);
  }
  return out.get();
}

// ---- tokenizer.json ------------------------------------------------------------------------------

bool is_null_or_absent(const Json& obj, const char* key) { return !obj.contains(key) || obj[key].is_null(); }

void require_flag(const std::string& file, const Json& obj, const std::string& path, const char* key, bool expected,
                  bool default_value, const char* why) {
  bool value = default_value;
  if (obj.contains(key)) {
    if (!obj[key].is_boolean()) fail(file, "key \"", path, ".", key, "\" is ", type_of(obj[key]), "; expected a boolean");
    value = obj[key].get<bool>();
  }
  if (value != expected)
    fail(file, "key \"", path, ".", key, "\" is ", value ? "true" : "false", (obj.contains(key) ? "" : " (by default)"),
         "; halfgrad supports only ", expected ? "true" : "false", " (", why, ")");
}

void check_byte_level(const std::string& file, const Json& j, const char* key, bool required) {
  if (is_null_or_absent(j, key)) {
    if (required) fail(file, "key \"", key, "\" is missing; expected {\"type\": \"ByteLevel\", ...}");
    return;
  }
  const Json& v = j[key];
  if (!v.is_object() || !v.contains("type") || v["type"] != "ByteLevel")
    fail(file, "key \"", key, "\" is ", v.dump().substr(0, 120), "; halfgrad supports only the ByteLevel ", key,
         required ? "" : " (or null)");
}

std::unique_ptr<Tokenizer::Impl> read_tokenizer_json(const std::string& file) {
  const Json j = parse_json(file, read_file(file));
  if (!j.is_object()) fail(file, "the file is a JSON ", type_of(j), "; expected an object (tokenizer.json)");
  for (const char* key : {"truncation", "padding"}) {
    if (!is_null_or_absent(j, key))
      fail(file, "key \"", key, "\" is set; halfgrad's encode neither truncates nor pads (expected null)");
  }
  if (!is_null_or_absent(j, "normalizer"))
    fail(file, "key \"normalizer\" is ", j["normalizer"].dump().substr(0, 120),
         "; a normalizer changes the text before encoding and halfgrad applies none (expected null)");
  check_byte_level(file, j, "pre_tokenizer", true);
  require_flag(file, j["pre_tokenizer"], "pre_tokenizer", "add_prefix_space", false, true,
               "encode does not insert a space before the text");
  require_flag(file, j["pre_tokenizer"], "pre_tokenizer", "use_regex", true, true, "encode splits with GPT-2's pattern");
  check_byte_level(file, j, "decoder", false);
  check_byte_level(file, j, "post_processor", false);

  if (!j.contains("model") || !j["model"].is_object())
    fail(file, "key \"model\" is ", j.contains("model") ? type_of(j["model"]) : "missing", "; expected a BPE model object");
  const Json& model = j["model"];
  if (model.contains("type") && model["type"] != "BPE")
    fail(file, "key \"model.type\" is ", model["type"].dump(), "; halfgrad supports only \"BPE\"");
  if (!is_null_or_absent(model, "dropout") &&
      !(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0))
    fail(file, "key \"model.dropout\" is ", model["dropout"].dump(),
         "; BPE dropout makes encoding random and halfgrad has none (expected null)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!is_null_or_absent(model, key) && !(model[key].is_string() && model[key].get<std::string>().empty()))
      fail(file, "key \"model.", key, "\" is ", model[key].dump(), "; byte-level BPE has none (expected null)");
  }
  require_flag(file, model, "model", "ignore_merges", false, false, "every piece goes through the merges");
  if (!model.contains("vocab") || !model["vocab"].is_object())
    fail(file, "key \"model.vocab\" is ", model.contains("vocab") ? type_of(model["vocab"]) : "missing",
         "; expected an object of token -> id");
  if (!model.contains("merges") || !model["merges"].is_array())
    fail(file, "key \"model.merges\" is ", model.contains("merges") ? type_of(model["merges"]) : "missing",
         "; expected an array of merges");

  // Added tokens first: their vocabulary keys are their raw content, not byte-alphabet spellings.
  std::vector<SpecialToken> specials;
  std::vector<bool> normalized_flags;  // of each of `specials`
  std::map<std::string, uint32_t> added;
  if (!is_null_or_absent(j, "added_tokens")) {
    if (!j["added_tokens"].is_array()) fail(file, "key \"added_tokens\" is ", type_of(j["added_tokens"]), "; expected an array");
    const Json& list = j["added_tokens"];
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string path = "added_tokens[" + std::to_string(i) + "]";
      const Json& a = list[i];
      if (!a.is_object()) fail(file, "key \"", path, "\" is ", type_of(a), "; expected an object");
      if (!a.contains("content") || !a["content"].is_string())
        fail(file, "key \"", path, ".content\" is missing or not a string");
      if (!a.contains("id")) fail(file, "key \"", path, ".id\" is missing");
      const uint64_t id = read_id(file, "key \"" + path + ".id\"", a["id"]);
      if (id >= 0xFFFFFFFFull) fail(file, "key \"", path, ".id\": ", id, " does not fit in 32 bits");
      for (const char* flag : {"single_word", "lstrip", "rstrip"})
        require_flag(file, a, path, flag, false, false, "added tokens match their exact content");
      const std::string content = a["content"].get<std::string>();
      if (content.empty()) fail(file, "key \"", path, ".content\" is empty; expected the token's text");
      if (!added.emplace(content, uint32_t(id)).second)
        fail(file, "key \"", path, ".content\": ", Json(content).dump(), " is listed twice");
      const bool special = a.contains("special") && a["special"].is_boolean() && a["special"].get<bool>();
      // `tokenizers`' default: an added token is normalized unless it is special.
      const bool normalized =
          a.contains("normalized") && a["normalized"].is_boolean() ? a["normalized"].get<bool>() : !special;
      for (size_t k = 0; k < specials.size(); ++k)
        if (normalized_flags[k] != normalized && can_overlap(specials[k].content, content))
          fail(file, "key \"", path, "\": the added token ", Json(content).dump(), " (\"normalized\": ",
               normalized ? "true" : "false", ") can overlap ", Json(specials[k].content).dump(), " (\"normalized\": ",
               normalized_flags[k] ? "true" : "false",
               "); expected added tokens that overlap to share one \"normalized\" flag (tokenizers cuts the two "
               "kinds in two passes, halfgrad in one)");
      specials.push_back({content, uint32_t(id), special});
      normalized_flags.push_back(normalized);
    }
  }

  VocabBuilder vocab{file, model["vocab"].size() + specials.size(), {}, {}};
  for (const auto& [spelling, value] : model["vocab"].items()) {
    const std::string key = "key \"model.vocab\" entry " + Json(spelling).dump();
    const uint64_t id = read_id(file, key, value);
    const auto special = added.find(spelling);
    if (special != added.end()) {
      if (special->second != id)
        fail(file, key, ": id ", id, " differs from the added token's id ", special->second);
      vocab.add(id, spelling, key);
    } else {
      vocab.add(id, spelled(file, key, spelling), key);
    }
  }
  for (const SpecialToken& s : specials) vocab.add(s.id, s.content, "key \"added_tokens\" entry " + Json(s.content).dump());

  const auto index = index_of(vocab);
  std::vector<std::pair<std::string, std::string>> merges;
  std::set<std::pair<std::string, std::string>> seen;
  const Json& list = model["merges"];
  merges.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = "key \"model.merges[" + std::to_string(i) + "]\"";
    const Json& m = list[i];
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == s.size() || s.find(' ', space + 1) != std::string::npos)
        fail(file, where, " is ", m.dump(), "; expected two tokens separated by one space");
      add_merge(file, where, index, s.substr(0, space), s.substr(space + 1), merges, seen);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      add_merge(file, where, index, m[0].get<std::string>(), m[1].get<std::string>(), merges, seen);
    } else {
      fail(file, where, " is ", m.dump().substr(0, 120), "; expected \"a b\" or [\"a\", \"b\"]");
    }
  }
  std::unique_ptr<Tokenizer::Impl> impl;
  build_in(file, std::move(vocab.tokens), merges, std::move(specials), impl);
  return impl;
}

// ---- vocab.json + merges.txt -----------------------------------------------------------------------

// Special tokens of a vocab.json: entries spelled "<|...|>" that are no single byte and no merge's result.
bool looks_special(const std::string& bytes) {
  return bytes.size() > 4 && bytes.compare(0, 2, "<|") == 0 && bytes.compare(bytes.size() - 2, 2, "|>") == 0;
}

std::unique_ptr<Tokenizer::Impl> read_vocab_merges(const std::string& vocab_file, const std::string& merges_file) {
  const Json j = parse_json(vocab_file, read_file(vocab_file));
  if (!j.is_object()) fail(vocab_file, "the file is a JSON ", type_of(j), "; expected an object of token -> id");
  VocabBuilder vocab{vocab_file, j.size(), {}, {}};
  for (const auto& [spelling, value] : j.items()) {
    const std::string key = "key " + Json(spelling).dump();
    const std::string bytes = spelled(vocab_file, key, spelling);
    vocab.add(read_id(vocab_file, key, value), bytes, key);
  }
  const auto index = index_of(vocab);

  const std::string text = read_file(merges_file);
  std::vector<std::pair<std::string, std::string>> merges;
  std::set<std::pair<std::string, std::string>> seen;
  size_t line_no = 0;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + begin, end - begin);
    begin = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const std::string where = merges_file + ":" + std::to_string(line_no);
    size_t bad = 0;
    if (!is_valid_utf8(line, &bad))
      throw Error(detail::concat("tokenizer: ", where, ": byte ", bad + 1, " is not valid UTF-8 (expected UTF-8 text)"));
    if (line.empty() || line.starts_with("#version")) continue;
    const size_t space = line.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string::npos)
      throw Error(detail::concat("tokenizer: ", where, ": ", Json(std::string(line)).dump().substr(0, 120),
                                 " is not a merge (expected two tokens separated by one space)"));
    add_merge(merges_file, "line " + std::to_string(line_no), index, std::string(line.substr(0, space)),
              std::string(line.substr(space + 1)), merges, seen);
  }
  std::set<std::string> produced;
  for (const auto& [l, r] : merges) produced.insert(l + r);
  std::vector<SpecialToken> specials;
  for (size_t id = 0; id < vocab.tokens.size(); ++id) {
    if (vocab.tokens[id] && looks_special(*vocab.tokens[id]) && !produced.count(*vocab.tokens[id]))
      specials.push_back({*vocab.tokens[id], uint32_t(id)});
  }
  std::unique_ptr<Tokenizer::Impl> impl;
  build_in(vocab_file + " + " + merges_file, std::move(vocab.tokens), merges, std::move(specials), impl);
  return impl;
}

// ---- writing -------------------------------------------------------------------------------------

std::string json_string(const std::string& file, const std::string& s) {
  if (!is_valid_utf8(s)) fail(file, "cannot write the special token ", quote_bytes(s), ": it is not valid UTF-8");
  return Json(s).dump();
}

bool is_special(const Tokenizer::Impl& t, uint32_t id) {
  for (const SpecialToken& s : t.specials)
    if (s.id == id) return true;
  return false;
}

std::string spelling_of(const Tokenizer::Impl& t, uint32_t id) { return bytes_to_spelling(t.tokens[id]); }

}  // namespace

Tokenizer Tokenizer::load_vocab_merges(const std::string& vocab_json, const std::string& merges_txt) {
  Tokenizer t;
  t.impl_ = read_vocab_merges(vocab_json, merges_txt);
  return t;
}

Tokenizer Tokenizer::load(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  Tokenizer t;
  if (fs::is_directory(p, ec)) {
    if (fs::exists(p / "tokenizer.json", ec)) {
      t.impl_ = read_tokenizer_json((p / "tokenizer.json").string());
    } else if (fs::exists(p / "vocab.json", ec) && fs::exists(p / "merges.txt", ec)) {
      t.impl_ = read_vocab_merges((p / "vocab.json").string(), (p / "merges.txt").string());
    } else {
      fail(path, "the directory holds neither tokenizer.json nor vocab.json + merges.txt");
    }
    return t;
  }
  if (!fs::exists(p, ec)) fail(path, "no such file or directory");
  const std::string name = p.filename().string();
  const auto ends_with = [&](const std::string& suffix) { return name.size() >= suffix.size() && name.ends_with(suffix); };
  if (ends_with("vocab.json") || ends_with("merges.txt")) {
    const bool is_vocab = ends_with("vocab.json");
    const std::string stem = name.substr(0, name.size() - 10);
    const fs::path other = p.parent_path() / (stem + (is_vocab ? "merges.txt" : "vocab.json"));
    if (!fs::exists(other, ec))
      fail(path, "the ", is_vocab ? "merges.txt" : "vocab.json", " that goes with it (", other.string(), ") does not exist");
    t.impl_ = is_vocab ? read_vocab_merges(path, other.string()) : read_vocab_merges(other.string(), path);
    return t;
  }
  t.impl_ = read_tokenizer_json(path);
  return t;
}

void Tokenizer::save_json(const std::string& path) const {
  HG_CHECK(impl_ != nullptr, "tokenizer: save_json(", path, "): this Tokenizer is empty");
  const Impl& t = *impl_;
  std::string out = "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [";
  for (size_t i = 0; i < t.specials.size(); ++i) {
    out += i ? ",\n    " : "\n    ";
    out += "{\"id\": " + std::to_string(t.specials[i].id) + ", \"content\": " + json_string(path, t.specials[i].content) +
           ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": " +
           (t.specials[i].special ? "true" : "false") + "}";
  }
  out += t.specials.empty() ? "],\n" : "\n  ],\n";
  out +=
      "  \"normalizer\": null,\n"
      "  \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true},\n"
      "  \"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": false, \"use_regex\": true},\n"
      "  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true},\n"
      "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n"
      "    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n    \"fuse_unk\": false,\n"
      "    \"byte_fallback\": false,\n    \"vocab\": {";
  std::set<std::string> keys;
  bool first = true;
  for (uint32_t id = 0; id < t.tokens.size(); ++id) {
    if (!t.present[id]) continue;
    const std::string key = is_special(t, id) ? json_string(path, t.tokens[id]) : Json(spelling_of(t, id)).dump();
    if (!keys.insert(key).second)
      fail(path, "cannot write the vocabulary: the special token id ", id, " is spelled ", key, " like another token");
    out += first ? "\n      " : ",\n      ";
    first = false;
    out += key + ": " + std::to_string(id);
  }
  out += "\n    },\n    \"merges\": [";
  for (size_t r = 0; r < t.merge_pairs.size(); ++r) {
    out += r ? ",\n      " : "\n      ";
    out += Json(spelling_of(t, t.merge_pairs[r].first) + " " + spelling_of(t, t.merge_pairs[r].second)).dump();
  }
  out += t.merge_pairs.empty() ? "]\n  }\n}\n" : "\n    ]\n  }\n}\n";
  write_file_atomically(path, out);
}

void Tokenizer::save_vocab_merges(const std::string& vocab_json, const std::string& merges_txt) const {
  HG_CHECK(impl_ != nullptr, "tokenizer: save_vocab_merges(", vocab_json, "): this Tokenizer is empty");
  const Impl& t = *impl_;
  for (const SpecialToken& s : t.specials) {
    if (!looks_special(s.content))
      fail(vocab_json, "cannot write the special token ", quote_bytes(s.content),
           ": vocab.json marks special tokens only by the spelling <|...|> (use tokenizer.json)");
  }
  std::string vocab = "{";
  bool first = true;
  for (uint32_t id = 0; id < t.tokens.size(); ++id) {
    if (!t.present[id]) continue;
    vocab += first ? "" : ", ";
    first = false;
    vocab += Json(spelling_of(t, id)).dump() + ": " + std::to_string(id);
  }
  vocab += "}\n";
  std::string merges = "#version: 0.2\n";
  for (const auto& [l, r] : t.merge_pairs) merges += spelling_of(t, l) + " " + spelling_of(t, r) + "\n";
  write_file_atomically(vocab_json, vocab);
  write_file_atomically(merges_txt, merges);
}

}  // namespace hg::text
