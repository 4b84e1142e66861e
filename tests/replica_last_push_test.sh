#!/usr/bin/env bash
# A primary lost while it holds the only copy of a worker's last push, with
# real processes over 127.0.0.1: a job with replicas: 2 (BSP, 40 steps) on 4
# shard daemons (2 indices) and 2 train workers. Worker 0 stops itself at
# the test-only pause point "train_step" of version 40 (before its last
# step: nothing of it pulled or pushed; BERTPS_PAUSE_AT,
# common/crash_point.h). Worker 1 pushes the last step, which the shards
# only stage (the step waits for worker 0), and its part ends: its slot is
# done. Then kill -9 of shard 1's primary, whose backup never saw that push
# (a step goes to the backups when it runs), and SIGCONT of worker 0, which
# finds the primary gone (the coordinator probes it). The backup is
# promoted; worker 1's member starts its ended part again at the
# new addresses and pushes its last step again, so the step completes and
# the job succeeds with no restart and the same parameters, bit for bit, as
# a fault-free run with no replicas. (Without that, the job waited forever
# for a push that nobody would make again.)
set -euo pipefail
BERT_LOCAL="$1"; COORD="$2"; SERVER="$3"; WORKER="$4"; CTL="$5"
source "$(dirname "$0")/process_lib.sh"
init_work last_push
tiny_model_data "$BERT_LOCAL"
# (A long member timeout: a stopped worker does not heartbeat; the failover
# comes from worker 0's report and the probe, not from the timeout.)
start_coordinator "$COORD" 0 "$work/coordinator.log" --member_timeout_s 30
coord="$BERTPS_COORDINATOR"
start_ps_daemons a b c d
paused=()
for w in a b; do
  BERTPS_PAUSE_AT="train_step:40:0" \
    "$WORKER" --role=train --coordinator "$coord" > "$work/w-$w.log" 2>&1 &
  pids+=($!); paused+=($!)
done
spec() { replicated_spec "$1" "$2" "$3" 40; }  # spec NAME REPLICAS EXPORT
spec last 2 "$work/last.safetensors" > "$work/last.pbtxt"
job=$("$CTL" submit "$work/last.pbtxt") || fail "submit"
# Worker 0 stopped before its last step; worker 1's slot done.
for _ in $(seq 1 600); do
  grep -q "pause point train_step of version 40 reached" "$work"/w-*.log && break
  sleep 0.1
done
log=$(grep -l "pause point train_step of version 40 reached" "$work"/w-*.log) \
  || fail "worker 0 did not reach its pause point"
w0=${paused[0]}; [ "$log" = "$work/w-b.log" ] && w0=${paused[1]}
echo "worker 0 paused before its last step ($(basename "$log"))"
for _ in $(seq 1 300); do
  [ "$(field "$job" 's["slots"][1].get("done", False)')" = True ] && break
  sleep 0.1
done
[ "$(field "$job" 's["slots"][1].get("done", False)')" = True ] \
  || fail "worker 1 did not finish: $("$CTL" status "$job" | tail -3)"
echo "worker 1 pushed its last step and ended: $("$CTL" status "$job" | grep -E '^workers')"
victim=$(field "$job" 's["ps_addresses"][1]')
for s in a b c d; do
  [ "$(cat "$work/ps-$s.address")" = "$victim" ] && victim_pid=${ps_daemon_pid[$s]}
done
[ -n "${victim_pid:-}" ] || fail "no shard daemon at $victim"
kill -9 "$victim_pid"
# Resumed at once (stopped, it does not heartbeat): its pull from the lost
# primary fails, it reports it, the coordinator's probe confirms.
kill -CONT "$w0"
for _ in $(seq 1 300); do
  [ "$(field "$job" 's.get("failovers", 0)')" -ge 1 ] && break
  sleep 0.05
done
[ "$(field "$job" 's.get("failovers", 0)')" -ge 1 ] || fail "no failover of shard 1"
timeout 120 "$CTL" watch "$job" > "$work/watch.out" 2>&1 \
  || fail "the job failed or hung: $(tail -3 "$work/watch.out")"
grep -q "slot 1 had ended; it starts again with the shards' new addresses" "$work"/w-*.log \
  || fail "worker 1 did not start its ended part again"
echo "worker 1 started its ended part again at the new primary: $(grep -h -o "slot 1 had ended.*" "$work"/w-*.log | head -1)"
[ "$(field "$job" 's.get("restarts", 0)')" = 0 ] || fail "the job was restarted: $(grep -i restart "$work/watch.out" | head -3)"
[ "$(field "$job" 's.get("failovers", 0)')" = 1 ] || fail "expected one failover"

# The same job with no fault and no replicas, on workers that do not pause.
for pid in "${paused[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
for pid in "${paused[@]}"; do wait "$pid" 2>/dev/null || true; done
start_train_daemons c d
spec clean 1 "$work/clean.safetensors" > "$work/clean.pbtxt"
clean=$("$CTL" submit "$work/clean.pbtxt") || fail "submit clean"
timeout 120 "$CTL" watch "$clean" > "$work/watch-clean.out" 2>&1 || fail "the clean job failed: $(tail -3 "$work/watch-clean.out")"
expect_same_parameters "$work/last.safetensors" "$work/clean.safetensors" \
  "a last push lost with a primary vs no fault and no replicas"
echo PASS
