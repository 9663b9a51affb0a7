#pragma once
// Strict UTF-8 decoding of one character (RFC 3629: no overlong forms, no surrogates, nothing above
// U+10FFFF). A byte that does not start a well-formed sequence decodes as an invalid character of
// length 1, so every byte string splits into characters and invalid single bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hg::text {

struct Utf8Char {
  char32_t cp = 0;    // the code point (0xFFFD for an invalid byte)
  uint8_t length = 1;  // bytes consumed: 1..4
  bool valid = true;
};

inline Utf8Char decode_utf8(const unsigned char* p, size_t available) {
  const unsigned char b0 = p[0];
  if (b0 < 0x80) return {b0, 1, true};
  const Utf8Char invalid{0xFFFD, 1, false};
  auto cont = [&](size_t i) { return i < available && (p[i] & 0xC0) == 0x80; };
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (!cont(1)) return invalid;
    return {char32_t(b0 & 0x1F) << 6 | (p[1] & 0x3F), 2, true};
  }
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (!cont(1) || !cont(2)) return invalid;
    const char32_t cp = char32_t(b0 & 0x0F) << 12 | char32_t(p[1] & 0x3F) << 6 | (p[2] & 0x3F);
    if (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF)) return invalid;
    return {cp, 3, true};
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return invalid;
    const char32_t cp =
        char32_t(b0 & 0x07) << 18 | char32_t(p[1] & 0x3F) << 12 | char32_t(p[2] & 0x3F) << 6 | (p[3] & 0x3F);
    if (cp < 0x10000 || cp > 0x10FFFF) return invalid;
    return {cp, 4, true};
  }
  return invalid;
}

// Whether `s` is entirely well-formed UTF-8; `bad_offset` (if given) gets the first bad byte's offset.
inline bool is_valid_utf8(std::string_view s, size_t* bad_offset = nullptr) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const Utf8Char c = decode_utf8(p + i, s.size() - i);
    if (!c.valid) {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    i += c.length;
  }
  return true;
}

// Appends the UTF-8 encoding of a valid code point.
inline void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

}  // namespace hg::text
