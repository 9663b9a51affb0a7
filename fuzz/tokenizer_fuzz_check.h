#pragma once
// What both tokenizer fuzz targets check on a file they managed to load: a fixed text (specials,
// contractions, whitespace runs, several scripts, invalid UTF-8) encodes to ids below vocab_size()
// and decodes back to the same bytes, and the tokenizer written back as tokenizer.json loads to the
// same encoding. A failure aborts (a finding).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

#include "kernels/error.h"
#include "text/tokenizer.h"

namespace hg::fuzz {

inline void require_tokenizer(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "tokenizer fuzz: %s\n", what);
    std::abort();
  }
}

inline void check_loaded_tokenizer(const text::Tokenizer& tok, const std::string& scratch_path) {
  static const std::string kText =
      "Hello, world! I'm here; they've 42 apples\xe2\x80\x94 don't\t\ttabs  \n\n  <|endoftext|>x \xff\xfe\xc3 "
      "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e caf\xc3\xa9 \xf0\x9f\x98\x80!! 3.14159 <|endoftext|";
  const std::vector<uint32_t> ids = tok.encode(kText);
  for (uint32_t id : ids) require_tokenizer(id < tok.vocab_size(), "encode produced an id past the vocabulary");
  require_tokenizer(tok.decode(ids) == kText, "decode(encode(text)) != text");
  // Written back as tokenizer.json (when the format can hold it) it loads to the same encoding.
  try {
    tok.save_json(scratch_path);
  } catch (const Error&) {
    return;  // e.g. a special token that is not UTF-8: refused with a message, no file written
  }
  const text::Tokenizer again = text::Tokenizer::load(scratch_path);
  ::unlink(scratch_path.c_str());
  require_tokenizer(again.encode(kText) == ids, "save_json -> load changed the encoding");
  require_tokenizer(again.vocab_size() == tok.vocab_size() && again.merges() == tok.merges(),
                    "save_json -> load changed the vocabulary or the merges");
}

}  // namespace hg::fuzz
