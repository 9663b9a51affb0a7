#!/usr/bin/env bash
# Every zoo model (makemore on a tiny word list; the DCGAN's loss is the discriminator's) on --device cuda (a GPU, or the SIMT emulator) reaches the CPU run's final loss on a
# tiny generated problem (zoo_tiny_data.sh); bf16 trains too. Without a CUDA device it prints SKIPPED.
set -uo pipefail
bin=$1
source "$(dirname "$0")/cuda_loss_parity.sh"  # loss_of, expect_losses_agree, expect_cuda_loss_equals_cpu
source "$(dirname "$0")/zoo_tiny_data.sh"     # make_tiny_mnist
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
make_tiny_mnist "$work/data" "${HG_TEST_SEED:-$RANDOM}"
for model in mlp lenet resnet vit vae dcgan diffusion; do
  warmup=1
  [[ $model == dcgan ]] && warmup=0  # a constant rate
  expect_cuda_loss_equals_cpu --model $model --data "$work/data" --validation 16 --batch 8 --steps 4 --warmup $warmup \
    --width 4 --threads 1 --workers 0
done
expect_cuda_loss_equals_cpu --model seq2seq --train-limit 64 --validation 8 --batch 16 --steps 4 --warmup 1 \
  --width 16 --threads 1 --workers 0
expect_cuda_loss_equals_cpu --model gcn --nodes 120 --validation 10 --steps 4 --width 8 --threads 1 --workers 0
make_tiny_words "$work/words" 7
expect_cuda_loss_equals_cpu --model char-lstm --data "$work/words" --steps 3 --batch 4 --width 16 --warmup 1 \
  --threads 1 --workers 0
make_tiny_chains "$work/chains" 7
expect_cuda_loss_equals_cpu --model word-lstm --data "$work/chains" --steps 3 --batch 4 --width 16 --warmup 1 \
  --threads 1 --workers 0
expect_cuda_loss_equals_cpu --model makemore --data "$work/words" --validation 40 --batch 16 --steps 6 --warmup 1 \
  --width 8 --threads 1 --workers 0
out=$("$bin" --model lenet --data "$work/data" --validation 16 --batch 8 --steps 4 --width 4 --threads 1 \
  --device cuda --precision bf16 2>&1) || { echo "FAIL: bf16 exited $?: $out"; exit 1; }
grep -q "final loss [0-9]" <<<"$out" || { echo "FAIL: bf16: no finite final loss: $out"; exit 1; }
echo "zoo cuda ok"
