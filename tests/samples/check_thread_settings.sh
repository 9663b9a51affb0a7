#!/usr/bin/env bash
# The samples' thread settings end to end (samples/thread_defaults.h; no timing): the start-up line
# names the defaults (one OpenMP thread per usable core, no loader worker on the CPU, the bounded
# spin that libgomp really read after the one-time re-exec), and every explicit setting wins over
# them -- --threads, OMP_NUM_THREADS, --workers, OMP_WAIT_POLICY, GOMP_SPINCOUNT, HALFGRAD_NO_REEXEC
# -- with argv (a path with spaces) and the environment intact through the re-exec.
# Usage: check_thread_settings.sh BIN_DIR
set -uo pipefail
bin_dir=$1
fail() { echo "FAIL: $*"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A clean slate: none of the variables the defaults defer to.
clean=(env -u OMP_NUM_THREADS -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u HALFGRAD_SPIN_DEFAULT -u HALFGRAD_NO_REEXEC
       -u OMP_DISPLAY_ENV)
tiny=(--layers 1 --heads 2 --dim 16 --batch 4 --steps 2 --eval-problems 10 --eval-every 0 --sample 0)
gpt() { "${clean[@]}" "$@" "$bin_dir/train_gpt" "${tiny[@]}" "${args[@]}" 2>&1 | head -1; }
expect() {  # expect TEXT LINE
  grep -qF -- "$1" <<<"$2" || fail "expected '$1' in: $2"
}

args=()
line=$(gpt)
cores=$(sed -n 's/.* OpenMP threads\{0,1\} (cores) on \([0-9]*\) usable cores\{0,1\}.*/\1/p' <<<"$line")
[[ -n "$cores" ]] || fail "no default thread count: $line"
expect "$cores OpenMP thread" "$line"
expect "0 loader workers (default)" "$line"
expect "bounded spin, GOMP_SPINCOUNT=3000 (default)" "$line"

# The cores are the affinity's, not the machine's.
line=$("${clean[@]}" taskset -c 0 "$bin_dir/train_gpt" "${tiny[@]}" 2>&1 | head -1)
expect "1 OpenMP thread (cores) on 1 usable core " "$line"

# libgomp itself read the bounded spin (its own report of its environment, after the re-exec).
spin=$("${clean[@]}" OMP_DISPLAY_ENV=verbose "$bin_dir/train_gpt" "${tiny[@]}" 2>&1 | grep "GOMP_SPINCOUNT = " | tail -1)
expect "GOMP_SPINCOUNT = '3000'" "$spin"

line=$(gpt OMP_NUM_THREADS=1)
expect "1 OpenMP thread (OMP_NUM_THREADS)" "$line"
args=(--threads 2)
line=$(gpt OMP_NUM_THREADS=1)
expect "2 OpenMP threads (--threads)" "$line"
args=(--workers 1 --threads 1)
line=$(gpt)
expect "1 loader worker (--workers)" "$line"
expect "1 OpenMP thread (--threads)" "$line"
args=(--workers 2)
line=$("${clean[@]}" taskset -c 0 "$bin_dir/train_gpt" "${tiny[@]}" "${args[@]}" 2>&1 | head -1)
expect "1 OpenMP thread (cores) on 1 usable core | 2 loader workers (--workers)" "$line"

args=()
line=$(gpt OMP_WAIT_POLICY=passive)
expect "OMP_WAIT_POLICY=passive (yours)" "$line"
line=$(gpt GOMP_SPINCOUNT=123)
expect "GOMP_SPINCOUNT=123 (yours)" "$line"
spin=$("${clean[@]}" GOMP_SPINCOUNT=123 OMP_DISPLAY_ENV=verbose "$bin_dir/train_gpt" "${tiny[@]}" 2>&1 | grep "GOMP_SPINCOUNT = ")
[[ $(wc -l <<<"$spin") -eq 1 ]] || fail "re-executed although GOMP_SPINCOUNT was set: $spin"
expect "GOMP_SPINCOUNT = '123'" "$spin"
line=$(gpt HALFGRAD_NO_REEXEC=1)
expect "libgomp's default spin (GOMP_SPINCOUNT unset)" "$line"

# argv and the environment survive the re-exec: a path with spaces, and a variable the run reads.
args=(--save "$work/a model.safetensors")
out=$("${clean[@]}" HALFGRAD_DIST_TIMEOUT=77 "$bin_dir/train_gpt" "${tiny[@]}" "${args[@]}" 2>&1) || fail "exited $?: $out"
[[ -s "$work/a model.safetensors" ]] || fail "--save with a space in the path wrote nothing: $out"
expect "bounded spin, GOMP_SPINCOUNT=3000 (default)" "$out"

# The other samples name their settings too.
line=$("${clean[@]}" "$bin_dir/train_mlp" --classes 3 --points 60 --width 8 --steps 2 --eval-every 0 --threads 0 2>&1 |
       head -1)
expect "OpenMP thread" "$line"
expect "bounded spin, GOMP_SPINCOUNT=3000 (default)" "$line"
line=$("${clean[@]}" OMP_WAIT_POLICY=passive "$bin_dir/train_cnn" --channels 2 --batch 8 --steps 1 --eval-every 0 \
       --eval-images 8 --threads 1 2>&1 | head -1)
expect "1 OpenMP thread (--threads)" "$line"
expect "OMP_WAIT_POLICY=passive (yours)" "$line"
echo "thread settings ok"
