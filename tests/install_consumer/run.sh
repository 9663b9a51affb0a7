#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, builds tests/install_consumer against it with
# find_package(halfgrad), and runs the results: the consumer program, the README's Trainer example and
# docs/building_a_model.md's module example (on the PyTorch weights of tests/data/torch/small_cnn.safetensors).
set -euo pipefail
build_dir=$1
source_dir=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" > /dev/null
cmake -S "$source_dir" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$work/build" -j 2 > /dev/null
"$work/build/consumer"
# The README's Trainer example trains from scratch, writes its checkpoint, and a second run resumes it.
cd "$work"
"$work/build/trainer_example" > "$work/first.txt" || { cat "$work/first.txt"; echo "trainer_example failed"; exit 1; }
loss=$(sed -n 's/^summary: 400 steps .*final loss \([0-9.]*\).*/\1/p' "$work/first.txt")
awk -v l="$loss" 'BEGIN { exit !(l != "" && l < 0.25) }' || { cat "$work/first.txt"; echo "trainer_example: final loss '$loss'"; exit 1; }
[[ -s "$work/checkpoints/step_0000000400.safetensors" ]] || { echo "trainer_example wrote no checkpoint"; exit 1; }
"$work/build/trainer_example" | grep -q "resumed from checkpoints/step_0000000400.safetensors at step 400" ||
  { echo "trainer_example did not resume"; exit 1; }
echo "trainer example ok"
# The walk-through's model loads PyTorch's weights strictly, trains, and classifies (it exits 1 below 90%).
"$work/build/module_example" "$source_dir/../data/torch/small_cnn.safetensors" > "$work/module.txt" ||
  { cat "$work/module.txt"; echo "module_example failed"; exit 1; }
grep -q "^SmallCNN(  # " "$work/module.txt" ||
  { cat "$work/module.txt"; echo "module_example printed no tree"; exit 1; }
echo "module example ok: $(grep '^accuracy' "$work/module.txt")"
