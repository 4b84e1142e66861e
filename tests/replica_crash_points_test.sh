#!/usr/bin/env bash
# A primary lost at each point of a BSP step costs no restart and no bit of
# the result, with real processes over 127.0.0.1. For each test-only crash
# point (BERTPS_CRASH_AT, common/crash_point.h) -- a push of the step staged;
# the step's aggregate on the backup, its norms not yet exchanged; the step
# applied, its commit not sent; every backup has the step, its version not
# yet published (pulls waiting) -- a fresh cluster (4 shard daemons, 2
# train workers) runs a job with replicas: 2 whose shard 1 primary dies
# there in step 25. The test proves the point was hit (the daemon's own
# line), then that the job succeeded with one failover and no restart, and
# that its final parameters equal, bit for bit, a fault-free run with no
# replicas.
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"
source "$(dirname "$0")/process_lib.sh"
init_work crash
tiny_model_data "$BERT_LOCAL"
spec() { replicated_spec "$1" "$2" "$3" 60; }  # spec NAME REPLICAS EXPORT
cluster() {  # cluster NAME [ENV...]: a coordinator, 4 shard daemons, 2 workers
  local name="$1"; shift
  start_coordinator "$COORD" 0 "$work/$name-coordinator.log" --member_timeout_s 60
  coord="$BERTPS_COORDINATOR"
  mine=($coord_pid)
  for s in a b c d; do
    env "$@" "$SERVER" --coordinator "$coord" --port 0 \
      --address_file "$work/$name-ps-$s.address" > "$work/$name-ps-$s.log" 2>&1 &
    pids+=($!); mine+=($!)
  done
  for s in a b c d; do
    for _ in $(seq 1 200); do [ -s "$work/$name-ps-$s.address" ] && break; sleep 0.05; done
  done
  for w in a b; do
    "$WORKER" --role=train --coordinator "$coord" > "$work/$name-w-$w.log" 2>&1 &
    pids+=($!); mine+=($!)
  done
}
teardown() { for p in "${mine[@]}"; do kill -9 "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }

for point in push exchange commit publish; do
  cluster "$point" BERTPS_CRASH_AT="$point:25:1"
  spec "$point" 2 "$work/$point.safetensors" > "$work/$point.pbtxt"
  job=$("$CTL" --coordinator "$coord" submit "$work/$point.pbtxt") || fail "submit $point"
  "$CTL" --coordinator "$coord" watch "$job" > "$work/$point-watch.out" 2>&1 \
    || fail "$point: the job failed: $(tail -3 "$work/$point-watch.out")"
  hit=$(grep -l "crash point $point of version 25 hit" "$work/$point"-ps-*.log || true)
  [ -n "$hit" ] || fail "$point: the crash point was not hit"
  failovers=$(BERTPS_COORDINATOR="$coord" field "$job" 's.get("failovers", 0)')
  restarts=$(BERTPS_COORDINATOR="$coord" field "$job" 's.get("restarts", 0)')
  [ "$failovers" = 1 ] && [ "$restarts" = 0 ] \
    || fail "$point: $failovers failovers, $restarts restarts"
  for _ in $(seq 1 100); do [ -f "$work/$point.safetensors" ] && break; sleep 0.1; done
  echo "$point: crash point hit in $(basename "$hit"), 1 failover, no restart"
  [ "$point" = publish ] || teardown
done

# The same job with no fault and no replicas (on the last cluster's 3 live
# shard daemons).
spec clean 1 "$work/clean.safetensors" > "$work/clean.pbtxt"
clean=$("$CTL" --coordinator "$coord" submit "$work/clean.pbtxt") || fail "submit clean"
"$CTL" --coordinator "$coord" watch "$clean" > "$work/clean-watch.out" 2>&1 || fail "the clean job failed"
for _ in $(seq 1 100); do [ -f "$work/clean.safetensors" ] && break; sleep 0.1; done
for point in push exchange commit publish; do
  worst=$(max_relative_difference "$work/$point.safetensors" "$work/clean.safetensors") \
    || fail "cannot compare the exports"
  echo "$point vs the fault-free run: worst relative difference $worst"
  [ "$worst" = "0.000e+00" ] || fail "$point: the parameters differ ($worst)"
done
echo PASS
