#!/usr/bin/env bash
# One run of tools/bench.sh elastic (real processes over 127.0.0.1, real
# tiny compute): an elastic BSP job of SLOTS slots (min_workers 1) starts on
# one train daemon; daemons are added until each count of DAEMONS is reached.
# For each count: the join's cost (the coordinator's membership history:
# from the slots' move to the first step applied with the new members, and
# from the new daemons' start to that step) and the steps per second over
# WINDOW seconds, and the resident memory of the first daemon (which holds
# the most slots: all of them alone at the start). Then SIGTERM to one
# daemon: the time to its exit, the time to the first step without it, and
# the job's longest step from the signal to three steps after that against
# its median step before the signal (from the shard's applied version,
# sampled every step_sample_ms).
# Last, the same job with fixed membership (SLOTS daemons, no min_workers):
# its steps per second over WINDOW, beside the elastic ones. Prints one JSON
# line.
#
#   tools/elastic_run.sh BERT_LOCAL COORD SERVER WORKER CTL [SLOTS] [DAEMONS] [WINDOW]
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"
slots="${6:-8}"; counts="${7:-1 2 4}"; window="${8:-8}"
source "$(dirname "$0")/../tests/process_lib.sh"
source "$(dirname "$0")/step_timeline.sh"
init_work elastic_run
tiny_model_data "$BERT_LOCAL" > /dev/null
start_coordinator "$COORD" 0 "$work/coordinator.log"
ps_daemon_flags=(--metrics_port 0 --metrics_refresh_ms 10)  # the shard's version, for step times
start_ps_daemons a
tiny_spec elastic 1000000 "num_workers: $slots" "min_workers: 1" > "$work/elastic.pbtxt"
# ELASTIC_MODEL (e.g. mini): a preset instead of the tests' small model, on
# the same data.
if [ -n "${ELASTIC_MODEL:-}" ]; then
  sed -i "s|^model: .*|model: \"$ELASTIC_MODEL\"|" "$work/elastic.pbtxt"
fi
per_slot=8  # tiny_spec's batch_size (per slot)
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
status_json() { "$CTL" status "$job" --json; }
step_now() { field "$job" 's.get("progress", {}).get("step", 0)'; }
daemons=0
results=()
for want in $counts; do
  started=$(now_ms)
  while [ "$daemons" -lt "$want" ]; do
    daemons=$((daemons + 1)); start_train_daemons "d$daemons"
    daemon_pid[$daemons]=${pids[-1]}
  done
  if [ -z "${job:-}" ]; then job=$("$CTL" submit "$work/elastic.pbtxt"); fi
  # The membership change to `want` members with its first step applied.
  join_ms="" ; first_step_ms=""
  for _ in $(seq 1 600); do
    read -r join_ms first_step_ms < <(status_json | /usr/bin/python3 -c "
import json, sys
s = json.load(sys.stdin); m = s.get('membership', [])
hit = [c for c in m if int(c.get('members', 0)) == $want and int(c.get('first_step_after_ms', 0)) > 0]
print(hit[-1]['first_step_after_ms'], int(hit[-1]['time_ms']) + int(hit[-1]['first_step_after_ms'])) if hit else print('', '')
") || true
    [ -n "$join_ms" ] && break
    sleep 0.1
  done
  [ -n "$join_ms" ] || fail "no step with $want members: $(status_json | head -c 600)"
  from_start=$(( first_step_ms - started ))
  if [ "$want" = "${counts##* }" ]; then
    # The step timeline from here through the drain below.
    start_step_timeline "$work/ps-a.log" "$work/steps.txt"
  fi
  s0=$(step_now); t0=$(now_ms); sleep "$window"; s1=$(step_now); t1=$(now_ms)
  rate=$(/usr/bin/python3 -c "print(round(($s1 - $s0) * 1000.0 / ($t1 - $t0), 3))")
  rss_mb=$(awk '/^VmRSS:/ {printf "%.1f", $2 / 1024}' "/proc/${daemon_pid[1]}/status")
  results+=("{\"daemons\": $want, \"slots_move_to_first_step_ms\": $join_ms, \"daemon_start_to_first_step_ms\": $from_start, \"steps_per_s\": $rate, \"examples_per_s\": $(/usr/bin/python3 -c "print(round($rate * $per_slot * $slots, 1))"), \"first_daemon_rss_mb\": $rss_mb}")
  echo "daemons $want: first step $join_ms ms after the slots moved ($from_start ms after the daemons started), $rate steps/s" >&2
done
# A drain: SIGTERM to the last daemon.
victim=${daemon_pid[$daemons]}
s_before=$(step_now); t_term=$(now_ms)
kill -TERM "$victim"
while kill -0 "$victim" 2>/dev/null && [ "$(ps -o stat= -p "$victim" | cut -c1)" != Z ]; do sleep 0.02; done
t_exit=$(now_ms)
rc=0; wait "$victim" || rc=$?
[ "$rc" = 0 ] || fail "the drained daemon exited $rc"
left_ms=""
for _ in $(seq 1 300); do
  left_ms=$(status_json | /usr/bin/python3 -c "
import json, sys
s = json.load(sys.stdin); m = s.get('membership', [])
c = m[-1] if m else {}
print(c['first_step_after_ms'] if c.get('cause') == 'left' and int(c.get('first_step_after_ms', 0)) > 0 else '')") || true
  [ -n "$left_ms" ] && break
  sleep 0.1
done
# Three more steps, then the drain's longest step against the median step
# before it (tools/step_timeline.sh).
s_left=$(step_now)
for _ in $(seq 1 600); do [ "$(step_now)" -ge $((s_left + 3)) ] && break; sleep 0.1; done
stop_step_timeline
read -r median_step_ms drain_longest_step_ms sample_ms < <(step_timeline_stats "$work/steps.txt" "$t_term")
echo "drain: longest step ${drain_longest_step_ms} ms against a median of ${median_step_ms} ms (sampled every ~${sample_ms} ms)" >&2
restarts=$(field "$job" 's.get("restarts", 0)')
"$CTL" cancel "$job" > /dev/null
# The fixed-membership job: one daemon per slot.
live=$((daemons - 1))
while [ "$live" -lt "$slots" ]; do
  live=$((live + 1)); daemons=$((daemons + 1)); start_train_daemons "d$daemons"
done
tiny_spec fixed 1000000 "num_workers: $slots" > "$work/fixed.pbtxt"
if [ -n "${ELASTIC_MODEL:-}" ]; then
  sed -i "s|^model: .*|model: \"$ELASTIC_MODEL\"|" "$work/fixed.pbtxt"
fi
job=$("$CTL" submit "$work/fixed.pbtxt")
for _ in $(seq 1 600); do [ "$(step_now)" -ge 5 ] && break; sleep 0.1; done
[ "$(step_now)" -ge 5 ] || fail "the fixed job made no progress: $(status_json | head -c 600)"
s0=$(step_now); t0=$(now_ms); sleep "$window"; s1=$(step_now); t1=$(now_ms)
fixed_rate=$(/usr/bin/python3 -c "print(round(($s1 - $s0) * 1000.0 / ($t1 - $t0), 3))")
echo "fixed membership ($slots daemons): $fixed_rate steps/s" >&2
"$CTL" cancel "$job" > /dev/null
echo "{\"bench\": \"elastic\", \"slots\": $slots, \"joins\": [$(IFS=,; echo "${results[*]}")], \"drain_sigterm_to_exit_ms\": $((t_exit - t_term)), \"drain_to_first_step_ms\": ${left_ms:-null}, \"median_step_ms\": $median_step_ms, \"drain_longest_step_ms\": $drain_longest_step_ms, \"step_sample_ms\": $sample_ms, \"restarts\": $restarts, \"fixed_steps_per_s\": $fixed_rate, \"fixed_examples_per_s\": $(/usr/bin/python3 -c "print(round($fixed_rate * $per_slot * $slots, 1))")}"
