#!/usr/bin/env bash
# A lost pipeline stage with no idle stage daemon, real processes over
# 127.0.0.1: a pipeline job of 2 replicas x 2 stages (BSP) on one shard and
# 4 stage daemons, no spare. kill -9 of one stage daemon mid-job: once it is
# found gone (by the coordinator's probe after its replica's other stage
# reports it, or after the member timeout, 3 s) and no stage daemon
# registered within the takeover time (2 s), the daemon running the same
# stage of the other
# replica computes the lost slot as well (a second part, served on its own
# address by its StageRouter); the lost replica's other stage starts the
# step again with it; no restart. A stage daemon started later takes the
# slot back. The job's parameters equal, bit for bit, those of the same job
# run without a fault.
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"
source "$(dirname "$0")/process_lib.sh"
init_work stage_takeover
tiny_model_data "$BERT_LOCAL"
start_coordinator "$COORD" 0 "$work/coordinator.log" --member_timeout_s 3 \
  --slot_takeover_s 2
coord="$BERTPS_COORDINATOR"
"$SERVER" --coordinator "$coord" --port 0 > "$work/ps.log" 2>&1 &
pids+=($!)
stage_pids=()
for s in 0 1 2 3; do
  "$WORKER" --role=stage --coordinator "$coord" > "$work/stage$s.log" 2>&1 &
  pids+=($!); stage_pids+=($!)
done
spec() { pipeline_spec "$1" 150; }  # spec NAME
spec takeover > "$work/takeover.pbtxt"
job=$("$CTL" submit "$work/takeover.pbtxt") || fail "submit"
wait_for_step "$job" 20
kill -9 "${stage_pids[3]}"
killed=$(date +%s%N)
for _ in $(seq 1 600); do
  "$CTL" status "$job" | grep -q "taken over beside slot" && break
  sleep 0.05
done
"$CTL" status "$job" | grep -E "^workers" || true
"$CTL" status "$job" | grep -q "taken over beside slot" \
  || fail "no stage took the lost slot over: $("$CTL" status "$job" | tail -5)"
took=$(( ($(date +%s%N) - killed) / 1000000 ))
echo "a stage daemon killed: its slot taken over after $took ms (member timeout 3 s, takeover 2 s)"
at=$(field "$job" 's.get("progress", {}).get("step", 0)')
for _ in $(seq 1 600); do
  [ "$(field "$job" 's.get("progress", {}).get("step", 0)')" -ge $((at + 10)) ] && break
  sleep 0.1
done
[ "$(field "$job" 's.get("progress", {}).get("step", 0)')" -ge $((at + 10)) ] \
  || fail "no progress after the takeover (step $at)"
echo "steps $at -> $((at + 10)) with one daemon computing two slots"
"$WORKER" --role=stage --coordinator "$coord" > "$work/stage4.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 400); do
  "$CTL" status "$job" | grep -q "taken over beside slot" || break
  sleep 0.05
done
"$CTL" status "$job" | grep -q "taken over beside slot" \
  && fail "the new stage daemon did not take the slot back"
"$CTL" watch "$job" > "$work/watch.out" 2>&1 || fail "the job failed: $(tail -3 "$work/watch.out")"
grep -o "pipeline stage [01] of replica [01] is taken over by .*" "$work/watch.out" | head -1 | sed 's/member [^ ]* //g' | cut -c1-220
grep -o "pipeline stage [01] of replica [01] is member [^ ]* (taken back.*" "$work/watch.out" | head -1 | sed 's/member [^ ]* //g'
[ "$(field "$job" 's.get("restarts", 0)')" = 0 ] || fail "the job was restarted: $(grep -i restart "$work/watch.out" | head -3)"
[ "$(field "$job" 's.get("incarnation", 0)')" = 1 ] || fail "the incarnation changed"
grep -q "is taken over by member" "$work/watch.out" || fail "no takeover event"
grep -q "(taken back from member" "$work/watch.out" || fail "no take-back event"

spec clean > "$work/clean.pbtxt"
clean=$("$CTL" submit "$work/clean.pbtxt") || fail "submit clean"
"$CTL" watch "$clean" > "$work/watch-clean.out" 2>&1 || fail "the clean job failed: $(tail -3 "$work/watch-clean.out")"
expect_same_parameters "$work/takeover.safetensors" "$work/clean.safetensors" \
  "a stage taken over and back vs no fault"
echo PASS
