#!/usr/bin/env bash
# Runs the whole bertps test suite: setup, test data, `bazel test //...`, the
# fuzz targets' short run (tools/fuzz.sh --short, one target), then
# tools/test_summary.sh, which judges every target by the cases it ran (a
# skip is a failure unless tests/allowed_skips.txt allows it; fewer cases than
# tests/expected_cases.txt is a failure) and ends with
#   "N passed, N failed, N skipped (test targets; C cases ran, S skipped)".
# Exits non-zero on any failure and always leaves no Bazel server running.
set -uo pipefail
cd "$(dirname "$0")/.."

tools/setup.sh || { echo "setup failed"; echo "0 passed, 1 failed, 0 skipped"; exit 1; }
tools/get_data.sh || { echo "get_data failed"; echo "0 passed, 1 failed, 0 skipped"; exit 1; }
trap 'bazel shutdown >/dev/null 2>&1' EXIT

log=$(mktemp)
bazel test //... --test_summary=short "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
summary=$(tools/test_summary.sh "$log")
summary_rc=$?
if [ "$rc" -ne 0 ] && ! grep -qE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FLAKY|INCOMPLETE)' "$log"; then
  summary="test: bazel test exited $rc without a failed target (the build failed?)"$'\n'"$summary"
  summary_rc=1
fi
rm -f "$log"

# The fuzz targets' short run (clang, its own Bazel server; docs/fuzzing.md)
# counts as one target. BERTPS_FUZZ=0 leaves it out.
fuzz_passed=0 fuzz_failed=0
if [ "${BERTPS_FUZZ:-1}" != 0 ]; then
  bazel shutdown >/dev/null 2>&1   # one Bazel server at a time
  if tools/fuzz.sh --short; then fuzz_passed=1; else fuzz_failed=1; fi
fi

echo "$summary" | sed '$d'
last=$(echo "$summary" | tail -n 1)
if [[ "$last" =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed,\ (.*)$ ]]; then
  echo "$((BASH_REMATCH[1] + fuzz_passed)) passed, $((BASH_REMATCH[2] + fuzz_failed)) failed, ${BASH_REMATCH[3]}"
else
  echo "$last"
  echo "0 passed, 1 failed, 0 skipped"
  exit 1
fi
[ "$rc" -eq 0 ] && [ "$summary_rc" -eq 0 ] && [ "$fuzz_failed" -eq 0 ]
