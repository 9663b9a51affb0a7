#!/usr/bin/env bash
# train_gpt with 8-bit AdamW state under ZeRO: `--optimizer-state-bits 8 --zero 2` under mpirun -np 2
# learns (the final loss well under the first step's) and ends within 1% of the single-process 8-bit
# run's final loss and within 2% of the 32-bit run's; the per-rank state is smaller than 32-bit
# ZeRO 2's; stage 3 and the offloaded optimizer with 8-bit state learn alike.
# Usage: check_train_gpt_zero8.sh train_gpt mpirun [mpirun flags...]
set -uo pipefail
bin=$1
shift
fail() { echo "FAIL: $*"; exit 1; }
# dim 64: the attention and MLP matrices (12288 to 16384 elements) keep 8-bit moments.
tiny=(--layers 1 --heads 2 --dim 64 --batch 16 --eval-problems 50 --threads 1 --steps 150 --eval-every 0 --sample 0)
final_loss() { sed -n 's/.*final loss \([0-9.]*\).*/\1/p' <<<"$1"; }
first_loss() { tr '\r' '\n' <<<"$1" | sed -n 's/^.*step  *1\/150 | loss \([0-9.]*\).*/\1/p' | head -1; }
state_mib() { tr '\r' '\n' <<<"$1" | sed -n 's/.*state \([0-9.]*\) MiB\/rank.*/\1/p' | tail -1; }
within() { awk -v a="$1" -v b="$2" -v r="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b > 0 && d <= r * b) }'; }

out=$("$bin" "${tiny[@]}" --optimizer-state-bits 8 2>&1) || fail "single process 8-bit exited $?: $out"
one8=$(final_loss "$out")
grep -q "optimizer state: 8-bit AdamW moments" <<<"$out" || fail "no 8-bit state line: $out"
out=$("$bin" "${tiny[@]}" 2>&1) || fail "single process 32-bit exited $?: $out"
one32=$(final_loss "$out")
out=$("$@" -np 2 "$bin" "${tiny[@]}" --zero 2 2>&1) || fail "zero 2 32-bit exited $?: $out"
mib32=$(state_mib "$out")
out=$("$@" -np 2 "$bin" "${tiny[@]}" --zero 2 --offload-optimizer 2>&1) || fail "zero 2 offload 32-bit exited $?: $out"
mib32_offload=$(state_mib "$out")
[[ -n "$one8" && -n "$one32" && -n "$mib32" && -n "$mib32_offload" ]] || fail "no final loss or state"

# check NAME MIB32 command...: MIB32 the 32-bit run's state per rank the 8-bit one must stay under.
check() {
  local name=$1 mib32=$2
  shift 2
  local out
  out=$("$@" 2>&1) || fail "$name exited $?: $out"
  local got first mib
  got=$(final_loss "$out")
  first=$(first_loss "$out")
  mib=$(state_mib "$out")
  [[ -n "$got" && -n "$first" && -n "$mib" ]] || fail "$name: no loss or state in: $out"
  awk -v a="$got" -v b="$first" 'BEGIN { exit !(a < 0.6 * b) }' || fail "$name did not learn: step 1 loss $first, final $got"
  within "$got" "$one8" 0.01 || fail "$name: final loss $got, single-process 8-bit $one8"
  within "$got" "$one32" 0.02 || fail "$name: final loss $got, single-process 32-bit $one32"
  awk -v a="$mib" -v b="$mib32" 'BEGIN { exit !(a < b) }' || fail "$name: state $mib MiB/rank, 32-bit $mib32"
  echo "ok: $name (loss $first -> $got; 8-bit one process $one8, 32-bit $one32; state $mib MiB/rank, 32-bit $mib32)"
}
check "mpirun x2 zero 2 8-bit" "$mib32" "$@" -np 2 "$bin" "${tiny[@]}" --optimizer-state-bits 8 --zero 2
check "mpirun x2 zero 3 8-bit" "$mib32" "$@" -np 2 "$bin" "${tiny[@]}" --optimizer-state-bits 8 --zero 3
check "mpirun x2 zero 2 8-bit offload" "$mib32_offload" "$@" -np 2 "$bin" "${tiny[@]}" --optimizer-state-bits 8 --zero 2 --offload-optimizer
echo "train_gpt zero8 checks ok"
