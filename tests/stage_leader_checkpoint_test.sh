#!/usr/bin/env bash
# A pipeline job's leader (stage 0 of replica 0, which writes the job's
# checkpoints) killed between a step and that step's checkpoint, real
# processes over 127.0.0.1: a job of 2 replicas x 2 stages (BSP, checkpoint
# every 10 steps) on one shard and 5 stage daemons (one spare). The leader
# dies at the test-only crash point "leader_checkpoint" of version 30 (its
# push of step 29 acknowledged, checkpoint 30 not written; the test proves
# it was hit); the spare takes its slot with no restart, starts at the
# shards' version 30 and writes checkpoint 30 first, so no checkpoint is
# skipped. The job's parameters equal, bit for bit, those of the same job
# run without a fault.
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"
source "$(dirname "$0")/process_lib.sh"
init_work stage_leader_checkpoint
tiny_model_data "$BERT_LOCAL"
start_coordinator "$COORD" 0 "$work/coordinator.log" --member_timeout_s 3
coord="$BERTPS_COORDINATOR"
"$SERVER" --coordinator "$coord" --port 0 > "$work/ps.log" 2>&1 &
pids+=($!)
for s in 0 1 2 3 4; do
  BERTPS_CRASH_AT="leader_checkpoint:30:0" \
    "$WORKER" --role=stage --coordinator "$coord" > "$work/stage$s.log" 2>&1 &
  pids+=($!)
done
spec() {  # spec NAME [CHECKPOINT-DIR]
  local ckpt=""
  [ -n "${2:-}" ] && ckpt="checkpoint { dir: \"$2\" every_steps: 10 }"
  cat <<EOF2
name: "$1"
task: PRETRAIN
model: "$work/model.json"
data: "$work/data/*.tfrecord"
batch_size: 8
steps: 60
num_workers: 2
optimizer { learning_rate: 2e-3 warmup_steps: 2 }
export_path: "$work/$1.safetensors"
pipeline { stages: 2 micro_batches: 2 schedule: "1f1b" }
$ckpt
EOF2
}
spec leader "$work/ckpt" > "$work/leader.pbtxt"
job=$("$CTL" submit "$work/leader.pbtxt") || fail "submit"
"$CTL" watch "$job" > "$work/watch.out" 2>&1 || fail "the job failed: $(tail -3 "$work/watch.out")"
hit=$(grep -l "crash point leader_checkpoint of version 30 hit" "$work"/stage*.log) \
  || fail "the crash point was not hit"
echo "the leader died at its crash point ($(basename "$hit"))"
grep -o "pipeline stage 0 of replica 0 is .*" "$work/watch.out" | head -1 | sed 's/member [^ ]* //g' | cut -c1-160
[ "$(field "$job" 's.get("restarts", 0)')" = 0 ] || fail "the job was restarted: $(grep -i restart "$work/watch.out" | head -3)"
kept=$(ls -d "$work"/ckpt/ckpt-*/manifest.json | sed 's#.*/ckpt-\([0-9]*\)/manifest.json#\1#' | sort -n | tr '\n' ' ')
echo "checkpoints: $kept"
[ "$kept" = "10 20 30 40 50 60 " ] || fail "a checkpoint is missing: $kept"
[ "$(field "$job" 's.get("last_checkpoint_version", 0)')" = 60 ] || fail "the last checkpoint is not 60"

# The same job with no checkpoints (so no crash point) on the 4 daemons left.
spec clean > "$work/clean.pbtxt"
clean=$("$CTL" submit "$work/clean.pbtxt") || fail "submit clean"
"$CTL" watch "$clean" > "$work/watch-clean.out" 2>&1 || fail "the clean job failed: $(tail -3 "$work/watch-clean.out")"
expect_same_parameters "$work/leader.safetensors" "$work/clean.safetensors" \
  "a leader lost before its checkpoint vs no fault"
echo PASS
