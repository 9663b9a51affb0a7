// The byte-level BPE tokenizer (text/): GPT-2's pre-tokenisation on hand-written cases (contractions,
// whitespace runs, numbers, letters of several scripts, marks, emoji, invalid UTF-8), the byte
// alphabet, BPE against a naive reference (lowest rank first, leftmost among equals), special tokens,
// the round trip of random bytes, from_parts' consistency errors, save -> load of both formats, and
// one bad file per error the loaders raise (the message names the file and the line or key).
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <random>
#include <string>
#include <vector>

#include "kernels/error.h"
#include "support/synthetic_text.h"
#include "support/temp_dir.h"
#include "text/byte_alphabet.h"
#include "text/pretokenize.h"
#include "text/tokenizer.h"
#include "text/unicode_tables.h"

using hg::text::Tokenizer;
using Pieces = std::vector<std::string>;
namespace fs = std::filesystem;

namespace {

Pieces pieces(std::string_view text) {
  Pieces out;
  for (std::string_view p : hg::text::pretokenize(text)) out.emplace_back(p);
  return out;
}

// 256 byte tokens, then one token per merge result (in merge order), then the specials.
Tokenizer tiny(const std::vector<std::pair<std::string, std::string>>& merges, const std::vector<std::string>& specials = {}) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, char(b));
  for (const auto& [l, r] : merges) {
    if (std::find(tokens.begin(), tokens.end(), l + r) == tokens.end()) tokens.push_back(l + r);
  }
  std::vector<hg::text::SpecialToken> sp;
  for (const std::string& s : specials) {
    sp.push_back({s, uint32_t(tokens.size())});
    tokens.push_back(s);
  }
  return Tokenizer::from_parts(tokens, merges, sp);
}

std::vector<std::string> token_strings(const Tokenizer& t, const std::vector<uint32_t>& ids) {
  std::vector<std::string> out;
  for (uint32_t id : ids) out.push_back(t.token_bytes(id));
  return out;
}

// The textbook BPE of one piece: repeatedly merge the adjacent pair of lowest rank, leftmost first.
std::vector<std::string> naive_bpe(const std::vector<std::pair<std::string, std::string>>& merges, std::string_view piece) {
  std::vector<std::string> symbols;
  for (char c : piece) symbols.emplace_back(1, c);
  for (;;) {
    size_t best_rank = merges.size(), best_pos = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      for (size_t r = 0; r < best_rank; ++r) {
        if (merges[r].first == symbols[i] && merges[r].second == symbols[i + 1]) {
          best_rank = r;
          best_pos = i;
          break;
        }
      }
    }
    if (best_rank == merges.size()) return symbols;
    symbols[best_pos] += symbols[best_pos + 1];
    symbols.erase(symbols.begin() + best_pos + 1);
  }
}

std::string random_bytes(std::mt19937_64& rng, size_t max_len) {
  // Biased towards the bytes the pattern cares about, with multi-byte UTF-8 and stray bytes.
  static const std::vector<std::string> parts = {"a", "b", "e", "t", "s", " ", " ", "  ", "\n", "\t", "'", "'s", "'ll",
                                                 "1", "42", ".", "!", "é", "日", "😀", "\xcc\x81", "\xc2\xa0", "\xff",
                                                 "\x80", "\xe2\x82", "<|endoftext|>", "<|", "|>", "\0"};
  std::string s;
  const size_t n = rng() % (max_len + 1);
  while (s.size() < n) {
    if (rng() % 4 == 0) s += char(rng() % 256);
    else s += parts[rng() % parts.size()];
  }
  return s;
}

std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const hg::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("pretokenize: words, contractions, numbers, punctuation") {
  CHECK(pieces("Hello world") == Pieces{"Hello", " world"});
  CHECK(pieces("I'm he's they're we've you'll I'd don't") ==
        Pieces{"I", "'m", " he", "'s", " they", "'re", " we", "'ve", " you", "'ll", " I", "'d", " don", "'t"});
  // Upper-case contractions are not in the pattern: the apostrophe is punctuation.
  CHECK(pieces("DON'T HE'S") == Pieces{"DON", "'", "T", " HE", "'", "S"});
  CHECK(pieces("'s") == Pieces{"'s"});
  CHECK(pieces("''s") == Pieces{"''", "s"});
  CHECK(pieces(" 's") == Pieces{" '", "s"});
  CHECK(pieces("'x") == Pieces{"'", "x"});
  CHECK(pieces("abc123 4567 3.14") == Pieces{"abc", "123", " 4567", " 3", ".", "14"});
  CHECK(pieces("x!?! (y)") == Pieces{"x", "!?!", " (", "y", ")"});
  CHECK(pieces("a_b-c") == Pieces{"a", "_", "b", "-", "c"});
  CHECK(pieces("").empty());
}

TEST_CASE("pretokenize: whitespace runs leave their last character to the next piece") {
  CHECK(pieces("a  b") == Pieces{"a", " ", " b"});
  CHECK(pieces("a     b") == Pieces{"a", "    ", " b"});
  CHECK(pieces("a  ") == Pieces{"a", "  "});          // a run at the end is one piece
  CHECK(pieces("  ") == Pieces{"  "});
  CHECK(pieces(" ") == Pieces{" "});
  CHECK(pieces("a\n\nb") == Pieces{"a", "\n", "\n", "b"});
  CHECK(pieces("a   \n\nb") == Pieces{"a", "   \n", "\n", "b"});
  CHECK(pieces("\t\ta") == Pieces{"\t", "\t", "a"});   // only U+0020 is the optional prefix
  CHECK(pieces("a \tb") == Pieces{"a", " ", "\t", "b"});
  CHECK(pieces("x\n  y\n") == Pieces{"x", "\n ", " y", "\n"});
  CHECK(pieces("1  2") == Pieces{"1", " ", " 2"});
  CHECK(pieces("!  ?") == Pieces{"!", " ", " ?"});
  // Unicode whitespace (\s): no-break space, next line, line separator, ideographic space.
  CHECK(pieces("a\u00a0b") == Pieces{"a", "\u00a0", "b"});
  CHECK(pieces("a\u00a0\u00a0b") == Pieces{"a", "\u00a0", "\u00a0", "b"});
  CHECK(pieces("a\xc2\x85 b") == Pieces{"a", "\xc2\x85", " b"});
  CHECK(pieces("a\u2028\u3000 b") == Pieces{"a", "\u2028\u3000", " b"});
  // U+200B (zero width space) is no whitespace in Unicode: it is "other".
  CHECK(pieces("a\u200bb") == Pieces{"a", "\u200b", "b"});
}

TEST_CASE("pretokenize: letters, marks, numbers and symbols of other scripts") {
  CHECK(pieces("héllo wörld") == Pieces{"héllo", " wörld"});
  CHECK(pieces("日本語 テキスト") == Pieces{"日本語", " テキスト"});
  CHECK(pieces("слово λόγος") == Pieces{"слово", " λόγος"});
  // A combining mark (Mn) is neither a letter nor a number.
  CHECK(pieces("e\u0301te") == Pieces{"e", "\u0301", "te"});
  CHECK(pieces("हिन्दी") == Pieces{"ह", "ि", "न", "्", "द", "ी"});
  // Numbers: Arabic-Indic digits (Nd), Roman numeral (Nl), vulgar fraction (No).
  CHECK(pieces("x٣٤ Ⅻ½") == Pieces{"x", "٣٤", " Ⅻ½"});
  CHECK(pieces("hi 👋🏽! 🚀") == Pieces{"hi", " 👋🏽!", " 🚀"});
  // Unicode 16.0, the version of Oniguruma 6.9.10 in Hugging Face `tokenizers` 0.2x: Egyptian
  // Hieroglyphs Extended-A (new in 16.0) are letters, CJK Extension J (17.0) is not assigned yet.
  CHECK(std::string(hg::text::unicode_version()) == "16.0.0");
  CHECK(hg::text::classify(0x13460) == hg::text::CharClass::kLetter);
  CHECK(hg::text::classify(0x323B0) == hg::text::CharClass::kOther);
  CHECK(pieces("x\U00013460's") == Pieces{"x\U00013460", "'s"});
  CHECK(hg::text::classify(U'ª') == hg::text::CharClass::kLetter);        // Lo
  CHECK(hg::text::classify(U'\U00020000') == hg::text::CharClass::kLetter);  // CJK Extension B
  CHECK(hg::text::classify(U'\U0001D7CE') == hg::text::CharClass::kNumber);  // mathematical digit
  CHECK(hg::text::classify(U'\U0001F600') == hg::text::CharClass::kOther);
  CHECK(hg::text::classify(0x110000) == hg::text::CharClass::kOther);
}

TEST_CASE("pretokenize: each invalid UTF-8 byte is one 'other' character") {
  CHECK(pieces("a\xff\xfe" "b") == Pieces{"a", "\xff\xfe", "b"});
  CHECK(pieces(" \x80x") == Pieces{" \x80", "x"});
  CHECK(pieces("\xff!?") == Pieces{"\xff!?"});
  CHECK(pieces("ab\xc3") == Pieces{"ab", "\xc3"});                 // truncated sequence at the end
  CHECK(pieces("\xc0\xaf" "x") == Pieces{"\xc0\xaf", "x"});         // overlong '/'
  CHECK(pieces("\xed\xa0\x80" "a") == Pieces{"\xed\xa0\x80", "a"});  // a surrogate
  CHECK(pieces("\xf4\x90\x80\x80") == Pieces{"\xf4\x90\x80\x80"});  // above U+10FFFF
  CHECK(pieces("x\xe2\x82 y") == Pieces{"x", "\xe2\x82", " y"});
  // Pieces always cover random bytes exactly, none empty.
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const std::string s = random_bytes(rng, 60);
    std::string joined;
    for (std::string_view p : hg::text::pretokenize(s)) {
      REQUIRE(!p.empty());
      joined += p;
    }
    REQUIRE(joined == s);
  }
}

TEST_CASE("byte alphabet: GPT-2's bytes_to_unicode, both ways") {
  CHECK(hg::text::byte_to_char(' ') == U'Ġ');
  CHECK(hg::text::byte_to_char('\n') == U'Ċ');
  CHECK(hg::text::byte_to_char('A') == U'A');
  CHECK(hg::text::byte_to_char(0) == 0x100);
  CHECK(hg::text::byte_to_char(0x7F) == 0x121);
  CHECK(hg::text::byte_to_char(0xA0) == 0x142);
  CHECK(hg::text::byte_to_char(0xAD) == 0x143);
  CHECK(hg::text::byte_to_char(0xFF) == 0xFF);
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const char32_t c = hg::text::byte_to_char(static_cast<unsigned char>(b));
    CHECK(seen.insert(c).second);
    CHECK(hg::text::char_to_byte(c) == std::optional<unsigned char>(static_cast<unsigned char>(b)));
  }
  CHECK(!hg::text::char_to_byte(U' ').has_value());
  CHECK(!hg::text::char_to_byte(0x144).has_value());
  CHECK(hg::text::bytes_to_spelling(" the\n") == "Ġthe\xc4\x8a");
  std::string all;
  for (int b = 0; b < 256; ++b) all += char(b);
  CHECK(hg::text::spelling_to_bytes(hg::text::bytes_to_spelling(all)) == all);
  CHECK(!hg::text::spelling_to_bytes("a b").has_value());
  CHECK(!hg::text::spelling_to_bytes("\xff").has_value());
}

TEST_CASE("BPE: lowest rank first, leftmost among equal ranks") {
  const Tokenizer bc_first = tiny({{"b", "c"}, {"a", "b"}});
  CHECK(token_strings(bc_first, bc_first.encode("abc")) == std::vector<std::string>{"a", "bc"});
  const Tokenizer ab_first = tiny({{"a", "b"}, {"b", "c"}});
  CHECK(token_strings(ab_first, ab_first.encode("abc")) == std::vector<std::string>{"ab", "c"});
  const Tokenizer aa = tiny({{"a", "a"}, {"aa", "aa"}});
  CHECK(token_strings(aa, aa.encode("aaa")) == std::vector<std::string>{"aa", "a"});
  CHECK(token_strings(aa, aa.encode("aaaaa")) == std::vector<std::string>{"aaaa", "a"});
  // Merges never cross pieces: " the" and "the" are different pieces' tokens.
  const Tokenizer the = tiny({{"t", "h"}, {"th", "e"}, {" ", "the"}});
  CHECK(token_strings(the, the.encode("the the")) == std::vector<std::string>{"the", " the"});
  CHECK(token_strings(the, the.encode("t he")) == std::vector<std::string>{"t", " ", "h", "e"});
  CHECK(the.merges() == 3);
  CHECK(the.vocab_size() == 259);
  CHECK(the.token_id("the") == 257u);
  CHECK(!the.token_id("xyz").has_value());
}

TEST_CASE("BPE: the heap matches the textbook algorithm on every piece") {
  const std::string corpus = hg::test::synthetic_text(60000, 3);
  const Tokenizer tok = hg::test::synthetic_tokenizer(corpus, 400, 40, false);
  std::vector<std::pair<std::string, std::string>> merges;
  // Recover the merges (rank order) from the saved merges.txt, read back with the byte alphabet.
  hg::test::TempDir dir;
  tok.save_vocab_merges((dir.path / "vocab.json").string(), (dir.path / "merges.txt").string());
  std::ifstream in(dir.path / "merges.txt");
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    const size_t space = line.find(' ');
    merges.emplace_back(*hg::text::spelling_to_bytes(line.substr(0, space)),
                        *hg::text::spelling_to_bytes(line.substr(space + 1)));
  }
  REQUIRE(merges.size() == 400);
  const std::string text = hg::test::synthetic_text(20000, 4);
  std::vector<std::string> expected;
  for (std::string_view piece : hg::text::pretokenize(text)) {
    for (std::string& s : naive_bpe(merges, piece)) expected.push_back(std::move(s));
  }
  const std::vector<uint32_t> ids = tok.encode(text);
  CHECK(token_strings(tok, ids) == expected);
  CHECK(ids.size() < text.size() / 2);  // the merges do compress
  // Pieces longer than 32 bytes take the heap path: long runs of letters (and of spaces).
  std::string joined;
  for (char c : text.substr(0, 6000)) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '\n') joined += c;
  }
  joined += std::string(70, ' ') + "x" + std::string(40, '!');
  std::vector<std::string> long_expected;
  size_t longest = 0;
  for (std::string_view piece : hg::text::pretokenize(joined)) {
    longest = std::max(longest, piece.size());
    for (std::string& s : naive_bpe(merges, piece)) long_expected.push_back(std::move(s));
  }
  CHECK(longest > 100);
  CHECK(token_strings(tok, tok.encode(joined)) == long_expected);
}

TEST_CASE("special tokens: cut out first, the longest where several start at one byte") {
  const Tokenizer tok = tiny({{"x", "y"}}, {"<|endoftext|>", "<|e|>", "<|e|>!"});
  const uint32_t eot = *tok.end_of_text(), e = *tok.token_id("<|e|>"), e_bang = *tok.token_id("<|e|>!");
  CHECK(eot == 257);
  CHECK(tok.special_tokens().size() == 3);
  const auto xy = *tok.token_id("xy");
  CHECK(tok.encode("xy<|endoftext|>xy") == std::vector<uint32_t>{xy, eot, xy});
  CHECK(tok.encode("<|e|>!<|e|>") == std::vector<uint32_t>{e_bang, e});
  CHECK(tok.encode("<|endoftext|><|endoftext|>") == std::vector<uint32_t>{eot, eot});
  // A broken special is plain text.
  const std::vector<uint32_t> broken = tok.encode("<|endoftext|");
  CHECK(broken.size() > 1);
  CHECK(tok.decode(broken) == "<|endoftext|");
  // Without specials, the same bytes are ordinary text.
  const Tokenizer plain = tiny({});
  CHECK(plain.encode("<|endoftext|>").size() == 13);
}

TEST_CASE("encode/decode: any byte string round-trips") {
  const std::string corpus = hg::test::synthetic_text(100000, 11);
  const Tokenizer tok = hg::test::synthetic_tokenizer(corpus, 600);
  std::mt19937_64 rng(12);
  for (int trial = 0; trial < 3000; ++trial) {
    const std::string s = random_bytes(rng, 200);
    const std::vector<uint32_t> ids = tok.encode(s);
    REQUIRE(tok.decode(ids) == s);
    for (uint32_t id : ids) REQUIRE(id < tok.vocab_size());
  }
  const std::vector<uint32_t> ids = tok.encode(corpus);
  CHECK(tok.decode(ids) == corpus);
  CHECK(double(corpus.size()) / double(ids.size()) > 2.0);
  // Encoding in one call or piece by piece gives the same ids (the per-call cache changes nothing).
  const std::string head = corpus.substr(0, 5000);
  std::vector<uint32_t> parts;
  for (std::string_view p : hg::text::pretokenize(head)) {
    const auto one = tok.encode(p);
    parts.insert(parts.end(), one.begin(), one.end());
  }
  CHECK(parts == tok.encode(head));
  CHECK(what_of([&] { tok.decode(std::vector<uint32_t>{65, tok.vocab_size()}); }).find("id " + std::to_string(tok.vocab_size()) + " at position 1") != std::string::npos);
  CHECK(what_of([&] { tok.token_bytes(1u << 30); }).find("not in the vocabulary") != std::string::npos);
  CHECK(what_of([] { Tokenizer().encode("x"); }).find("empty") != std::string::npos);
}

TEST_CASE("from_parts: every inconsistency is named") {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, char(b));
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> t = bytes;
    t.insert(t.end(), extra.begin(), extra.end());
    return t;
  };
  auto error = [](std::vector<std::string> tokens, std::vector<std::pair<std::string, std::string>> merges,
                  std::vector<hg::text::SpecialToken> specials) {
    return what_of([&] { Tokenizer::from_parts(tokens, merges, specials); });
  };
  CHECK(error(with({"ab", "ab"}), {}, {}).find("token id 257 \"ab\" duplicates token id 256") != std::string::npos);
  CHECK(error(with({""}), {}, {}).find("token id 256 is empty") != std::string::npos);
  std::vector<std::string> missing(bytes.begin(), bytes.end() - 1);
  CHECK(error(missing, {}, {}).find("no token for the byte \"\\xff\"") != std::string::npos);
  CHECK(error(with({"ab"}), {{"q", "ab"}, {"a", "b"}}, {}).find("merge 0 (\"q\" + \"ab\"): the merged token") != std::string::npos);
  CHECK(error(with({"ab"}), {{"zz", "b"}}, {}).find("merge 0 (\"zz\" + \"b\"): its left part") != std::string::npos);
  CHECK(error(with({"ab"}), {{"a", "zz"}}, {}).find("its right part") != std::string::npos);
  CHECK(error(with({"ab"}), {{"a", "b"}, {"a", "b"}}, {}).find("merge 1 (\"a\" + \"b\") repeats") != std::string::npos);
  CHECK(error(with({"<s>"}), {}, {{"<s>", 300}}).find("has id 300, which is not in the vocabulary") != std::string::npos);
  CHECK(error(with({"<s>"}), {}, {{"<t>", 256}}).find("whose token is \"<s>\"") != std::string::npos);
  CHECK(error(with({"<s>"}), {}, {{"<s>", 256}, {"<s>", 256}}).find("listed twice") != std::string::npos);
  CHECK(error({}, {}, {}).find("vocabulary is empty") != std::string::npos);
  CHECK(error(with({"ab"}), {{"a", "b"}}, {}) == "(no error)");
}

TEST_CASE("save -> load: both formats, every way of naming them, give the same encode") {
  const std::string corpus = hg::test::synthetic_text(80000, 21);
  const Tokenizer tok = hg::test::synthetic_tokenizer(corpus, 500);
  const std::string text = hg::test::synthetic_text(20000, 22) + "<|endoftext|>" + "tail \xff\xfe";
  const std::vector<uint32_t> ids = tok.encode(text);
  hg::test::TempDir dir;
  const std::string json = (dir.path / "tokenizer.json").string();
  tok.save_json(json);
  tok.save_vocab_merges((dir.path / "vocab.json").string(), (dir.path / "merges.txt").string());
  for (const std::string& path : {json, (dir.path / "vocab.json").string(), (dir.path / "merges.txt").string(),
                                  dir.path.string()}) {
    CAPTURE(path);
    const Tokenizer back = Tokenizer::load(path);
    CHECK(back.encode(text) == ids);
    CHECK(back.vocab_size() == tok.vocab_size());
    CHECK(back.merges() == tok.merges());
    CHECK(back.end_of_text() == tok.end_of_text());
    REQUIRE(back.special_tokens().size() == 1);
    CHECK(back.special_tokens()[0].content == "<|endoftext|>");
  }
  // The JSON is what Hugging Face writes: a BPE model, merges as "a b", the ByteLevel pieces.
  std::ifstream in(json);
  const nlohmann::json j = nlohmann::json::parse(in);
  CHECK(j["model"]["type"] == "BPE");
  CHECK(j["pre_tokenizer"]["type"] == "ByteLevel");
  CHECK(j["pre_tokenizer"]["add_prefix_space"] == false);
  CHECK(j["model"]["merges"].size() == 500);
  CHECK(j["model"]["vocab"]["Ġ"] == 32);
  CHECK(j["added_tokens"][0]["content"] == "<|endoftext|>");
  // No temporary files are left beside them.
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path)) ++files;
  CHECK(files == 3);
  // A vocab.json/merges.txt pair with other prefixes (Megatron's gpt2-vocab.json) loads by either name.
  std::filesystem::copy_file(dir.path / "vocab.json", dir.path / "gpt2-vocab.json");
  std::filesystem::copy_file(dir.path / "merges.txt", dir.path / "gpt2-merges.txt");
  CHECK(Tokenizer::load((dir.path / "gpt2-merges.txt").string()).encode(text) == ids);
  // Copies are independent.
  Tokenizer copy = tok;
  Tokenizer moved = std::move(copy);
  CHECK(moved.encode(text) == ids);
}

namespace {

struct BadCase {
  const char* name;
  std::function<void(nlohmann::json&)> change;  // applied to a valid file
  const char* expected;                         // a part of the message (after the file's name)
};

std::string load_error(const std::string& path) {
  return what_of([&] { Tokenizer::load(path); });
}

}  // namespace

TEST_CASE("tokenizer.json: each refused input names the file and the key") {
  hg::test::TempDir dir;
  const std::string valid_path = (dir.path / "valid.json").string();
  tiny({{"a", "b"}, {"ab", "c"}}, {"<|endoftext|>"}).save_json(valid_path);
  std::ifstream in(valid_path);
  const nlohmann::json valid = nlohmann::json::parse(in);
  REQUIRE(load_error(valid_path) == "(no error)");
  using J = nlohmann::json;
  const std::vector<BadCase> cases = {
      {"not_object", [](J& j) { j = J::array({1, 2}); }, "the file is a JSON array; expected an object"},
      {"truncation", [](J& j) { j["truncation"] = {{"max_length", 5}}; }, "key \"truncation\" is set"},
      {"padding", [](J& j) { j["padding"] = {{"length", 5}}; }, "key \"padding\" is set"},
      {"normalizer", [](J& j) { j["normalizer"] = {{"type", "NFC"}}; }, "key \"normalizer\" is {\"type\":\"NFC\"}"},
      {"no_pre_tokenizer", [](J& j) { j.erase("pre_tokenizer"); }, "key \"pre_tokenizer\" is missing"},
      {"whitespace_pre_tokenizer", [](J& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }, "key \"pre_tokenizer\" is {\"type\":\"Whitespace\"}"},
      {"prefix_space", [](J& j) { j["pre_tokenizer"]["add_prefix_space"] = true; }, "key \"pre_tokenizer.add_prefix_space\" is true"},
      {"prefix_space_default", [](J& j) { j["pre_tokenizer"].erase("add_prefix_space"); }, "key \"pre_tokenizer.add_prefix_space\" is true (by default)"},
      {"no_regex", [](J& j) { j["pre_tokenizer"]["use_regex"] = false; }, "key \"pre_tokenizer.use_regex\" is false"},
      {"flag_type", [](J& j) { j["pre_tokenizer"]["use_regex"] = "yes"; }, "key \"pre_tokenizer.use_regex\" is string; expected a boolean"},
      {"decoder", [](J& j) { j["decoder"] = {{"type", "WordPiece"}}; }, "key \"decoder\" is {\"type\":\"WordPiece\"}"},
      {"post_processor", [](J& j) { j["post_processor"] = {{"type", "TemplateProcessing"}}; }, "key \"post_processor\""},
      {"no_model", [](J& j) { j.erase("model"); }, "key \"model\" is missing"},
      {"wordpiece", [](J& j) { j["model"]["type"] = "WordPiece"; }, "key \"model.type\" is \"WordPiece\""},
      {"dropout", [](J& j) { j["model"]["dropout"] = 0.1; }, "key \"model.dropout\" is 0.1"},
      {"subword_prefix", [](J& j) { j["model"]["continuing_subword_prefix"] = "##"; }, "key \"model.continuing_subword_prefix\""},
      {"word_suffix", [](J& j) { j["model"]["end_of_word_suffix"] = "</w>"; }, "key \"model.end_of_word_suffix\""},
      {"ignore_merges", [](J& j) { j["model"]["ignore_merges"] = true; }, "key \"model.ignore_merges\" is true"},
      {"vocab_array", [](J& j) { j["model"]["vocab"] = J::array(); }, "key \"model.vocab\" is array"},
      {"merges_object", [](J& j) { j["model"]["merges"] = J::object(); }, "key \"model.merges\" is object"},
      {"added_object", [](J& j) { j["added_tokens"] = J::object(); }, "key \"added_tokens\" is object"},
      {"added_number", [](J& j) { j["added_tokens"][0] = 5; }, "key \"added_tokens[0]\" is number"},
      {"added_content", [](J& j) { j["added_tokens"][0].erase("content"); }, "key \"added_tokens[0].content\" is missing"},
      {"added_empty", [](J& j) { j["added_tokens"][0]["content"] = ""; }, "key \"added_tokens[0].content\" is empty"},
      {"added_id", [](J& j) { j["added_tokens"][0].erase("id"); }, "key \"added_tokens[0].id\" is missing"},
      {"added_id_type", [](J& j) { j["added_tokens"][0]["id"] = "x"; }, "key \"added_tokens[0].id\": the id is \"x\""},
      {"added_lstrip", [](J& j) { j["added_tokens"][0]["lstrip"] = true; }, "key \"added_tokens[0].lstrip\" is true"},
      {"added_twice", [](J& j) { j["added_tokens"].push_back(j["added_tokens"][0]); }, "key \"added_tokens[1].content\": \"<|endoftext|>\" is listed twice"},
      {"added_mixed_normalized", [](J& j) { j["added_tokens"].push_back({{"id", 259}, {"content", "text|>"}, {"normalized", true}, {"special", false}}); },
       "key \"added_tokens[1]\": the added token \"text|>\" (\"normalized\": true) can overlap \"<|endoftext|>\" (\"normalized\": false)"},
      {"added_other_id", [](J& j) { j["added_tokens"][0]["id"] = 5; }, "entry \"<|endoftext|>\": id 258 differs from the added token's id 5"},
      {"vocab_id_string", [](J& j) { j["model"]["vocab"]["ab"] = "7"; }, "key \"model.vocab\" entry \"ab\": the id is \"7\" (string)"},
      {"vocab_id_negative", [](J& j) { j["model"]["vocab"]["ab"] = -1; }, "key \"model.vocab\" entry \"ab\": the id is -1"},
      {"vocab_not_byte_level", [](J& j) { j["model"]["vocab"]["a b"] = 300; }, "key \"model.vocab\" entry \"a b\": the token \"a b\" is not spelled in GPT-2's byte alphabet"},
      {"vocab_empty_token", [](J& j) { j["model"]["vocab"][""] = 300; }, "key \"model.vocab\" entry \"\": the token is empty"},
      {"vocab_duplicate_id", [](J& j) { j["model"]["vocab"]["zz"] = 97; }, "id 97 is already the id of key \"model.vocab\" entry"},
      {"vocab_huge_id", [](J& j) { j["model"]["vocab"]["zz"] = 4000000000ull; }, "entry \"zz\": id 4000000000 is too large (the file has 261 tokens, and at most 65536 ids below the largest may be unused)"},
      {"vocab_holes", [](J& j) { j["model"]["vocab"]["zz"] = 65797; }, "entry \"zz\": id 65797 is too large"},
      {"vocab_missing_byte", [](J& j) { j["model"]["vocab"].erase("z"); }, "no token for the byte \"z\""},
      {"merge_one_part", [](J& j) { j["model"]["merges"][1] = "abc"; }, "key \"model.merges[1]\" is \"abc\"; expected two tokens separated by one space"},
      {"merge_three_parts", [](J& j) { j["model"]["merges"][0] = "a b c"; }, "key \"model.merges[0]\" is \"a b c\""},
      {"merge_number", [](J& j) { j["model"]["merges"][0] = 5; }, "key \"model.merges[0]\" is 5; expected \"a b\" or [\"a\", \"b\"]"},
      {"merge_left", [](J& j) { j["model"]["merges"][0] = "zz b"; }, "key \"model.merges[0]\": the merge's left part \"zz\" is not in the vocabulary"},
      {"merge_right", [](J& j) { j["model"]["merges"][1] = J::array({"ab", "zz"}); }, "key \"model.merges[1]\": the merge's right part \"zz\""},
      {"merge_result", [](J& j) { j["model"]["merges"].push_back("b c"); }, "key \"model.merges[2]\": the merged token \"bc\" is not in the vocabulary"},
      {"merge_twice", [](J& j) { j["model"]["merges"].push_back("a b"); }, "key \"model.merges[2]\": the merge \"a b\" appears twice"},
      {"merge_not_byte_level", [](J& j) { j["model"]["merges"][0] = "a\xe4\xb8\x80 b"; }, "key \"model.merges[0]\": the token \"a\xe4\xb8\x80\" is not spelled"},
  };
  for (const BadCase& c : cases) {
    CAPTURE(c.name);
    nlohmann::json j = valid;
    c.change(j);
    const std::string path = dir.write(std::string(c.name) + ".json", j.dump());
    const std::string message = load_error(path);
    CHECK(message.find(path) != std::string::npos);
    CHECK_MESSAGE(message.find(c.expected) != std::string::npos, message);
    // One clean line: the prefix once, no source location of the check that failed.
    CHECK_MESSAGE(message.rfind("tokenizer: ") == 0, message);
    CHECK_MESSAGE(message.find("tokenizer: ", 1) == std::string::npos, message);
    CHECK_MESSAGE(message.find(".cpp:") == std::string::npos, message);
    CHECK(message.find('\n') == std::string::npos);
  }
  // Byte-level damage the JSON library cannot express.
  const std::string text = valid.dump();
  const std::vector<std::pair<std::string, const char*>> raw = {
      {"{\"model\": ", "not valid UTF-8 JSON"},
      {"{\"a\": 1, \"a\": 2}", "the key \"a\" appears twice in one object"},
      {text.substr(0, 40) + "\xff" + text.substr(40), "not valid UTF-8 JSON"},
      {std::string(100, '[') + std::string(100, ']'), "nested deeper than 64 levels"},
      {"", "not valid UTF-8 JSON"},
  };
  for (size_t i = 0; i < raw.size(); ++i) {
    CAPTURE(i);
    const std::string path = dir.write("raw" + std::to_string(i) + ".json", raw[i].first);
    const std::string message = load_error(path);
    CHECK(message.find(path) != std::string::npos);
    CHECK_MESSAGE(message.find(raw[i].second) != std::string::npos, message);
  }
  // Unused ids below the limit are allowed; decoding one is an error.
  nlohmann::json holes = valid;
  holes["model"]["vocab"]["zz"] = 65000;
  const Tokenizer with_holes = Tokenizer::load(dir.write("holes.json", holes.dump()));
  CHECK(with_holes.vocab_size() == 65001);
  CHECK(with_holes.decode(std::vector<uint32_t>{65000}) == "zz");
  CHECK(what_of([&] { with_holes.decode(std::vector<uint32_t>{64000}); }).find("id 64000 at position 0 is not in the vocabulary (65001 ids, this one unused)") != std::string::npos);
  // Hugging Face's other merge spelling, [a, b] pairs, loads to the same tokenizer.
  nlohmann::json pairs = valid;
  pairs["model"]["merges"] = nlohmann::json::array({nlohmann::json::array({"a", "b"}), nlohmann::json::array({"ab", "c"})});
  const Tokenizer from_pairs = Tokenizer::load(dir.write("pairs.json", pairs.dump()));
  CHECK(from_pairs.encode("abcab") == Tokenizer::load(valid_path).encode("abcab"));
  CHECK(from_pairs.encode("abcab").size() == 2);
}

TEST_CASE("vocab.json + merges.txt: each refused input names the file and the line or key") {
  hg::test::TempDir dir;
  const Tokenizer base = tiny({{"a", "b"}, {"ab", "c"}}, {"<|endoftext|>"});
  base.save_vocab_merges((dir.path / "vocab.json").string(), (dir.path / "merges.txt").string());
  std::ifstream in(dir.path / "vocab.json");
  const nlohmann::json vocab = nlohmann::json::parse(in);
  const std::string merges = "#version: 0.2\na b\nab c\n";
  auto load_pair = [&](const std::string& name, const std::string& vocab_text, const std::string& merges_text) {
    const fs::path sub = dir.path / name;
    std::filesystem::create_directories(sub);
    std::ofstream((sub / "vocab.json").string(), std::ios::binary) << vocab_text;
    std::ofstream((sub / "merges.txt").string(), std::ios::binary) << merges_text;
    return std::make_pair(load_error(sub.string()), sub.string());
  };
  {
    const auto [message, where] = load_pair("valid", vocab.dump(), merges);
    CHECK(message == "(no error)");
    const Tokenizer t = Tokenizer::load(where);
    CHECK(t.special_tokens().size() == 1);
    CHECK(t.encode("abc<|endoftext|>").size() == 2);
    // CRLF line ends, blank lines and a missing final newline are fine.
    CHECK(load_pair("crlf", vocab.dump(), "#version: 0.2\r\na b\r\n\r\nab c").first == "(no error)");
  }
  struct Case {
    const char* name;
    std::string vocab_text, merges_text;
    const char* file;
    const char* expected;
  };
  nlohmann::json dup = vocab, str = vocab, spaced = vocab;
  dup["zz"] = 97;
  str["ab"] = "x";
  spaced["a b"] = 400;
  const std::vector<Case> cases = {
      {"vocab_not_json", "{\"a\": ", merges, "vocab.json", "not valid UTF-8 JSON"},
      {"vocab_array", "[1]", merges, "vocab.json", "the file is a JSON array; expected an object of token -> id"},
      {"vocab_id_string", str.dump(), merges, "vocab.json", "key \"ab\": the id is \"x\" (string)"},
      {"vocab_not_byte_level", spaced.dump(), merges, "vocab.json", "key \"a b\": the token \"a b\" is not spelled"},
      {"vocab_duplicate_id", dup.dump(), merges, "vocab.json", "id 97 is already the id of key"},
      {"vocab_duplicate_key", "{\"a\": 1, \"a\": 2}", merges, "vocab.json", "the key \"a\" appears twice"},
      {"merges_not_utf8", vocab.dump(), "#version: 0.2\na b\nab\xff c\n", "merges.txt:3", "byte 3 is not valid UTF-8"},
      {"merges_one_token", vocab.dump(), "#version: 0.2\nab\n", "merges.txt:2", "\"ab\" is not a merge (expected two tokens separated by one space)"},
      {"merges_three_tokens", vocab.dump(), "#version: 0.2\na b c\n", "merges.txt:2", "\"a b c\" is not a merge"},
      {"merges_double_space", vocab.dump(), "a  b\n", "merges.txt:1", "is not a merge"},
      {"merges_left", vocab.dump(), "#version: 0.2\na b\nzz c\n", "merges.txt", "line 3: the merge's left part \"zz\" is not in the vocabulary"},
      {"merges_right", vocab.dump(), "a b\nab zz\n", "merges.txt", "line 2: the merge's right part \"zz\""},
      {"merges_result", vocab.dump(), "a b\nb c\n", "merges.txt", "line 2: the merged token \"bc\" is not in the vocabulary"},
      {"merges_twice", vocab.dump(), "a b\nab c\na b\n", "merges.txt", "line 3: the merge \"a b\" appears twice"},
      {"merges_three_tokens_later", vocab.dump(), "a b\nab c d\n", "merges.txt:2", "is not a merge"},
      // A token outside GPT-2's byte alphabet (U+4E00 is not one of its 256 characters).
      {"merges_not_byte_level", vocab.dump(), "a b\na\xe4\xb8\x80 b\n", "merges.txt", "line 2: the token \"a\xe4\xb8\x80\" is not spelled in GPT-2's byte alphabet"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const auto [message, where] = load_pair(c.name, c.vocab_text, c.merges_text);
    CHECK_MESSAGE(message.find((fs::path(where) / c.file).string()) != std::string::npos, message);
    CHECK_MESSAGE(message.find(c.expected) != std::string::npos, message);
  }
  // Files that are not there.
  const fs::path alone = dir.path / "alone";
  std::filesystem::create_directories(alone);
  std::ofstream((alone / "vocab.json").string()) << vocab.dump();
  CHECK(load_error((alone / "vocab.json").string()).find("the merges.txt that goes with it (" + (alone / "merges.txt").string() + ") does not exist") != std::string::npos);
  CHECK(load_error(alone.string()).find(alone.string() + ": the directory holds neither tokenizer.json nor vocab.json + merges.txt") != std::string::npos);
  CHECK(load_error((dir.path / "nothing.json").string()).find("nothing.json: no such file or directory") != std::string::npos);
  CHECK(what_of([&] { Tokenizer::load_vocab_merges((alone / "vocab.json").string(), (alone / "merges.txt").string()); })
            .find((alone / "merges.txt").string() + ": cannot open it") != std::string::npos);
  // Writing where no file can be: the error names the path.
  CHECK(what_of([&] { base.save_json((dir.path / "no" / "such" / "t.json").string()); }).find("t.json: cannot create the temporary file") != std::string::npos);
}

TEST_CASE("save: what a format cannot hold is refused, naming it") {
  hg::test::TempDir dir;
  const Tokenizer odd = tiny({}, {"[PAD]"});
  CHECK(what_of([&] { odd.save_vocab_merges((dir.path / "v.json").string(), (dir.path / "m.txt").string()); })
            .find("cannot write the special token \"[PAD]\": vocab.json marks special tokens only by the spelling <|...|>") != std::string::npos);
  odd.save_json((dir.path / "t.json").string());  // tokenizer.json lists it
  CHECK(Tokenizer::load((dir.path / "t.json").string()).special_tokens().at(0).content == "[PAD]");
  const Tokenizer binary = tiny({}, {"<|\xff|>"});
  CHECK(what_of([&] { binary.save_json((dir.path / "b.json").string()); }).find("is not valid UTF-8") != std::string::npos);
}

TEST_CASE("encode: one Tokenizer used by several threads at once gives each the same ids") {
  const std::string corpus = hg::test::synthetic_text(60000, 31);
  const Tokenizer tok = hg::test::synthetic_tokenizer(corpus, 300);
  std::vector<std::string> texts;
  std::vector<std::vector<uint32_t>> expected;
  for (int i = 0; i < 4; ++i) {
    texts.push_back(hg::test::synthetic_text(30000, 40 + i));
    expected.push_back(tok.encode(texts.back()));
  }
  std::vector<int> same(4, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      bool ok = true;
      for (int round = 0; round < 5; ++round) ok = ok && tok.encode(texts[(i + round) % 4]) == expected[(i + round) % 4];
      same[i] = ok;
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(same == std::vector<int>{1, 1, 1, 1});
}

TEST_CASE("vocab.json: only unreachable <|...|> entries are special") {
  hg::test::TempDir dir;
  // "<|" + "x|>" is a merge result: an ordinary token. "<|endoftext|>" and "<|pad|>" are special.
  const Tokenizer tok = tiny({{"<", "|"}, {"x", "|"}, {"x|", ">"}, {"<|", "x|>"}}, {"<|endoftext|>", "<|pad|>"});
  tok.save_vocab_merges((dir.path / "vocab.json").string(), (dir.path / "merges.txt").string());
  const Tokenizer back = Tokenizer::load(dir.path.string());
  std::vector<std::string> specials;
  for (const auto& s : back.special_tokens()) specials.push_back(s.content);
  CHECK(specials == std::vector<std::string>{"<|endoftext|>", "<|pad|>"});
  CHECK(back.encode("a<|pad|>") == std::vector<uint32_t>{'a', *back.token_id("<|pad|>")});
  // Pieces "<|" (merged), "x", "|>" (no merge: 2 tokens), never the unreachable token.
  CHECK(back.encode("<|x|>").size() == 4);
}

TEST_CASE("tokenizer.json: added tokens keep their \"special\" flag; the two \"normalized\" kinds may mix where they cannot overlap") {
  hg::test::TempDir dir;
  const std::string path = (dir.path / "t.json").string();
  tiny({{"a", "b"}, {"ab", "c"}}, {"<|endoftext|>"}).save_json(path);
  nlohmann::json j;
  {
    std::ifstream in(path);
    j = nlohmann::json::parse(in);
  }
  // A non-special, normalized added token that cannot overlap "<|endoftext|>" (normalized: false).
  j["added_tokens"].push_back({{"id", 259}, {"content", "[MASK]"}, {"single_word", false}, {"lstrip", false},
                               {"rstrip", false}, {"normalized", true}, {"special", false}});
  { std::ofstream(path) << j.dump(); }
  const Tokenizer tok = Tokenizer::load(path);
  CHECK(tok.encode("ab[MASK]c<|endoftext|>") == std::vector<uint32_t>{256, 259, 99, 258});
  REQUIRE(tok.special_tokens().size() == 2);
  CHECK(tok.special_tokens()[0].special);
  CHECK_FALSE(tok.special_tokens()[1].special);
  // Written back as read (it was written "special": true before).
  const std::string again = (dir.path / "again.json").string();
  tok.save_json(again);
  std::ifstream in(again);
  const nlohmann::json back = nlohmann::json::parse(in);
  REQUIRE(back["added_tokens"].size() == 2);
  CHECK(back["added_tokens"][0]["special"] == true);
  CHECK(back["added_tokens"][1]["content"] == "[MASK]");
  CHECK(back["added_tokens"][1]["special"] == false);
  CHECK(Tokenizer::load(again).encode("ab[MASK]c<|endoftext|>") == tok.encode("ab[MASK]c<|endoftext|>"));
}

TEST_CASE("load: a FIFO or a device is refused at once, not waited on or read without end") {
  hg::test::TempDir dir;
  // A FIFO with no writer: opening it for reading would block forever; reading /dev/zero never ends.
  const std::string fifo = (dir.path / "tokenizer.json").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::string message = load_error(fifo);
  CHECK(message.find(fifo) != std::string::npos);
  CHECK(message.find("not a regular file") != std::string::npos);
  message = load_error(dir.path.string());  // the directory's tokenizer.json is that FIFO
  CHECK(message.find("not a regular file") != std::string::npos);
  if (std::filesystem::exists("/dev/zero")) {
    message = load_error("/dev/zero");
    CHECK(message.find("/dev/zero") != std::string::npos);
    CHECK(message.find("not a regular file") != std::string::npos);
  }
  // vocab.json + a FIFO merges.txt
  const fs::path pair = dir.path / "pair";
  fs::create_directories(pair);
  tiny({{"a", "b"}}, {}).save_vocab_merges((pair / "vocab.json").string(), (pair / "other.txt").string());
  REQUIRE(::mkfifo((pair / "merges.txt").string().c_str(), 0600) == 0);
  message = load_error(pair.string());
  CHECK(message.find("merges.txt") != std::string::npos);
  CHECK(message.find("not a regular file") != std::string::npos);
}
