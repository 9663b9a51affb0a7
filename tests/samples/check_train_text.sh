#!/usr/bin/env bash
# The text flow of `make train-text`, tiny: a corpus (the first 60 KB of tests/data/text/corpus.txt)
# -> tokenize --train (vocabulary 400) -> prepare_data --tokenizer (u16 shards, the tokenizer's
# vocabulary in the header) -> train_gpt on the shards (the model's vocabulary from the header, loss
# per token and bits per byte, finite, in the progress line, the metrics log and the summary; the
# sample decoded) -> generate with the tokenizer. Then the refusals, each one line and exit code 2:
# shards of two vocabularies, --vocab, --load's model and --tokenizer that disagree with the shards,
# prepare_data --dtype u16 for a vocabulary past u16.
# Usage: check_train_text.sh <bin dir> <tests/data/text>
set -uo pipefail
source "$(dirname "$0")/gpt2_byte_vocab.sh"  # gpt2_byte_vocab_entries
bin=$1
data=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

head -c 60000 "$data/corpus.txt" > "$work/corpus.txt"
"$bin/tokenize" --train "$work/corpus.txt" --vocab-size 400 -o "$work/tokenizer.json" >"$work/log" 2>&1 \
  || fail "tokenize --train exited $?: $(cat "$work/log")"
out=$("$bin/prepare_data" --input "$work/corpus.txt" --output "$work/shard" --tokenizer "$work/tokenizer.json" \
      --shard-tokens 20000 2>&1) || fail "prepare_data exited $?: $out"
grep -q "wrote $work/shard_000001.bin: .* u16 tokens" <<<"$out" || fail "no second u16 shard: $out"
grep -Eq "prepare_data: 60000 bytes of .* -> [0-9]+ tokens \([0-9.]+ bytes/token\), 2 u16 shard\(s\), BPE tokenizer .*vocabulary 400\)" <<<"$out" \
  || fail "no tokens / bytes / bytes-per-token line: $out"
bytes_per_token=$(grep -o "([0-9.]* bytes/token)" <<<"$out" | tr -d '(' | cut -d' ' -f1)
awk -v b="$bytes_per_token" 'BEGIN { exit !(b > 1.2 && b < 6) }' || fail "a 400-token BPE gives $bytes_per_token bytes/token"

shards="$work/shard_000000.bin,$work/shard_000001.bin"
tiny=(--layers 1 --heads 2 --dim 32 --context 32 --batch 8 --threads 1)
out=$("$bin/train_gpt" --data "$shards" --tokenizer "$work/tokenizer.json" "${tiny[@]}" --steps 30 --eval-every 15 \
      --sample 12 --metrics-log "$work/metrics.jsonl" --save "$work/model.safetensors" 2>&1) || fail "train_gpt exited $?: $out"
grep -q "GPT L1 H2 C32 T32" <<<"$out" || fail "no model line: $out"
grep -Eq "unigram baseline: [0-9.]+ per token, [0-9.]+ bits per byte" <<<"$out" || fail "no unigram baseline: $out"
grep -Eq "eval  step 15 \| validation loss [0-9.]+ per token, [0-9.]+ bits per byte" <<<"$out" || fail "no eval line: $out"
summary=$(grep "^summary: 30 steps" <<<"$out") || fail "no summary: $out"
bpb=$(grep -Eo "[0-9.]+ bits per byte" <<<"$summary" | cut -d' ' -f1)
loss=$(grep -Eo "validation loss [0-9.]+ per token" <<<"$summary" | cut -d' ' -f3)
# Finite, and consistent: bits per byte = loss / ln 2 / (bytes per token), near prepare_data's ratio
# (the validation windows are a sample of the text).
awk -v b="$bpb" -v l="$loss" -v r="$bytes_per_token" \
  'BEGIN { x = l / log(2) / b; exit !(b > 0.5 && b < 5 && x > 0.5 * r && x < 2 * r) }' \
  || fail "bits per byte $bpb for a loss of $loss per token at $bytes_per_token bytes/token"
grep -q '"val_bits_per_byte":' "$work/metrics.jsonl" || fail "no val_bits_per_byte in the metrics log"
grep -q "^sample: " <<<"$out" || fail "no sample: $out"
grep -q "(token ids" <<<"$out" && fail "the sample was not decoded: $out"

# generate with the tokenizer: the prompt first, then text.
gen=$("$bin/generate" --model "$work/model.safetensors" --tokenizer "$work/tokenizer.json" --prompt "The " \
      --max-tokens 10 --seed 3 --threads 1 2>"$work/err") || fail "generate exited $?: $(cat "$work/err")"
[[ "$gen" == "The "* ]] || fail "generate did not echo the prompt: $gen"
grep -q "generate: [0-9]* tokens" "$work/err" || fail "no generate summary: $(cat "$work/err")"

# Resume on the shards: a checkpoint, then --resume without --vocab (the run config holds the shards'
# vocabulary, not --vocab's default); --print-config -> --config runs the same settings.
"$bin/train_gpt" --data "$shards" --tokenizer "$work/tokenizer.json" "${tiny[@]}" --steps 4 --sample 0 \
  --checkpoint-dir "$work/ckpt" --checkpoint-every-steps 2 --stop-after-steps 2 >"$work/log" 2>&1 \
  || fail "train_gpt --checkpoint-dir exited $?: $(cat "$work/log")"
"$bin/train_gpt" --checkpoint-dir "$work/ckpt" --resume --threads 1 >"$work/log" 2>&1 \
  || fail "train_gpt --resume on BPE shards exited $?: $(cat "$work/log")"
grep -q "resumed from .*step_0000000002.safetensors at step 2" "$work/log" || fail "did not resume: $(cat "$work/log")"
grep -q "^summary: 2 steps" "$work/log" || fail "the resumed run did not train steps 3-4: $(cat "$work/log")"
"$bin/train_gpt" --data "$shards" --tokenizer "$work/tokenizer.json" "${tiny[@]}" --steps 2 --sample 0 \
  --print-config >"$work/config.json" 2>"$work/err" || fail "--print-config exited $?: $(cat "$work/err")"
grep -q '"vocab": 400' "$work/config.json" || fail "--print-config does not hold the shards' vocabulary: $(cat "$work/config.json")"
"$bin/train_gpt" --config "$work/config.json" >"$work/log" 2>&1 \
  || fail "train_gpt --config of --print-config exited $?: $(cat "$work/log")"
grep -q "^summary: 2 steps" "$work/log" || fail "no summary from --config: $(cat "$work/log")"

# Refusals: one line, exit code 2, the message's key words.
expect_usage_error() {
  local program=$1 want=$2
  shift 2
  "$bin/$program" "$@" >/dev/null 2>"$work/err"
  local code=$?
  [[ $code -eq 2 ]] || fail "$program $*: exit $code, expected 2: $(cat "$work/err")"
  [[ $(wc -l <"$work/err") -eq 1 ]] || fail "$program $*: more than one line: $(cat "$work/err")"
  grep -q -- "$want" "$work/err" || fail "$program $*: said '$(cat "$work/err")', expected '$want'"
}
"$bin/tokenize" --train "$work/corpus.txt" --vocab-size 300 -o "$work/other.json" >/dev/null 2>&1 || fail "second tokenizer"
"$bin/prepare_data" --input "$work/corpus.txt" --output "$work/other" --tokenizer "$work/other.json" >/dev/null \
  || fail "prepare_data with the second tokenizer"
expect_usage_error train_gpt "has a vocabulary of 300 ids, but .*shard_000000.bin\" has 400" \
  --data "$work/shard_000000.bin,$work/other_000000.bin" "${tiny[@]}" --steps 1
expect_usage_error train_gpt "--vocab 512 does not match the vocabulary of --data .* (400 ids" \
  --data "$shards" --vocab 512 "${tiny[@]}" --steps 1
expect_usage_error train_gpt "--tokenizer .*other.json has a vocabulary of 300 ids, but --data .* has 400" \
  --data "$shards" --tokenizer "$work/other.json" "${tiny[@]}" --steps 1
# A tokenizer of the same size (400) learned on other text: the shards' ids are not its encoding.
tail -c 60000 "$data/corpus.txt" | rev > "$work/other_corpus.txt"
"$bin/tokenize" --train "$work/other_corpus.txt" --vocab-size 400 -o "$work/same_size.json" >/dev/null 2>&1 \
  || fail "tokenizer of the same size"
expect_usage_error train_gpt "--tokenizer .*same_size.json does not encode the text of --data .* to its ids (token [0-9]* of" \
  --data "$shards" --tokenizer "$work/same_size.json" "${tiny[@]}" --steps 1
"$bin/train_gpt" "${tiny[@]}" --steps 1 --sample 0 --save "$work/bytes.safetensors" >/dev/null || fail "byte-level model"
expect_usage_error train_gpt "the model of --load .*bytes.safetensors has 256 token ids, fewer than the 400" \
  --data "$shards" --load "$work/bytes.safetensors" --steps 1 --threads 1
expect_usage_error train_gpt "--tokenizer .* needs --data" --tokenizer "$work/tokenizer.json" --steps 1
# A vocabulary past u16: GPT-2's vocab.json layout, the 256 byte tokens and "<|endoftext|>" at id 65600.
{
  printf '{'
  gpt2_byte_vocab_entries
  printf '"<|endoftext|>": 65600}'
} > "$work/vocab.json"
printf '#version: 0.2\n' > "$work/merges.txt"
expect_usage_error prepare_data "--dtype u16 cannot hold the ids of --tokenizer .* (a vocabulary of 65601 ids" \
  --input "$work/corpus.txt" --output "$work/wide" --tokenizer "$work/vocab.json" --dtype u16
out=$("$bin/prepare_data" --input "$work/corpus.txt" --output "$work/wide" --tokenizer "$work/vocab.json") \
  || fail "prepare_data with a 65601-id vocabulary exited $?: $out"
grep -q "1 u32 shard(s)" <<<"$out" || fail "a 65601-id vocabulary did not give u32 shards: $out"
echo "train_text checks ok"
