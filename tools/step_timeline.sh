# The job's step timeline from a shard daemon's applied version (sourced by
# tools/elastic_run.sh and tools/primary_drain_run.sh; the daemon started
# with --metrics_port 0 --metrics_refresh_ms 10).
#   start_step_timeline LOG FILE   samples the version of the daemon whose
#                                  log is LOG every ~10 ms into FILE
#                                  ("ms version" lines); $timeline_pid
#   stop_step_timeline
#   step_timeline_stats FILE TERM_MS
#                                  "MEDIAN LONGEST SAMPLE": the median step
#                                  (ms) before TERM_MS, the longest from it
#                                  on, the median sample interval ("null"
#                                  where there are none). A step's time is
#                                  the time between the samples where the
#                                  version moved, shared by the steps it moved.
start_step_timeline() {
  local log="$1" file="$2" port=""
  for _ in $(seq 1 100); do
    port=$(sed -n 's/.*metrics on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$log" | head -1)
    [ -n "$port" ] && break; sleep 0.05
  done
  [ -n "$port" ] || fail "no metrics port in $log"
  while :; do
    v=$(curl -s "http://127.0.0.1:$port/metrics" | awk '/^bertps_shard_version/ {if ($2 > m) m = $2} END {print m + 0}')
    echo "$(( $(date +%s%N) / 1000000 )) ${v%.*}"; sleep 0.01
  done > "$file" 2>/dev/null &
  timeline_pid=$!
}
stop_step_timeline() {
  kill "$timeline_pid" 2>/dev/null || true; wait "$timeline_pid" 2>/dev/null || true
}
step_timeline_stats() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import statistics, sys
rows = []
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) == 2 and p[1].isdigit():
        rows.append((int(p[0]), int(p[1])))
term = int(sys.argv[2])
moves = [(t, s) for (t, s), (_, s0) in zip(rows[1:], rows) if s > s0]
steps = [(t1, (t1 - t0) / (s1 - s0)) for (t0, s0), (t1, s1) in zip(moves, moves[1:])]
before = [d for t, d in steps if t < term]
after = [d for t, d in steps if t >= term]
gaps = [b[0] - a[0] for a, b in zip(rows, rows[1:])]
print(round(statistics.median(before)) if before else "null",
      round(max(after)) if after else "null",
      round(statistics.median(gaps)) if gaps else "null")
PY
}
