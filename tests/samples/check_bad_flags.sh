#!/usr/bin/env bash
# Every sample answers a bad flag, a bad size or a file it cannot use with ONE line on stderr
# ("<program>: error: ..." saying what was wrong and what was expected), exit code 2, no stack trace
# and no crash: train_gpt, train_mlp, train_cnn, prepare_data. Usage: check_bad_flags.sh BIN_DIR
set -uo pipefail
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cases=0

# expect PROGRAM "expected text" ARGS...: exit code 2, one line on stderr containing the text.
expect() {
  local program=$1 expected=$2
  shift 2
  local err code
  err=$("$bin/$program" "$@" 2>&1 >/dev/null)
  code=$?
  [[ $code -eq 2 ]] || fail "$program $* exited $code, expected 2: $err"
  [[ $(wc -l <<<"$err") -eq 1 ]] || fail "$program $* printed more than one line: $err"
  [[ $err == "$program: error: "* ]] || fail "$program $* did not start with '$program: error: ': $err"
  grep -qF -- "$expected" <<<"$err" || fail "$program $* said '$err', expected '$expected'"
  cases=$((cases + 1))
}

tiny=(--layers 1 --heads 2 --dim 16 --context 16 --batch 4 --eval-problems 10 --eval-every 0 --sample 0 --threads 1)
printf 'the quick brown fox jumps over the lazy dog. %.0s' {1..20} > "$work/text.txt"
"$bin/train_gpt" "${tiny[@]}" --steps 1 --save "$work/model.safetensors" >/dev/null || fail "could not save a model"
"$bin/train_gpt" "${tiny[@]}" --steps 2 --checkpoint-dir "$work/ckpt" >/dev/null || fail "could not write a checkpoint"
# The same checkpoints as an older build wrote them: no run config, checkpoint version 1 without the
# header's checksum (keys and values renamed in place, same length, so the header stays valid).
cp -r "$work/ckpt" "$work/ckpt_plain"
for entry in "$work"/ckpt_plain/*.safetensors; do
  LC_ALL=C sed -i 's/"run_config"/"xun_config"/; s/"version":"2"/"version":"1"/; s/"halfgrad\.crc32c\.__metadata__"/"halfgrad.xrc32c.__metadata__"/' "$entry"
  grep -qa '"run_config"' "$entry" && fail "the run config is still in $entry"
done
mkdir "$work/a_directory"
head -c 100 "$work/model.safetensors" > "$work/truncated.safetensors"

# ---- train_gpt ----
for flag in layers heads dim context batch grad-accum eval-problems digits curriculum-steps; do
  expect train_gpt "--$flag must be >= 1, got 0" --$flag 0
done
for flag in steps warmup eval-every seed threads sample workers keep-checkpoints; do
  expect train_gpt "--$flag must be >= " --$flag -3
done
expect train_gpt "--lr must be in [0, " --lr -1
expect train_gpt "--dropout must be in [0, 0.99], got 1" --dropout 1
expect train_gpt "expects a number, got \"nan\"" --clip nan
expect train_gpt "expects an integer, got \"1e3\"" --steps 1e3
expect train_gpt "expects an integer, got \"99999999999999999999\"" --batch 99999999999999999999
expect train_gpt "--dim 100000 is too large; expected at most 65536" --dim 100000 --heads 1
expect train_gpt "--layers 5000 is too large; expected at most 1024" --layers 5000
expect train_gpt "--context 2000000 is too large" --context 2000000
expect train_gpt "--batch 4000000 is too large" --batch 4000000
expect train_gpt "--heads 3 does not divide --dim 16; expected dim % heads == 0" --heads 3 --dim 16
expect train_gpt "--heads 32 does not divide --dim 16" --heads 32 --dim 16
expect train_gpt "unknown --device \"gpu\"; expected cpu, cuda or cuda:N" --device gpu
expect train_gpt "unknown --device \"cuda:x\"" --device cuda:x
expect train_gpt "--device cuda:7 is not available" --device cuda:7
expect train_gpt "unknown flag --bogus" --bogus
expect train_gpt "--steps needs a value" --steps
expect train_gpt "unexpected argument \"extra\"" extra
expect train_gpt "--resume expects true or false" --resume=maybe
expect train_gpt "--resume and --checkpoint-every-steps need --checkpoint-dir" --resume
expect train_gpt "--load \"$work/missing.safetensors\": No such file or directory; expected a readable file" \
  --load "$work/missing.safetensors"
# A directory is a GPT-2 model's (model.safetensors + config.json): one without its file is named.
expect train_gpt "a_directory/model.safetensors': cannot open" --load "$work/a_directory"
expect train_gpt "--data \"$work/missing.txt\": No such file or directory" --data "$work/missing.txt"
expect train_gpt "--data \"$work/missing.bin\": No such file" --data "$work/text.txt,$work/missing.bin"
expect train_gpt "--load $work/text.txt: [safetensors::load]" --load "$work/text.txt"
expect train_gpt "--load $work/truncated.safetensors: [safetensors::load]" --load "$work/truncated.safetensors"
# A model of 16 positions cannot read 64-token windows; nor 16 of 7-digit problems.
expect train_gpt "--context 64 is longer than the 16 positions of --load $work/model.safetensors; expected --context <= 16" \
  "${tiny[@]}" --load "$work/model.safetensors" --data "$work/text.txt" --context 64
expect train_gpt "positions of --load $work/model.safetensors are too few for 7-digit problems" \
  "${tiny[@]}" --load "$work/model.safetensors" --digits 7 --context 24
# A checkpoint directory written by another architecture (width 16) resumed with width 32: refused by
# the run config the checkpoint stores (tests/samples/check_run_config.sh: the run config files).
expect train_gpt "--resume: \"dim\" is 16 in the checkpoint's run config, 32 now; it cannot change mid-run" \
  "${tiny[@]}" --dim 32 --checkpoint-dir "$work/ckpt" --resume --steps 4
# Without a run config in the checkpoint, the trainer's load refuses the other architecture.
expect train_gpt "the checkpoint was written for another model configuration" \
  "${tiny[@]}" --dim 32 --checkpoint-dir "$work/ckpt_plain" --resume --steps 4
expect train_gpt "--data $work/text.txt: " "${tiny[@]}" --data "$work/text.txt" --context 1000

# ---- train_mlp ----
for flag in points width depth batch; do expect train_mlp "--$flag must be >= 1, got 0" --$flag 0; done
expect train_mlp "--classes must be >= 2, got 1" --classes 1
expect train_mlp "--width 100000 is too large; expected at most 65536" --width 100000
expect train_mlp "--depth 2000 is too large" --depth 2000
expect train_mlp "--noise must be in [0, 10], got -1" --noise -1
expect train_mlp "unknown --device \"tpu\"" --device tpu
expect train_mlp "unknown flag --heads" --heads 2

# ---- train_cnn ----
expect train_cnn "--size must be >= 8, got 4" --size 4
expect train_cnn "--size 30 must be a multiple of 4 in [8, 256]" --size 30
expect train_cnn "--channels must be >= 1, got -2" --channels -2
expect train_cnn "--channels 9999 is too large; expected at most 4096" --channels 9999
expect train_cnn "--batch must be >= 1, got 0" --batch 0
expect train_cnn "unknown --device \"cuda:\"" --device cuda:

# ---- prepare_data ----
expect prepare_data "--input FILE is required" --output "$work/x"
expect prepare_data "--output PREFIX is required" --input "$work/text.txt"
expect prepare_data "--input \"$work/none.txt\": No such file or directory; expected a readable file" \
  --input "$work/none.txt" --output "$work/x"
expect prepare_data "--input \"$work/a_directory\" is not a regular file" --input "$work/a_directory" --output "$work/x"
expect prepare_data "the directory \"$work/no/such/\" is not writable" --input "$work/text.txt" --output "$work/no/such/x"
expect prepare_data "unknown --dtype \"u8\"; expected u16 or u32" --input "$work/text.txt" --output "$work/x" --dtype u8
expect prepare_data "--shard-tokens must be >= 1, got 0" --input "$work/text.txt" --output "$work/x" --shard-tokens 0
: > "$work/empty.txt"
expect prepare_data "is empty" --input "$work/empty.txt" --output "$work/x"

echo "bad flags ok: $cases cases, each one line and exit code 2"
