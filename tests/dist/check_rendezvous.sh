#!/usr/bin/env bash
# The env-launched job's rendezvous against strangers (dist/rendezvous.h), with real processes on
# loopback. Rank 0 of 2 listens on MASTER_ADDR's address (asserted from its log line); before the real
# rank 1 starts, a port scan (50 connects and closes), a connection that sends nothing and stays open,
# garbage bytes, a hello claiming rank 1 without the job secret, one for the wrong world size, a replayed
# handshake, a rank without the secret and a rank with the wrong one come and go. Each is refused and logged
# with its address; the two ranks exit 2 naming the secret; the real ranks then form the job and
# all-reduce, within the silent connection's handshake deadline. Also: without a secret on loopback no
# warning; a missing rank ends rank 0 at the overall timeout naming it; a MASTER_ADDR that is not this host's
# is refused (exit 2) before anything listens; malformed variables exit 2 naming them.
# Usage: check_rendezvous.sh rendezvous_child rendezvous_intruder
set -uo pipefail
child=$1
intruder=$2
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for f in "$work"/*.err; do [[ -f $f ]] && { echo "--- $f"; cat "$f"; }; done
  exit 1
}

export WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 HALFGRAD_DIST_TIMEOUT=60 HALFGRAD_DIST_HANDSHAKE_TIMEOUT=20
unset HALFGRAD_DIST_TOKEN_FILE HALFGRAD_DIST_BIND
source "$(dirname "$0")/free_port.sh"  # free_port

# wait_listening FILE PORT: rank 0's log line says it listens on 127.0.0.1:PORT.
wait_listening() {
  for _ in $(seq 100); do
    grep -q "rank 0 listens on 127.0.0.1:$2 " "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  fail "rank 0 never said it listens on 127.0.0.1:$2: $(cat "$1")"
}

# ---- strangers before the real rank 1, with a job secret ----
export MASTER_PORT=$(free_port) HALFGRAD_DIST_TOKEN="job-secret-$RANDOM$RANDOM"
RANK=0 LOCAL_RANK=0 "$child" >"$work/r0.out" 2>"$work/r0.err" &
rank0=$!
pids+=("$rank0")
wait_listening "$work/r0.err" "$MASTER_PORT"

"$intruder" "$MASTER_PORT" scan 50 || fail "the port scan could not connect"
"$intruder" "$MASTER_PORT" silent 30 &
pids+=("$!")
[[ $("$intruder" "$MASTER_PORT" garbage) == "no verdict" ]] || fail "garbage got a verdict"
[[ $("$intruder" "$MASTER_PORT" claim 1) == "verdict 2" ]] || fail "a hello without the secret was not refused as such"
[[ $("$intruder" "$MASTER_PORT" wrong-world 1) == "verdict 3" ]] || fail "a wrong world size was not refused as such"
[[ $("$intruder" "$MASTER_PORT" claim 7) == "verdict 4" ]] || fail "rank 7 of 2 was not refused as such"
[[ $("$intruder" "$MASTER_PORT" replay 1) == "verdict 2" ]] || fail "a replayed hello was not refused"
out=$(RANK=1 LOCAL_RANK=1 HALFGRAD_DIST_TOKEN=wrong "$child" 2>&1)
[[ $? -eq 2 ]] || fail "a rank with the wrong secret did not exit 2: $out"
grep -q "refused this rank's job secret" <<<"$out" || fail "the wrong-secret rank's message: $out"
out=$(RANK=1 LOCAL_RANK=1 HALFGRAD_DIST_TOKEN= "$child" 2>&1)
[[ $? -eq 2 ]] || fail "a rank with an empty secret did not exit 2: $out"
out=$(env -u HALFGRAD_DIST_TOKEN RANK=1 LOCAL_RANK=1 "$child" 2>&1)
[[ $? -eq 2 ]] || fail "a rank without the secret did not exit 2: $out"
grep -q "requires the job secret and this rank has none" <<<"$out" || fail "the secretless rank's message: $out"

start=$(date +%s%N)
RANK=1 LOCAL_RANK=1 "$child" >"$work/r1.out" 2>"$work/r1.err" || fail "the real rank 1 exited $?"
wait "$rank0" || fail "rank 0 exited $? after the strangers"
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
grep -q "rank 0 of 2: sum 3" "$work/r0.out" || fail "rank 0's all-reduce: $(cat "$work/r0.out")"
grep -q "rank 1 of 2: sum 3" "$work/r1.out" || fail "rank 1's all-reduce: $(cat "$work/r1.out")"
# The silent connection (held 30 s, deadline 20 s) delayed nothing: the job formed at once.
((elapsed_ms < 10000)) || fail "the job took $elapsed_ms ms to form beside a silent connection"
log=$(cat "$work/r0.err")
for why in "closed the connection before its hello" "sent bytes that are not a halfgrad rendezvous hello" \
  "claims rank 1 without the job secret" "says the job has 3 ranks" "claims rank 7; expected 1..1" \
  "was still in its handshake when every rank had joined"; do
  grep -q "rendezvous: refused 127\.0\.0\.1:[0-9]*: it $why" <<<"$log" || fail "rank 0 did not log '$why': $log"
done
scans=$(grep -c "closed the connection before its hello" <<<"$log")
((scans >= 50)) || fail "rank 0 logged $scans closed connections, expected the 50 of the scan and more: $log"
grep -q "warning" <<<"$log" && fail "rank 0 warned on loopback: $log"
echo "ok: the job formed in $elapsed_ms ms past $scans scans, garbage, forged, replayed and wrong-secret hellos"

# ---- a silent connection is dropped at its handshake deadline ----
export MASTER_PORT=$(free_port) HALFGRAD_DIST_HANDSHAKE_TIMEOUT=1
RANK=0 LOCAL_RANK=0 "$child" >"$work/s0.out" 2>"$work/s0.err" &
rank0=$!
pids+=("$rank0")
wait_listening "$work/s0.err" "$MASTER_PORT"
"$intruder" "$MASTER_PORT" silent 3 &
pids+=("$!")
sleep 2
RANK=1 LOCAL_RANK=1 "$child" >"$work/s1.out" 2>"$work/s1.err" || fail "rank 1 exited $? after a silent connection"
wait "$rank0" || fail "rank 0 exited $? after a silent connection"
grep -q "it sent no complete hello within 1 s" "$work/s0.err" \
  || fail "no handshake timeout logged: $(cat "$work/s0.err")"
echo "ok: a silent connection was dropped after its 1 s handshake deadline"

# ---- two processes with RANK=1 in a world of 3: the second is refused, rank 2 still joins ----
export MASTER_PORT=$(free_port) WORLD_SIZE=3 HALFGRAD_DIST_TOKEN="job-secret-$RANDOM$RANDOM"
RANK=0 LOCAL_RANK=0 "$child" >"$work/d0.out" 2>"$work/d0.err" &
rank0=$!
pids+=("$rank0")
RANK=1 LOCAL_RANK=1 "$child" >"$work/d1.out" 2>"$work/d1.err" &
rank1=$!
pids+=("$rank1")
for _ in $(seq 100); do grep -q "admitted rank 1 from 127.0.0.1:" "$work/d0.err" && break; sleep 0.1; done
out=$(RANK=1 LOCAL_RANK=1 "$child" 2>&1)
[[ $? -eq 2 ]] && grep -q "already admitted a rank 1: two processes have RANK=1" <<<"$out" \
  || fail "a second RANK=1 was not refused as a duplicate: $out"
RANK=2 LOCAL_RANK=2 "$child" >"$work/d2.out" 2>"$work/d2.err" || fail "rank 2 exited $? after a duplicate rank 1"
wait "$rank0" && wait "$rank1" || fail "ranks 0 and 1 did not finish after a duplicate rank 1"
grep -q "rank 2 of 3: sum 6" "$work/d2.out" || fail "rank 2's all-reduce: $(cat "$work/d2.out")"
grep -q "it claims rank 1, which has already joined" "$work/d0.err" || fail "no duplicate logged: $(cat "$work/d0.err")"
echo "ok: a second RANK=1 exits 2 and the job of 3 forms"
export WORLD_SIZE=2

# ---- without a secret on loopback: no warning, and the job forms ----
export MASTER_PORT=$(free_port) HALFGRAD_DIST_HANDSHAKE_TIMEOUT=20
unset HALFGRAD_DIST_TOKEN
RANK=0 LOCAL_RANK=0 "$child" >"$work/n0.out" 2>"$work/n0.err" &
rank0=$!
pids+=("$rank0")
RANK=1 LOCAL_RANK=1 "$child" >"$work/n1.out" 2>"$work/n1.err" || fail "rank 1 without a secret exited $?"
wait "$rank0" || fail "rank 0 without a secret exited $?"
grep -q "without a job secret" "$work/n0.err" || fail "rank 0 did not say it has no secret: $(cat "$work/n0.err")"
grep -q "warning" "$work/n0.err" && fail "rank 0 warned on loopback: $(cat "$work/n0.err")"
echo "ok: without a secret on loopback"

# ---- a rank that never comes: rank 0 names it at the overall timeout ----
export MASTER_PORT=$(free_port) HALFGRAD_DIST_TIMEOUT=2
out=$(RANK=0 LOCAL_RANK=0 "$child" 2>&1)
[[ $? -eq 1 ]] || fail "rank 0 alone did not exit 1: $out"
grep -q "rank(s) 1 of 2 never joined rank 0 at 127.0.0.1:$MASTER_PORT" <<<"$out" || fail "the timeout's message: $out"
export HALFGRAD_DIST_TIMEOUT=60

# ---- where rank 0 listens, and malformed variables ----
out=$(MASTER_ADDR=192.0.2.1 RANK=0 LOCAL_RANK=0 "$child" 2>&1)  # TEST-NET-1: no address of this host
[[ $? -eq 2 ]] || fail "a foreign MASTER_ADDR did not exit 2: $out"
grep -q "cannot listen on 192.0.2.1 (MASTER_ADDR='192.0.2.1')" <<<"$out" || fail "the foreign address's message: $out"
grep -q "listens on" <<<"$out" && fail "rank 0 listened on a foreign MASTER_ADDR: $out"
out=$(HALFGRAD_DIST_BIND=everywhere RANK=0 LOCAL_RANK=0 "$child" 2>&1)
[[ $? -eq 2 ]] && grep -q "HALFGRAD_DIST_BIND='everywhere' is not an IPv4 address" <<<"$out" || fail "bad bind: $out"
out=$(HALFGRAD_DIST_HANDSHAKE_TIMEOUT=soon RANK=0 LOCAL_RANK=0 "$child" 2>&1)
[[ $? -eq 2 ]] && grep -q "HALFGRAD_DIST_HANDSHAKE_TIMEOUT='soon'" <<<"$out" || fail "bad handshake timeout: $out"
out=$(HALFGRAD_DIST_TOKEN=a HALFGRAD_DIST_TOKEN_FILE=/dev/null RANK=0 LOCAL_RANK=0 "$child" 2>&1)
[[ $? -eq 2 ]] && grep -q "both HALFGRAD_DIST_TOKEN and HALFGRAD_DIST_TOKEN_FILE" <<<"$out" || fail "two secrets: $out"
echo "rendezvous checks ok"
