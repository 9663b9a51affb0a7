#!/usr/bin/env bash
# train_cnn end to end with a tiny config: trains on drawn digits, reports held-out accuracy well
# above chance, draws held-out images, and answers bad flags with a one-line error and exit code 2.
set -uo pipefail
bin=$1
source "$(dirname "$0")/expect_usage_error.sh"  # fail, expect_usage_error

out=$("$bin" --channels 4 --batch 32 --lr 1e-2 --steps 80 --eval-every 40 --eval-images 300 --threads 1 --show 1) \
  || fail "run exited $?: $out"
grep -q "eval  step 40 | held-out accuracy" <<<"$out" || fail "no evaluation line: $out"
grep -q "summary: 80 steps" <<<"$out" || fail "no summary: $out"
grep -q "held-out image 0: label [0-9], model says [0-9]" <<<"$out" || fail "no drawn image: $out"
accuracy=$(grep -o "summary:.*held-out accuracy [0-9.]*" <<<"$out" | grep -o "[0-9.]*$")
awk -v a="$accuracy" 'BEGIN { exit !(a != "" && a >= 60) }' || fail "held-out accuracy $accuracy% < 60% (chance: 10%): $out"

# Another optimizer through --optimizer (SGD with momentum 0.9; measured 55.7% after 80 steps).
out=$("$bin" --optimizer sgd --channels 4 --batch 32 --lr 0.1 --steps 80 --eval-every 0 --eval-images 300 --threads 1) \
  || fail "--optimizer sgd exited $?: $out"
accuracy=$(grep -o "summary:.*held-out accuracy [0-9.]*" <<<"$out" | grep -o "[0-9.]*$")
awk -v a="$accuracy" 'BEGIN { exit !(a != "" && a >= 40) }' || fail "--optimizer sgd: held-out accuracy $accuracy% < 40%: $out"

expect_usage_error "unknown --optimizer \"adam_w\"" --optimizer adam_w
expect_usage_error "must be a multiple of 4" --size 18
expect_usage_error "--channels must be >= 1" --channels 0
expect_usage_error "unknown flag --bogus" --bogus 1
expect_usage_error "unknown --device" --device tpu
help=$("$bin" --help); grep -q -- "--eval-images" <<<"$help" || fail "--help does not list the flags"
echo "train_cnn checks ok"
