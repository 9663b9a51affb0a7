#!/usr/bin/env bash
# Launches NPROC copies of a program the way torchrun does (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
# MASTER_PORT), without MPI, and fails unless every copy exits 0. Usage: run_env.sh NPROC program [args]
set -uo pipefail
nproc=$1
shift
export WORLD_SIZE=$nproc MASTER_ADDR=127.0.0.1 MASTER_PORT=${MASTER_PORT:-$((20000 + RANDOM % 30000))}
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
