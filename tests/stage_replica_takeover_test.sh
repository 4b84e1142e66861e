#!/usr/bin/env bash
# A whole pipeline replica lost with no idle stage daemon, real processes
# over 127.0.0.1: a job of 2 replicas x 2 stages (BSP) on one shard and 4
# stage daemons, no spare. kill -9 of both stages of replica 1 mid-job: once
# they are found gone (member timeout 3 s, or the probe after replica 0's
# stages report them) and no stage daemon registered within the takeover
# time (2 s), each of replica 0's stages computes its stage of replica 1 as
# well, slot by slot (a second part each, served by its StageRouter); no
# restart. The job ends on 2 daemons with parameters equal, bit for bit, to
# the same job run on 4 without a fault.
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"
source "$(dirname "$0")/process_lib.sh"
init_work stage_replica_takeover
tiny_model_data "$BERT_LOCAL"
start_coordinator "$COORD" 0 "$work/coordinator.log" --member_timeout_s 3 \
  --slot_takeover_s 2
coord="$BERTPS_COORDINATOR"
"$SERVER" --coordinator "$coord" --port 0 > "$work/ps.log" 2>&1 &
pids+=($!)
stage_pids=()
start_stage() {  # start_stage N
  "$WORKER" --role=stage --coordinator "$coord" > "$work/stage$1.log" 2>&1 &
  pids+=($!); stage_pids[$1]=$!
}
for s in 0 1 2 3; do start_stage $s; done
spec() { pipeline_spec "$1" 120; }  # spec NAME
spec replica > "$work/replica.pbtxt"
job=$("$CTL" submit "$work/replica.pbtxt") || fail "submit"
wait_for_step "$job" 20
[ "$(field "$job" 's.get("progress", {}).get("step", 0)')" -ge 20 ] || fail "step 20 not reached"
# The daemons of slots 2 and 3 (stages 0 and 1 of replica 1), from the line
# each writes when a slot's part starts.
lost=()
for slot in 2 3; do
  for s in 0 1 2 3; do
    grep -q "$job: slot $slot starts" "$work/stage$s.log" && lost+=("$s")
  done
done
[ "${#lost[@]}" = 2 ] || fail "slots 2 and 3 not found in the daemons' logs (${lost[*]:-none})"
kill -9 "${stage_pids[${lost[0]}]}" "${stage_pids[${lost[1]}]}"
killed=$(date +%s%N)
taken() { "$CTL" status "$job" | grep -o "taken over beside slot" | wc -l; }
for _ in $(seq 1 600); do
  [ "$(taken)" = 2 ] && break
  sleep 0.05
done
"$CTL" status "$job" | grep -E "^workers" || true
[ "$(taken)" = 2 ] || fail "replica 1 was not taken over: $("$CTL" status "$job" | tail -5)"
took=$(( ($(date +%s%N) - killed) / 1000000 ))
echo "replica 1 killed: both its slots taken over after $took ms (member timeout 3 s, takeover 2 s)"
timeout 120 "$CTL" watch "$job" > "$work/watch.out" 2>&1 || fail "the job failed: $(tail -3 "$work/watch.out")"
grep -o "pipeline stage [01] of replica 1 is taken over by .*" "$work/watch.out" | sed 's/member [^ ]* //g' | cut -c1-120 || true
[ "$(grep -c "of replica 1 is taken over by member" "$work/watch.out")" = 2 ] \
  || fail "expected 2 takeover events: $(grep -i "replica 1" "$work/watch.out" | head -5)"
[ "$(field "$job" 's.get("restarts", 0)')" = 0 ] || fail "the job was restarted: $(grep -i restart "$work/watch.out" | head -3)"
[ "$(field "$job" 's.get("incarnation", 0)')" = 1 ] || fail "the incarnation changed"

# The same job on 4 daemons with no fault.
start_stage 4; start_stage 5
spec clean > "$work/clean.pbtxt"
clean=$("$CTL" submit "$work/clean.pbtxt") || fail "submit clean"
timeout 120 "$CTL" watch "$clean" > "$work/watch-clean.out" 2>&1 || fail "the clean job failed: $(tail -3 "$work/watch-clean.out")"
expect_same_parameters "$work/replica.safetensors" "$work/clean.safetensors" \
  "a whole replica taken over vs no fault"
echo PASS
