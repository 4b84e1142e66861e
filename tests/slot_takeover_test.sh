#!/usr/bin/env bash
# Worker slots taken over, with real processes over 127.0.0.1, in the
# quick-start's shape: a coordinator, two parameter-server daemons and two
# train daemons, no spare. A kill -9 of one train daemon:
#  1. the coordinator declares it dead after the member timeout, waits the
#     takeover delay for an idle train daemon, then has the survivor compute
#     both slots; `bertpsctl status` and the coordinator's Prometheus metrics
#     say so, and the job moves on with one daemon;
#  2. a new train daemon started mid-job takes the slot back;
#  3. the job succeeds, and its final parameters equal, bit for bit (dropout
#     on), those of the same job run with no fault.
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"
source "$(dirname "$0")/process_lib.sh"
init_work takeover
tiny_model_data "$BERT_LOCAL"
start_coordinator "$COORD" 0 "$work/coordinator.log" \
  --member_timeout_s 2 --slot_takeover_s 1
coord="$BERTPS_COORDINATOR"

for s in a b; do
  "$SERVER" --coordinator "$coord" --port 0 > "$work/ps-$s.log" 2>&1 &
  pids+=($!)
done
start_worker() {  # start_worker NAME: worker_pid
  "$WORKER" --role=train --coordinator "$coord" --threads 1 > "$work/$1.log" 2>&1 &
  worker_pid=$!; pids+=($worker_pid)
}
start_worker w-a; w_a=$worker_pid
start_worker w-b; w_b=$worker_pid
wait_for() {  # wait_for WHAT SECONDS COMMAND...: until COMMAND succeeds
  local what="$1" limit="$2"; shift 2
  for _ in $(seq 1 $((limit * 10))); do "$@" && return 0; sleep 0.1; done
  fail "$what: not within ${limit}s"
}
step_at_least() { [ "$(field "$job" 's.get("progress", {}).get("step", 0)')" -ge "$1" ]; }

spec() {  # spec NAME EXPORT
  tiny_spec "$1" 800 "num_ps_shards: 2" "num_workers: 2" "export_path: \"$2\""
}
spec takeover "$work/takeover.safetensors" > "$work/takeover.pbtxt"
job=$("$CTL" submit "$work/takeover.pbtxt") || fail "submit"
"$CTL" watch "$job" > "$work/watch.out" 2>&1 &
watch_pid=$!; pids+=($watch_pid)

# 1. kill -9 of a train daemon; no spare: the survivor takes its slot over.
wait_for "step 10" 120 step_at_least 10
s0=$(field "$job" 's["progress"]["step"]'); t0=$(date +%s%N)
wait_for "step 40" 120 step_at_least 40
s1=$(field "$job" 's["progress"]["step"]'); t1=$(date +%s%N)
echo "two daemons: $(( (s1 - s0) * 1000000000 / (t1 - t0) )) steps/s"
kill -9 "$w_b"
killed_at=$(date +%s%N)
echo "killed a train daemon at step $(field "$job" 's["progress"]["step"]')"
shared() { [ "$(field "$job" 'sum(1 for h in s.get("slots", []) if h.get("shared"))')" -eq 1 ]; }
wait_for "a taken-over slot" 30 shared
echo "slot taken over $(( ($(date +%s%N) - killed_at) / 1000000 )) ms after the kill"
"$CTL" status "$job" > "$work/status.out"
grep -q "taken over beside slot" "$work/status.out" \
  || fail "status does not say who computes the slot: $(cat "$work/status.out")"
mport=$(sed -n 's/.*metrics on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$work/coordinator.log" | head -1)
[ -n "$mport" ] || fail "no metrics port in the coordinator's log"
scrape_until "$mport" "$work/metrics.txt" \
  "^bertps_job_worker_slots\\{holder=\"taken_over\",job_id=\"$job\"\\} 1$"
# The job moves on with one daemon.
before=$(field "$job" 's["progress"]["step"]'); t0=$(date +%s%N)
wait_for "progress with one daemon" 120 step_at_least $((before + 100))
[ "$(field "$job" 's["state"]')" = RUNNING ] || fail "the job is not running"
after=$(field "$job" 's["progress"]["step"]'); t1=$(date +%s%N)
echo "one daemon computed both slots from step $before to $after" \
  "($(( (after - before) * 1000000000 / (t1 - t0) )) steps/s)"

# 2. A new train daemon takes the slot back.
start_worker w-c
not_shared() { [ "$(field "$job" 'sum(1 for h in s.get("slots", []) if h.get("shared"))')" -eq 0 ]; }
wait_for "the slot taken back" 60 not_shared
[ "$(field "$job" 's["state"]')" = RUNNING ] \
  || fail "the job ended before the new daemon took the slot back (lengthen it)"
echo "slot taken back at step $(field "$job" 's["progress"]["step"]')"

wait "$watch_pid" || fail "the job failed: $(tail -5 "$work/watch.out")"
grep -q "stopped answering; its slot is free" "$work/watch.out" || fail "no lost-worker event"
grep -q "is taken over by member .* no idle train daemon registered within 1s" "$work/watch.out" \
  || fail "no takeover event: $(grep -i worker "$work/watch.out" | tail -5)"
grep -q "(taken back from member" "$work/watch.out" || fail "no take-back event"
grep -qi "restart" "$work/watch.out" && fail "the job restarted: $(grep -i restart "$work/watch.out")"
grep -q "taking over slot" "$work/w-a.log" || fail "the survivor's log does not say it took the slot over"
# The job's log, with times, from the coordinator's kept events.
"$CTL" events "$job" > "$work/events.out" || fail "events: $(cat "$work/events.out")"
grep -qE "^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8} .* worker [01] is taken over by member" "$work/events.out" \
  || fail "events: $(head -20 "$work/events.out")"
grep -qE " {2,}step [0-9]+$" "$work/events.out" && fail "events lists progress-only events"
echo "events: $(wc -l < "$work/events.out") lines, e.g. $(grep -m1 "taken over by" "$work/events.out" | cut -c1-120)"

# 3. The same job with no fault: equal parameters, bit for bit.
spec clean "$work/clean.safetensors" > "$work/clean.pbtxt"
clean=$("$CTL" submit "$work/clean.pbtxt") || fail "submit clean"
"$CTL" watch "$clean" > "$work/watch-clean.out" 2>&1 || fail "the clean job failed"
grep -q "taken over" "$work/watch-clean.out" && fail "the clean job had a takeover"
for _ in $(seq 1 100); do [ -f "$work/clean.safetensors" ] && [ -f "$work/takeover.safetensors" ] && break; sleep 0.1; done
worst=$(max_relative_difference "$work/takeover.safetensors" "$work/clean.safetensors") \
  || fail "cannot compare the exports"
echo "with a takeover vs the same job without faults: worst relative difference $worst"
[ "$worst" = "0.000e+00" ] || fail "the parameters differ ($worst)"
cmp -s "$work/takeover.safetensors" "$work/clean.safetensors" || fail "the exports differ in bytes"
echo PASS
