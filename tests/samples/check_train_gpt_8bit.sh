#!/usr/bin/env bash
# train_gpt with 8-bit AdamW state (--optimizer-state-bits 8): the addition task still learns (held-out
# exact match over a threshold, stated below with the margin measured when it was set), the start-up
# line reports the state's bytes per parameter, a stopped-and-resumed run equals the straight one, a
# checkpoint of 8-bit state does not resume a 32-bit run, bf16 without master weights runs, and the
# flags' bad values are answered with one line.
set -uo pipefail
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# Learning: 2-digit addition, a small GPT, 8-bit moments on every matrix (dim 64: 64x64 = 4096 elements).
# The task is learnt in a sudden jump whose step moves with any change of rounding (a new exp, a GEMM
# summing in another order): at 500 steps, seeds 1-5 gave 54-99.75% on 2026-12-02 and the default seed
# 14% (it had given 99.75% before that day's kernel changes). At 800 steps the default seed reaches 100%
# (seeds 3, 4, 6, 8: >= 99.75%; seed 7: 73%), ~8 s on one core. The check asks for 95%.
learn=(--digits 2 --context 12 --layers 2 --heads 4 --dim 64 --batch 64 --steps 800 --lr 3e-3 --warmup 50
       --eval-every 0 --eval-problems 400 --sample 0 --threads 1 --optimizer-state-bits 8)
out=$("$bin" "${learn[@]}") || fail "8-bit training run exited $?: $out"
grep -q "optimizer state: 8-bit AdamW moments 2\.[0-9][0-9] bytes/parameter (32-bit: 8\.00)" <<<"$out" \
  || fail "no optimizer-state line: $out"
accuracy=$(grep -o "held-out exact match [0-9.]*" <<<"$out" | tail -1 | grep -o "[0-9.]*$")
[[ -n "$accuracy" ]] || fail "no held-out accuracy: $out"
awk -v a="$accuracy" 'BEGIN { exit !(a >= 95) }' || fail "8-bit run reached only $accuracy% held-out: $out"

# Resume: 2N steps equal N, a checkpoint and N more, to the printed bit (%.9g loss of the last checkpoint).
n=6
tiny=(--layers 1 --heads 2 --dim 64 --batch 8 --eval-problems 20 --eval-every 0 --sample 0 --threads 1
      --steps $((2 * n)) --warmup 2 --optimizer-state-bits 8)
out=$("$bin" "${tiny[@]}" --checkpoint-dir "$work/straight" --checkpoint-every-steps 2) || fail "straight run: $out"
straight=$(grep "checkpoint step $((2 * n)) " <<<"$out" | grep -o "| loss [^ ]*") || fail "no checkpoint line: $out"
"$bin" "${tiny[@]}" --checkpoint-dir "$work/resumed" --checkpoint-every-steps 2 --stop-after-steps $n >/dev/null \
  || fail "first half failed"
out=$("$bin" "${tiny[@]}" --checkpoint-dir "$work/resumed" --checkpoint-every-steps 2 --resume) || fail "resume: $out"
resumed=$(grep "checkpoint step $((2 * n)) " <<<"$out" | grep -o "| loss [^ ]*") || fail "no checkpoint line: $out"
[[ "$straight" == "$resumed" ]] || fail "resumed 8-bit run differs: $straight vs $resumed"
cmp -s "$work/straight/step_0000000012.safetensors" "$work/resumed/step_0000000012.safetensors" \
  || fail "the resumed run's final checkpoint differs from the straight run's"

# The 8-bit checkpoint does not resume a 32-bit run. Its run config refuses the change of width; a
# checkpoint without a run config (an older build's: version 1, no header checksum) is refused by the
# optimizer, naming the entry.
cp -r "$work/resumed" "$work/wide"
wide=("${tiny[@]:0:${#tiny[@]}-2}" --optimizer-state-bits 32)
err=$("$bin" "${wide[@]}" --checkpoint-dir "$work/wide" --resume 2>&1 >/dev/null)
grep -q '"optimizer-state-bits" is 8 in the checkpoint' <<<"$err" || fail "a 32-bit resume of an 8-bit run said: $err"
for entry in "$work/wide"/step_*.safetensors; do
  LC_ALL=C sed -i 's/"run_config"/"xun_config"/; s/"version":"2"/"version":"1"/; s/"halfgrad\.crc32c\.__metadata__"/"halfgrad.xrc32c.__metadata__"/' "$entry"
done
err=$("$bin" "${wide[@]}" --checkpoint-dir "$work/wide" --resume 2>&1 >/dev/null)
grep -q "exp_avg.*8-bit state" <<<"$err" || fail "a 32-bit resume of 8-bit state without a run config said: $err"

# bf16 without master weights, stochastic rounding, 8-bit moments.
out=$("$bin" "${tiny[@]}" --precision bf16 --no-master-weights --stochastic-rounding) || fail "bf16 run: $out"
grep -q "optimizer state: 8-bit" <<<"$out" || fail "no optimizer-state line in the bf16 run: $out"
grep -q "fp32 master weights" <<<"$out" && fail "--no-master-weights still reports master weights: $out"

err=$("$bin" --optimizer-state-bits 16 --steps 1 2>&1 >/dev/null); code=$?
[[ $code -eq 2 && $(wc -l <<<"$err") -eq 1 ]] && grep -q "expected 8 or 32" <<<"$err" || fail "--optimizer-state-bits 16: $code $err"
echo "train_gpt 8-bit checks ok"
