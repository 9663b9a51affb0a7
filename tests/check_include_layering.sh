#!/usr/bin/env bash
# The layering of docs/ARCHITECTURE.md, enforced: scripts/check-includes passes on the tree, and fails
# on a planted tree whose engine/ includes layers/ (an include pointing up), naming the file, the line
# and what engine/ may include.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
fail() { echo "FAIL: $*"; exit 1; }
out=$("$root/scripts/check-includes" "$root") || fail "the tree breaks the layering:"$'\n'"$out"
echo "$out"
planted=$(mktemp -d)
trap 'rm -rf "$planted"' EXIT
for folder in kernels text audit metrics engine layers optim data dist train plan app samples tests bench fuzz; do
  mkdir -p "$planted/$folder"
done
printf '#include "kernels/error.h"\n' > "$planted/layers/fine.h"
printf '#pragma once\n\n#include "kernels/error.h"\n#include "layers/module.h"\n' > "$planted/engine/upward.h"
printf '#include "tests/support/skip_cuda.h"\n' > "$planted/train/uses_tests.cpp"
out=$("$root/scripts/check-includes" "$planted")
status=$?
[[ $status == 1 ]] || fail "a planted upward include passed (exit $status): $out"
grep -qF 'engine/upward.h:4: includes "layers/..."; engine/ may include kernels' <<<"$out" || fail "not named: $out"
grep -qF 'train/uses_tests.cpp:1: includes "tests/..."' <<<"$out" || fail "a library including tests/ passed: $out"
! grep -q 'fine.h' <<<"$out" || fail "an allowed include was reported: $out"
echo "include layering ok"
