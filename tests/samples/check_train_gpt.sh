#!/usr/bin/env bash
# train_gpt end to end with a tiny config: trains, evaluates, saves, reloads, and answers bad flags
# with a one-line error and exit code 2.
set -uo pipefail
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

tiny=(--layers 1 --heads 2 --dim 32 --batch 16 --eval-problems 50 --threads 1)
out=$("$bin" "${tiny[@]}" --steps 60 --eval-every 30 --save "$work/model.safetensors" --sample 2) || fail "training run exited $?: $out"
grep -q "eval  step 30 | held-out exact match" <<<"$out" || fail "no evaluation line: $out"
grep -q "summary: 60 steps" <<<"$out" || fail "no summary: $out"
[[ -s "$work/model.safetensors" ]] || fail "no checkpoint written"

out=$("$bin" "${tiny[@]}" --steps 5 --load "$work/model.safetensors") || fail "reload run exited $?: $out"
grep -q "GPT L1 H2 C32" <<<"$out" || fail "reloaded model has another shape: $out"

printf 'hello halfgrad, hello world. %.0s' {1..40} > "$work/text.txt"
out=$("$bin" --data "$work/text.txt" --layers 1 --heads 2 --dim 32 --batch 8 --steps 20 --eval-every 10 --threads 1 --sample 16) \
  || fail "text run exited $?: $out"
grep -q "validation loss" <<<"$out" || fail "no validation loss: $out"

# Checkpointing and activation offload change memory, not the run: the same seed gives the same losses.
final_loss() { "$bin" --layers 2 --heads 2 --dim 32 --batch 8 --dropout 0.1 --steps 12 --eval-every 0 --eval-problems 20 \
  --threads 1 --sample 0 "$@" | grep -o "final loss [0-9.]*"; }
plain=$(final_loss) || fail "plain run failed"
[[ -n "$plain" ]] || fail "no final loss in the plain run"
for savers in "--checkpoint-every 1" "--checkpoint-every 2 --offload-activations inputs" "--offload-activations all"; do
  # shellcheck disable=SC2086
  [[ $(final_loss $savers) == "$plain" ]] || fail "$savers changed the run: $(final_loss $savers) vs $plain"
done

expect_usage_error() {
  local expected=$1
  shift
  local err
  err=$("$bin" "$@" 2>&1 >/dev/null)
  local code=$?
  [[ $code -eq 2 ]] || fail "'$*' exited $code, expected 2 ($err)"
  [[ $(wc -l <<<"$err") -eq 1 ]] || fail "'$*' printed more than one line: $err"
  grep -q -- "$expected" <<<"$err" || fail "'$*' said '$err', expected '$expected'"
}
expect_usage_error "does not divide --dim" --heads 3 --dim 128
expect_usage_error "--layers must be >= 1" --layers 0
expect_usage_error "unknown flag --bogus" --bogus 1
expect_usage_error "expects an integer" --steps ten
expect_usage_error "unknown --device" --device tpu
expect_usage_error "too short for 3-digit problems" --context 8
expect_usage_error "unknown --offload-activations" --offload-activations gpu
expect_usage_error "it needs --checkpoint-every" --offload-activations inputs
"$bin" --help | grep -q -- "--weight-decay" || fail "--help does not list the flags"
echo "train_gpt checks ok"
