#!/usr/bin/env bash
# Launches NPROC copies of a program the way torchrun does (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
# MASTER_PORT, and a job secret in HALFGRAD_DIST_TOKEN), without MPI, and fails unless every copy exits 0.
# Usage: run_env.sh NPROC program [args]
set -uo pipefail
nproc=$1
shift
source "$(dirname "$0")/free_port.sh"
export WORLD_SIZE=$nproc MASTER_ADDR=127.0.0.1 MASTER_PORT=${MASTER_PORT:-$(free_port)}
# A job secret, as a multi-node job should have (dist/rendezvous.h); unless the caller set one (or a file).
[[ -n "${HALFGRAD_DIST_TOKEN_FILE:-}" ]] || export HALFGRAD_DIST_TOKEN=${HALFGRAD_DIST_TOKEN:-run-env-$RANDOM$RANDOM}
pids=()
for ((rank = 0; rank < nproc; ++rank)); do
  RANK=$rank LOCAL_RANK=$rank "$@" &
  pids+=($!)
done
status=0
for ((rank = 0; rank < nproc; ++rank)); do
  wait "${pids[$rank]}" || { echo "run_env: rank $rank exited $?"; status=1; }
done
exit $status
