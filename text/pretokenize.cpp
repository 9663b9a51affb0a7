// GPT-2's pattern as a hand-written scanner: at each position, decide which alternative of the
// pattern matches first (contraction, optional space + letters / numbers / others, whitespace) and
// consume its greedy run. ASCII is classified by a 128-entry table, the rest by classify().
#include "text/pretokenize.h"

#include <array>

#include "text/unicode_tables.h"
#include "text/utf8.h"

namespace hg::text {
namespace {

constexpr std::array<CharClass, 128> make_ascii_table() {
  std::array<CharClass, 128> t{};
  for (int c = 0; c < 128; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) t[c] = CharClass::kLetter;
    else if (c >= '0' && c <= '9') t[c] = CharClass::kNumber;
    else if ((c >= 0x09 && c <= 0x0D) || c == ' ') t[c] = CharClass::kSpace;
    else t[c] = CharClass::kOther;
  }
  return t;
}
constexpr std::array<CharClass, 128> kAscii = make_ascii_table();

struct Char {
  CharClass cls;
  size_t length;
};

// The character at byte offset `i` of `s` (i < s.size()): its class and byte length.
inline Char char_at(std::string_view s, size_t i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  if (*p < 0x80) return {kAscii[*p], 1};
  const Utf8Char c = decode_utf8(p, s.size() - i);
  if (!c.valid) return {CharClass::kOther, 1};
  return {classify(c.cp), c.length};
}

// The end of the run of characters of class `cls` that starts at `i`.
inline size_t run_end(std::string_view s, size_t i, CharClass cls) {
  while (i < s.size()) {
    const Char c = char_at(s, i);
    if (c.cls != cls) break;
    i += c.length;
  }
  return i;
}

// The length of the contraction ('s 't 're 've 'm 'll 'd) at `i`, or 0.
inline size_t contraction(std::string_view s, size_t i) {
  if (s[i] != '\'' || i + 1 >= s.size()) return 0;
  const char a = s[i + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= s.size()) return 0;
  const char b = s[i + 2];
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

}  // namespace

bool PieceSplitter::next(std::string_view& piece) {
  const std::string_view s = text_;
  const size_t start = pos_;
  if (start >= s.size()) return false;
  size_t end;
  if (const size_t k = contraction(s, start); k > 0) {
    end = start + k;  // 's|'t|'re|'ve|'m|'ll|'d
  } else {
    Char c = char_at(s, start);
    size_t body = start;  // where the letters / numbers / others begin
    if (s[start] == ' ' && start + 1 < s.size()) {
      const Char after = char_at(s, start + 1);
      if (after.cls != CharClass::kSpace) {  // " ?" followed by a letter, number or other
        c = after;
        body = start + 1;
      }
    }
    if (c.cls != CharClass::kSpace) {
      end = run_end(s, body, c.cls);  // ` ?\p{L}+`, ` ?\p{N}+` or ` ?[^\s\p{L}\p{N}]+`
    } else {
      // A whitespace run [start, run). `\s+(?!\S)`: the whole run at the end of the text, else the run
      // less its last character when that leaves at least one; otherwise `\s+` takes the one character.
      size_t run = start, last = start;
      while (run < s.size()) {
        const Char w = char_at(s, run);
        if (w.cls != CharClass::kSpace) break;
        last = run;
        run += w.length;
      }
      end = (run == s.size() || last == start) ? run : last;
    }
  }
  piece = s.substr(start, end - start);
  pos_ = end;
  return true;
}

std::vector<std::string_view> pretokenize(std::string_view text) {
  std::vector<std::string_view> pieces;
  PieceSplitter splitter(text);
  std::string_view piece;
  while (splitter.next(piece)) pieces.push_back(piece);
  return pieces;
}

}  // namespace hg::text
