#!/usr/bin/env bash
# Runs the whole bertps test suite: setup, `bazel test //...`, a closing line
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
echo "${passed} passed, ${failed} failed"
[ "$rc" -eq 0 ] && [ "$failed" -eq 0 ]
