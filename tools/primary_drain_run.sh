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
source "$(dirname "$0")/step_timeline.sh"
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
start_step_timeline "$work/ps-$p0.log" "$work/steps.txt"
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
stop_step_timeline
restarts=$(field "$job" 's.get("restarts", 0)')
"$CTL" cancel "$job" > /dev/null
read -r median_step_ms longest_step_ms sample_ms < <(step_timeline_stats "$work/steps.txt" "$t_term")
/usr/bin/python3 - "$median_step_ms" "$longest_step_ms" "$sample_ms" "$((t_exit - t_term))" "$restarts" "$workers" "${model:-small}" <<'PY'
import json, sys
num = lambda v: None if v == "null" else float(v)
med, longest, sample = num(sys.argv[1]), num(sys.argv[2]), num(sys.argv[3])
print(json.dumps({"bench": "primary-drain", "model": sys.argv[7], "workers": int(sys.argv[6]),
                  "sigterm_to_exit_ms": int(sys.argv[4]), "median_step_ms": med,
                  "longest_step_ms": longest,
                  "longest_vs_median": round(longest / med, 2) if med and longest else None,
                  "step_sample_ms": sample, "restarts": int(sys.argv[5])}))
PY
