#!/usr/bin/env bash
# train_cnn on --device cuda (a GPU, or the SIMT emulator) with a tiny config must reach the CPU
# run's loss for the same seed (the kernels agree to float rounding). Without a CUDA device it prints
# SKIPPED (ctest lists it as skipped).
set -uo pipefail
bin=$1
source "$(dirname "$0")/cuda_loss_parity.sh"  # loss_of, expect_losses_agree, expect_cuda_loss_equals_cpu
tiny=(--size 8 --channels 2 --batch 8 --steps 6 --eval-every 6 --eval-images 16 --threads 1)
expect_cuda_loss_equals_cpu "${tiny[@]}"
echo "train_cnn cuda ok"
