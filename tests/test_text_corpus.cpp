// Word- and character-level text (data/text_corpus.h): tokens as the rules in the header spell them out,
// a vocabulary ranked by count with "<unk>" and "<eos>" first, contiguous splits by lines with the vocabulary
// from the training lines only (unseen words become "<unk>" and are counted), and a random text whose
// encoded splits decode back to its own tokens. Hostile files and options are one error naming them.
#include <doctest/doctest.h>

#include <random>

#include "data/text_corpus.h"
#include "support/check_error.h"
#include "support/temp_dir.h"
#include "support/test_seed.h"

using namespace hg;
using namespace hg::data;

using Tokens = std::vector<std::string>;

TEST_CASE("word_tokens: words, punctuation alone, <eos> per line with a token, UTF-8 words whole") {
  CHECK(word_tokens("Hello, world!\n\n  x_1 = f(a)  \nit's caf\xc3\xa9.") ==
        Tokens{"Hello", ",", "world", "!", "<eos>", "x_1", "=", "f", "(", "a", ")", "<eos>", "it's", "caf\xc3\xa9", ".",
               "<eos>"});
  CHECK(word_tokens("").empty());
  CHECK(word_tokens("\n \t\r\n").empty());
  CHECK(word_tokens("a\r\nb") == Tokens{"a", "<eos>", "b", "<eos>"});
}

TEST_CASE("char_tokens: one token per UTF-8 character, newlines included, a cut sequence kept as is") {
  CHECK(char_tokens("ab\n\xc3\xa9\xe2\x82\xac") == Tokens{"a", "b", "\n", "\xc3\xa9", "\xe2\x82\xac"});
  CHECK(char_tokens("x\xe2\x82") == Tokens{"x", "\xe2\x82"});
}

TEST_CASE("Vocabulary: <unk>, <eos>, then by count with ties in byte order, capped by size and min_count") {
  const Tokens tokens{"b", "a", "c", "a", "b", "a", "d", "<eos>", "<unk>", "c"};
  const Vocabulary v(tokens, 5, 1, true);
  REQUIRE(v.size() == 5);
  CHECK(v.token(0) == "<unk>");
  CHECK(v.token(1) == "<eos>");
  CHECK(v.token(2) == "a");  // 3
  CHECK(v.token(3) == "b");  // 2, before c's 2
  CHECK(v.token(4) == "c");
  CHECK(v.id("d") == 0);
  CHECK(v.encode({"c", "zz", "a"}) == std::vector<uint32_t>{4, 0, 2});
  const Vocabulary frequent(tokens, 100, 2, false);
  CHECK(frequent.size() == 4);  // <unk>, a, b, c: d is seen once
  CHECK(frequent.id("<eos>") == 0);
  CHECK_ERROR(v.token(5), "id 5 is outside the vocabulary of 5");
  CHECK_ERROR(Vocabulary(tokens, 1, 1, true), "max_size 1", "at least 2");
  CHECK_ERROR(Vocabulary(tokens, 10, 0, true), "min_count 0", "at least 1");
}

TEST_CASE("load_text_corpus splits lines in order and builds the vocabulary from the training lines") {
  const test::TempDir dir;
  // 20 lines: 16 training, 2 validation, 2 test.
  std::string text;
  for (int i = 0; i < 16; ++i) text += "the cat sat\n";
  text += "the dog sat\nthe cat\nsat dog dog\nthe end\n";
  const TextCorpus c = load_text_corpus(dir.write("t.txt", text), {TextLevel::words, 0.1, 0.1, 100, 1});
  CHECK(c.lines == 20);
  CHECK(c.bytes == int64_t(text.size()));
  CHECK(c.vocabulary->size() == 5);  // <unk> <eos> cat sat the (16 each, in byte order)
  CHECK(c.vocabulary->token(2) == "cat");
  CHECK(c.train->size() == 16 * 4);
  CHECK(*c.validation == std::vector<uint32_t>{4, 0, 3, 1, 4, 2, 1});  // "dog" is <unk>
  CHECK(*c.test == std::vector<uint32_t>{3, 0, 0, 1, 4, 0, 1});
  CHECK(c.train_unknown == 0);
  CHECK(c.validation_unknown == 1);
  CHECK(c.test_unknown == 3);
  const TextCorpus chars = load_text_corpus(dir.write("c.txt", text), {TextLevel::chars, 0.1, 0.1, 100, 1});
  CHECK(chars.vocabulary->id("\n") != 0);
  CHECK(chars.vocabulary->id("<eos>") == 0);
  CHECK(chars.train->size() == 16 * 12);
  CHECK(chars.validation_unknown == 3);  // d, o, g
}

TEST_CASE("load_text_corpus: a random text's splits decode to its own tokens in order") {
  std::mt19937_64 rng(testing::fresh_seed());
  const Tokens words{"alpha", "beta", "gamma", "delta", "(", ")", ",", "x1"};
  std::string text;
  for (int line = 0; line < 200; ++line) {
    const int n = int(rng() % 6);
    for (int k = 0; k < n; ++k) text += words[rng() % words.size()] + (rng() % 2 ? " " : "  ");
    text += "\n";
  }
  const test::TempDir dir;
  const TextCorpus c = load_text_corpus(dir.write("r.txt", text), {TextLevel::words, 0.2, 0.1, 1000, 1});
  std::vector<uint32_t> all(c.train->begin(), c.train->end());
  all.insert(all.end(), c.validation->begin(), c.validation->end());
  all.insert(all.end(), c.test->begin(), c.test->end());
  Tokens decoded;
  for (uint32_t id : all) decoded.push_back(c.vocabulary->token(id));
  const Tokens expected = word_tokens(text);
  CHECK(decoded.size() == expected.size());
  for (size_t i = 0; i < std::min(decoded.size(), expected.size()); ++i)
    if (decoded[i] != "<unk>") CHECK(decoded[i] == expected[i]);
}

TEST_CASE("load_text_corpus: missing, empty, binary and too-small files and bad fractions are errors naming them") {
  const test::TempDir dir;
  CHECK_ERROR(load_text_corpus((dir.path / "none.txt").string(), {}), "cannot read", "none.txt", "a text file");
  CHECK_ERROR(load_text_corpus(dir.write("empty.txt", ""), {}), "empty.txt", "has no words", "training split");
  CHECK_ERROR(load_text_corpus(dir.write("binary.bin", std::string("ELF\x01\0\0x", 7)), {}), "binary.bin",
              "NUL byte at offset 4", "not a binary one");
  CHECK_ERROR(load_text_corpus(dir.write("blank.txt", "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n"), {}), "blank.txt",
              "has no words");
  std::string text;
  for (int i = 0; i < 19; ++i) text += "word\n";
  text += "\n";  // the one test line is blank
  CHECK_ERROR(load_text_corpus(dir.write("short.txt", text), {TextLevel::words, 0.05, 0.05, 10, 1}), "short.txt",
              "the test split", "holds no words");
  CHECK_ERROR(load_text_corpus(dir.write("ok.txt", "a\n"), {TextLevel::words, 0.6, 0.5, 10, 1}),
              "validation fraction 0.6 and test fraction 0.5", "leaving lines for training");
  CHECK_ERROR(load_text_corpus(dir.write("ok2.txt", "a\n"), {TextLevel::words, -0.1, 0.0, 10, 1}),
              "validation fraction -0.1");
}
