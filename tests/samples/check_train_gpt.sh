#!/usr/bin/env bash
# train_gpt end to end with a tiny config: trains, evaluates, saves, reloads, and answers bad flags
# with a one-line error and exit code 2.
set -uo pipefail
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/expect_usage_error.sh"  # fail, expect_usage_error

tiny=(--layers 1 --heads 2 --dim 32 --batch 16 --eval-problems 50 --threads 1)
out=$("$bin" "${tiny[@]}" --steps 60 --eval-every 30 --save "$work/model.safetensors" --sample 2) || fail "training run exited $?: $out"
grep -q "eval  step 30 | held-out exact match" <<<"$out" || fail "no evaluation line: $out"
grep -q "summary: 60 steps" <<<"$out" || fail "no summary: $out"
[[ -s "$work/model.safetensors" ]] || fail "no checkpoint written"

out=$("$bin" "${tiny[@]}" --steps 5 --load "$work/model.safetensors") || fail "reload run exited $?: $out"
grep -q "GPT L1 H2 C32" <<<"$out" || fail "reloaded model has another shape: $out"

# HG_VECTOR_MATH forces the row kernels' tier for a whole run (A/B on one CPU); a bad value is refused.
out=$(HG_VECTOR_MATH=portable "$bin" "${tiny[@]}" --steps 5 --eval-every 0 --sample 0) || fail "portable-tier run exited $?: $out"
grep -q "cpu row kernels: portable" <<<"$out" || fail "HG_VECTOR_MATH=portable did not choose the portable row kernels: $out"
out=$(HG_VECTOR_MATH=bogus "$bin" "${tiny[@]}" --steps 5 --eval-every 0 --sample 0 2>&1) && fail "HG_VECTOR_MATH=bogus was accepted: $out"
grep -q "HG_VECTOR_MATH=bogus: expected portable, avx512 or auto" <<<"$out" || fail "no clear error for HG_VECTOR_MATH=bogus: $out"

# The GEMM paths are printed in the header: calibrated by default (measured or read from the cache),
# fixed by HG_CPU_GEMM; a bad HG_CPU_GEMM is refused naming the values.
out=$("$bin" "${tiny[@]}" --steps 1 --eval-every 0 --sample 0 --precision bf16) || fail "bf16 run exited $?: $out"
grep -Eq "^cpu gemm: f32 [^ ]+.*, bf16 .*\((measured in [0-9]+ ms|cached in |the only path|measured)" <<<"$out" ||
  fail "the header does not name the calibrated GEMM paths: $out"
grep -Eq "^cpu row kernels: (avx512|portable) \((timed: avx512 [0-9.]+ ms, portable [0-9.]+ ms|the only tier)\) \| half conversions: [a-z0-9+]+ \((timed: |the only tier)" <<<"$out" ||
  fail "the header does not say how the row kernels' and conversions' tiers were chosen: $out"
out=$(HG_CPU_GEMM=fp32 "$bin" "${tiny[@]}" --steps 1 --eval-every 0 --sample 0 --precision bf16) ||
  fail "HG_CPU_GEMM=fp32 run exited $?: $out"
grep -Eq "^cpu gemm: f32 [^ ]+, bf16 (fp32|f32 temporaries) \(HG_CPU_GEMM=fp32\)$" <<<"$out" ||
  fail "HG_CPU_GEMM=fp32 is not what the header reports: $out"
out=$(HG_CPU_GEMM=bogus "$bin" "${tiny[@]}" --steps 1 --eval-every 0 --sample 0 2>&1) && fail "HG_CPU_GEMM=bogus was accepted: $out"
grep -q 'HG_CPU_GEMM="bogus": expected auto, flags, amx, amx4, avx512 or fp32' <<<"$out" ||
  fail "no clear error for HG_CPU_GEMM=bogus: $out"

printf 'hello halfgrad, hello world. %.0s' {1..40} > "$work/text.txt"
out=$("$bin" --data "$work/text.txt" --layers 1 --heads 2 --dim 32 --batch 8 --steps 20 --eval-every 10 --threads 1 --sample 16) \
  || fail "text run exited $?: $out"
grep -q "validation loss" <<<"$out" || fail "no validation loss: $out"

# Mixed precision and accumulation: fp16 with dynamic loss scaling over 2 micro-batches per step.
out=$("$bin" "${tiny[@]}" --steps 20 --eval-every 0 --sample 0 --precision fp16 --grad-accum 2) \
  || fail "fp16 run exited $?: $out"
grep -q "batch 16 x 2 (384 tokens) | fp16, dynamic loss scale" <<<"$out" || fail "no fp16 header: $out"
grep -q "skipped steps" <<<"$out" || fail "no skipped-step count in the fp16 summary: $out"
out=$("$bin" "${tiny[@]}" --steps 10 --eval-every 0 --sample 0 --precision bf16 --batch-tokens 768 --fp32-grads \
  --stochastic-rounding) || fail "bf16 run exited $?: $out"
grep -q "batch 16 x 4 (768 tokens) | bf16 |" <<<"$out" || fail "--batch-tokens 768 did not give 4 micro-batches: $out"
# Recompute and activation offload change memory, not the run: the same seed gives the same losses.
final_loss() { "$bin" --layers 2 --heads 2 --dim 32 --batch 8 --dropout 0.1 --steps 12 --eval-every 0 --eval-problems 20 \
  --threads 1 --sample 0 "$@" | grep -o "final loss [0-9.]*"; }
plain=$(final_loss) || fail "plain run failed"
[[ -n "$plain" ]] || fail "no final loss in the plain run"
# (--checkpoint-every is recompute's former name: it still works, with a note.)
for savers in "--recompute-every 1" "--checkpoint-every 2 --offload-activations inputs" "--offload-activations all"; do
  # shellcheck disable=SC2086
  [[ $(final_loss $savers) == "$plain" ]] || fail "$savers changed the run: $(final_loss $savers) vs $plain"
done
# The fused attention (auto on the CPU) and the composed path train the same model, dropout on the
# probabilities included: the final losses agree to float rounding.
grep -q "attention: fused" <<<"$("$bin" "${tiny[@]}" --steps 1 --eval-every 0 --sample 0)" || fail "auto is not fused on the CPU"
composed=$(final_loss --attention composed) || fail "composed run failed"
awk -v a="${plain##* }" -v b="${composed##* }" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 2e-3 * (b < 1 ? 1 : b)) }' \
  || fail "fused vs composed attention: $plain vs $composed"
# The data pipeline: the same losses whatever the number of loader workers; curriculum flags; token
# shards written by prepare_data (its bad flags and bad files answered with exit codes 2 and 1).
loss_of() { grep -o "final loss [0-9.]*" <<<"$1"; }
out0=$("$bin" "${tiny[@]}" --steps 12 --eval-every 0 --sample 0 --workers 0) || fail "--workers 0 exited $?: $out0"
out2=$("$bin" "${tiny[@]}" --steps 12 --eval-every 0 --sample 0 --workers 2) || fail "--workers 2 exited $?: $out2"
[[ -n "$(loss_of "$out0")" && "$(loss_of "$out0")" == "$(loss_of "$out2")" ]] || fail "workers 0 and 2 differ: $out0 / $out2"
grep -q "waiting for data" <<<"$out2" || fail "no data-wait figure: $out2"
out=$("$bin" "${tiny[@]}" --steps 12 --eval-every 0 --sample 0 --curriculum easy-to-hard --curriculum-steps 6 \
      --seq-warmup-steps 6) || fail "curriculum run exited $?: $out"
prepare=$(dirname "$bin")/prepare_data
"$prepare" --input "$work/text.txt" --output "$work/shard" --shard-tokens 700 --dtype u32 >"$work/prep.log" \
  || fail "prepare_data exited $?: $(cat "$work/prep.log")"
[[ -s "$work/shard_000000.bin" && -s "$work/shard_000001.bin" ]] || fail "prepare_data wrote no shards: $(cat "$work/prep.log")"
out=$("$bin" --data "$work/shard_000000.bin,$work/shard_000001.bin" --layers 1 --heads 2 --dim 32 --batch 8 --steps 20 \
      --eval-every 10 --threads 1 --sample 8) || fail "shard run exited $?: $out"
grep -q "shard_000001.bin: .* u32 tokens" <<<"$out" || fail "shards not described: $out"
grep -q "validation loss" <<<"$out" || fail "no validation loss on shards: $out"
head -c 40 "$work/shard_000000.bin" > "$work/truncated.bin"
err=$("$bin" --data "$work/truncated.bin" --steps 1 2>&1 >/dev/null); code=$?
[[ $code -eq 2 ]] && grep -q "truncated: the header promises 700 u32 tokens" <<<"$err" || fail "truncated shard: $code $err"
help=$("$prepare" --help); grep -q -- "--shard-tokens" <<<"$help" || fail "prepare_data --help does not list the flags"
"$prepare" --input "$work/none.txt" --output "$work/x" 2>/dev/null; [[ $? -eq 2 ]] || fail "prepare_data: missing input not exit 2"
"$prepare" --input "$work/text.txt" --output "$work/x" --dtype u8 2>/dev/null; [[ $? -eq 2 ]] || fail "prepare_data: --dtype u8 not exit 2"

expect_usage_error "does not divide --dim" --heads 3 --dim 128
expect_usage_error "--layers must be >= 1" --layers 0
expect_usage_error "unknown flag --bogus" --bogus 1
expect_usage_error "expects an integer" --steps ten
expect_usage_error "unknown --device" --device tpu
expect_usage_error "too short for 3-digit problems" --context 8
expect_usage_error "unknown --precision \"fp8\"; expected fp32, bf16 or fp16" --precision fp8
expect_usage_error "expected static:S with a finite S > 0" --loss-scale static:-4
expect_usage_error "unknown --loss-scale" --loss-scale sometimes
expect_usage_error "is not a multiple of the micro-batch's 768 tokens" --batch-tokens 1000
expect_usage_error "either --grad-accum or --batch-tokens" --grad-accum 2 --batch-tokens 1536
expect_usage_error "unknown --offload-activations" --offload-activations gpu
expect_usage_error "it needs --recompute-every" --offload-activations inputs
expect_usage_error "unknown --curriculum" --curriculum hardest-first
expect_usage_error "does not apply to --data" --curriculum easy-to-hard --data "$work/text.txt"
help=$("$bin" --help); grep -q -- "--weight-decay" <<<"$help" || fail "--help does not list the flags"
echo "train_gpt checks ok"
