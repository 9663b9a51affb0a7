#!/usr/bin/env bash
# Resume through chaos (issue 21): train_gpt checkpointing every 2 steps is SIGKILLed at random
# moments (seeded) and resumed with --resume each time, until it reaches the last step; its final
# checkpoint -- weights, AdamW moments, loss scaler, counters, generators, data position -- must be
# byte-identical to the one of a run never interrupted. Two modes:
#   zero2   mpirun -np 2 ... --zero 2 (a sharded entry: state.safetensors + one optimizer shard per
#           rank; the whole job -- mpirun and each rank's process group -- is killed at once)
#   fp16    one process, --precision fp16 with dynamic loss scaling
# Kills land anywhere: in the start-up, mid-step, in a checkpoint write (between the ranks' shard writes,
# before the rename), during pruning. A run that reaches the end before its kill starts a new round
# from an empty directory, so the kill count is always reached. Reports per mode: kills survived,
# kills after the first step was done, kills that left a temporary or retired entry (a write or prune was cut), steps lost per kill
# (last step logged before the kill - the step the next run resumed from: mean, max).
# At least half the kills must land after a step was done (else the kills test start-ups only), and
# at least CHAOS_MIN_CUT (default 0; scripts/chaos-resume: 1) must cut a checkpoint write or prune.
# Knobs: CHAOS_KILLS (per mode, default 10), CHAOS_STEPS (default 24), CHAOS_SEED (default 2026),
# CHAOS_MODES (default "zero2 fp16"; zero2 needs mpirun flags), CHAOS_MIN_CUT.
# Usage: check_chaos_resume.sh train_gpt [mpirun flags...]   (scripts/chaos-resume: the long version)
set -uo pipefail
bin=$1
shift
mpirun=("$@")
kills_wanted=${CHAOS_KILLS:-10}
steps=${CHAOS_STEPS:-24}
RANDOM=${CHAOS_SEED:-2026}
modes=${CHAOS_MODES:-zero2 fp16}
min_cut=${CHAOS_MIN_CUT:-0}
work=$(mktemp -d)
# At exit (a failure included) no job outlives the script: each background job's process group and
# its children's (mpirun's ranks sit in process groups of their own), then the work directory.
cleanup() {
  local pid child
  for pid in $(jobs -p); do
    for child in $(pgrep -P "$pid" 2>/dev/null); do kill -KILL -- "-$child" 2>/dev/null || kill -KILL "$child" 2>/dev/null; done
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT
export TMPDIR=$work HALFGRAD_DIST_TIMEOUT=${HALFGRAD_DIST_TIMEOUT:-30}  # OpenMPI's session files die with $work
fail() { echo "FAIL: $*"; exit 1; }
set -m  # each background job its own process group

tiny=(--layers 1 --heads 2 --dim 32 --batch 8 --eval-problems 20 --eval-every 0 --sample 0 --threads 1
      --workers 0 --steps "$steps" --warmup 2 --checkpoint-every-steps 2 --keep-checkpoints 2 --dropout 0.1)

# The newest complete entry's step in DIR (0 when none), as --resume picks it.
newest_step() {
  local newest=0 name step
  for name in $(ls "$1" 2>/dev/null); do
    [[ $name =~ ^step_([0-9]{10})(\.safetensors)?$ ]] || continue
    step=$((10#${BASH_REMATCH[1]}))
    ((step > newest)) && newest=$step
  done
  echo $newest
}

# The last step LOG (a --metrics-log) recorded (0: none yet).
last_step() {
  local step=0
  [[ -s $1 ]] && step=$(tail -n 1 "$1" | grep -o '"step":[0-9]*' | cut -d: -f2)
  echo "${step:-0}"
}

# Whether PID runs (a finished job stays a zombie until waited for: kill -0 would say yes).
running() {
  local state
  state=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ -n $state && $state != Z ]]
}

# The final entry of DIR equals REF's, file by file.
same_final() {
  local name
  name=$(printf 'step_%010d' "$steps")
  if [[ -d "$2/$name" ]]; then
    [[ -d "$1/$name" ]] || return 1
    for f in "$2/$name"/*; do cmp -s "$f" "$1/$name/$(basename "$f")" || return 1; done
    [[ $(ls "$1/$name" | wc -l) -eq $(ls "$2/$name" | wc -l) ]]
  else
    cmp -s "$1/$name.safetensors" "$2/$name.safetensors"
  fi
}

# Kills the job whose leader is PID (mpirun's ranks sit in process groups of their own) and returns
# its exit status: 137 when the kill ended it, its own when it had finished already.
kill_job() {
  local pid=$1 child status
  local children
  kill -STOP -- "-$pid" 2>/dev/null  # mpirun can start no rank now: the list below is complete
  children=$(pgrep -P "$pid" 2>/dev/null)
  kill -KILL -- "-$pid" 2>/dev/null
  for child in $children; do kill -KILL -- "-$child" 2>/dev/null || kill -KILL "$child" 2>/dev/null; done
  wait "$pid" 2>/dev/null
  status=$?
  local tries=0
  while ((status == 128 + 19 && tries++ < 1000)); do  # the SIGSTOP reported first: now the kill
    sleep 0.01
    wait "$pid" 2>/dev/null
    status=$?
  done
  # Each child gone (a zombie counts as gone: its parent may be dead, its reaper slow), within 10 s.
  for child in $children; do
    tries=0
    while running "$child" && ((tries++ < 1000)); do sleep 0.01; done
    running "$child" && fail "process $child of the killed job $pid still runs 10 s after SIGKILL"
  done
  return $status
}

chaos() {
  local mode=$1
  local -a launch args
  case $mode in
    zero2) launch=("${mpirun[@]}" -np 2 "$bin"); args=("${tiny[@]}" --zero 2) ;;
    fp16) launch=("$bin"); args=("${tiny[@]}" --precision fp16 --loss-scale dynamic) ;;
  esac
  local ref=$work/$mode.ref
  local start=$SECONDS began
  began=$(date +%s%N)
  "${launch[@]}" "${args[@]}" --checkpoint-dir "$ref" --resume >"$work/$mode.ref.out" 2>&1 ||
    fail "$mode: the uninterrupted run exited $?: $(tail -5 "$work/$mode.ref.out")"
  local span_ms=$((($(date +%s%N) - began) / 1000000))
  # One kill in 5 lands in the start-up (launch, set-up, the resume's loading: uniform over an
  # uninterrupted run's). The others aim by progress, not by time (the load changes): a step drawn
  # from those left, then a moment within the next two steps (their length from the uninterrupted
  # run's summary line) -- inside the step, its checkpoint write or the pruning after it.
  local train_ms start_ms step_ms
  train_ms=$(grep -o "summary: [0-9]* steps in [0-9.]* s" "$work/$mode.ref.out" | awk '{ printf "%d", $5 * 1000 }')
  start_ms=$((span_ms > train_ms ? span_ms - train_ms : 0))
  step_ms=$((train_ms / steps))

  local kills=0 mid=0 cut=0 rounds=0 attempts=0 lost_total=0 lost_max=0 finished_rounds=0
  local dir=$work/$mode.run.$rounds
  while ((kills < kills_wanted)); do
    attempts=$((attempts + 1))
    local log=$work/$mode.metrics.$attempts
    "${launch[@]}" "${args[@]}" --checkpoint-dir "$dir" --resume --metrics-log "$log" >"$work/$mode.out" 2>&1 &
    local pid=$! delay_ms
    if ((RANDOM % 5 == 0)); then
      delay_ms=$((RANDOM * (start_ms + 1) / 32768))
    else
      local from target
      from=$(newest_step "$dir")
      target=$steps  # a run killed after its last checkpoint, before it exited: nothing left but the exit
      ((from < steps)) && target=$((from + 1 + RANDOM % (steps - from)))
      until (($(last_step "$log") >= target)) || ! running "$pid"; do sleep 0.02; done
      delay_ms=$((RANDOM * (2 * step_ms + 1) / 32768))
    fi
    sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
    kill_job "$pid"
    local status=$?
    if ((status == 137)); then
      kills=$((kills + 1))
      local reached=0 resumed
      [[ -s $log ]] && reached=$(tail -n 1 "$log" | grep -o '"step":[0-9]*' | cut -d: -f2)
      ((${reached:-0} > 0)) && mid=$((mid + 1))
      ls "$dir" 2>/dev/null | grep -q '\.tmp\.\|\.old\.' && cut=$((cut + 1))
      resumed=$(newest_step "$dir")
      local lost=$((reached > resumed ? reached - resumed : 0))
      lost_total=$((lost_total + lost))
      ((lost > lost_max)) && lost_max=$lost
      continue
    fi
    ((status == 0)) || fail "$mode: attempt $attempts (not killed) exited $status: $(tail -5 "$work/$mode.out")"
    # It reached the last step before its kill: the round is over; compare, start another.
    same_final "$dir" "$ref" || fail "$mode: round $rounds (after its kills) ends unlike the uninterrupted run"
    finished_rounds=$((finished_rounds + 1))
    rounds=$((rounds + 1))
    dir=$work/$mode.run.$rounds
  done
  # Finish the last round without kills and compare.
  "${launch[@]}" "${args[@]}" --checkpoint-dir "$dir" --resume >"$work/$mode.out" 2>&1 ||
    fail "$mode: the final resume exited $?: $(tail -5 "$work/$mode.out")"
  same_final "$dir" "$ref" || fail "$mode: the run killed $kills times ends unlike the uninterrupted run"
  finished_rounds=$((finished_rounds + 1))
  ((2 * mid >= kills)) || fail "$mode: only $mid of $kills kills came after a step was done (expected half or more)"
  ((cut >= min_cut)) || fail "$mode: $cut kills cut a checkpoint write or prune (expected $min_cut or more)"
  local mean
  mean=$(awk -v t=$lost_total -v k=$kills 'BEGIN { printf "%.2f", k ? t / k : 0 }')
  modes_done=$((modes_done + 1))
  echo "ok: $mode: $kills kills survived in $finished_rounds round(s) of $steps steps, each ending byte-identical" \
       "to the uninterrupted run; $mid kills after a step was done, $cut cut a checkpoint write or prune; steps lost per kill: mean $mean," \
       "max $lost_max (checkpoint every 2) [$((SECONDS - start)) s]"
}

modes_done=0 modes_run=0 skipped="nothing skipped"
for mode in $modes; do
  if [[ $mode == zero2 && ${#mpirun[@]} -eq 0 ]]; then
    echo "skipped: zero2 (no mpirun flags given: this build has no MPI)"
    skipped="skipped: zero2 (no MPI)"
    continue
  fi
  modes_run=$((modes_run + 1))
  chaos "$mode"
done
# An error bash survives (an arithmetic one returns from the function) must not pass for success.
((modes_done == modes_run)) || fail "a mode ended without its result line"
echo "chaos resume ok ($skipped)"
