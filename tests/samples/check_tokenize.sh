#!/usr/bin/env bash
# The tokenize tool end to end: encode gives Hugging Face's ids (a vector of tests/data/text), decode
# gives the bytes back (the whole corpus round-trips), --train writes tokenizer.json or vocab.json +
# merges.txt that encode like HF's file, --special in both spellings, --help; and bad input -- no
# mode, a missing or broken tokenizer file, ids that are not numbers or not in the vocabulary, bad
# training settings -- is one line "tokenize: error: ..." with exit code 2.
# Usage: check_tokenize.sh build/bin/tokenize tests/data/text
set -uo pipefail
bin=$1
data=$2
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
hf=$data/hf_tokenizer.json

# --help: exit 0, every mode's flag listed.
help=$("$bin" --help) || fail "--help exited $?"
for flag in --tokenizer --decode --train --vocab-size --min-frequency --special --output; do
  grep -q -- "$flag" <<<"$help" || fail "--help does not list $flag"
done

# Encode: the ids Hugging Face gave for "Hello, world!" (vectors.jsonl), on one line.
expected=$(grep -F '{"text": "Hello, world!", "ids": [' "$data/vectors.jsonl" | sed 's/.*"ids": \[\(.*\)\]}/\1/; s/,//g')
[[ -n $expected ]] || fail "no \"Hello, world!\" vector in $data/vectors.jsonl"
got=$(printf 'Hello, world!' | "$bin" --tokenizer "$hf") || fail "encode exited $?"
[[ $got == "$expected" ]] || fail "encode gave '$got', HF gave '$expected'"
[[ $(printf 'Hello, world!' | "$bin" --tokenizer "$hf" | wc -l) -eq 1 ]] || fail "encode output is not one line"
[[ $(printf 'a<|endoftext|>b' | "$bin" --tokenizer "$hf") == *" 0 "* ]] || fail "<|endoftext|> is not id 0 inside text"
[[ $(printf '' | "$bin" --tokenizer "$hf") == "" ]] || fail "empty input should give an empty line"

# Decode: the corpus, encoded and decoded, is byte for byte the corpus; ids may be split by any whitespace.
"$bin" --tokenizer "$hf" <"$data/corpus.txt" >"$tmp/corpus.ids" || fail "encoding the corpus exited $?"
"$bin" --tokenizer "$hf" --decode <"$tmp/corpus.ids" >"$tmp/corpus.txt" || fail "decoding the corpus exited $?"
cmp -s "$data/corpus.txt" "$tmp/corpus.txt" || fail "the corpus does not round-trip through encode and --decode"
tr ' ' '\n' <"$tmp/corpus.ids" | sed 's/^/\t /' | "$bin" --tokenizer "$hf" --decode | cmp -s - "$data/corpus.txt" ||
  fail "--decode of one id per line (tabs, spaces) differs"

# Train: the corpus at HF's settings gives HF's model (same ids on the corpus), as tokenizer.json and
# as vocab.json + merges.txt (-o a directory).
out=$("$bin" --train "$data/corpus.txt" --vocab-size 2000 --min-frequency 2 -o "$tmp/t.json") || fail "--train exited $?: $out"
grep -q "trained 2000 tokens (1743 merges, 1 special)" <<<"$out" || fail "unexpected --train summary: $out"
"$bin" --tokenizer "$tmp/t.json" <"$data/corpus.txt" | cmp -s - "$tmp/corpus.ids" || fail "the trained tokenizer.json encodes the corpus unlike hf_tokenizer.json (HF's model, encoded by halfgrad)"
mkdir "$tmp/gpt2"
"$bin" --train "$data/corpus.txt" --vocab-size 2000 -o "$tmp/gpt2" >/dev/null || fail "--train -o DIR exited $?"
[[ -f $tmp/gpt2/vocab.json && -f $tmp/gpt2/merges.txt ]] || fail "-o DIR did not write vocab.json + merges.txt"
"$bin" --tokenizer "$tmp/gpt2" <"$data/corpus.txt" | cmp -s - "$tmp/corpus.ids" || fail "the trained vocab.json + merges.txt encode the corpus unlike hf_tokenizer.json (HF's model, encoded by halfgrad)"
# --special: comma-separated and repeated give the same ids 0, 1, 2; "" gives none.
"$bin" --train "$data/corpus.txt" --vocab-size 300 --special "<|endoftext|>,<pad>" --special "<mask>" -o "$tmp/s.json" >/dev/null ||
  fail "--train with --special exited $?"
[[ $(printf '<mask><pad><|endoftext|>' | "$bin" --tokenizer "$tmp/s.json") == "2 1 0" ]] || fail "--special tokens are not ids 0, 1, 2"
"$bin" --train "$data/corpus.txt" --vocab-size 300 --special "" -o "$tmp/none.json" >/dev/null || fail "--special \"\" exited $?"
[[ $(printf '<|endoftext|>' | "$bin" --tokenizer "$tmp/none.json" | wc -w) -gt 1 ]] || fail "--special \"\" still has a special token"

# Bad input: exit code 2 and one line starting with the expected words.
expect_error() {
  local input=$1 expected=$2
  shift 2
  local err code
  err=$(printf '%s' "$input" | "$bin" "$@" 2>&1 >/dev/null)
  code=$?
  [[ $code -eq 2 ]] || fail "'$*' exited $code, expected 2 ($err)"
  [[ $(wc -l <<<"$err") -eq 1 ]] || fail "'$*' printed more than one line: $err"
  [[ $err == "tokenize: error: $expected"* ]] || fail "'$*' said '$err', expected 'tokenize: error: $expected...'"
}
expect_error "" "expected --tokenizer FILE"
expect_error "" "--train and --tokenizer exclude each other" --tokenizer "$hf" --train "$data/corpus.txt" -o "$tmp/x.json"
expect_error "" "--decode needs --tokenizer" --train "$data/corpus.txt" --decode -o "$tmp/x.json"
expect_error "" "--train needs -o" --train "$data/corpus.txt"
expect_error "" "-o, --vocab-size, --min-frequency and --special go with --train" --tokenizer "$hf" --vocab-size 500
expect_error "1 2" "--tokenizer $tmp/missing.json:" --tokenizer "$tmp/missing.json"
printf '{"model": {"type": "WordPiece"}}' >"$tmp/broken.json"
expect_error "1 2" "--tokenizer $tmp/broken.json:" --tokenizer "$tmp/broken.json" --decode
expect_error "5 17 abc 3" '--decode: "abc" at item 3 (byte 5) is not a token id' --tokenizer "$hf" --decode
expect_error "5 -1" '--decode: "-1" at item 2 (byte 2) is not a token id' --tokenizer "$hf" --decode
expect_error "5 2.5" '--decode: "2.5" at item 2' --tokenizer "$hf" --decode
expect_error "  2000" "--decode: id 2000 at item 1 (byte 2) is not in the vocabulary (2000 tokens" --tokenizer "$hf" --decode
expect_error "1 99999999999999999999999" "--decode: id 99999999999999999999999 at item 2" --tokenizer "$hf" --decode
expect_error "" "--vocab-size 100 is below 256 bytes + 1 special token(s)" --train "$data/corpus.txt" --vocab-size 100 -o "$tmp/x.json"
expect_error "" "--vocab-size must be >= 1" --train "$data/corpus.txt" --vocab-size 0 -o "$tmp/x.json"
expect_error "" "--special \"a,,b\" has an empty token" --train "$data/corpus.txt" --special "a,,b" -o "$tmp/x.json"
expect_error "" "train_bpe: special token \"!\" is spelled like the byte token" --train "$data/corpus.txt" --special "!" -o "$tmp/x.json"
expect_error "" "--train" --train "$tmp/no-such-corpus.txt" -o "$tmp/x.json"
expect_error "" "-o $tmp/no-such-dir/x.json:" --train "$data/corpus.txt" --vocab-size 300 -o "$tmp/no-such-dir/x.json"
expect_error "" "unknown flag --bogus" --bogus
echo "tokenize checks ok"
