#!/usr/bin/env bash
# train_gpt when training goes wrong: out of memory under --memory-limit-mib (the error carries the
# allocators' table and the flags that need less memory), --detect-anomaly naming the first op
# that made NaN/inf and its module (diverging on a huge learning rate), --memory-summary.
set -uo pipefail
bin=$1
fail() { echo "FAIL: $*"; exit 1; }
tiny=(--layers 1 --heads 2 --dim 32 --batch 16 --eval-problems 10 --eval-every 0 --sample 0 --threads 1)

err=$("$bin" "${tiny[@]}" --steps 2 --memory-limit-mib 1 2>&1 >/dev/null); code=$?
[[ $code -eq 1 ]] || fail "out of memory exited $code: $err"
for part in "train_gpt: error: [CpuCachingAllocator] out of host memory" "(limit 1048576 bytes)" "peak alloc" "OOMs" \
            "--grad-accum N" "--precision bf16" "--recompute-every K" "--offload-activations"; do
  grep -qF -- "$part" <<<"$err" || fail "the out-of-memory error lacks '$part': $err"
done
grep -q "Segmentation\|Aborted\|terminate called" <<<"$err" && fail "out of memory crashed: $err"

err=$("$bin" "${tiny[@]}" --steps 3 --lr 1e30 --clip 0 --warmup 0 --detect-anomaly 2>&1 >/dev/null); code=$?
[[ $code -eq 1 ]] || fail "--detect-anomaly on a diverging run exited $code: $err"
[[ $(wc -l <<<"$err") -eq 1 ]] || fail "the anomaly error is not one line: $err"
grep -q "train_gpt: error: \[detect_anomaly\] forward of op '[a-z_]*' produced NaN or inf in its output \[" <<<"$err" \
  || fail "no anomaly named: $err"
grep -q "module stack: GPT" <<<"$err" || fail "the anomaly names no module: $err"
# Without --detect-anomaly the same run finishes (with a NaN loss): the mode is off by default.
out=$("$bin" "${tiny[@]}" --steps 3 --lr 1e30 --clip 0 --warmup 0 2>&1) || fail "the diverging run failed without --detect-anomaly: $out"

out=$("$bin" "${tiny[@]}" --steps 1) || fail "plain run failed: $out"
grep -q "peak reserved" <<<"$out" && fail "the memory table printed without --memory-summary: $out"
out=$("$bin" "${tiny[@]}" --steps 1 --memory-summary) || fail "--memory-summary run failed: $out"
grep -q "peak reserved" <<<"$out" || fail "--memory-summary printed no table: $out"
echo "train_gpt faults ok"
