#!/usr/bin/env bash
# Every benchmark binary answers --help and -h with its usage on stdout (naming itself), exit 0, without
# running anything (under `timeout 10`; a full benchmark takes minutes), and an argument it does not take
# with an error naming that argument on stderr, exit 2.
# Usage: check_bench_help.sh BIN_DIR [EXTRA_BINARY ...]   (extras: built only in some configurations,
# e.g. bench_kernels with a CUDA backend). A listed binary missing from BIN_DIR fails; a bench_* there
# that the list lacks is checked too.
set -uo pipefail
bin=$1
shift
fail() { echo "FAIL: $*"; exit 1; }
expected=(bench_adamw8bit bench_attention bench_checksum bench_conv bench_data bench_generate bench_memory
          bench_ops bench_optimizer bench_plan bench_precision bench_profiler bench_step bench_threads
          bench_tokenizer bench_train bench_train_bpe bench_zero "$@")
for name in "${expected[@]}"; do
  [[ -x $bin/$name ]] || fail "$bin/$name is missing (not built?)"
done
# Whatever else is there, so that a new benchmark cannot skip this check.
for path in "$bin"/bench_*; do
  name=$(basename "$path")
  [[ -f $path && -x $path ]] || continue
  [[ " ${expected[*]} " == *" $name "* ]] || expected+=("$name")
done
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
checked=0
for name in "${expected[@]}"; do
  for flag in --help -h; do
    timeout 10 "$bin/$name" "$flag" >"$out" 2>"$err"
    code=$?
    [[ $code -eq 0 ]] || fail "$name $flag exited $code, expected 0 (124: it ran the benchmark): $(head -c 400 "$err")"
    [[ -s $out ]] || fail "$name $flag printed nothing on stdout"
    grep -qi "usage" "$out" || fail "$name $flag: no 'usage' in its stdout: $(head -c 400 "$out")"
    grep -qF "$name" "$out" || fail "$name $flag: its usage does not name the binary: $(head -c 400 "$out")"
  done
  timeout 10 "$bin/$name" --no-such-option >"$out" 2>"$err"
  code=$?
  [[ $code -eq 2 ]] || fail "$name --no-such-option exited $code, expected 2: $(head -c 400 "$err")"
  grep -qF -- "--no-such-option" "$err" || fail "$name --no-such-option: stderr does not name the argument: $(head -c 400 "$err")"
  checked=$((checked + 1))
done
[[ $checked -ge 18 ]] || fail "only $checked binaries checked"
echo "bench help ok ($checked binaries)"
