#!/usr/bin/env bash
# Pipeline stages lost at the edges of a step, real processes over
# 127.0.0.1: a job of 2 replicas x 2 stages (BSP, 60 steps, checkpoint every
# 10) on one shard and 4 stage daemons armed with two test-only crash
# points (common/crash_point.h; the test proves each hit), and two spares
# (unarmed):
#  1. the job's leader (stage 0 of replica 0, which writes its checkpoints)
#     dies at "leader_checkpoint" of version 30: its push of step 29
#     acknowledged, checkpoint 30 not written. A spare takes its slot with
#     no restart, starts at the shards' version 30 and writes checkpoint 30
#     first, so no checkpoint is skipped;
#  2. stage 1 of replica 1 dies at "stage_push" of version 60: the last
#     step computed, its gradients sent to stage 0 (whose part then pushes
#     and ends), its own push not made. The other spare takes the slot at
#     the shards' step 59, and the ended stage 0 of its replica starts its
#     part again with it (the replica computes the last step again), so the
#     job ends instead of waiting on a stage that had finished.
# The job's parameters equal, bit for bit, those of the same job run
# without a fault on fresh daemons.
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"
source "$(dirname "$0")/process_lib.sh"
init_work stage_edges
tiny_model_data "$BERT_LOCAL"
start_coordinator "$COORD" 0 "$work/coordinator.log" --member_timeout_s 3
coord="$BERTPS_COORDINATOR"
"$SERVER" --coordinator "$coord" --port 0 > "$work/ps.log" 2>&1 &
pids+=($!)
armed=()
for s in 0 1 2 3; do
  BERTPS_CRASH_AT="leader_checkpoint:30:0,stage_push:60:3" \
    "$WORKER" --role=stage --coordinator "$coord" > "$work/stage$s.log" 2>&1 &
  pids+=($!); armed+=($!)
done
start_spares() {  # unarmed: a replacement must not die at the same point
  for s in 4 5; do
    "$WORKER" --role=stage --coordinator "$coord" > "$work/stage$s.log" 2>&1 &
    pids+=($!)
  done
}
spec() {  # spec NAME [CHECKPOINT-DIR]
  local ckpt=""
  [ -n "${2:-}" ] && ckpt="checkpoint { dir: \"$2\" every_steps: 10 }"
  pipeline_spec "$1" 60 "$ckpt"
}
spec leader "$work/ckpt" > "$work/leader.pbtxt"
job=$("$CTL" submit "$work/leader.pbtxt") || fail "submit"
wait_for_step "$job" 1  # the armed daemons hold the job's 4 slots
[ "$(field "$job" 's.get("progress", {}).get("step", 0)')" -ge 1 ] || fail "the job did not start"
start_spares
timeout 120 "$CTL" watch "$job" > "$work/watch.out" 2>&1 \
  || fail "the job failed or hung: $(tail -3 "$work/watch.out")"
for point in "leader_checkpoint of version 30" "stage_push of version 60"; do
  hit=$(grep -l "crash point $point hit" "$work"/stage*.log) \
    || fail "the crash point $point was not hit"
  echo "crash point $point hit ($(basename "$hit"))"
done
grep -o "pipeline stage 0 of replica 0 is .*" "$work/watch.out" | head -1 | sed 's/member [^ ]* //g' | cut -c1-160 || true
grep -o "pipeline stage 1 of replica 1 is .*" "$work/watch.out" | head -1 | sed 's/member [^ ]* //g' | cut -c1-160 || true
grep -q "slot 2 had ended; it starts again with the replica's new stage addresses" "$work"/stage*.log \
  || fail "stage 0 of replica 1 did not start its ended part again"
[ "$(field "$job" 's.get("restarts", 0)')" = 0 ] || fail "the job was restarted: $(grep -i restart "$work/watch.out" | head -3)"
kept=$(ls -d "$work"/ckpt/ckpt-*/manifest.json | sed 's#.*/ckpt-\([0-9]*\)/manifest.json#\1#' | sort -n | tr '\n' ' ')
echo "checkpoints: $kept"
[ "$kept" = "10 20 30 40 50 60 " ] || fail "a checkpoint is missing: $kept"
[ "$(field "$job" 's.get("last_checkpoint_version", 0)')" = 60 ] || fail "the last checkpoint is not 60"

# The same job with no checkpoints on unarmed daemons (the armed ones leave).
for pid in "${armed[@]}"; do
  kill -0 "$pid" 2>/dev/null || continue  # died at its crash point
  kill -TERM "$pid"  # leaves the coordinator's pool now
done
for pid in "${armed[@]}"; do wait "$pid" 2>/dev/null || true; done
for s in 6 7; do
  "$WORKER" --role=stage --coordinator "$coord" > "$work/stage$s.log" 2>&1 &
  pids+=($!)
done
spec clean > "$work/clean.pbtxt"
clean=$("$CTL" submit "$work/clean.pbtxt") || fail "submit clean"
timeout 120 "$CTL" watch "$clean" > "$work/watch-clean.out" 2>&1 || fail "the clean job failed: $(tail -3 "$work/watch-clean.out")"
expect_same_parameters "$work/leader.safetensors" "$work/clean.safetensors" \
  "stages lost at a step's edges vs no fault"
echo PASS
