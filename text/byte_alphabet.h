#pragma once
// GPT-2's byte alphabet (bytes_to_unicode): every byte value is spelled as one printable Unicode
// character, so tokens can be written as JSON strings and split on spaces in merges.txt. The bytes
// '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF stand for themselves; the other 68 bytes (controls,
// space, DEL, U+00A0, U+00AD, ...) map in increasing order to U+0100, U+0101, ... (so ' ' is 'Ġ',
// U+0120, and '\n' is 'Ċ', U+010A). vocab.json, merges.txt and tokenizer.json spell tokens this way.
#include <optional>
#include <string>
#include <string_view>

namespace hg::text {

// The code point that spells byte `b`.
char32_t byte_to_char(unsigned char b);
// The byte a code point spells, if it is one of the 256 characters of the alphabet.
std::optional<unsigned char> char_to_byte(char32_t cp);

// Raw bytes -> their spelling (UTF-8).
std::string bytes_to_spelling(std::string_view bytes);
// A spelling (UTF-8) -> the raw bytes; nullopt when it is not valid UTF-8 or has a character outside
// the alphabet.
std::optional<std::string> spelling_to_bytes(std::string_view spelling);

}  // namespace hg::text
