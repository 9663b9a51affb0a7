#!/usr/bin/env bash
# scripts/bench-cpu-peers --table over saved runs (no PyTorch, no binaries needed): the ratio of the
# medians and the round-by-round ratio (median, range), with each file's rounds kept apart; and its
# refusals of files that are not a run's JSON lines (exit 2, the file and what was expected named).
# Usage: check_peers_table.sh SCRIPT
set -uo pipefail
script=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
line() {  # impl precision round ms
  printf '{"bench": "train_step", "impl": "%s", "precision": "%s", "model": "gpt_L4_H4_C256_T64_B4", "threads": 2, "round": %s, "median_ms": %s}\n' "$@"
}
# Two runs. Run a: rounds 1 and 2; run b: round 1 again, its halfgrad fp16 in a slow spell the fp32
# before it missed. Medians: fp32 31, fp16 36 (0.86x); round by round 30/28, 40/37, 31/36.
{ echo '{"bench": "cpu_peers_header", "quick": false}'
  line halfgrad fp32 1 30; line pytorch fp32 1 45; line halfgrad fp16 1 28
  line halfgrad fp32 2 40; line pytorch fp32 2 60; line halfgrad fp16 2 37; } > "$dir/a.jsonl"
{ echo '{"bench": "cpu_peers_header", "quick": false}'
  line halfgrad fp32 1 31; line pytorch fp32 1 46.5; line halfgrad fp16 1 36; } > "$dir/b.jsonl"
out=$("$script" --table "$dir/a.jsonl" "$dir/b.jsonl") || fail "--table exited $?: $out"
grep -qF '| gpt_L4_H4_C256_T64_B4 | fp32 | 31.0 | 46.5 | 1.50x | – | 1.50x (1.50-1.50) | – |' <<<"$out" ||
  fail "fp32 row: $(grep -F 'T64_B4 | fp32' <<<"$out")"
# Had the two files' round 1 been merged, b's would replace a's and the median would be 0.97x.
grep -qF '| gpt_L4_H4_C256_T64_B4 | fp16 | 36.0 | n/a | – | 0.86x | – | 1.07x (0.86-1.08) |' <<<"$out" ||
  fail "fp16 row: $(grep -F 'T64_B4 | fp16' <<<"$out")"
grep -q '^### 2 threads' <<<"$out" || fail "no 2-thread table"
! grep -q '^### 1 thread' <<<"$out" || fail "a 1-thread table without 1-thread lines"

refused() {  # expected-message file...
  local want=$1; shift
  local err rc
  err=$("$script" --table "$@" 2>&1 >/dev/null); rc=$?
  [[ $rc == 2 ]] || fail "--table $* exited $rc, expected 2"
  grep -qF "$want" <<<"$err" || fail "--table $*: '$err' lacks '$want'"
}
refused "cannot read $dir/missing.jsonl" "$dir/missing.jsonl"
printf 'not json\n' > "$dir/text.jsonl"
refused "$dir/text.jsonl:1: not a JSON line" "$dir/text.jsonl"
printf '[1, 2]\n' > "$dir/list.jsonl"
refused "$dir/list.jsonl:1: a JSON list, expected an object" "$dir/list.jsonl"
: > "$dir/empty.jsonl"
refused "no train_step lines in $dir/empty.jsonl" "$dir/empty.jsonl"
echo '{"bench": "cpu_peers_header", "quick": true}' > "$dir/quick.jsonl"
line halfgrad fp32 1 30 >> "$dir/quick.jsonl"
refused "mix --quick and full runs" "$dir/a.jsonl" "$dir/quick.jsonl"
echo "peers table ok"
