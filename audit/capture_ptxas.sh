#!/usr/bin/env bash
# capture_ptxas.sh COMPILER ARGS...: the compiler launcher of hg_kernels_cuda in the nvcc build
# (audit/resources.cmake). Runs the compile command as given (ccache nvcc ... -Xptxas=-v ... -o OBJ) and
# keeps ptxas's resource report (registers, shared memory, stack frame, spill stores and loads of every
# kernel) in OBJ.ptxas, from which the kernel_resources tool gathers ${CMAKE_BINARY_DIR}/kernel_resources.txt.
# ptxas's info lines are kept out of the build log; every other line of the compiler's stderr (warnings,
# errors) is passed through. ccache replays a cached compile's stderr, so a cache hit writes OBJ.ptxas too.
set -uo pipefail
object=""
previous=""
for arg in "$@"; do
  [[ $previous == "-o" ]] && object=$arg
  previous=$arg
done
if [[ -z $object ]]; then
  exec "$@"
fi
log="$object.ptxas.tmp"
"$@" 2> "$log"
status=$?
grep -v -E '^(ptxas info|    [0-9]+ bytes stack frame)' "$log" >&2
if [[ $status -eq 0 ]]; then
  mv -f "$log" "$object.ptxas"
else
  rm -f "$log" "$object.ptxas"
fi
exit $status
