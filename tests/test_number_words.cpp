// seq2seq's task (samples/zoo/number_words.h): English words of numbers against known answers, the example
// fields (teacher forcing shifted by one, <eos>, ignored padding), the splits disjoint and deterministic,
// and the held-out sets of distinct numbers.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "samples/zoo/number_words.h"
#include "support/check_error.h"
#include "support/test_seed.h"

using namespace hg;
using namespace hg::samples::zoo;

TEST_CASE("number words: known answers from zero to 999,999") {
  CHECK(number_text(0) == "zero");
  CHECK(number_text(7) == "seven");
  CHECK(number_text(13) == "thirteen");
  CHECK(number_text(20) == "twenty");
  CHECK(number_text(45) == "forty five");
  CHECK(number_text(100) == "one hundred");
  CHECK(number_text(110) == "one hundred ten");
  CHECK(number_text(999) == "nine hundred ninety nine");
  CHECK(number_text(1000) == "one thousand");
  CHECK(number_text(1001) == "one thousand one");
  CHECK(number_text(40213) == "forty thousand two hundred thirteen");
  CHECK(number_text(100000) == "one hundred thousand");
  CHECK(number_text(777777) == "seven hundred seventy seven thousand seven hundred seventy seven");
  CHECK(number_words(777777).size() == 9);  // the longest: kNumberWords - 1 words, then <eos>
  size_t longest = 0;  // every number fits the target with its <eos>
  for (int64_t n = 0; n <= 999999; n += 1 + n % 7) longest = std::max(longest, number_words(n).size());
  CHECK(longest == size_t(kNumberWords - 1));
  CHECK(target_vocabulary().size() == 33);
  CHECK_ERROR(number_words(1000000), "[number_words] 1000000 is outside [0, 999999]");
  CHECK_ERROR(number_words(-1), "is outside [0, 999999]");
}

TEST_CASE("number words dataset: fields, splits and held-out numbers") {
  const uint64_t seed = testing::fresh_seed();
  const NumberWordsDataset train(NumberSplit::train, 2000, seed), validation(NumberSplit::validation, 500, seed),
      test(NumberSplit::test, 500, seed);
  const std::vector<std::string>& vocabulary = target_vocabulary();
  std::set<int64_t> digit_counts;
  for (int64_t i = 0; i < train.size(); ++i) {
    std::vector<int64_t> source(kNumberDigits, -7), decoder_input(kNumberWords, -7), target(kNumberWords, -7);
    train.get(i, {source.data(), decoder_input.data(), target.data()});
    const int64_t n = train.number(i);
    REQUIRE(split_of(n) == NumberSplit::train);
    const std::string digits = std::to_string(n);
    digit_counts.insert(int64_t(digits.size()));
    for (int64_t k = 0; k < kNumberDigits; ++k)
      REQUIRE(source[size_t(k)] == (k < int64_t(digits.size()) ? digits[size_t(k)] - '0' + 1 : kSourcePad));
    const std::vector<std::string> words = number_words(n);
    REQUIRE(decoder_input[0] == kBos);
    for (size_t k = 0; k < size_t(kNumberWords); ++k) {
      if (k < words.size())
        REQUIRE(vocabulary[size_t(target[k])] == words[k]);
      else
        REQUIRE(target[k] == (k == words.size() ? kEos : kIgnoredTarget));
      // Teacher forcing: the decoder reads <bos> then the target's words, one position late.
      if (k > 0) REQUIRE(decoder_input[k] == (k - 1 < words.size() ? target[k - 1] : kTargetPad));
    }
  }
  CHECK(digit_counts == std::set<int64_t>{1, 2, 3, 4, 5, 6});
  // The held-out splits: distinct numbers of their own split, the same for the same seed.
  std::set<int64_t> seen_validation, seen_test;
  for (int64_t i = 0; i < 500; ++i) {
    CHECK(split_of(validation.number(i)) == NumberSplit::validation);
    CHECK(split_of(test.number(i)) == NumberSplit::test);
    seen_validation.insert(validation.number(i));
    seen_test.insert(test.number(i));
  }
  CHECK(seen_validation.size() == 500);
  CHECK(seen_test.size() == 500);
  const NumberWordsDataset again(NumberSplit::validation, 500, seed);
  CHECK(again.number(123) == validation.number(123));
  // About 5% of all numbers in each held-out split.
  int64_t held_out = 0;
  for (int64_t n = 0; n < 100000; ++n) held_out += split_of(n) != NumberSplit::train;
  CHECK(held_out > 9000);
  CHECK(held_out < 11000);
  CHECK_ERROR(NumberWordsDataset(NumberSplit::test, kMaxHeldOut + 1, seed), "held-out numbers asked for");
}
