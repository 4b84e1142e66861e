#!/usr/bin/env bash
# Reads the results of a `bazel test` run and judges every test target by
# what it actually ran, not only by Bazel's verdict (Bazel 4.2.3 reports a
# fully skipped gtest as PASSED):
#   - a target whose Bazel status is not PASSED fails;
#   - a target with a skipped case fails unless tests/allowed_skips.txt lists
#     it (the documented reasons: an ISA the CPU lacks, a tool Debian 12 does
#     not package, root for network namespaces);
#   - a target that ran fewer cases than tests/expected_cases.txt says fails
#     (a test that silently returns early cannot pass); a shell test must
#     also end its log with a line starting "PASS";
#   - a target missing from tests/expected_cases.txt fails (add it).
# Prints one line per problem and, last,
#   "N passed, N failed, N skipped (test targets; C cases ran, S skipped)"
# where N counts targets and C/S count test cases inside them.
#
#   test_summary.sh BAZEL_LOG [TESTLOGS_DIR]
# Exits 0 when nothing failed.
set -uo pipefail
cd "$(dirname "$0")/.."
log="$1"
testlogs="${2:-bazel-testlogs}"
expected_file=tests/expected_cases.txt
allowed_file=tests/allowed_skips.txt

declare -A expected=() allowed=()
while read -r target n _; do
  [[ -z "$target" || "$target" == \#* ]] && continue
  expected["$target"]="$n"
done <"$expected_file"
while read -r target _; do
  [[ -z "$target" || "$target" == \#* ]] && continue
  allowed["$target"]=1
done <"$allowed_file"

passed=0 failed=0 skipped=0 cases=0 case_skips=0
problem() { echo "test_summary: $1: $2"; }

# "//pkg:name   (cached) PASSED in 1.2s" / "FAILED in ..." / "NO STATUS" ...
while read -r target status; do
  rel="${target#//}"; rel="${rel/://}"
  xml="$testlogs/$rel/test.xml" tlog="$testlogs/$rel/test.log"
  if [ "$status" != PASSED ]; then
    problem "$target" "$status"
    failed=$((failed + 1))
    continue
  fi
  if [ ! -f "$xml" ]; then
    problem "$target" "no test.xml"
    failed=$((failed + 1))
    continue
  fi
  n=$(grep -c '<testcase' "$xml")
  s=$(grep -c '<skipped\|status="notrun"' "$xml")
  ran=$((n - s))
  cases=$((cases + ran)) case_skips=$((case_skips + s))
  bad=""
  if [ "$s" -gt 0 ]; then
    if [ -n "${allowed[$target]:-}" ]; then
      skipped=$((skipped + 1))
      echo "test_summary: $target: $s of $n cases skipped (allowed: tests/allowed_skips.txt)"
      continue
    fi
    bad="$s of $n cases skipped: $(grep -o '<skipped message="[^"]*"' "$xml" | head -1 | sed 's/<skipped message=//; s/&#x0A;/ /g')"
  fi
  want="${expected[$target]:-}"
  if [ -z "$bad" ] && [ -z "$want" ]; then
    bad="not in $expected_file (add \"$target $ran\")"
  elif [ -z "$bad" ] && [ "$ran" -lt "$want" ]; then
    bad="ran $ran cases, $expected_file expects at least $want"
  elif [ -z "$bad" ] && ! grep -q '^\[==========\]' "$tlog" 2>/dev/null &&
       ! tail -n 3 "$tlog" 2>/dev/null | grep -qE '^PASS\b'; then
    bad="a shell test whose log does not end with a line PASS (did it return early?)"
  fi
  if [ -n "$bad" ]; then
    problem "$target" "$bad"
    failed=$((failed + 1))
  else
    passed=$((passed + 1))
  fi
done < <(sed -nE 's#^(//[^ ]+) +(\(cached\) )?(PASSED|FAILED|TIMEOUT|NO STATUS|FLAKY|INCOMPLETE|FAILED TO BUILD|SKIPPED).*#\1 \3#p' "$log" |
         sed 's/ NO STATUS$/ NO_STATUS/; s/ FAILED TO BUILD$/ FAILED_TO_BUILD/')

echo "${passed} passed, ${failed} failed, ${skipped} skipped (test targets; ${cases} cases ran, ${case_skips} skipped)"
[ "$failed" -eq 0 ]
