// Word lists for character models (data/words.h): only words of 'a'..'z' are kept (the rest counted), the
// splits are a seeded partition of the words, and CharContextDataset yields every (3 characters before,
// next character) of each word and its end, '.'-padded, as a reference written here spells them out.
// Missing files and files without a usable word are one error naming the file.
#include <doctest/doctest.h>

#include <set>

#include "data/words.h"
#include "support/check_error.h"
#include "support/temp_dir.h"
#include "support/test_seed.h"

using namespace hg;
using namespace hg::data;

TEST_CASE("read_words keeps the words of a..z within the length and counts the rest") {
  const test::TempDir dir;
  const std::string path =
      dir.write("words", "apple\nBanana\ncan't\nemma\r\n\nzz\nverylongwordindeed\nx\n\xc3\xa9t\xc3\xa9\n");
  const WordList list = read_words(path, 10);
  CHECK(list.words == std::vector<std::string>{"apple", "emma", "zz", "x"});
  CHECK(list.skipped == 5);
  CHECK_ERROR(read_words((dir.path / "none").string()), "cannot open", "/none", "one word per line");
  CHECK_ERROR(read_words(dir.write("caps", "Apple\nBANANA\n")), "has no word of only 'a'..'z'", "among its 2 lines");
}

TEST_CASE("split_words partitions the words by seed; too many held out is an error") {
  std::vector<std::string> words;
  for (int i = 0; i < 50; ++i) words.push_back(std::string(size_t(1 + i % 5), char('a' + i % 26)) + char('a' + i / 26));
  const WordSplits a = split_words(words, 7, 5, testing::fresh_seed()),
                   b = split_words(words, 7, 5, testing::fresh_seed());
  CHECK(a.validation.size() == 7);
  CHECK(a.test.size() == 5);
  CHECK(a.train.size() == 38);
  CHECK(a.train == b.train);
  std::multiset<std::string> all(a.train.begin(), a.train.end());
  all.insert(a.validation.begin(), a.validation.end());
  all.insert(a.test.begin(), a.test.end());
  CHECK(all == std::multiset<std::string>(words.begin(), words.end()));
  CHECK(split_words(words, 7, 5, testing::fresh_seed() + 1).train != a.train);
  CHECK_ERROR(split_words(words, 30, 20, 1), "30 validation and 20 test words of 50", "at least one for training");
}

TEST_CASE("CharContextDataset: every character and the end, after the 3 before it") {
  const CharContextDataset set({"ab", "emma"}, 3);
  REQUIRE(set.size() == 3 + 5);
  // (context, target) as text: "..." -> a, "..a" -> b, ".ab" -> '.', then emma.
  const std::vector<std::pair<std::string, char>> expected{{"...", 'a'}, {"..a", 'b'}, {".ab", '.'}, {"...", 'e'},
                                                           {"..e", 'm'}, {".em", 'm'}, {"emm", 'a'}, {"mma", '.'}};
  for (int64_t i = 0; i < set.size(); ++i) {
    int64_t context[3] = {-1, -1, -1}, target = -1;
    set.get(i, {context, &target});
    std::string text;
    for (int64_t id : context) text.push_back(id_char(id));
    CHECK(text == expected[size_t(i)].first);
    CHECK(id_char(target) == expected[size_t(i)].second);
  }
  CHECK(set.fields()[0].shape == Shape{3});
  CHECK(char_id('.') == 0);
  CHECK(char_id('z') == 26);
  CHECK_ERROR(char_id('A'), "'A' is not '.' or 'a'..'z'");
}
