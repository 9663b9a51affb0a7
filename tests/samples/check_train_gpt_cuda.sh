#!/usr/bin/env bash
# train_gpt on --device cuda (a GPU, or the SIMT emulator) with a tiny config: trains, evaluates and
# must reach the same loss as the CPU run of the same seed (the kernels agree to float rounding).
# Then --cuda-graph (the step captured once and replayed) must give the eager run's losses and weights
# bit for bit, in fp32 and bf16. Without a CUDA device it prints SKIPPED (ctest lists it as skipped).
set -uo pipefail
bin=$1
source "$(dirname "$0")/cuda_loss_parity.sh"  # loss_of, expect_losses_agree, expect_cuda_loss_equals_cpu
tiny=(--layers 1 --heads 2 --dim 32 --batch 16 --steps 40 --eval-every 40 --eval-problems 20 --threads 2 --sample 0)
expect_cuda_loss_equals_cpu "${tiny[@]}"

# CUDA graph vs eager: the metrics logs' losses (every logged step) and the saved weights, identical.
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# Head dimension 64, so the step runs the fused attention kernels (auto), captured and replayed.
graph_tiny=(--layers 1 --heads 1 --dim 64 --batch 8 --steps 12 --eval-every 6 --eval-problems 10 --threads 2 --sample 0
            --device cuda)
for precision in fp32 bf16; do
  for mode in eager graph; do
    extra=()
    [[ $mode == graph ]] && extra=(--cuda-graph)
    "$bin" "${graph_tiny[@]}" --precision $precision "${extra[@]}" --metrics-log "$dir/$mode.jsonl" \
      --save "$dir/$mode.safetensors" > "$dir/$mode.out" 2>&1 || { echo "FAIL: $precision $mode run:"; cat "$dir/$mode.out"; exit 1; }
  done
  losses() { grep -o '"loss": *[-0-9.e+]*' "$1"; }
  [[ -n "$(losses "$dir/eager.jsonl")" ]] || { echo "FAIL: no loss in the eager metrics log"; exit 1; }
  if [[ "$(losses "$dir/eager.jsonl")" != "$(losses "$dir/graph.jsonl")" ]]; then
    echo "FAIL: $precision --cuda-graph losses differ from eager:"; diff <(losses "$dir/eager.jsonl") <(losses "$dir/graph.jsonl"); exit 1
  fi
  cmp -s "$dir/eager.safetensors" "$dir/graph.safetensors" || { echo "FAIL: $precision --cuda-graph weights differ from eager"; exit 1; }
  echo "$precision: --cuda-graph losses ($(losses "$dir/graph.jsonl" | wc -l) logged) and weights equal eager bit for bit"
done
# The fused attention kernels on the device (head dimension 64) train as the CPU's fused kernels do.
fused_tiny=(--layers 1 --heads 1 --dim 64 --batch 16 --steps 30 --eval-every 30 --eval-problems 20 --threads 2 --sample 0
            --attention fused)
out=$("$bin" "${fused_tiny[@]}" --device cuda 2>&1) || { echo "FAIL: fused cuda run: $out"; exit 1; }
grep -q "attention: fused" <<<"$out" || { echo "FAIL: the cuda run did not take the fused kernels: $out"; exit 1; }
cpu=$("$bin" "${fused_tiny[@]}" --device cpu 2>&1) || { echo "FAIL: fused cpu run: $cpu"; exit 1; }
echo "fused attention: cuda final loss $(loss_of "$out"), cpu final loss $(loss_of "$cpu")"
expect_losses_agree "fused cuda" "$(loss_of "$out")" "$(loss_of "$cpu")"
# --attention fused where the kernels refuse (head dimension 16 on CUDA): a usage error, exit 2.
out=$("$bin" "${tiny[@]}" --device cuda --attention fused 2>&1)
[[ $? -eq 2 && "$out" == *"head dimension 64 or 128"* ]] || { echo "FAIL: --attention fused with D = 16 on cuda: $out"; exit 1; }
echo "train_gpt cuda ok"
