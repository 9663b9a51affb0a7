// The byte alphabet as two tables built once: byte -> code point (256 entries) and code point ->
// byte for U+0000..U+01FF (every character of the alphabet is below U+0144).
#include "text/byte_alphabet.h"

#include <array>

#include "text/utf8.h"

namespace hg::text {
namespace {

struct Alphabet {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 0x200> to_byte{};
  Alphabet() {
    to_byte.fill(-1);
    const auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE); };
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) to_char[b] = printable(b) ? char32_t(b) : next++;
    for (int b = 0; b < 256; ++b) to_byte[to_char[b]] = int16_t(b);
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

char32_t byte_to_char(unsigned char b) { return alphabet().to_char[b]; }

std::optional<unsigned char> char_to_byte(char32_t cp) {
  if (cp >= 0x200 || alphabet().to_byte[cp] < 0) return std::nullopt;
  return static_cast<unsigned char>(alphabet().to_byte[cp]);
}

std::string bytes_to_spelling(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) append_utf8(out, byte_to_char(static_cast<unsigned char>(c)));
  return out;
}

std::optional<std::string> spelling_to_bytes(std::string_view spelling) {
  std::string out;
  out.reserve(spelling.size());
  const auto* p = reinterpret_cast<const unsigned char*>(spelling.data());
  for (size_t i = 0; i < spelling.size();) {
    const Utf8Char c = decode_utf8(p + i, spelling.size() - i);
    if (!c.valid) return std::nullopt;
    const std::optional<unsigned char> b = char_to_byte(c.cp);
    if (!b) return std::nullopt;
    out += static_cast<char>(*b);
    i += c.length;
  }
  return out;
}

}  // namespace hg::text
