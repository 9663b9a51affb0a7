# Sourced by the samples' CUDA scripts (check_train_cnn_cuda.sh, check_train_gpt_cuda.sh), after they set
# $bin to the program under test:
#   loss_of OUTPUT                     the number after "final loss" in a run's output
#   expect_losses_agree WHAT A B       fails with "FAIL: WHAT loss A vs cpu loss B" unless A and B agree to
#                                      1e-3 relative (absolute below 1), or if either is empty
#   expect_cuda_loss_equals_cpu ARGS...  runs "$bin" ARGS on --device cuda (output in $out) and on --device cpu
#                                      (output in $cpu) and expects the same final loss; without a CUDA
#                                      device it prints SKIPPED (ctest lists the test as skipped) and exits 0
loss_of() { grep -o "final loss [0-9.]*" <<<"$1" | awk '{print $3}'; }

expect_losses_agree() {
  awk -v what="$1" -v a="$2" -v b="$3" 'BEGIN {
    d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; if (m < 1) m = 1
    if (a == "" || b == "" || d > 1e-3 * m) { print "FAIL: " what " loss " a " vs cpu loss " b; exit 1 }
  }' || exit 1
}

expect_cuda_loss_equals_cpu() {
  out=$("$bin" "$@" --device cuda 2>&1)
  local code=$?
  if [[ $code -eq 2 && "$out" == *"is not available"* ]]; then
    echo "SKIPPED: $out"
    exit 0
  fi
  [[ $code -eq 0 ]] || { echo "FAIL: exited $code: $out"; exit 1; }
  cpu=$("$bin" "$@" --device cpu 2>&1) || { echo "FAIL: cpu run: $cpu"; exit 1; }
  echo "cuda final loss $(loss_of "$out"), cpu final loss $(loss_of "$cpu")"
  expect_losses_agree cuda "$(loss_of "$out")" "$(loss_of "$cpu")"
}
