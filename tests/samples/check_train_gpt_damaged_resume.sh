#!/usr/bin/env bash
# train_gpt --resume over damaged checkpoints (train/checkpoint_directory.h DAMAGED ENTRIES): a run
# stopped at step 8 with entries 4 and 8, one bit of step 8's tensor bytes flipped; --resume says
# step 8 is damaged (the tensor named, "checksum mismatch") and resumes from step 4, and its final
# checkpoint equals an uninterrupted run's byte for byte; the same for the sharded layout (--zero 1, a
# flipped bit in an optimizer shard); the damaged entry is kept aside as "<entry>.damaged". With every entry damaged, --resume is refused (exit 2) naming each. Usage: check_train_gpt_damaged_resume.sh TRAIN_GPT
set -uo pipefail
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# flip FILE OFFSET: flips bit 4 of the byte at OFFSET, in place.
flip() {
  local byte
  byte=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
  printf "$(printf '\\x%02x' $((byte ^ 16)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}

tiny=(--layers 1 --heads 2 --dim 32 --batch 8 --eval-problems 20 --eval-every 0 --sample 0 --threads 1
      --dropout 0.1 --steps 12 --warmup 2 --checkpoint-every-steps 4 --keep-checkpoints 3)
out=$("$bin" "${tiny[@]}" --checkpoint-dir "$work/straight") || fail "straight run exited $?: $out"

out=$("$bin" "${tiny[@]}" --checkpoint-dir "$work/run" --stop-after-steps 8) || fail "first part exited $?: $out"
entry8=$work/run/step_0000000008.safetensors
[[ -f $entry8 ]] || fail "no step-8 checkpoint: $(ls "$work/run")"
flip "$entry8" $(( $(stat -c %s "$entry8") - 100 ))  # a byte of the last tensors' data
err_file=$work/stderr
out=$("$bin" "${tiny[@]}" --checkpoint-dir "$work/run" --resume 2>"$err_file") || fail "resume exited $?: $(cat "$err_file")"
err=$(cat "$err_file")
grep -qE "^warning: checkpoint .*step_0000000008.safetensors is damaged \(.*tensor '[^']+': checksum mismatch.*\); resuming from .*step_0000000004.safetensors \(moved aside to .*step_0000000008.safetensors.damaged\)$" <<<"$err" ||
  fail "no fallback warning on stderr: $err"
[[ -f $entry8.damaged ]] || fail "the damaged step 8 was not kept aside as $entry8.damaged: $(ls "$work/run")"
grep -q "resumed from .*step_0000000004.safetensors at step 4" <<<"$out" || fail "did not resume at step 4: $out"
cmp "$work/straight/step_0000000012.safetensors" "$work/run/step_0000000012.safetensors" ||
  fail "the final checkpoint differs from the uninterrupted run's"

# The sharded layout (ZeRO stage 1, one process: an entry is a directory of the state and the optimizer
# shards): a flipped bit in step 8's optimizer shard falls back to step 4 the same way.
zero=("${tiny[@]}" --zero 1)
out=$("$bin" "${zero[@]}" --checkpoint-dir "$work/zero_straight") || fail "ZeRO straight run exited $?: $out"
out=$("$bin" "${zero[@]}" --checkpoint-dir "$work/zero" --stop-after-steps 8) || fail "ZeRO first part exited $?: $out"
shard=$work/zero/step_0000000008/optimizer.rank0-of-1.safetensors
[[ -f $shard ]] || fail "no step-8 optimizer shard: $(ls -R "$work/zero")"
flip "$shard" $(( $(stat -c %s "$shard") - 100 ))
out=$("$bin" "${zero[@]}" --checkpoint-dir "$work/zero" --resume 2>"$err_file") ||
  fail "ZeRO resume exited $?: $(cat "$err_file")"
grep -qE "^warning: checkpoint .*step_0000000008 is damaged \(.*optimizer.rank0-of-1.safetensors.*checksum mismatch.*\); resuming from .*step_0000000004 \(moved aside to .*step_0000000008.damaged\)$" "$err_file" ||
  fail "no ZeRO fallback warning on stderr: $(cat "$err_file")"
grep -q "resumed from .*step_0000000004 at step 4" <<<"$out" || fail "ZeRO run did not resume at step 4: $out"
for f in state.safetensors optimizer.rank0-of-1.safetensors; do
  cmp "$work/zero_straight/step_0000000012/$f" "$work/zero/step_0000000012/$f" ||
    fail "the final ZeRO checkpoint's $f differs from the uninterrupted run's"
done

# Every entry damaged: refused, each named.
for entry in "$work"/run/step_*.safetensors; do flip "$entry" $(( $(stat -c %s "$entry") - 100 )); done
err=$("$bin" "${tiny[@]}" --checkpoint-dir "$work/run" --resume 2>&1 >/dev/null)
code=$?
[[ $code -eq 2 ]] || fail "resuming from damaged entries only exited $code: $err"
[[ $(wc -l <<<"$err") -eq 1 ]] || fail "more than one line: $err"
grep -q "^train_gpt: error: --resume: .*every checkpoint in .* is damaged; none to resume from" <<<"$err" ||
  fail "unclear refusal: $err"
for step in 4 8 12; do
  grep -q "step_00000000$(printf %02d $step).safetensors: .*checksum mismatch" <<<"$err" || fail "step $step not named: $err"
done
echo "train_gpt damaged resume ok"
