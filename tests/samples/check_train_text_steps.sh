#!/usr/bin/env bash
# scripts/train-text redoes a step when its settings or inputs changed and reuses it otherwise: run
# with stand-in programs (each logs its call and writes its output) under a scratch BUILD_DIR, then
# check which steps ran for: a first run, a repeat (nothing but generate), other ARGS (train only),
# another VOCAB (tokenizer, shards and train under v<VOCAB>/), a newer tokenizer (shards and train).
# Needs python3-doc (the corpus): says so and passes when it is absent (it installs nothing).
# Usage: check_train_text_steps.sh <scripts/train-text>
set -uo pipefail
script=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
if [[ ! -d /usr/share/doc/python3/html/_sources ]]; then
  echo "python3-doc is not installed: nothing to check"
  echo "train-text steps ok"
  exit 0
fi
mkdir -p "$work/build/bin"
stub() {  # stub NAME 'shell code writing the output'
  printf '#!/usr/bin/env bash\necho "%s $*" >> "%s/calls"\n%s\n' "$1" "$work" "$2" > "$work/build/bin/$1"
  chmod +x "$work/build/bin/$1"
}
stub tokenize 'while [[ $# -gt 0 ]]; do [[ $1 == -o ]] && echo "{}" > "$2"; shift; done'
stub prepare_data 'while [[ $# -gt 0 ]]; do [[ $1 == --output ]] && echo x > "${2}_000000.bin"; shift; done'
stub train_gpt 'while [[ $# -gt 0 ]]; do [[ $1 == --save ]] && echo x > "$2"; shift; done'
stub generate 'echo sample'
run() {  # run VAR=VALUE...: the programs called, one word each, in order
  rm -f "$work/calls"
  env BUILD_DIR="$work/build" "$@" "$script" >"$work/log" 2>&1 || { echo "train-text $* failed: $(cat "$work/log")"; return; }
  cut -d' ' -f1 "$work/calls" | tr '\n' ' '
}
[[ $(run) == "tokenize prepare_data train_gpt generate " ]] || fail "first run: $(cat "$work/calls")"
[[ -s "$work/build/text/v4096/tokenizer.json" ]] || fail "no build/text/v4096/tokenizer.json"
[[ $(run) == "generate " ]] || fail "a repeat redid steps: $(cat "$work/calls" "$work/log")"
[[ $(run ARGS="--steps 10") == "train_gpt generate " ]] || fail "other ARGS: $(cat "$work/calls")"
grep -q -- "--steps 10" "$work/calls" || fail "ARGS not passed: $(cat "$work/calls")"
[[ $(run ARGS="--steps 10") == "generate " ]] || fail "the same ARGS again: $(cat "$work/calls")"
[[ $(run VOCAB=1000 ARGS="--steps 10") == "tokenize prepare_data train_gpt generate " ]] ||
  fail "VOCAB=1000: $(cat "$work/calls")"
grep -q -- "--vocab-size 1000" "$work/calls" || fail "VOCAB not passed: $(cat "$work/calls")"
touch -d '+1 minute' "$work/build/text/v4096/tokenizer.json"
[[ $(run) == "prepare_data train_gpt generate " ]] || fail "a newer tokenizer: $(cat "$work/calls")"
echo "train-text steps ok"
