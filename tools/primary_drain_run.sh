#!/usr/bin/env bash
# One run of tools/bench.sh primary-drain (real processes over 127.0.0.1,
# real compute): a replicated BSP job (2 shards x replicas 2, WORKERS train
# daemons; MODEL: the process tests' small BERT, or a preset such as mini)
# runs; SIGTERM to shard 1's primary. The step timeline comes from shard 0's
# primary (its applied version on its metrics endpoint, sampled every
# ~25 ms): the median step before the signal, the longest from the signal
# to five steps after it, the exit of the drained daemon, and
# whether the job restarted. Prints one JSON line.
#
#   tools/primary_drain_run.sh BERT_LOCAL COORD SERVER WORKER CTL [WORKERS] [MODEL]
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"
workers="${6:-2}"; model="${7:-}"
source "$(dirname "$0")/../tests/process_lib.sh"
init_work primary_drain
tiny_model_data "$BERT_LOCAL" > /dev/null
start_coordinator "$COORD" 0 "$work/coordinator.log" --member_timeout_s 30
ps_daemon_flags=(--metrics_port 0 --metrics_refresh_ms 10)
start_ps_daemons a b c d
for w in $(seq 1 "$workers"); do start_train_daemons "t$w"; done
replicated_spec drained 2 "$work/drained.safetensors" 1000000 "num_workers: $workers" > "$work/job.pbtxt"
sed -i '0,/^num_workers: 2$/{/^num_workers: 2$/d}' "$work/job.pbtxt"
if [ -n "$model" ]; then sed -i "s|^model: .*|model: \"$model\"|" "$work/job.pbtxt"; fi
job=$("$CTL" submit "$work/job.pbtxt")
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
wait_for_step "$job" 5
daemon_of() {  # daemon_of INDEX: the daemon serving it as primary
  local s
  for s in a b c d; do
    grep -q "serving shard $1 of job $job" "$work/ps-$s.log" && { echo "$s"; return 0; }
  done
  return 1
}
p0=$(daemon_of 0) || fail "no primary of shard 0"
p1=$(daemon_of 1) || fail "no primary of shard 1"
mport=$(sed -n 's/.*metrics on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$work/ps-$p0.log" | head -1)
[ -n "$mport" ] || fail "no metrics port for shard 0's primary"
while :; do
  v=$(curl -s "http://127.0.0.1:$mport/metrics" | awk '/^bertps_shard_version/ {if ($2 > m) m = $2} END {print m + 0}')
  echo "$(now_ms) ${v%.*}"; sleep 0.01
done > "$work/steps.txt" 2>/dev/null &
poller=$!
s0=$(field "$job" 's["progress"]["step"]')
wait_for_step "$job" $((s0 + 10))
victim=${ps_daemon_pid[$p1]}
version_now() { tail -1 "$work/steps.txt" | awk '{print $2 + 0}'; }
v_term=$(version_now)
t_term=$(now_ms)
kill -TERM "$victim"
while kill -0 "$victim" 2>/dev/null && [ "$(ps -o stat= -p "$victim" | cut -c1)" != Z ]; do sleep 0.01; done
t_exit=$(now_ms)
rc=0; wait "$victim" || rc=$?
[ "$rc" = 0 ] || fail "the drained primary exited $rc"
wait_for_field "$job" 's.get("failovers", 0)' 1 30 "no failover"
# Five steps past the signal on shard 0 (the timeline's own clock).
for _ in $(seq 1 600); do [ "$(version_now)" -ge $((v_term + 5)) ] && break; sleep 0.1; done
[ "$(version_now)" -ge $((v_term + 5)) ] || fail "shard 0 made no 5 steps after the drain"
kill "$poller" 2>/dev/null || true; wait "$poller" 2>/dev/null || true
restarts=$(field "$job" 's.get("restarts", 0)')
"$CTL" cancel "$job" > /dev/null
/usr/bin/python3 - "$work/steps.txt" "$t_term" "$((t_exit - t_term))" "$restarts" "$workers" "${model:-small}" <<'PY'
import json, statistics, sys
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
med = statistics.median(before) if before else None
longest = max(after) if after else None
print(json.dumps({"bench": "primary-drain", "model": sys.argv[6], "workers": int(sys.argv[5]),
                  "sigterm_to_exit_ms": int(sys.argv[3]), "median_step_ms": round(med) if med else None,
                  "longest_step_ms": round(longest) if longest else None,
                  "longest_vs_median": round(longest / med, 2) if med and longest else None,
                  "step_sample_ms": round(statistics.median(gaps)) if gaps else None,
                  "restarts": int(sys.argv[4])}))
PY
