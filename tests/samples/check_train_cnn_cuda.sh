#!/usr/bin/env bash
# train_cnn on --device cuda (a GPU, or the SIMT emulator) with a tiny config must reach the CPU
# run's loss for the same seed (the kernels agree to float rounding). Without a CUDA device it prints
# SKIPPED (ctest lists it as skipped).
set -uo pipefail
bin=$1
tiny=(--size 8 --channels 2 --batch 8 --steps 6 --eval-every 6 --eval-images 16 --threads 1)
out=$("$bin" "${tiny[@]}" --device cuda 2>&1)
code=$?
if [[ $code -eq 2 && "$out" == *"is not available"* ]]; then
  echo "SKIPPED: $out"
  exit 0
fi
[[ $code -eq 0 ]] || { echo "FAIL: exited $code: $out"; exit 1; }
cpu=$("$bin" "${tiny[@]}" --device cpu 2>&1) || { echo "FAIL: cpu run: $cpu"; exit 1; }
loss_of() { grep -o "final loss [0-9.]*" <<<"$1" | awk '{print $3}'; }
echo "cuda final loss $(loss_of "$out"), cpu final loss $(loss_of "$cpu")"
awk -v a="$(loss_of "$out")" -v b="$(loss_of "$cpu")" 'BEGIN {
  d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; if (m < 1) m = 1
  if (a == "" || b == "" || d > 1e-3 * m) { print "FAIL: cuda loss " a " vs cpu loss " b; exit 1 }
}' || exit 1
echo "train_cnn cuda ok"
