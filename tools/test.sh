#!/usr/bin/env bash
# Runs the whole bertps test suite: setup, `bazel test //...`, the fuzz
# targets' short run (tools/fuzz.sh --short, one test), a closing line
# "N passed, N failed" counted from Bazel's per-target results. Exits non-zero
# on any failure and always leaves no Bazel server running.
set -uo pipefail
cd "$(dirname "$0")/.."

tools/setup.sh || { echo "setup failed"; echo "0 passed, 1 failed"; exit 1; }
tools/get_data.sh || { echo "get_data failed"; echo "0 passed, 1 failed"; exit 1; }
trap 'bazel shutdown >/dev/null 2>&1' EXIT

log=$(mktemp)
bazel test //... --test_summary=short "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}

passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FLAKY|INCOMPLETE|FAILED TO BUILD)' "$log")
rm -f "$log"
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
  failed=1   # the build itself failed
fi

# The fuzz targets' short run (clang, its own Bazel server; docs/fuzzing.md)
# counts as one test. BERTPS_FUZZ=0 skips it.
if [ "${BERTPS_FUZZ:-1}" != 0 ]; then
  bazel shutdown >/dev/null 2>&1   # one Bazel server at a time
  if tools/fuzz.sh --short; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    rc=1
  fi
fi
echo "${passed} passed, ${failed} failed"
[ "$rc" -eq 0 ] && [ "$failed" -eq 0 ]
