#!/usr/bin/env bash
# generate end to end: a tiny byte-level model saved by train_gpt --save writes text from a prompt (echoed
# first), the same with and without the KV cache (greedy and sampled with one seed); a hand-written
# byte-level BPE tokenizer (vocab.json + merges.txt: the 256 bytes, one merge, <|endoftext|>) with a model
# of its vocabulary; --help; and bad input answered with one line and exit code 2.
# The same model converted to a GPT-2 directory (save_hf_child: GPT::save_hf) generates the same text
# from the directory, and train_gpt --load takes the directory.
# A tokenizer with a hole in its ids never has the hole drawn; --no-stop-at-eot runs past <|endoftext|>.
# Usage: check_generate.sh <generate> <train_gpt> <save_hf_child>
set -uo pipefail
source "$(dirname "$0")/gpt2_byte_vocab.sh"  # gpt2_byte_vocab_entries
generate=$1
train_gpt=$2
save_hf=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

printf 'hello halfgrad, hello world. %.0s' {1..60} > "$work/text.txt"
train=(--data "$work/text.txt" --layers 2 --heads 2 --dim 32 --context 32 --batch 8 --steps 40 --eval-every 0
       --threads 1 --sample 0)
"$train_gpt" "${train[@]}" --save "$work/bytes.safetensors" >"$work/train.log" 2>&1 \
  || fail "train_gpt exited $?: $(cat "$work/train.log")"

# With and without the cache: the same bytes, prompt first; 26 new tokens fill the 32-position context.
# Outputs go to files (tokens are any bytes, NUL and newline included) and are compared with cmp.
run() {
  local out=$1
  shift
  "$generate" --model "${run_model:-$work/bytes.safetensors}" --prompt "hello " --max-tokens 26 --threads 1 "$@" >"$work/$out" \
    2>"$work/err" || fail "generate $* exited $?: $(cat "$work/err")"
}
size() { wc -c <"$work/$1"; }
for sampling in "--temperature 0" "--temperature 1.0 --top-k 20 --seed 7" "--temperature 0.7 --top-p 0.9 --seed 3"; do
  # shellcheck disable=SC2086
  run cached $sampling
  grep -q "26 tokens in .* KV cache on" "$work/err" || fail "no summary line for $sampling: $(cat "$work/err")"
  # shellcheck disable=SC2086
  run uncached $sampling --no-cache
  cmp -s "$work/cached" "$work/uncached" || fail "$sampling: cached and uncached differ: $(cat -v "$work/cached") vs $(cat -v "$work/uncached")"
  [[ $(head -c 6 "$work/cached") == "hello " ]] || fail "the prompt is not echoed first: $(cat -v "$work/cached")"
  (( $(size cached) == 33 )) || fail "$sampling: expected 6 + 26 bytes and a newline, got $(size cached)"
done
# Past the context (the cache refills from half of it); the same seed gives the same bytes, another seed others.
run long1 --max-tokens 100 --seed 5
run long2 --max-tokens 100 --seed 5
run long3 --max-tokens 100 --seed 6
cmp -s "$work/long1" "$work/long2" && (( $(size long1) == 107 )) || fail "100 tokens past the context: $(size long1) bytes"
! cmp -s "$work/long1" "$work/long3" || fail "seeds 5 and 6 gave the same text"

# A GPT-2 directory (model.safetensors + config.json) of the same model: the same bytes.
"$save_hf" "$work/bytes.safetensors" "$work/hf" || fail "save_hf_child exited $?"
[[ -f $work/hf/model.safetensors && -f $work/hf/config.json ]] || fail "save_hf wrote no GPT-2 directory"
run_model=$work/hf run long2 --max-tokens 100 --seed 5
cmp -s "$work/long1" "$work/long2" || fail "--model DIR: not the file's text: $(cat -v "$work/long2")"
"$train_gpt" "${train[@]}" --steps 2 --load "$work/hf" >"$work/train.log" 2>&1 \
  || fail "train_gpt --load DIR exited $?: $(cat "$work/train.log")"

# A byte-level BPE tokenizer written by hand: vocab.json spells bytes in GPT-2's bytes_to_unicode
# alphabet (printable bytes as themselves, the rest from U+0100 in byte order), one merge "h e".
{
  printf '{'
  gpt2_byte_vocab_entries
  printf '"he": 256, "<|endoftext|>": 257}'
} > "$work/vocab.json"
printf '#version: 0.2\nh e\n' > "$work/merges.txt"
"$train_gpt" "${train[@]}" --vocab 258 --save "$work/bpe.safetensors" >"$work/train.log" 2>&1 \
  || fail "train_gpt --vocab 258 exited $?: $(cat "$work/train.log")"
bpe() {
  local out=$1
  shift
  "$generate" --model "$work/bpe.safetensors" --tokenizer "$work/vocab.json" --max-tokens 20 --threads 1 "$@" \
    >"$work/$out" 2>"$work/err" || fail "generate --tokenizer $* exited $?: $(cat "$work/err")"
}
bpe cached --prompt "hello " --seed 2
bpe uncached --prompt "hello " --seed 2 --no-cache
cmp -s "$work/cached" "$work/uncached" || fail "BPE: cached and uncached differ"
[[ $(head -c 6 "$work/cached") == "hello " ]] || fail "BPE: the prompt is not echoed first: $(cat -v "$work/cached")"
grep -q "generate: [0-9]* tokens" "$work/err" || fail "BPE: no summary line: $(cat "$work/err")"
bpe empty --prompt ""

# A vocabulary with a hole (no id 257; <|endoftext|> is 258) and a model of 259 tokens: a nearly uniform
# sampler (temperature 100) drawing 2000 tokens never draws the hole, and --no-stop-at-eot runs past
# the <|endoftext|> it draws, where the default stops at it.
mkdir "$work/holes"
sed 's/"<|endoftext|>": 257/"<|endoftext|>": 258/' "$work/vocab.json" > "$work/holes/vocab.json"
cp "$work/merges.txt" "$work/holes/merges.txt"
"$train_gpt" "${train[@]}" --vocab 259 --steps 2 --save "$work/holes.safetensors" >"$work/train.log" 2>&1 \
  || fail "train_gpt --vocab 259 exited $?: $(cat "$work/train.log")"
holes=(--model "$work/holes.safetensors" --tokenizer "$work/holes/vocab.json" --prompt "hello " --max-tokens 2000
       --temperature 100 --seed 4 --threads 1)
"$generate" "${holes[@]}" --no-stop-at-eot >"$work/out" 2>"$work/err" \
  || fail "a tokenizer with a hole: generate exited $?: $(cat "$work/err")"
grep -q "generate: 2000 tokens in" "$work/err" || fail "--no-stop-at-eot: not 2000 tokens: $(cat "$work/err")"
"$generate" "${holes[@]}" >"$work/out" 2>"$work/err" || fail "stop at eot: generate exited $?: $(cat "$work/err")"
grep -q "generate: 2000 tokens in" "$work/err" && fail "the default did not stop at <|endoftext|>: $(cat "$work/err")"
grep -q "generate: [0-9]* tokens in .* | prefill [0-9]* prompt tokens" "$work/err" \
  || fail "no prefill in the summary: $(cat "$work/err")"

# --help, then bad input: one line on stderr, exit code 2.
"$generate" --help | grep -q -- "--max-tokens" || fail "--help does not list --max-tokens"
expect_usage_error() {
  local want=$1
  shift
  "$generate" "$@" >/dev/null 2>"$work/err"
  local code=$?
  [[ $code == 2 ]] || fail "generate $* exited $code, expected 2: $(cat "$work/err")"
  [[ $(wc -l <"$work/err") == 1 ]] || fail "generate $* printed more than one line: $(cat "$work/err")"
  [[ $(cat "$work/err") == "generate: error: "* ]] || fail "generate $*: no program prefix: $(cat "$work/err")"
  grep -q -- "$want" "$work/err" || fail "generate $*: no '$want' in: $(cat "$work/err")"
}
model=(--model "$work/bytes.safetensors")
expect_usage_error "--model FILE is required" --prompt "hi"
expect_usage_error "missing.safetensors" --model "$work/missing.safetensors" --prompt "hi"
mkdir "$work/empty-dir"
expect_usage_error "--model $work/empty-dir" --model "$work/empty-dir" --prompt "hi"
printf 'not a model' > "$work/garbage.safetensors"
expect_usage_error "--model $work/garbage.safetensors" --model "$work/garbage.safetensors" --prompt "hi"
expect_usage_error "has 258 tokens" "${model[@]}" --tokenizer "$work/vocab.json" --prompt "hi"
expect_usage_error "vocabulary of 258; without --tokenizer" --model "$work/bpe.safetensors" --prompt "hi"
expect_usage_error "--tokenizer $work/nothing.json" "${model[@]}" --tokenizer "$work/nothing.json" --prompt "hi"
expect_usage_error "--prompt is 40 tokens; the model's context is 32" "${model[@]}" --prompt "$(printf 'x%.0s' {1..40})"
expect_usage_error "--prompt is empty" "${model[@]}" --prompt ""
expect_usage_error "temperature" "${model[@]}" --prompt "hi" --temperature -1
expect_usage_error "top-p" "${model[@]}" --prompt "hi" --top-p 0
expect_usage_error "top-p" "${model[@]}" --prompt "hi" --top-p 1.5
expect_usage_error "top-k" "${model[@]}" --prompt "hi" --top-k -3
expect_usage_error "max-tokens" "${model[@]}" --prompt "hi" --max-tokens -1
expect_usage_error "precision" "${model[@]}" --prompt "hi" --precision fp8
expect_usage_error "device" "${model[@]}" --prompt "hi" --device tpu
echo "generate checks ok"
