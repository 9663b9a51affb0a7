# Sourced by the samples' end-to-end scripts, after they set $bin to the program under test:
#   fail MESSAGE...                  prints "FAIL: MESSAGE" and exits 1
#   expect_usage_error EXPECTED ARGS...  runs "$bin" ARGS, which must exit 2 with exactly one line on
#                                        stderr that contains EXPECTED
fail() { echo "FAIL: $*"; exit 1; }

expect_usage_error() {
  local expected=$1
  shift
  local err
  err=$("$bin" "$@" 2>&1 >/dev/null)
  local code=$?
  [[ $code -eq 2 ]] || fail "'$*' exited $code, expected 2 ($err)"
  [[ $(wc -l <<<"$err") -eq 1 ]] || fail "'$*' printed more than one line: $err"
  grep -q -- "$expected" <<<"$err" || fail "'$*' said '$err', expected '$expected'"
}
