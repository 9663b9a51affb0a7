#!/usr/bin/env bash
# The programs the docs show are files that tests/install_consumer builds and runs against the installed
# package, verbatim: the README's training-loop program (trainer_example.cpp) and
# docs/building_a_model.md's (module_example.cpp). The first ```cpp block after a doc's marker heading is
# compared with the file.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
status=0
check() {  # DOC HEADING FILE
  local shown
  shown=$(awk -v heading="$2" 'index($0, heading) == 1 { section = 1 } section && /^```cpp/ { inside = 1; next }
                               inside && /^```/ { exit } inside { print }' "$root/$1")
  if diff <(printf '%s\n' "$shown") "$root/$3"; then
    echo "$1 example ok"
  else
    echo "FAIL: the program in $1 (under '$2') differs from $3"
    status=1
  fi
}
check README.md "## Training loop" tests/install_consumer/trainer_example.cpp
check docs/building_a_model.md "## The whole program" tests/install_consumer/module_example.cpp
exit $status
