#!/usr/bin/env bash
# train_gpt checkpoint and resume: 2N steps in one run equal N steps, a checkpoint, and a second
# process that resumes and trains N more -- the final checkpoints (weights, AdamW state, step, RNG
# states) byte for byte, and the printed final losses (%.9g: every bit of an f32) equal. Dropout is
# on, so the Philox generator's state matters; keep-last-K and the --resume errors are checked too.
set -uo pipefail
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

n=6
tiny=(--layers 1 --heads 2 --dim 32 --batch 8 --eval-problems 20 --eval-every 0 --sample 0 --threads 1
      --dropout 0.1 --steps $((2 * n)) --warmup 2)

# Both runs checkpoint every 4 steps and keep 2: the run config each checkpoint stores (every setting
# but --resume, --checkpoint-dir and --stop-after-steps) is then the same, byte for byte.
ck=(--checkpoint-every-steps 4 --keep-checkpoints 2)
out=$("$bin" "${tiny[@]}" "${ck[@]}" --checkpoint-dir "$work/straight") || fail "straight run exited $?: $out"
ls "$work/straight" | grep -qx "step_0000000012.safetensors" || fail "no final checkpoint: $(ls "$work/straight")"
[[ $(ls "$work/straight" | wc -l) -eq 2 ]] || fail "keep-checkpoints 2 left: $(ls "$work/straight")"
straight_loss=$(grep "checkpoint step $((2 * n)) " <<<"$out" | grep -o "| loss [^ ]*") || fail "no checkpoint line: $out"

out=$("$bin" "${tiny[@]}" "${ck[@]}" --checkpoint-dir "$work/resumed" --stop-after-steps $n) \
  || fail "first half exited $?: $out"
grep -q "checkpoint step $n " <<<"$out" || fail "first half wrote no step-$n checkpoint: $out"
[[ $(ls "$work/resumed" | tr '\n' ' ') == "step_0000000004.safetensors step_000000000$n.safetensors " ]] \
  || fail "first half left: $(ls "$work/resumed")"
out=$("$bin" "${tiny[@]}" "${ck[@]}" --checkpoint-dir "$work/resumed" --resume) \
  || fail "resumed run exited $?: $out"
grep -q "resumed from .*step_000000000$n.safetensors at step $n" <<<"$out" || fail "did not resume at step $n: $out"
resumed_loss=$(grep "checkpoint step $((2 * n)) " <<<"$out" | grep -o "| loss [^ ]*") || fail "no checkpoint line: $out"

[[ "$straight_loss" == "$resumed_loss" ]] || fail "final losses differ: $straight_loss vs $resumed_loss"
cmp "$work/straight/step_0000000012.safetensors" "$work/resumed/step_0000000012.safetensors" \
  || fail "the final checkpoints differ"

# Another architecture is refused with a one-line usage error (exit 2) naming it: by the run config
# the checkpoint stores (tests/samples/check_run_config.sh checks it further).
wide=("${tiny[@]}")
wide[5]=64  # --dim 32 -> 64
err=$("$bin" "${wide[@]}" --checkpoint-dir "$work/resumed" --resume 2>&1 >/dev/null)
code=$?
[[ $code -eq 2 ]] || fail "resuming a dim-32 checkpoint with --dim 64 exited $code: $err"
grep -qF '"dim" is 32 in the checkpoint'"'"'s run config, 64 now; it cannot change mid-run' <<<"$err" ||
  fail "unclear error for another architecture: $err"
err=$("$bin" --resume 2>&1 >/dev/null)
[[ $? -eq 2 ]] && grep -q -- "need --checkpoint-dir" <<<"$err" || fail "--resume without a directory: $err"
echo "train_gpt resume ok"
