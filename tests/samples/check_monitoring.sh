#!/usr/bin/env bash
# train_gpt's monitoring flags end to end with a tiny config: --metrics-log writes one JSON line per
# step (evaluations add accuracy), --profile writes a Chrome trace and prints the tables,
# --early-stop stops and restores the best weights, and plot_metrics renders the log to SVG.
set -uo pipefail
bin=$1
plot=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

tiny=(--layers 1 --heads 2 --dim 32 --batch 16 --eval-problems 20 --threads 1 --sample 0)
out=$("$bin" "${tiny[@]}" --steps 30 --eval-every 10 --metrics-log "$work/m.jsonl" --profile "$work/trace.json" \
      --profile-ops) || fail "profiled run exited $?: $out"
[[ $(wc -l <"$work/m.jsonl") -eq 30 ]] || fail "expected 30 metrics lines, got $(wc -l <"$work/m.jsonl")"
head -1 "$work/m.jsonl" | grep -q '^{"step":1,"loss":[0-9.e-]*,"lr":' || fail "first record: $(head -1 "$work/m.jsonl")"
[[ $(grep -c '"accuracy"' "$work/m.jsonl") -eq 3 ]] || fail "expected accuracy on the 3 evaluation steps"
grep -q '"memory_peak_mib"' "$work/m.jsonl" || fail "no memory in the records"
grep -q '"val_loss"' "$work/m.jsonl" && fail "the addition task has no validation loss, but the log claims one"
grep -q '"loss_scale"' "$work/m.jsonl" && fail "no loss scaler runs, but the log claims a loss scale"
grep -q '^{"displayTimeUnit": "ms", "traceEvents": \[' "$work/trace.json" || fail "trace does not start like a Chrome trace"
grep -q '"name": "gemm", "cat": "op", "ph": "X"' "$work/trace.json" || fail "--profile-ops recorded no kernel ranges"
grep -q '"name": "backward", "cat": "backward"' "$work/trace.json" || fail "no backward phase range"
grep -q "per-step breakdown over 30 steps" <<<"$out" || fail "no step breakdown: $out"
grep -q "data wait" <<<"$out" || fail "no data wait row: $out"
grep -Eq "^step +step +30 " <<<"$out" || fail "summary lacks the 30 step ranges: $out"

"$plot" "$work/m.jsonl" -o "$work/m.svg" --title "tiny run" >/dev/null || fail "plot_metrics failed"
grep -q "<svg" "$work/m.svg" || fail "no SVG written"
[[ $(grep -c "<polyline" "$work/m.svg") -ge 4 ]] || fail "expected curves in the SVG"
err=$("$plot" "$work/m.jsonl" 2>&1 >/dev/null)
[[ $? -eq 2 ]] && grep -q "no output given" <<<"$err" || fail "plot_metrics without -o: '$err'"

out=$("$bin" "${tiny[@]}" --steps 400 --eval-every 5 --early-stop 1 --lr 0 --min-lr 0) || fail "early-stop run exited $?: $out"
grep -q "early stopping: no improvement in 1 evaluations, stopping at step 10" <<<"$out" || fail "did not stop at step 10: $out"
grep -q "early stopping: restored the weights of step 5" <<<"$out" || fail "did not restore step 5: $out"
grep -q "summary: 10 steps" <<<"$out" || fail "summary should count the 10 steps run: $out"
err=$("$bin" --profile-ops 2>&1 >/dev/null)
[[ $? -eq 2 ]] && grep -q -- "--profile-ops needs --profile FILE" <<<"$err" || fail "--profile-ops alone: '$err'"
err=$("$bin" "${tiny[@]}" --steps 1 --profile /nonexistent/trace.json 2>&1 >/dev/null)
[[ $? -eq 1 ]] && grep -q "cannot open trace file" <<<"$err" || fail "unwritable trace: '$err'"
echo "monitoring checks ok"
