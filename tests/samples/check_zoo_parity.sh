#!/usr/bin/env bash
# The zoo's models against PyTorch: from the same initial weights and batches, halfgrad's loss at each of
# the first 8 steps (zoo --metrics-log) equals the one PyTorch 1.13 computed (tests/data/torch/zoo_losses.txt,
# written by scripts/make-torch-zoo-vectors; measured there: at most 1.7e-7 relative) to 2e-5 relative.
set -uo pipefail
bin=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
vectors=$root/tests/data/torch/zoo_losses.txt
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

cd "$root" || fail "cannot enter $root"
models=$(awk '$1 == "args" { print $2 }' "$vectors")
[[ $(wc -w <<<"$models") -eq 12 ]] || fail "expected 12 models in $vectors, found: $models"
for model in $models; do
  read -r -a args <<<"$(awk -v m="$model" '$1 == "args" && $2 == m { $1 = ""; $2 = ""; print }' "$vectors")"
  out=$("$bin" --model "$model" "${args[@]}" --metrics-log "$work/$model.jsonl") \
    || fail "$model exited $?: $out"
  grep -o '"step":[0-9]*,"loss":[-0-9.e+]*' "$work/$model.jsonl" | sed 's/"step":\([0-9]*\),"loss":/\1 /' \
    >"$work/$model.ours"
  awk -v m="$model" '$1 == "loss" && $2 == m { print $3, $4 }' "$vectors" >"$work/$model.torch"
  [[ $(wc -l <"$work/$model.torch") -eq 8 ]] || fail "$model: expected 8 PyTorch losses in $vectors"
  # One line per step: step, halfgrad's loss, PyTorch's loss.
  join "$work/$model.ours" "$work/$model.torch" | awk -v m="$model" '
    { d = $2 - $3; if (d < 0) d = -d; s = $3 < 0 ? -$3 : $3; r = d / s; if (r > worst) worst = r; n++
      if (r > 2e-5) { print "FAIL: " m " step " $1 ": halfgrad loss " $2 ", PyTorch " $3; bad = 1 } }
    END { if (n != 8) { print "FAIL: " m ": " n " steps compared, expected 8"; exit 1 }
          printf "%s: 8 steps, max relative difference %.2e\n", m, worst; exit bad }' || exit 1
done
echo "zoo parity ok"
