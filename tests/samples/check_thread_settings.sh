#!/usr/bin/env bash
# The samples' thread settings end to end (app/thread_defaults.h; no timing): the start-up line
# names the defaults (one OpenMP thread per usable core, no loader worker on the CPU, the bounded
# spin that libgomp really read after the one-time re-exec), and every explicit setting wins over
# them -- --threads, OMP_NUM_THREADS, --workers, OMP_WAIT_POLICY, GOMP_SPINCOUNT, HALFGRAD_NO_REEXEC
# -- with argv (a path with spaces) and the environment intact through the re-exec; no re-exec where
# it would break the run (a start through ld.so, valgrind); ranks sharing one mask split it; an
# unchosen --workers stays unchosen through --print-config | --config and --resume.
# Usage: check_thread_settings.sh BIN_DIR
set -uo pipefail
bin_dir=$1
fail() { echo "FAIL: $*"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A clean slate: none of the variables the defaults defer to.
clean=(env -u OMP_NUM_THREADS -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u HALFGRAD_SPIN_DEFAULT -u HALFGRAD_NO_REEXEC
       -u OMP_DISPLAY_ENV -u LD_PRELOAD -u VALGRIND_LAUNCHER -u OMPI_COMM_WORLD_LOCAL_SIZE -u MPI_LOCALNRANKS
       -u LOCAL_WORLD_SIZE -u WORLD_SIZE -u RANK -u MASTER_ADDR)
tiny=(--layers 1 --heads 2 --dim 16 --batch 4 --steps 2 --eval-problems 10 --eval-every 0 --sample 0)
gpt() { "${clean[@]}" "$@" "$bin_dir/train_gpt" "${tiny[@]}" "${args[@]}" 2>&1 | head -1; }
expect() {  # expect TEXT LINE
  grep -qF -- "$1" <<<"$2" || fail "expected '$1' in: $2"
}

args=()
line=$(gpt)
cores=$(sed -n 's/.* OpenMP threads\{0,1\} (cores) on \([0-9]*\) usable cores\{0,1\}.*/\1/p' <<<"$line")
[[ -n "$cores" ]] || fail "no default thread count: $line"
# The usable cores are the affinity's (nproc), unless a cgroup quota caps them.
[[ "$cores" -le $(nproc) && "$cores" -ge 1 ]] || fail "$cores usable cores, but nproc says $(nproc): $line"
quota=$(cat /sys/fs/cgroup/cpu.max /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null | grep -v -e '^max' -e '^-1' || true)
[[ -n "$quota" || "$cores" -eq $(nproc) ]] || fail "$cores usable cores without a quota, but nproc says $(nproc): $line"
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
expect "libgomp's default spin (GOMP_SPINCOUNT unset; no re-exec: HALFGRAD_NO_REEXEC)" "$line"

# argv survives the re-exec: a path with spaces (the environment does too: OMP_DISPLAY_ENV above).
args=(--save "$work/a model.safetensors")
out=$("${clean[@]}" "$bin_dir/train_gpt" "${tiny[@]}" "${args[@]}" 2>&1) || fail "exited $?: $out"
[[ -s "$work/a model.safetensors" ]] || fail "--save with a space in the path wrote nothing: $out"
expect "bounded spin, GOMP_SPINCOUNT=3000 (default)" "$out"

# Started through the dynamic loader, /proc/self/exe is ld.so: no re-exec, and the run still works.
loader=$(ldd "$bin_dir/train_gpt" | sed -n 's/^[[:space:]]*\(\/[^ ]*ld-linux[^ ]*\.so[^ ]*\) .*/\1/p' | head -1)
[[ -n "$loader" ]] || loader=/lib64/ld-linux-x86-64.so.2
[[ -x "$loader" ]] || fail "no dynamic loader found (ldd: $(ldd "$bin_dir/train_gpt" | grep ld-linux))"
out=$("${clean[@]}" "$loader" "$bin_dir/train_gpt" "${tiny[@]}" 2>&1) || fail "through $loader: exited $?: $out"
expect "libgomp's default spin (GOMP_SPINCOUNT unset; no re-exec: started through the dynamic loader)" "$out"
expect "summary: 2 steps" "$out"
# Under valgrind (its launcher's variable; the re-executed image would run natively): no re-exec.
line=$(gpt VALGRIND_LAUNCHER=/usr/bin/valgrind)
expect "no re-exec: under valgrind)" "$line"

# Ranks of one run sharing one mask split its cores (torchrun's LOCAL_WORLD_SIZE; one process here).
if [[ $(nproc) -eq $(nproc --all) ]]; then
  line=$(gpt LOCAL_WORLD_SIZE=2)
  per_rank=$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))
  [[ -n "$quota" ]] || expect "$per_rank OpenMP thread" "$line"
  expect "(of the mask shared by 2 local ranks)" "$line"
fi

# An unchosen --workers stays unchosen: --print-config shows -1, and a run from that file chooses.
"${clean[@]}" "$bin_dir/train_gpt" "${tiny[@]}" --print-config > "$work/run.json" || fail "--print-config exited $?"
grep -q '"workers": -1' "$work/run.json" || fail "--print-config: $(grep workers "$work/run.json")"
line=$("${clean[@]}" "$bin_dir/train_gpt" --config "$work/run.json" 2>&1 | head -1)
expect "0 loader workers (default)" "$line"
# --resume takes --workers anew: a checkpoint written with --workers 1 (as older checkpoints stored
# the old default) does not impose it; one given now wins.
ck=(--checkpoint-dir "$work/ck" --checkpoint-every-steps 1)
out=$("${clean[@]}" "$bin_dir/train_gpt" "${tiny[@]}" --workers 1 "${ck[@]}" --stop-after-steps 1 2>&1) ||
  fail "first segment exited $?: $out"
out=$("${clean[@]}" "$bin_dir/train_gpt" "${ck[@]}" --resume 2>&1) || fail "resume exited $?: $out"
expect "0 loader workers (default)" "$(head -1 <<<"$out")"
out=$("${clean[@]}" "$bin_dir/train_gpt" "${ck[@]}" --resume --workers 2 --steps 3 2>&1) || fail "resume exited $?: $out"
expect "2 loader workers (--workers)" "$(head -1 <<<"$out")"

# The other samples name their settings too.
line=$("${clean[@]}" "$bin_dir/train_mlp" --classes 3 --points 60 --width 8 --steps 2 --eval-every 0 --threads 0 2>&1 |
       head -1)
expect "OpenMP thread" "$line"
expect "bounded spin, GOMP_SPINCOUNT=3000 (default)" "$line"
# Their own default (one thread) loses to OMP_NUM_THREADS, which loses to --threads.
mlp=("$bin_dir/train_mlp" --classes 3 --points 60 --width 8 --steps 2 --eval-every 0)
expect "1 OpenMP thread (default)" "$("${clean[@]}" "${mlp[@]}" 2>&1 | head -1)"
expect "2 OpenMP threads (OMP_NUM_THREADS)" "$("${clean[@]}" OMP_NUM_THREADS=2 "${mlp[@]}" 2>&1 | head -1)"
expect "3 OpenMP threads (--threads)" "$("${clean[@]}" OMP_NUM_THREADS=2 "${mlp[@]}" --threads 3 2>&1 | head -1)"
line=$("${clean[@]}" OMP_NUM_THREADS=2 "$bin_dir/train_cnn" --channels 2 --batch 8 --steps 1 --eval-every 0 \
       --eval-images 8 2>&1 | head -1)
expect "2 OpenMP threads (OMP_NUM_THREADS)" "$line"
line=$("${clean[@]}" OMP_WAIT_POLICY=passive "$bin_dir/train_cnn" --channels 2 --batch 8 --steps 1 --eval-every 0 \
       --eval-images 8 --threads 1 2>&1 | head -1)
expect "1 OpenMP thread (--threads)" "$line"
expect "OMP_WAIT_POLICY=passive (yours)" "$line"
echo "thread settings ok"
