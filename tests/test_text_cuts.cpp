// prepare_data's chunked encoding (samples/text_cuts.h): every cut TextCuts calls safe leaves the ids
// unchanged (encode(left) ++ encode(right) == encode(whole)) on a Hugging Face-trained tokenizer
// (tests/data/text/hf_tokenizer.json, vocabulary 2000, "<|endoftext|>") over its corpus, generated
// multilingual text and adversarial strings; for_each_chunk over small blocks gives the whole file's
// ids; the cuts it refuses are ones that do change the ids (so the check can fail); and the token
// lengths bits per byte counts add up to the text's bytes.
#include <doctest/doctest.h>

#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "samples/gpt_datasets.h"
#include "samples/text_cuts.h"
#include "support/synthetic_text.h"
#include "support/test_seed.h"
#include "text/tokenizer.h"

using namespace hg;
using samples::TextCuts;

namespace {

const std::string kData = std::string(HG_SOURCE_DIR) + "/tests/data/text/";

const text::Tokenizer& hf_tokenizer() {
  static const text::Tokenizer tokenizer = text::Tokenizer::load(kData + "hf_tokenizer.json");
  return tokenizer;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::string> specials_of(const text::Tokenizer& tokenizer) {
  std::vector<std::string> out;
  for (const text::SpecialToken& s : tokenizer.special_tokens()) out.push_back(s.content);
  return out;
}

// encode(text[0, p)) followed by encode(text[p, end)).
std::vector<uint32_t> encode_cut(const text::Tokenizer& tokenizer, std::string_view text, size_t p) {
  std::vector<uint32_t> ids = tokenizer.encode(text.substr(0, p));
  const std::vector<uint32_t> right = tokenizer.encode(text.substr(p));
  ids.insert(ids.end(), right.begin(), right.end());
  return ids;
}

// The corpus, generated multilingual text with CRLF and tab runs, and "<|endoftext|>" between
// documents and inside lines.
std::string mixed_text(std::mt19937& rng) {
  std::string text = read_file(kData + "corpus.txt").substr(0, 60000);
  text += "<|endoftext|>";
  text += test::synthetic_text(30000, rng());
  text += "end.<|endoftext|>\nNext doc\n<|endoftext|><|endoftext|>x\n\ny z\n \nw\t\nv\r\nu";
  return text;
}

}  // namespace

TEST_CASE("the safe cuts by rule, on hand-made strings") {
  const TextCuts cuts({"<|endoftext|>"});
  CHECK(cuts.is_cut("ab cd", 2));           // "ab" | " cd"
  CHECK(cuts.is_cut("ab\ncd", 2));          // "ab" | "\ncd"
  CHECK(cuts.is_cut("ab \ncd", 3));         // "ab " | "\ncd": before the run's last byte
  CHECK_FALSE(cuts.is_cut("ab \ncd", 2));   // before a whitespace byte that whitespace follows
  CHECK_FALSE(cuts.is_cut("ab \ncd", 4));   // after the run: the left part would end in " \n"
  CHECK_FALSE(cuts.is_cut("ab cd", 3));      // inside a word
  CHECK_FALSE(cuts.is_cut("ab \xc3\xa9", 2)); // a non-ASCII byte follows
  CHECK_FALSE(cuts.is_cut("\xa0 cd", 1));    // a non-ASCII byte precedes
  CHECK_FALSE(cuts.is_cut("ab ", 2));        // kind 1 needs the byte after the whitespace
  CHECK_FALSE(cuts.is_cut("ab\n\n<|endoftext|>", 3));  // a special token ends the segment: "\n\n" is one piece
  CHECK_FALSE(cuts.is_cut("ab\n\n<|end", 3));           // ... or may (the text may go on)
  CHECK(cuts.is_cut("ab\n\n<|x", 3));
  CHECK(cuts.is_cut("a<|endoftext|>", 14));
  CHECK(cuts.is_cut("a<|endoftext|>b", 14));
  CHECK_FALSE(cuts.is_cut("a<|endoftext|>b", 13));
  CHECK(cuts.last_cut("x y z<|endoftext|>tail") == 18);
  CHECK(cuts.last_cut("x y z<|endoftext|>ta il") == 20);
  CHECK(cuts.last_cut("one two\n\nthree") == 8);
  CHECK(cuts.last_cut("nocut  \n ") == 0);
  CHECK(cuts.last_cut("") == 0);
  // A special token with whitespace turns whitespace cuts off; a bordered or second special token
  // turns the special-token cut off.
  CHECK(TextCuts({"<sep>\n"}).last_cut("a b<sep>\nc") == 9);
  CHECK(TextCuts({"<sep> ", "<x>"}).last_cut("a b<x>c") == 0);
  CHECK(TextCuts({"abab"}).last_cut("xxababxx") == 0);
  CHECK(TextCuts({"<a>", "<b>"}).last_cut("x<a>y") == 0);
  CHECK(TextCuts({}).last_cut("x yz") == 1);
}

TEST_CASE("every safe cut leaves the ids unchanged, and a refused cut can change them") {
  const text::Tokenizer& tokenizer = hf_tokenizer();
  REQUIRE(tokenizer.end_of_text().has_value());
  const TextCuts cuts(specials_of(tokenizer));
  std::mt19937 rng = testing::seeded_rng();
  const std::string text = mixed_text(rng);
  // Windows of the text around each safe cut, cut there: ids equal the window's.
  int64_t checked = 0;
  for (size_t p = 1; p < text.size(); ++p) {
    const size_t begin = p - std::min<size_t>(p, 1 + rng() % 120), end = std::min(text.size(), p + 1 + rng() % 120);
    const std::string_view window = std::string_view(text).substr(begin, end - begin);
    if (!cuts.is_cut(window, p - begin)) continue;
    REQUIRE_MESSAGE(encode_cut(tokenizer, window, p - begin) == tokenizer.encode(window),
                    "cut at ", p - begin, " of \"", std::string(window), "\"");
    ++checked;
  }
  MESSAGE(checked, " safe cuts checked");
  CHECK(checked > 10000);
  // Cuts the rules refuse do change the ids (so the check above can fail): inside a word, after a
  // whitespace run, inside a special token.
  CHECK(encode_cut(tokenizer, "the question", 6) != tokenizer.encode("the question"));
  CHECK(encode_cut(tokenizer, "x     the", 6) != tokenizer.encode("x     the"));
  CHECK(encode_cut(tokenizer, "end.\n\n<|endoftext|>", 5) != tokenizer.encode("end.\n\n<|endoftext|>"));
  CHECK(encode_cut(tokenizer, "x<|endoftext|>y", 5) != tokenizer.encode("x<|endoftext|>y"));
}

TEST_CASE("for_each_chunk over small blocks gives the whole input's ids") {
  const text::Tokenizer& tokenizer = hf_tokenizer();
  const TextCuts cuts(specials_of(tokenizer));
  std::mt19937 rng = testing::seeded_rng();
  const std::string text = mixed_text(rng);
  const std::vector<uint32_t> whole = tokenizer.encode(text);
  for (const size_t block : {size_t(1), size_t(7), size_t(333), size_t(4096), size_t(1) << 20}) {
    std::istringstream in(text);
    std::vector<uint32_t> ids;
    size_t chunks = 0;
    const uint64_t bytes = samples::for_each_chunk(in, "mixed", block, &cuts, [&](std::string_view chunk) {
      const std::vector<uint32_t> part = tokenizer.encode(chunk);
      ids.insert(ids.end(), part.begin(), part.end());
      ++chunks;
    });
    CAPTURE(block);
    CHECK(bytes == text.size());
    CHECK(ids == whole);
    CHECK(tokenizer.decode(ids) == text);
    if (block < text.size()) CHECK(chunks > 1);
  }
  // The bytes bits per byte divides by (samples/gpt_datasets.h): the ids' token lengths add up to the
  // text's bytes exactly, special tokens included.
  std::vector<uint32_t> lengths(tokenizer.vocab_size());
  for (uint32_t id = 0; id < lengths.size(); ++id) lengths[id] = uint32_t(tokenizer.token_bytes(id).size());
  const std::vector<int64_t> whole_ids(whole.begin(), whole.end());
  CHECK(samples::TokenBytes(lengths).bytes(whole_ids) == int64_t(text.size()));
  // Byte-level (no cuts object): every position is a cut; the chunks are the input.
  std::istringstream in(text);
  std::string again;
  samples::for_each_chunk(in, "mixed", 1000, nullptr, [&](std::string_view chunk) { again += chunk; });
  CHECK(again == text);
}

TEST_CASE("last_cut after a settled prefix equals a full scan, and a stream without cuts is scanned once") {
  const TextCuts cuts({"<|endoftext|>", "<pad>"});
  const TextCuts one({"<|endoftext|>"});
  std::mt19937 rng = testing::seeded_rng();
  // Texts of few kinds of bytes, so that cuts, near-cuts and special tokens cut short all occur; for
  // every prefix without a cut, scanning after it gives what a full scan gives.
  static const char* parts[] = {"a", "b", " ", "\n", "<|endoftext|>", "<|endo", "<pad>", "<", "\xc3\xa9", "."};
  for (int round = 0; round < 300; ++round) {
    std::string text;
    for (int n = int(rng() % 30); n > 0; --n) text += parts[rng() % std::size(parts)];
    for (const TextCuts* c : {&cuts, &one}) {
      for (size_t settled = 0; settled <= text.size(); ++settled) {
        if (settled > 0 && c->last_cut(std::string_view(text).substr(0, settled)) != 0) break;
        CAPTURE(text);
        CAPTURE(settled);
        REQUIRE(c->last_cut(text, settled) == c->last_cut(text));
      }
    }
  }
  // 64 MiB without a safe cut (no ASCII whitespace) in 4 KiB blocks: one chunk, at the end. Rescanning
  // the pending text at every block (as before) is 16,384 scans of up to 64 MiB: many minutes, not a moment.
  std::string block(4096, 'x');
  std::string stream;
  for (int i = 0; i < 16384; ++i) stream += block;
  std::istringstream in(stream);
  size_t chunks = 0, bytes = 0;
  samples::for_each_chunk(in, "no cuts", block.size(), &one, [&](std::string_view chunk) {
    ++chunks;
    bytes += chunk.size();
  });
  CHECK(chunks == 1);
  CHECK(bytes == stream.size());
}
