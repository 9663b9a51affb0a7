#!/usr/bin/env bash
# 8-bit AdamW shards re-partitioned from 2 ranks to 4: `-np 2` trains 3 steps of ZeRO stage 2 with
# 8-bit state (every rank on the whole batch, so any world size is the single process bit for bit) and
# saves its shards; `-np 4` loads them at stages 1 and 3 and must continue to the single-process
# 8-bit AdamW's parameters bit for bit (test_dist_zero8.cpp, the two "for another world" cases).
# Usage: check_zero8_repartition.sh test_dist_zero8 mpirun [mpirun flags...]
set -uo pipefail
bin=$1
shift
fail() { echo "FAIL: $*"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export HG_ZERO8_SHARDS=$work
out=$("$@" -np 2 "$bin" -tc="8-bit shards for another world: written" 2>&1) || fail "writing at 2 ranks: $out"
[[ -s "$work/ckpt.rank1-of-2.safetensors" ]] || fail "no shards written: $(ls "$work") $out"
grep -q "wrote 8-bit shards at world 2" <<<"$out" || fail "the writing case did not run: $out"
out=$("$@" -np 4 "$bin" -tc="8-bit shards for another world: read" 2>&1) || fail "reading at 4 ranks: $out"
grep -q "resumed world 2 8-bit shards at world 4 bit for bit" <<<"$out" || fail "the reading case did not run: $out"
echo "zero8 repartition ok"
