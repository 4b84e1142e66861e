#!/usr/bin/env bash
# The hostile-input list (tools/hostile.sh, tools/hostile/cases.sh) against a
# real local cluster: every case must end as a careful user expects (refused
# naming the field, file or limit; failed with a reason; still serving after
# raw bytes), no daemon may die and no job may be left running.
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"; HOSTILE="$6"
export BERT_LOCAL COORD SERVER WORKER CTL
out="${TEST_TMPDIR:-/tmp}/hostile.out"
"$HOSTILE" > "$out" 2>&1 || { cat "$out"; echo "FAIL: $(tail -n 1 "$out")"; exit 1; }
cat "$out"
last=$(tail -n 1 "$out")
[[ "$last" =~ ^hostile:\ ([0-9]+)\ cases:\ ([0-9]+)\ as\ expected ]] || { echo "FAIL: $last"; exit 1; }
[ "${BASH_REMATCH[1]}" -ge 100 ] || { echo "FAIL: only ${BASH_REMATCH[1]} cases ran"; exit 1; }
echo "PASS: ${BASH_REMATCH[1]} hostile cases as expected"
