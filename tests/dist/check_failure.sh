#!/usr/bin/env bash
# A rank that hangs or dies must make the others exit non-zero with a clear message, within seconds,
# under mpirun and under the TCP (RANK/WORLD_SIZE) launcher.
# Usage: check_failure.sh failure_child [mpirun flags...]   (no mpirun flags: TCP only)
set -uo pipefail
child=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "FAIL: $*"; exit 1; }
export HALFGRAD_DIST_TIMEOUT=2

# expect NAME PATTERN command...: exits non-zero, within 30 s, output matching PATTERN.
expect() {
  local name=$1 pattern=$2
  shift 2
  local start=$SECONDS out code
  out=$(timeout 60 "$@" 2>&1)
  code=$?
  local elapsed=$((SECONDS - start))
  [[ $code -ne 0 ]] || fail "$name: exited 0: $out"
  [[ $code -ne 124 ]] || fail "$name: still running after 60 s (hang): $out"
  ((elapsed <= 30)) || fail "$name: took ${elapsed} s: $out"
  grep -Eq "$pattern" <<<"$out" || fail "$name: no message matching '$pattern': $out"
  echo "ok: $name (exit $code after ${elapsed} s)"
}

# The waiting rank's Work and its TCP socket share the 2 s deadline: either may report it first.
expect "tcp stall" "did not complete within 2 s|tcp: timed out waiting for rank" "$here/run_env.sh" 2 "$child" stall
expect "tcp kill" "rank 1 of [0-9]+ closed its connection" "$here/run_env.sh" 3 "$child" kill
if [[ $# -gt 0 ]]; then
  mpirun=("$@")
  expect "mpirun stall" "did not complete within 2 s" "${mpirun[@]}" -np 2 "$child" stall
  expect "mpirun kill" "signal 9|Killed|killed" "${mpirun[@]}" -np 4 "$child" kill
fi
echo "dist failure checks ok"
