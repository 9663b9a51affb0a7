#!/usr/bin/env bash
# train_gpt data parallel end to end: under mpirun (-np 2 with --zero 0/1/2 and --offload-optimizer,
# -np 4 with --zero 2) and under the RANK/WORLD_SIZE launcher, the final loss equals the
# single-process run's on the same global batch, and the progress line reports the per-rank state.
# Usage: check_train_gpt_dist.sh train_gpt [mpirun flags...]   (no mpirun flags: TCP only)
set -uo pipefail
bin=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "FAIL: $*"; exit 1; }
tiny=(--layers 1 --heads 2 --dim 32 --batch 16 --eval-problems 50 --threads 1 --steps 40 --eval-every 20 --sample 0)

final_loss() { sed -n 's/.*final loss \([0-9.]*\).*/\1/p' <<<"$1"; }
out=$("$bin" "${tiny[@]}") || fail "single process exited $?: $out"
want=$(final_loss "$out")
[[ -n "$want" ]] || fail "no final loss: $out"

# check NAME command...: the run succeeds, reports its ZeRO state, and ends at the same loss (4 decimals
# printed; allow one unit of the last for reduction order).
check() {
  local name=$1
  shift
  local out
  out=$("$@" 2>&1) || fail "$name exited $?: $out"
  grep -q "state .* MiB/rank" <<<"$out" || fail "$name: no per-rank state in the progress line: $out"
  local got
  got=$(final_loss "$out")
  awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1.5e-4) }' \
    || fail "$name: final loss $got, single process $want"
  echo "ok: $name (final loss $got)"
}

check "tcp x2 zero 1" "$here/run_env.sh" 2 "$bin" "${tiny[@]}" --zero 1
if [[ $# -gt 0 ]]; then
  for stage in 0 1 2; do check "mpirun x2 zero $stage" "$@" -np 2 "$bin" "${tiny[@]}" --zero $stage; done
  check "mpirun x2 zero 2 offload" "$@" -np 2 "$bin" "${tiny[@]}" --zero 2 --offload-optimizer
  check "mpirun x4 zero 2" "$@" -np 4 "$bin" "${tiny[@]}" --zero 2
  # Checkpoint at 2 ranks (weights + optimizer shards), resumed at 4 ranks and in one process: same run.
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  out=$("$@" -np 2 "$bin" "${tiny[@]}" --zero 2 --save "$work/m.safetensors" 2>&1) || fail "save at 2 ranks: $out"
  [[ -s "$work/m.safetensors" && -s "$work/m.safetensors.rank1-of-2.safetensors" ]] || fail "no checkpoint files"
  four=$(final_loss "$("$@" -np 4 "$bin" "${tiny[@]}" --zero 1 --load "$work/m.safetensors" 2>&1)")
  one=$(final_loss "$("$bin" "${tiny[@]}" --zero 0 --load "$work/m.safetensors" 2>&1)")
  [[ -n "$four" && "$four" == "$one" ]] || fail "resumed at 4 ranks: final loss '$four', in one process: '$one'"
  echo "ok: checkpoint at 2 ranks resumed at 4 and at 1 (final loss $one)"
fi
out=$("$bin" "${tiny[@]}" --zero 3 2>&1)
[[ $? -eq 2 ]] || fail "--zero 3 should be a usage error: $out"
echo "train_gpt dist checks ok"
