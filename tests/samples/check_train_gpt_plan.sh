#!/usr/bin/env bash
# train_gpt and the memory planner: --plan prints a ranked table with a recommended row and exits 0;
# --write-config writes a JSON object with the chosen keys; --memory-budget alone trains with the
# plan's pick and logs it; a budget nothing fits in is a usage error (exit 2) that says what would fit.
set -uo pipefail
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

tiny=(--layers 2 --heads 2 --dim 32 --batch 16 --eval-problems 50 --threads 1)

# --plan for this run's model on the CPU device: a table, the recommended row first, the counts.
out=$("$bin" "${tiny[@]}" --plan --memory-budget 1 --write-config "$work/plan.json") || fail "--plan exited $?: $out"
grep -q "^plan: GPT L2 H2 C32 T16 V256" <<<"$out" || fail "no plan header: $out"
grep -q "^rank  *device GiB" <<<"$out" || fail "no column header: $out"
grep -q "^1\* " <<<"$out" || fail "no recommended row: $out"
grep -q "^\* recommended: --" <<<"$out" || fail "no recommended flags: $out"
grep -Eq "^[0-9]+ configurations considered, [0-9]+ fit" <<<"$out" || fail "no counts: $out"
grep -q "wrote $work/plan.json" <<<"$out" || fail "--write-config not reported: $out"
[[ -s "$work/plan.json" ]] || fail "--write-config wrote nothing"
if command -v python3 >/dev/null; then
  python3 - "$work/plan.json" <<'PY' || fail "plan.json is not the expected JSON: $(cat "$work/plan.json")"
import json, sys
c = json.load(open(sys.argv[1]))
assert isinstance(c, dict), c
for key, kind in {"precision": str, "batch": int, "grad-accum": int, "recompute-every": int,
                  "offload-activations": str, "zero": int, "offload-optimizer": bool,
                  "optimizer-state-bits": int}.items():
    assert isinstance(c[key], kind), (key, c)
assert c["precision"] in ("fp32", "bf16", "fp16") and c["optimizer-state-bits"] in (8, 32), c
assert c["batch"] * c["grad-accum"] == 16, c  # the run's 16 sequences per step
# the whole run config, not only the chosen keys: the model's shape, the batch, the device
assert (c["layers"], c["heads"], c["dim"], c["context"], c["batch-tokens"], c["device"]) == (2, 2, 32, 16, 0, "cpu"), c
for key in ("plan", "memory-budget", "world", "write-config"):
    assert key not in c, (key, c)
PY
else
  grep -q '"precision": "' "$work/plan.json" || fail "plan.json has no precision: $(cat "$work/plan.json")"
fi

# The written config fed back: --print-config shows the plan's values, and it trains with nothing else.
shown=$("$bin" --config "$work/plan.json" --print-config) || fail "--config plan.json --print-config: $shown"
for key in precision batch grad-accum zero recompute-every optimizer-state-bits layers dim; do
  want=$(grep "\"$key\":" "$work/plan.json")
  grep -qF -- "$want" <<<"$shown" || fail "--config plan.json shows another $key (want $want): $shown"
done
out=$("$bin" --config "$work/plan.json" --steps 1 --eval-every 0 --sample 0 2>&1) || fail "training from plan.json: $out"
grep -q "summary: 1 steps" <<<"$out" || fail "plan.json did not train: $out"

# --batch-tokens is divided by the trained sequence length (3-digit addition: 12 bytes), as train_gpt does:
# 192 tokens are 16 sequences, planned as 16 x 16 tokens of the model's context.
out=$("$bin" "${tiny[@]}" --plan --memory-budget 1 --batch-tokens 192) || fail "--batch-tokens plan: $out"
grep -q "| 256 tokens per step (16 sequences" <<<"$out" || fail "--batch-tokens 192 planned another batch: $out"

# Flags the plan chooses, or conflicts it does not model, are refused with --memory-budget.
for flag in "--zero 1" "--precision bf16" "--stochastic-rounding" "--fp32-grads"; do
  out=$("$bin" "${tiny[@]}" --memory-budget 1 --steps 1 $flag 2>&1)
  [[ $? -eq 2 ]] && grep -q -- "${flag%% *} is" <<<"$out" || fail "--memory-budget with $flag: $out"
done

# --load's model is planned for (its shape, whatever the shape flags say).
"$bin" "${tiny[@]}" --steps 1 --eval-every 0 --sample 0 --save "$work/model.safetensors" >/dev/null || fail "save run"
out=$("$bin" --plan --memory-budget 1 --layers 5 --load "$work/model.safetensors") || fail "--plan --load exited $?: $out"
grep -q "^plan: GPT L2 H2 C32 T16 V256" <<<"$out" || fail "--plan --load planned another shape: $out"

# A model given by its shape only (never built): GPT-2 XL on an H200 at world 8, planned on this machine.
out=$("$bin" --plan --device cuda --memory-budget 131 --layers 48 --heads 25 --dim 1600 --context 1024 --vocab 50257 \
  --batch 512 --world 8) || fail "GPT-2 XL plan exited $?: $out"
grep -q "GPT L48 H25 C1600 T1024 V50257 (1.56B parameters) | 524288 tokens per step (64 sequences x 8 ranks)" <<<"$out" \
  || fail "GPT-2 XL header: $out"
grep -q "budget 131.00 GiB - headroom 7.69 GiB per rank" <<<"$out" || fail "no headroom in the header: $out"
# The pick fits the budget less the headroom, and its flags, parsed by train_gpt itself, are the
# configuration: 512 sequences per step (--batch x --grad-accum) and what the row's flags say.
peak=$(grep '^1\*' <<<"$out" | awk '{print $2}')
awk -v p="$peak" 'BEGIN { exit !(p <= 131 - 7.69) }' || fail "the pick's peak $peak GiB exceeds the usable 123.31 GiB: $out"
# every shown row's flags (from the 10th column on; step and tokens/s take two and one)
while read -r pick; do
  "$bin" --layers 48 --heads 25 --dim 1600 --context 1024 $pick --print-config >"$work/pick.json" \
    || fail "train_gpt rejects the pick $pick"
if command -v python3 >/dev/null; then
  python3 - "$pick" "$work/pick.json" <<'PY' || fail "the pick's flags parse to another configuration: $pick"
import json, sys
c, words = json.load(open(sys.argv[2])), sys.argv[1].split()
assert c["batch"] * c["grad-accum"] == 512, c
flags = {}
for i, w in enumerate(words):
    if w.startswith("--"):
        flags[w[2:]] = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") else True
for key, value in flags.items():
    if key.startswith("no-"):
        assert c[key[3:]] is False, (key, c)
    elif value is True:
        assert c[key] is True, (key, c)
    else:
        assert str(c[key]) == value, (key, value, c[key])
assert ("zero" in flags) == (c["zero"] != -1) and ("precision" in flags) == (c["precision"] != "fp32"), c
PY
fi
done < <(grep -E '^[0-9]+\*? ' <<<"$out" | awk '{ for (i = 11; i <= NF; ++i) printf "%s%s", $i, (i < NF ? " " : "\n") }')

# --memory-budget alone: the plan's pick, logged, then training.
out=$("$bin" "${tiny[@]}" --memory-budget 1 --steps 4 --eval-every 0 --sample 0) || fail "--memory-budget run exited $?: $out"
grep -Eq "^plan: --.* \(predicted [0-9.]+ GiB of 1.00 GiB per rank\)" <<<"$out" || fail "no plan line: $out"
grep -q "summary: 4 steps" <<<"$out" || fail "the planned run did not train: $out"

# Nothing fits: exit 2, the smallest peak and what would have to change.
out=$("$bin" "${tiny[@]}" --memory-budget 0.00001 --steps 4 2>&1)
status=$?
[[ $status -eq 2 ]] || fail "a too-small budget exited $status, expected 2: $out"
grep -q "train_gpt: error: nothing fits in 1e-05 GiB per rank: the smallest predicted peak is" <<<"$out" || fail "message: $out"
grep -q "expected --memory-budget" <<<"$out" || fail "no remedy in the message: $out"
out=$("$bin" "${tiny[@]}" --plan 2>&1)
[[ $? -eq 2 ]] && grep -q -- "--plan needs --memory-budget" <<<"$out" || fail "--plan without a budget: $out"

out=$("$bin" "${tiny[@]}" --memory-budget 1 --world 4 --steps 1 2>&1)
[[ $? -eq 2 ]] && grep -q -- "--world 4 plans for another world than this run's 1" <<<"$out" || fail "--world without --plan: $out"

echo "train_gpt plan ok"
