#!/usr/bin/env bash
# Run config files end to end (docs/samples.md "Run config files"): every sample's --print-config
# round-trips through --config byte for byte; a partial file keeps the other defaults and the command
# line wins over it; each kind of bad file is one usage error (exit 2); train_gpt --resume restores the
# run config its checkpoint stores -- resuming with no other flag than --checkpoint-dir ends in the
# same final checkpoint, byte for byte, as the uninterrupted run -- refuses a changed fixed key and
# accepts a changed mutable one. Usage: check_run_config.sh BIN_DIR
set -uo pipefail
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# ---- --print-config round trip, every sample ----
printf 'some text\n' > "$work/input.txt"
for program in train_gpt train_mlp train_cnn prepare_data; do
  required=()  # prepare_data's checks want its input and output (and run before printing)
  [[ $program == prepare_data ]] && required=(--input "$work/input.txt" --output "$work/shards")
  "$bin/$program" "${required[@]}" --print-config > "$work/$program.json" || fail "$program --print-config exited $?"
  "$bin/$program" --config "$work/$program.json" --print-config > "$work/$program.again.json" ||
    fail "$program --config of its own --print-config exited $?"
  cmp -s "$work/$program.json" "$work/$program.again.json" || fail "$program: --print-config does not round-trip"
  [[ $(head -c 1 "$work/$program.json") == "{" ]] || fail "$program --print-config is not a JSON object"
  # Every flag of --help is a key.
  for flag in $("$bin/$program" --help | sed -n 's/^  --\([a-z0-9-]*\).*/\1/p' | grep -vx 'help\|config\|print-config'); do
    grep -q "^  \"$flag\": " "$work/$program.json" || fail "$program --print-config lacks \"$flag\""
  done
done
# --print-config prints only settings the program's checks accept (a usage error, nothing printed).
for refused in "train_gpt:--heads 3 does not divide --dim 16:--heads 3 --dim 16" \
               "train_mlp:--classes must be at most 1000:--classes 1001" \
               "train_cnn:must be a multiple of 4:--size 10" \
               "prepare_data:--input FILE is required:--output $work/shards"; do
  IFS=: read -r program message args <<<"$refused"
  # shellcheck disable=SC2086
  "$bin/$program" $args --print-config > "$work/out.txt" 2> "$work/err.txt"
  code=$?
  [[ $code -eq 2 && ! -s "$work/out.txt" ]] || fail "$program $args --print-config exited $code: $(cat "$work/out.txt")"
  grep -qF -- "$message" "$work/err.txt" || fail "$program $args --print-config said: $(cat "$work/err.txt")"
done
# A text value that is not UTF-8 cannot become JSON: a usage error naming the flag.
err=$("$bin/train_gpt" --device $'cpu\xff' --print-config 2>&1 >/dev/null)
[[ $? -eq 2 && $err == "train_gpt: error: --device must be UTF-8 text "*"byte 3 (0xff) is not"* ]] ||
  fail "a non-UTF-8 --device: $err"
# A pipe is a config file too: process substitution and /dev/stdin.
out=$("$bin/train_gpt" --config <(printf '{"steps": 11}') --print-config) || fail "--config <(...) exited $?"
grep -q '^  "steps": 11,$' <<<"$out" || fail "--config <(...) did not read the pipe: $out"
out=$(printf '{"steps": 12}' | "$bin/train_gpt" --config /dev/stdin --print-config) || fail "--config /dev/stdin exited $?"
grep -q '^  "steps": 12,$' <<<"$out" || fail "--config /dev/stdin did not read the pipe: $out"
echo "ok: --print-config round-trips for train_gpt, train_mlp, train_cnn and prepare_data, after their checks"

# ---- a partial file, flags win wherever --config stands ----
printf '{"steps": 7, "lr": 0.5, "precision": "bf16"}\n' > "$work/partial.json"
for args in "--steps 3 --config $work/partial.json" "--config $work/partial.json --steps 3"; do
  # shellcheck disable=SC2086
  out=$("$bin/train_gpt" $args --print-config) || fail "train_gpt $args exited $?"
  grep -q '^  "steps": 3,$' <<<"$out" || fail "the flag did not win in '$args': $out"
  grep -q '^  "lr": 0.5,$' <<<"$out" || fail "the file's lr is lost in '$args'"
  grep -q '^  "precision": "bf16",$' <<<"$out" || fail "the file's precision is lost in '$args'"
  grep -q '^  "dim": 128,$' <<<"$out" || fail "an absent key lost its default in '$args'"
done
# A config file drives a real run.
printf '{"steps": 30, "points": 200, "width": 16, "eval-every": 0}\n' > "$work/mlp.json"
out=$("$bin/train_mlp" --config "$work/mlp.json" --classes 3) || fail "train_mlp --config exited $?: $out"
grep -q "train_mlp: 3 spiral arms, 1.50 turns, 200 training points .* MLP 2-16x2-3" <<<"$out" ||
  fail "train_mlp did not run the file's settings: $out"
grep -q "step *30/30" <<<"$out" || fail "train_mlp did not run the file's 30 steps: $out"
echo "ok: a partial file keeps the defaults, flags win before and after --config, a file drives a run"

# ---- bad files: one line, exit 2, naming the file and the key ----
expect() {  # expect PROGRAM "expected text" FILE_CONTENT [ARGS...]
  local program=$1 expected=$2 content=$3
  shift 3
  printf '%s' "$content" > "$work/bad.json"
  local err code
  err=$("$bin/$program" --config "$work/bad.json" "$@" 2>&1 >/dev/null)
  code=$?
  [[ $code -eq 2 ]] || fail "$program with '$content' exited $code, expected 2: $err"
  [[ $(wc -l <<<"$err") -eq 1 ]] || fail "$program with '$content' printed more than one line: $err"
  [[ $err == "$program: error: $work/bad.json: $expected"* ]] ||
    fail "$program with '$content' said '$err', expected '$program: error: $work/bad.json: $expected...'"
}
expect train_gpt 'key "steps": expected an integer, got the string "3"' '{"steps": "3"}'
expect train_gpt 'key "steps": expected an integer, got the number 2.0' '{"steps": 2.0}'
expect train_gpt 'key "lr": expected a number, got the string "fast"' '{"lr": "fast"}'
expect train_gpt 'key "resume": expected true or false, got the integer 1' '{"resume": 1}'
expect train_gpt 'key "precision": expected a string, got null' '{"precision": null}'
expect train_gpt 'key "dim": must be >= 1, got 0' '{"dim": 0}'
expect train_gpt 'key "dropout": must be in [0, 0.99], got 2' '{"dropout": 2}'
expect train_gpt 'key "steps": expected an integer' '{"steps": "3"}' --steps 5  # even where a flag overrides it
expect train_gpt 'unknown key "grad_accum"; did you mean "grad-accum"?' '{"grad_accum": 2}'
expect train_gpt 'unknown key "wibble"; expected a flag name of train_gpt' '{"wibble": 2}'
expect train_gpt 'key "steps" appears twice' '{"steps": 1, "steps": 2}'
expect train_gpt 'expected a JSON object of settings' '[{"steps": 1}]'
expect train_gpt 'not valid JSON: parse error at line 2, column 10: syntax error while parsing object key' $'{"steps": 1,\n "lr": 1,}'
expect train_gpt 'not valid JSON: parse error at line 1, column 1: ' ''
expect train_mlp 'key "classes": must be >= 2, got 1' '{"classes": 1}'
expect train_cnn 'unknown key "chanels"; did you mean "channels"?' '{"chanels": 4}'
expect prepare_data 'key "shard-tokens": expected an integer, got the string "1k"' '{"shard-tokens": "1k"}'
# The checks after parsing see the file's values as they see the flags'.
printf '{"heads": 3, "dim": 16}' > "$work/heads.json"
err=$("$bin/train_gpt" --config "$work/heads.json" 2>&1 >/dev/null)
[[ $? -eq 2 && $err == *"--heads 3 does not divide --dim 16"* ]] || fail "a file's heads/dim not checked: $err"
err=$("$bin/train_gpt" --config "$work/missing.json" 2>&1 >/dev/null)
[[ $? -eq 2 && $err == *"--config \"$work/missing.json\": No such file or directory"* ]] || fail "missing file: $err"
err=$("$bin/train_gpt" --config "$work/partial.json" --config "$work/partial.json" 2>&1 >/dev/null)
[[ $? -eq 2 && $err == *"--config is given twice"* ]] || fail "--config twice: $err"
echo "ok: bad config files are one-line usage errors (exit 2) naming the file and the key"

# ---- the run config in checkpoints, restored by --resume ----
cat > "$work/run.json" <<'EOF'
{"layers": 1, "heads": 2, "dim": 32, "batch": 8, "eval-problems": 20, "eval-every": 0, "sample": 0,
 "threads": 1, "dropout": 0.1, "steps": 8, "warmup": 2, "checkpoint-every-steps": 4, "keep-checkpoints": 2}
EOF
out=$("$bin/train_gpt" --config "$work/run.json" --checkpoint-dir "$work/straight") || fail "straight run exited $?: $out"
out=$("$bin/train_gpt" --config "$work/run.json" --checkpoint-dir "$work/halves" --stop-after-steps 4 \
  --metrics-log "$work/metrics.jsonl" --profile "$work/trace.json") || fail "first half exited $?: $out"
[[ -s "$work/metrics.jsonl" && -s "$work/trace.json" ]] || fail "the first half wrote no metrics log or trace"
cp "$work/metrics.jsonl" "$work/metrics.first"
cp "$work/trace.json" "$work/trace.first"
# The resumed settings are the stored ones: --print-config after --resume equals the original's.
"$bin/train_gpt" --config "$work/run.json" --checkpoint-dir "$work/halves" --resume --print-config > "$work/want.json"
"$bin/train_gpt" --checkpoint-dir "$work/halves" --resume --print-config > "$work/got.json" ||
  fail "--resume --print-config exited $?"
cmp -s "$work/want.json" "$work/got.json" || fail "resumed settings differ: $(diff "$work/want.json" "$work/got.json")"
# Nothing but the directory: the run continues with the stored settings to the same final checkpoint.
out=$("$bin/train_gpt" --checkpoint-dir "$work/halves" --resume) || fail "resumed run exited $?: $out"
grep -q "resumed from .*step_0000000004.safetensors at step 4" <<<"$out" || fail "did not resume at step 4: $out"
grep -q "GPT L1 H2 C32 T16" <<<"$out" || fail "the resumed model is not the stored one: $out"
cmp -s "$work/straight/step_0000000008.safetensors" "$work/halves/step_0000000008.safetensors" ||
  fail "the resumed run's final checkpoint differs from the uninterrupted run's"
# The metrics log and the trace are each invocation's own: a bare --resume leaves the first segment's.
cmp -s "$work/metrics.jsonl" "$work/metrics.first" || fail "the bare --resume rewrote the first segment's metrics log"
cmp -s "$work/trace.json" "$work/trace.first" || fail "the bare --resume rewrote the first segment's trace"
grep -q '^  "metrics-log": "",$' "$work/got.json" || fail "--resume restored metrics-log: $(cat "$work/got.json")"
grep -q '^  "profile": "",$' "$work/got.json" || fail "--resume restored profile: $(cat "$work/got.json")"
# A key that cannot change mid-run, given with another value: one line, exit 2.
for change in "--dim 64:\"dim\" is 32 in the checkpoint's run config, 64 now; it cannot change mid-run" \
              "--precision bf16:\"precision\" is \"fp32\" in the checkpoint's run config, \"bf16\" now" \
              "--seed 7:\"seed\" is 1337 in the checkpoint's run config, 7 now" \
              "--batch 4:\"batch\" is 8 in the checkpoint's run config, 4 now"; do
  # shellcheck disable=SC2086
  err=$("$bin/train_gpt" --checkpoint-dir "$work/halves" --resume ${change%%:*} 2>&1 >/dev/null)
  code=$?
  [[ $code -eq 2 && $err == "train_gpt: error: --resume: ${change#*:}"* ]] ||
    fail "--resume ${change%%:*} exited $code: $err"
done
# The same value, given again, and a mutable key changed: accepted (8 more steps).
out=$("$bin/train_gpt" --checkpoint-dir "$work/halves" --resume --dim 32 --steps 12) ||
  fail "resume with --steps 12 exited $?: $out"
grep -q "resumed from .*step_0000000008.safetensors at step 8" <<<"$out" || fail "did not resume at step 8: $out"
grep -q "checkpoint step 12 " <<<"$out" || fail "--steps 12 did not take: $out"
# A directory holding both layouts: the layout given now (--zero) picks the entry, else a usage error.
# (a newer sharded entry, as if written by a ZeRO run, of another width: 16)
out=$("$bin/train_gpt" --config "$work/run.json" --dim 16 --steps 1 --checkpoint-dir "$work/narrow") ||
  fail "the dim-16 run exited $?: $out"
cp -r "$work/halves" "$work/mixed"
mkdir "$work/mixed/step_0000000020"
cp "$work/narrow/step_0000000001.safetensors" "$work/mixed/step_0000000020/state.safetensors"
cp "$work/narrow/step_0000000001.safetensors" "$work/mixed/step_0000000020/optimizer.rank0-of-1.safetensors"
err=$("$bin/train_gpt" --checkpoint-dir "$work/mixed" --resume --print-config 2>&1 >/dev/null)
[[ $? -eq 2 && $err == "train_gpt: error: --resume: "*"holds checkpoints of both layouts"*"(train_gpt: --zero)"* ]] ||
  fail "a directory of both layouts: $err"
"$bin/train_gpt" --checkpoint-dir "$work/mixed" --resume --zero -1 --print-config > "$work/mixed.json" ||
  fail "--zero -1 in a directory of both layouts exited $?"
grep -q '^  "dim": 32,$' "$work/mixed.json" || fail "--zero -1 did not restore the single-file run config"
# A sharded entry whose run config gives a single-file run (as a multi-process run without --zero
# stores: --zero -1, sharded by its world size) resumed in one process: the layouts must agree.
mkdir -p "$work/sharded_only/step_0000000001"
cp "$work/narrow/step_0000000001.safetensors" "$work/sharded_only/step_0000000001/state.safetensors"
# (an entry is whole only with its shards: a stand-in for rank 0's, any intact file)
cp "$work/narrow/step_0000000001.safetensors" "$work/sharded_only/step_0000000001/optimizer.rank0-of-1.safetensors"
err=$("$bin/train_gpt" --checkpoint-dir "$work/sharded_only" --resume --print-config 2>&1 >/dev/null)
[[ $? -eq 2 && $err == "train_gpt: error: --resume: the run config of $work/sharded_only/step_0000000001 (a sharded checkpoint) gives a single-file run (--zero -1, --offload-optimizer false); expected the checkpoint's layout: give --zero "* ]] ||
  fail "a sharded entry with a single-file run config: $err"
echo "ok: --resume restores the stored run config (byte-identical final checkpoint), refuses a changed fixed key"
echo "run config ok"
