#!/usr/bin/env bash
# The README's training-loop program is tests/install_consumer/trainer_example.cpp, verbatim (that file
# is built and run against the installed package by the install_consumer test).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
shown=$(awk '/^## Training loop/ { section = 1 } section && /^```cpp/ { inside = 1; next } inside && /^```/ { exit }
             inside { print }' "$root/README.md")
if diff <(printf '%s\n' "$shown") "$root/tests/install_consumer/trainer_example.cpp"; then
  echo "readme example ok"
else
  echo "FAIL: the README's training-loop program differs from tests/install_consumer/trainer_example.cpp"
  exit 1
fi
