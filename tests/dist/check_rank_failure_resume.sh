#!/usr/bin/env bash
# A rank of a ZeRO run that dies mid-run (SIGKILL, once checkpoints exist): the others must exit
# non-zero within the communicator's timeout with an error naming the dead rank, and the run must
# resume from the last checkpoint -- at the same world size and at another (np 2 -> np 1 and np 4).
# A rank that hangs (SIGSTOP) is given up on after the timeout.
# Covered: ZeRO stage 3 (every forward and backward gathers the blocks' parameters) and stage 2 with
# the optimizer offloaded (gradients streamed to the host, the CPU update, the parameters gathered
# back), both over the TCP launcher (RANK/WORLD_SIZE: the host transport sees the closed socket and
# names the rank). Under mpirun, mpirun itself ends the job when a rank is killed (check_failure.sh).
# Usage: check_rank_failure_resume.sh train_gpt
set -uo pipefail
bin=$1
here=$(cd "$(dirname "$0")" && pwd)
source "$here/free_port.sh"  # free_port
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export HALFGRAD_DIST_TIMEOUT=${HALFGRAD_DIST_TIMEOUT:-5}

tiny=(--layers 2 --heads 2 --dim 32 --batch 8 --eval-problems 20 --eval-every 0 --sample 0 --threads 1
      --workers 0 --warmup 2 --checkpoint-every-steps 2 --keep-checkpoints 2)

# kill_mid_run NAME DIR VICTIM SIGNAL FLAGS...: 2 ranks train 100000 steps; once DIR holds a
# checkpoint, rank VICTIM gets SIGNAL (KILL: it dies; STOP: it hangs, and is killed afterwards); the
# other must exit non-zero within the timeout, naming it.
kill_mid_run() {
  local name=$1 dir=$2 victim=$3 signal=$4
  shift 4
  export WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$(free_port)
  RANK=0 LOCAL_RANK=0 "$bin" "${tiny[@]}" --steps 100000 --checkpoint-dir "$dir" "$@" >"$work/rank0.out" 2>&1 &
  local rank0=$!
  RANK=1 LOCAL_RANK=1 "$bin" "${tiny[@]}" --steps 100000 --checkpoint-dir "$dir" "$@" >"$work/rank1.out" 2>&1 &
  local rank1=$!
  local pids=($rank0 $rank1)
  local dead=${pids[$victim]} survivor=${pids[$((1 - victim))]} out=$work/rank$((1 - victim)).out
  local waited=0
  until ls "$dir" 2>/dev/null | grep -Eq '^step_[0-9]{10}$'; do
    sleep 0.05
    waited=$((waited + 1))
    ((waited < 1200)) || { kill -KILL $rank0 $rank1; fail "$name: no checkpoint of step 4 after 60 s: $(cat "$work/rank0.out")"; }
  done
  sleep 0.$((RANDOM % 10))  # somewhere in a later step: a gather, a reduce-scatter, the offloaded update
  kill -"$signal" "$dead"
  local killed_at=$SECONDS
  wait "$survivor"
  local code=$? elapsed=$((SECONDS - killed_at))
  kill -KILL "$dead" 2>/dev/null
  wait "$dead" 2>/dev/null
  unset WORLD_SIZE MASTER_ADDR MASTER_PORT
  [[ $code -ne 0 ]] || fail "$name: the survivor exited 0 after rank $victim died: $(tail -3 "$out")"
  ((elapsed <= HALFGRAD_DIST_TIMEOUT + 5)) || fail "$name: the survivor took ${elapsed} s to notice (timeout $HALFGRAD_DIST_TIMEOUT s)"
  local error
  error=$(grep "error:" "$out" | head -1)
  # A dead rank is named (its socket closed). A hung one is named when the TCP deadline fires first;
  # the collective's own timeout (the same length) may fire first and say only that it did not complete.
  local expected="rank $victim of 2 closed its connection"
  [[ $signal == STOP ]] && expected="timed out waiting for rank $victim of 2|did not complete within $HALFGRAD_DIST_TIMEOUT s"
  grep -Eq "$expected" <<<"$error" ||
    fail "$name: the survivor's error does not name rank $victim: '${error:-no error line}'; its output ends: $(tail -3 "$out")"
  echo "ok: $name: rank $victim SIG$signal; rank $((1 - victim)) exited $code after ${elapsed} s: ${error:0:170}"
}

# resume NAME DIR NP FLAGS...: NP ranks resume DIR's newest checkpoint and train to step N+4.
resume() {
  local name=$1 dir=$2 np=$3
  shift 3
  local newest
  newest=$(ls "$dir" | grep -E '^step_[0-9]{10}$' | tail -1)
  [[ -n $newest ]] || fail "$name: no complete checkpoint in $dir: $(ls "$dir")"
  local step=$((10#${newest#step_}))
  # The kill left the entry being written (if any) as a temporary: it is not listed, and goes.
  out=$(MASTER_PORT=$(free_port) "$here/run_env.sh" "$np" "$bin" "${tiny[@]}" --steps $((step + 4)) \
        --checkpoint-dir "$dir" --resume "$@" 2>&1) || fail "$name: the np $np resume exited $?: $out"
  grep -q "resumed from .*$newest at step $step" <<<"$out" || fail "$name: np $np did not resume at step $step: $out"
  grep -q "checkpoint step $((step + 4)) " <<<"$out" || fail "$name: np $np did not reach step $((step + 4)): $out"
  ls "$dir" | grep -q '\.tmp\.' && fail "$name: a temporary survived the resume: $(ls "$dir")"
  echo "ok: $name: resumed at np $np from step $step to $((step + 4)): $(grep -o '| loss [^ ]*' <<<"$out" | tail -1)"
}

# ZeRO 3 loses rank 1 (rank 0, the star's centre, sees its socket close); the offloaded run loses
# rank 0 (rank 1 sees the centre go); a hung rank 1 (SIGSTOP) of ZeRO 3 is given up on after the
# timeout.
for config in "zero 3|1|KILL|--zero 3" "zero 2 offload|0|KILL|--zero 2 --offload-optimizer" \
              "zero 3 hung rank|1|STOP|--zero 3"; do
  IFS='|' read -r name victim signal flag_text <<<"$config"
  read -ra flags <<<"$flag_text"
  dir=$work/${name// /_}
  kill_mid_run "$name" "$dir" "$victim" "$signal" "${flags[@]}"
  cp -r "$dir" "$dir.np1"
  cp -r "$dir" "$dir.np4"
  resume "$name" "$dir" 2 "${flags[@]}"
  resume "$name" "$dir.np1" 1 "${flags[@]}"
  resume "$name" "$dir.np4" 4 "${flags[@]}"
done
echo "rank failure resume ok"
