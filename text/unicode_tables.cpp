// The generated code-point ranges (unicode_tables.inc) and classify(): a byte per code point for the
// BMP, filled once from the ranges, and a binary search over the ranges for the planes above.
#include "text/unicode_tables.h"

#include <algorithm>
#include <array>
#include <span>

namespace hg::text {
namespace {

#include "text/unicode_tables.inc"

bool in_ranges(std::span<const CodePointRange> ranges, char32_t cp) {
  const auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                                   [](char32_t c, const CodePointRange& r) { return c < r.first; });
  return it != ranges.begin() && cp <= std::prev(it)->last;
}

CharClass classify_slow(char32_t cp) {
  if (in_ranges(kLetterRanges, cp)) return CharClass::kLetter;
  if (in_ranges(kNumberRanges, cp)) return CharClass::kNumber;
  if (in_ranges(kSpaceRanges, cp)) return CharClass::kSpace;
  return CharClass::kOther;
}

struct BmpTable {
  std::array<CharClass, 0x10000> cls;
  BmpTable() {
    cls.fill(CharClass::kOther);
    const auto fill = [&](std::span<const CodePointRange> ranges, CharClass c) {
      for (const CodePointRange& r : ranges) {
        for (char32_t cp = r.first; cp <= r.last && cp < 0x10000; ++cp) cls[cp] = c;
      }
    };
    fill(kLetterRanges, CharClass::kLetter);
    fill(kNumberRanges, CharClass::kNumber);
    fill(kSpaceRanges, CharClass::kSpace);
  }
};

}  // namespace

CharClass classify(char32_t cp) {
  static const BmpTable bmp;
  if (cp < 0x10000) return bmp.cls[cp];
  if (cp > 0x10FFFF) return CharClass::kOther;
  return classify_slow(cp);
}

const char* unicode_version() { return HG_TEXT_UNICODE_VERSION; }

}  // namespace hg::text
