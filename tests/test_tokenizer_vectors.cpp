// Exactness against Hugging Face `tokenizers` (the vectors under tests/data/text/, made once by
// scripts/make-tokenizer-vectors -- this test needs no Python):
//   - encode: halfgrad's encode of every test string equals the ids `tokenizers` gave, with the
//     tokenizer loaded from HF's tokenizer.json and from its vocab.json + merges.txt, and decode gives
//     the string back;
//   - training: train_bpe on the committed corpus (vocabulary 2000, min_frequency 2, <|endoftext|>)
//     learns exactly HF's vocabulary (every id's bytes) and merge list (every rank), and so encodes
//     every vector the same; the small corner-case trainings of train_cases.jsonl match too.
#include <doctest/doctest.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "support/temp_dir.h"
#include "text/byte_alphabet.h"
#include "text/tokenizer.h"

using hg::text::Tokenizer;
using nlohmann::json;

namespace {

const std::string kData = HG_TEXT_TEST_DATA;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot read ", path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct Vector {
  std::string text;
  std::vector<uint32_t> ids;
};

// vectors.jsonl: a header line naming the generator and the tokenizers version, then the vectors.
std::vector<Vector> load_vectors() {
  std::istringstream lines(read_file(kData + "/vectors.jsonl"));
  std::string line;
  REQUIRE(std::getline(lines, line));
  const json header = json::parse(line);
  REQUIRE(header.contains("tokenizers"));
  MESSAGE("vectors made by tokenizers ", header["tokenizers"].get<std::string>());
  std::vector<Vector> vectors;
  while (std::getline(lines, line)) {
    const json v = json::parse(line);
    vectors.push_back({v.at("text").get<std::string>(), v.at("ids").get<std::vector<uint32_t>>()});
  }
  return vectors;
}

// Every vector encodes to its ids and decodes back; returns how many matched.
size_t check_vectors(const Tokenizer& tok, const std::vector<Vector>& vectors) {
  size_t matched = 0;
  for (size_t i = 0; i < vectors.size(); ++i) {
    const Vector& v = vectors[i];
    const std::vector<uint32_t> ids = tok.encode(v.text);
    INFO("vector ", i + 2, " of vectors.jsonl: ", json(v.text).dump());
    CHECK(ids == v.ids);
    CHECK(tok.decode(ids) == v.text);
    matched += ids == v.ids;
  }
  return matched;
}

// merges.txt's merges as (left, right) spellings in rank order ("#version" lines skipped).
std::vector<std::pair<std::string, std::string>> read_merges(const std::string& path) {
  std::istringstream lines(read_file(path));
  std::vector<std::pair<std::string, std::string>> merges;
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("#version", 0) == 0 || line.empty()) continue;
    const size_t space = line.find(' ');
    REQUIRE_MESSAGE(space != std::string::npos, path, ": ", line);
    merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  return merges;
}

// The vocabulary as token spellings by id (what vocab.json / tokenizer.json hold).
std::vector<std::string> spellings(const Tokenizer& tok) {
  std::vector<std::string> out;
  for (uint32_t id = 0; id < tok.vocab_size(); ++id) {
    bool special = false;
    for (const auto& s : tok.special_tokens()) special |= s.id == id;
    out.push_back(special ? tok.token_bytes(id) : hg::text::bytes_to_spelling(tok.token_bytes(id)));
  }
  return out;
}

// `tok`'s merge list, spelled, read back from the tokenizer.json it saves ("a b" strings or [a, b]).
std::vector<std::pair<std::string, std::string>> merges_of(const Tokenizer& tok) {
  hg::test::TempDir dir;
  const std::string path = (dir.path / "tokenizer.json").string();
  tok.save_json(path);
  const json saved = json::parse(read_file(path));
  std::vector<std::pair<std::string, std::string>> merges;
  for (const json& m : saved.at("model").at("merges")) {
    if (m.is_array()) {
      merges.emplace_back(m.at(0).get<std::string>(), m.at(1).get<std::string>());
    } else {
      const std::string text = m.get<std::string>();
      const size_t space = text.find(' ');
      REQUIRE(space != std::string::npos);
      merges.emplace_back(text.substr(0, space), text.substr(space + 1));
    }
  }
  return merges;
}

void check_same_model(const Tokenizer& ours, const std::vector<std::string>& vocab,
                      const std::vector<std::pair<std::string, std::string>>& merges) {
  const std::vector<std::string> got = spellings(ours);
  CHECK(got.size() == vocab.size());
  size_t first_diff = 0;
  while (first_diff < std::min(got.size(), vocab.size()) && got[first_diff] == vocab[first_diff]) ++first_diff;
  INFO("first differing id ", first_diff);
  CHECK(got == vocab);
  const auto got_merges = merges_of(ours);
  CHECK(ours.merges() == merges.size());
  size_t first_merge_diff = 0;
  while (first_merge_diff < std::min(got_merges.size(), merges.size()) &&
         got_merges[first_merge_diff] == merges[first_merge_diff])
    ++first_merge_diff;
  INFO("first differing rank ", first_merge_diff);
  CHECK(got_merges == merges);
}

std::vector<std::string> hf_vocab_by_id() {
  const json vocab = json::parse(read_file(kData + "/hf_vocab.json"));
  std::vector<std::string> by_id(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    REQUIRE(id.get<size_t>() < by_id.size());
    by_id[id.get<size_t>()] = token;
  }
  return by_id;
}

}  // namespace

TEST_CASE("tokenizer vectors: encode equals Hugging Face's ids (tokenizer.json)") {
  const auto vectors = load_vectors();
  REQUIRE(vectors.size() >= 200);
  const Tokenizer tok = Tokenizer::load(kData + "/hf_tokenizer.json");
  CHECK(tok.vocab_size() == 2000);
  REQUIRE(tok.end_of_text().has_value());
  CHECK(*tok.end_of_text() == 0);
  CHECK(check_vectors(tok, vectors) == vectors.size());
}

TEST_CASE("tokenizer vectors: encode equals Hugging Face's ids (vocab.json + merges.txt)") {
  const auto vectors = load_vectors();
  const Tokenizer tok = Tokenizer::load_vocab_merges(kData + "/hf_vocab.json", kData + "/hf_merges.txt");
  CHECK(tok.vocab_size() == 2000);
  CHECK(tok.merges() == 1743);
  CHECK(check_vectors(tok, vectors) == vectors.size());
}

TEST_CASE("tokenizer vectors: the two HF files describe one model") {
  const Tokenizer from_json = Tokenizer::load(kData + "/hf_tokenizer.json");
  check_same_model(from_json, hf_vocab_by_id(), read_merges(kData + "/hf_merges.txt"));
}

TEST_CASE("train_bpe on the corpus learns Hugging Face's vocabulary and merges") {
  const std::string corpus = read_file(kData + "/corpus.txt");
  REQUIRE(corpus.size() > 200'000);
  hg::text::BpeTrainerOptions options;
  options.vocab_size = 2000;
  options.min_frequency = 2;
  options.special_tokens = {"<|endoftext|>"};
  const Tokenizer ours = hg::text::train_bpe(corpus, options);
  check_same_model(ours, hf_vocab_by_id(), read_merges(kData + "/hf_merges.txt"));
  const auto vectors = load_vectors();
  CHECK(check_vectors(ours, vectors) == vectors.size());
}

TEST_CASE("train_bpe matches Hugging Face on the corner cases of train_cases.jsonl") {
  std::istringstream lines(read_file(kData + "/train_cases.jsonl"));
  std::string line;
  REQUIRE(std::getline(lines, line));  // the header
  int cases = 0;
  while (std::getline(lines, line)) {
    const json c = json::parse(line);
    hg::text::BpeTrainerOptions options;
    options.vocab_size = c.at("vocab_size").get<uint32_t>();
    options.min_frequency = c.at("min_frequency").get<uint64_t>();
    options.special_tokens = c.at("special_tokens").get<std::vector<std::string>>();
    std::vector<std::pair<std::string, std::string>> merges;
    for (const json& m : c.at("merges")) merges.emplace_back(m.at(0).get<std::string>(), m.at(1).get<std::string>());
    INFO("case \"", c.at("name").get<std::string>(), "\"");
    const Tokenizer ours = hg::text::train_bpe(c.at("corpus").get<std::string>(), options);
    check_same_model(ours, c.at("vocab").get<std::vector<std::string>>(), merges);
    ++cases;
  }
  CHECK(cases >= 6);
}
